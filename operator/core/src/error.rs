//! The categories every Spillway error falls into.
//!
//! Each crate keeps its own `thiserror` enum; each enum maps its variants onto a
//! [`ErrorCategory`] with a `category()` method. The operator's executor retries by category
//! and its metrics and Events label failures by it, so the set is small and closed.

use std::fmt;

/// What kind of failure an error is, as far as a caller deciding what to do next cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCategory {
    /// Worth retrying after a while: timeouts, throttling, server errors, lost connections,
    /// cloud capacity that may come back.
    Transient,
    /// Someone else changed the object first: read it again, then retry.
    Conflict,
    /// The input is wrong and retrying it unchanged cannot help; wait for a change.
    InvalidInput,
    /// Not allowed (RBAC, IAM): retrying cannot help until someone grants it.
    Permission,
    /// The object is gone (or never existed).
    NotFound,
}

impl ErrorCategory {
    /// Every category, in a stable order (metric label values).
    pub const ALL: [ErrorCategory; 5] = [
        ErrorCategory::Transient,
        ErrorCategory::Conflict,
        ErrorCategory::InvalidInput,
        ErrorCategory::Permission,
        ErrorCategory::NotFound,
    ];

    /// The label form: `transient`, `conflict`, `invalid_input`, `permission`, `not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Transient => "transient",
            ErrorCategory::Conflict => "conflict",
            ErrorCategory::InvalidInput => "invalid_input",
            ErrorCategory::Permission => "permission",
            ErrorCategory::NotFound => "not_found",
        }
    }

    /// Whether repeating the same request later can succeed.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCategory::Transient | ErrorCategory::Conflict)
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
