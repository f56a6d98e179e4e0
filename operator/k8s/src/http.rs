//! The operator's HTTP endpoints on `--metrics-addr`: `/metrics` (Prometheus), `/healthz`
//! (the process is alive and its loop turns), `/readyz` (the watch caches are synced).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::serve::Limits;

/// What the endpoints report on.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch cache has listed once.
    pub ready: AtomicBool,
    /// Unix seconds of the controller loop's last turn (0 before the first).
    pub last_turn: AtomicI64,
}

/// The loop counts as stuck when it has not turned for this long (it turns at least every
/// resync period, 30 s).
const STUCK_AFTER_SECONDS: i64 = 120;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Health {
    pub fn turned(&self) {
        self.last_turn.store(unix_now(), Ordering::Relaxed);
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

fn route(path: &str, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        "/healthz" | "/livez" => {
            let last = health.last_turn.load(Ordering::Relaxed);
            if last == 0 || unix_now() - last < STUCK_AFTER_SECONDS {
                respond(StatusCode::OK, "text/plain", "ok\n".into())
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!(
                        "controller loop has not turned for {} s\n",
                        unix_now() - last
                    ),
                )
            }
        }
        "/readyz" => {
            if health.ready.load(Ordering::Relaxed) {
                respond(StatusCode::OK, "text/plain", "ok\n".into())
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "watch caches not synced yet\n".into(),
                )
            }
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves the endpoints on `listener` until the task is dropped, within `limits`.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    limits: Limits,
) {
    crate::serve::accept_each(listener, "metrics", limits, move |stream| {
        let (metrics, health) = (metrics.clone(), health.clone());
        async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let r = route(req.uri().path(), &metrics, &health);
                async move { Ok::<_, Infallible>(r) }
            });
            if let Err(e) = crate::serve::http1(&limits)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(stream: &mut tokio::net::TcpStream) -> std::io::Result<String> {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await?;
        let mut buf = vec![0u8; 1024];
        let n = stream.read(&mut buf).await?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// A stopped endpoint answers nothing more, not even on a connection kept alive from
    /// before (the API server and Prometheus keep theirs).
    #[tokio::test]
    async fn stopping_the_endpoint_ends_its_kept_alive_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(
            listener,
            Arc::new(Metrics::default()),
            Arc::new(Health::default()),
            crate::serve::LIMITS,
        ));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(get(&mut stream).await.unwrap().starts_with("HTTP/1.1 200"));
        server.abort();
        let _ = server.await;
        let after = tokio::time::timeout(std::time::Duration::from_secs(5), get(&mut stream)).await;
        let answered = matches!(&after, Ok(Ok(s)) if s.starts_with("HTTP/1.1 200"));
        assert!(!answered, "answered after the stop: {after:?}");
    }
}
