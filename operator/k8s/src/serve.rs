//! The accept loop every endpoint of the operator shares (metrics and probes, the token issuer,
//! the admission webhook), and the limits that keep slow, idle or greedy clients from
//! exhausting a replica: a cap on open connections per endpoint, a deadline for the TLS
//! handshake, for a request's head (which also closes idle keep-alive connections) and for its
//! body, and a connection's whole lifetime.
//!
//! What each refusal did is counted per endpoint ([`refused`]); the metrics endpoint reports
//! the counts as `spillway_http_connections_refused_total{endpoint,reason}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Bytes};
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long and how much one client may take of an endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once per endpoint; one more is closed at once.
    pub max_connections: usize,
    /// A TLS handshake's deadline.
    pub handshake: Duration,
    /// The deadline for a request's head once a connection waits for one (so also how long
    /// an idle keep-alive connection stays open).
    pub header_read: Duration,
    /// The deadline for a request's body.
    pub body_read: Duration,
    /// A connection's whole lifetime, however busy: one that never reads its answers goes too.
    pub lifetime: Duration,
}

/// The operator's limits. The API server sends a review at once and waits for its answer at
/// most `timeoutSeconds` (5 by default, 30 at most), and reconnects freely; Prometheus and the
/// kubelet's probes open short connections.
pub const LIMITS: Limits = Limits {
    max_connections: 512,
    handshake: Duration::from_secs(10),
    header_read: Duration::from_secs(10),
    body_read: Duration::from_secs(10),
    lifetime: Duration::from_secs(300),
};

/// Why a connection or a request was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The endpoint had `max_connections` open.
    Limit,
    /// The TLS handshake did not finish in time (or failed).
    Handshake,
    /// The connection outlived `lifetime`.
    Lifetime,
    /// A request's body did not arrive in time.
    BodyTimeout,
    /// A request's body was larger than the endpoint takes.
    TooLarge,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::Limit,
        Refusal::Handshake,
        Refusal::Lifetime,
        Refusal::BodyTimeout,
        Refusal::TooLarge,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::Limit => "connection_limit",
            Refusal::Handshake => "handshake",
            Refusal::Lifetime => "lifetime",
            Refusal::BodyTimeout => "body_timeout",
            Refusal::TooLarge => "too_large",
        }
    }
}

/// The endpoints that count refusals.
pub const ENDPOINTS: [&str; 3] = ["metrics", "identity", "webhook"];

static COUNTS: [[AtomicU64; Refusal::ALL.len()]; ENDPOINTS.len()] =
    [const { [const { AtomicU64::new(0) }; Refusal::ALL.len()] }; ENDPOINTS.len()];

fn count(endpoint: &str, why: Refusal) {
    if let Some(e) = ENDPOINTS.iter().position(|x| *x == endpoint) {
        COUNTS[e][why as usize].fetch_add(1, Ordering::Relaxed);
    }
    tracing::debug!(endpoint, reason = why.label(), "connection refused");
}

/// How many connections or requests of `endpoint` were cut off for `why` in this process.
pub fn refused(endpoint: &str, why: Refusal) -> u64 {
    ENDPOINTS
        .iter()
        .position(|x| *x == endpoint)
        .map(|e| COUNTS[e][why as usize].load(Ordering::Relaxed))
        .unwrap_or(0)
}

