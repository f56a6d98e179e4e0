//! The operator crate's errors, each with a [`ErrorCategory`] that the executor retries by and
//! the metrics label failures with.

use spillway_cloud::CloudError;
use spillway_core::ErrorCategory;

/// What can go wrong in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A cloud call failed.
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    /// The watch caches could not list.
    #[error("watch caches: {0}")]
    Caches(String),
    /// The HTTP endpoints could not listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// Leadership was lost (the Lease is someone else's, or could not be renewed in time).
    #[error("lost leadership: {0}")]
    LostLeadership(String),
    /// The action was cancelled before it reached the API or the cloud, because this replica
    /// stopped leading.
    #[error("not the leader any more; cancelled before it was sent")]
    Fenced,
    /// The operator's settings cannot work.
    #[error("invalid settings: {0}")]
    Settings(String),
    /// A cluster pool's other cluster cannot be reached (it has no connection yet).
    #[error("{0}")]
    Remote(String),
    /// A bootstrap token could not be made.
    #[error("bootstrap token: {0}")]
    Token(String),
    /// The object is there already and is not the one this action makes (a name taken).
    #[error("{0}")]
    Taken(String),
}

impl Error {
    /// The error's category.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Kube(e) => kube_category(e),
            Error::Cloud(e) => e.category(),
            Error::Caches(_) | Error::Token(_) | Error::Remote(_) => ErrorCategory::Transient,
            Error::Listen { .. } | Error::Settings(_) => ErrorCategory::InvalidInput,
            Error::LostLeadership(_) | Error::Fenced | Error::Taken(_) => ErrorCategory::Conflict,
        }
    }

    /// Whether the call that failed was retried already where it was made: a cloud call's
    /// SDK retries it with its own budget (`spillway_cloud::CallPolicy`), so the executor
    /// does not retry it again on top (retries stacked in layers multiply during a throttle).
    pub fn retried_below(&self) -> bool {
        matches!(self, Error::Cloud(_))
    }

    /// The HTTP status code of an API error, if that is what it is.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Kube(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    /// The API's reason (`AlreadyExists`, `Conflict`, `NotFound`, ...), if it gave one.
    pub fn api_reason(&self) -> Option<&str> {
        match self {
            Error::Kube(kube::Error::Api(s)) => Some(s.reason.as_str()),
            _ => None,
        }
    }
}

/// The category of a Kubernetes client error: by the API's status code where it answered,
/// transient for anything on the way (connection, TLS, timeout).
pub fn kube_category(e: &kube::Error) -> ErrorCategory {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => ErrorCategory::Conflict,
            404 | 410 => ErrorCategory::NotFound,
            401 | 403 => ErrorCategory::Permission,
            400 | 413 | 415 | 422 => ErrorCategory::InvalidInput,
            _ => ErrorCategory::Transient,
        },
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => ErrorCategory::InvalidInput,
        _ => ErrorCategory::Transient,
    }
}

/// An API error of `code` with `reason`, as the server would answer (tests of failure paths).
pub fn api_error(code: u16, reason: &str, message: &str) -> Error {
    Error::Kube(kube::Error::Api(Box::new(
        kube::core::Status::failure(message, reason).with_code(code),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_are_categorised_by_code() {
        let c = |code, reason| api_error(code, reason, "x").category();
        assert_eq!(c(409, "Conflict"), ErrorCategory::Conflict);
        assert_eq!(c(404, "NotFound"), ErrorCategory::NotFound);
        assert_eq!(c(403, "Forbidden"), ErrorCategory::Permission);
        assert_eq!(c(422, "Invalid"), ErrorCategory::InvalidInput);
        assert_eq!(c(429, "TooManyRequests"), ErrorCategory::Transient);
        assert_eq!(c(500, "InternalError"), ErrorCategory::Transient);
        assert_eq!(
            Error::Cloud(CloudError::from_code("UnauthorizedOperation", "no")).category(),
            ErrorCategory::Permission
        );
    }
}