/// Accepts connections on `listener` until the task is dropped, each served by `handle` in a
/// task of its own that ends with this one (a stopped endpoint answers nothing more, not even on
/// a connection kept alive from before) and at the latest after `limits.lifetime`. With
/// `limits.max_connections` open, a new connection is closed at once.
pub async fn accept_each<F, Fut>(
    listener: TcpListener,
    endpoint: &'static str,
    limits: Limits,
    mut handle: F,
) where
    F: FnMut(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    count(endpoint, Refusal::Limit);
                    drop(stream);
                    continue;
                };
                let served = handle(stream);
                connections.spawn(async move {
                    if tokio::time::timeout(limits.lifetime, served).await.is_err() {
                        count(endpoint, Refusal::Lifetime);
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, endpoint, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The TLS side of a connection, or `None` (counted) when the handshake fails or takes longer
/// than `limits.handshake`.
pub async fn tls(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    endpoint: &'static str,
    limits: &Limits,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(limits.handshake, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, endpoint, "TLS handshake failed");
            count(endpoint, Refusal::Handshake);
            None
        }
        Err(_) => {
            count(endpoint, Refusal::Handshake);
            None
        }
    }
}

/// An HTTP/1 connection builder with `limits`' deadline for request heads and bounded buffers.
pub fn http1(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(64 * 1024);
    b
}

/// What reading a request body came to when it did not arrive whole.
#[derive(Debug)]
pub enum BodyError {
    /// Too large or too slow (counted).
    Refused(Refusal),
    /// The client broke off.
    Failed(String),
}

/// A request body of at most `max` bytes read within `limits.body_read`; a longer or slower
/// one is refused (and counted) without reading the rest.
pub async fn read_body<B>(
    body: B,
    max: usize,
    endpoint: &'static str,
    limits: &Limits,
) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let refuse = |why| {
        count(endpoint, why);
        Err(BodyError::Refused(why))
    };
    if body.size_hint().lower() > max as u64 {
        return refuse(Refusal::TooLarge);
    }
    match tokio::time::timeout(limits.body_read, Limited::new(body, max).collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => refuse(Refusal::TooLarge),
        Ok(Err(e)) => Err(BodyError::Failed(e.to_string())),
        Err(_) => refuse(Refusal::BodyTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const SHORT: Limits = Limits {
        max_connections: 4,
        handshake: Duration::from_millis(500),
        header_read: Duration::from_millis(500),
        body_read: Duration::from_millis(500),
        lifetime: Duration::from_secs(30),
    };

    /// An endpoint answering `GET /` with "ok" within `limits`, on a free port.
    async fn endpoint(name: &'static str, limits: Limits) -> std::net::SocketAddr {
        use http_body_util::Full;
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(accept_each(
            listener,
            name,
            limits,
            move |stream| async move {
                let service = service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        "ok",
                    ))))
                });
                let _ = http1(&limits)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            },
        ));
        addr
    }

    async fn get(addr: std::net::SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Reads until the peer closes (or `within` passes): whether it closed.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 256];
        matches!(
            tokio::time::timeout(within, async {
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await,
            Ok(())
        )
    }

    #[tokio::test]
    async fn a_connection_past_the_cap_is_closed_at_once_and_idle_ones_go_after_the_head_deadline()
    {
        // The metrics endpoint's name: counted in the exposition.
        let addr = endpoint("metrics", SHORT).await;
        let before = refused("metrics", Refusal::Limit);
        let mut idle = Vec::new();
        for _ in 0..SHORT.max_connections {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Let the endpoint accept the four.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut extra = TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_within(&mut extra, Duration::from_millis(300)).await,
            "the fifth connection was kept"
        );
        assert!(refused("metrics", Refusal::Limit) > before);
        // A connection that never sends its request head is closed by the head deadline,
        // and the endpoint answers again.
        for s in &mut idle {
            assert!(
                closed_within(s, SHORT.header_read * 4).await,
                "an idle connection outlived the head deadline"
            );
        }
        let answer = get(addr).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }

    #[tokio::test]
    async fn a_request_head_sent_slowly_is_cut_off() {
        let addr = endpoint("identity", SHORT).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        // Never finishes its head: one more header now and then, each well inside the deadline.
        let trickle = async {
            for _ in 0..20 {
                tokio::time::sleep(SHORT.header_read / 4).await;
                if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return true;
                }
            }
            false
        };
        assert!(
            trickle.await,
            "a head trickled for {:?} was still read",
            SHORT.header_read * 5
        );
    }

    #[tokio::test]
    async fn a_body_too_large_or_too_slow_is_refused_without_reading_it() {
        use http_body_util::{Full, StreamBody};
        use hyper::body::Frame;
        let too_large = read_body(
            Full::new(Bytes::from(vec![0u8; 2048])),
            1024,
            "webhook",
            &SHORT,
        )
        .await;
        assert!(matches!(
            too_large,
            Err(BodyError::Refused(Refusal::TooLarge))
        ));
        // A body that never ends.
        let never = StreamBody::new(futures::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        let slow = read_body(never, 1024, "webhook", &SHORT).await;
        assert!(matches!(
            slow,
            Err(BodyError::Refused(Refusal::BodyTimeout))
        ));
        let fine = read_body(Full::new(Bytes::from("{}")), 1024, "webhook", &SHORT).await;
        assert_eq!(fine.unwrap(), Bytes::from("{}"));
    }
}
