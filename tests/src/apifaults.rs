//! An HTTPS proxy in front of the API server that answers requests with 429 or 500 for a
//! while, as an overloaded or failing API server does.
//!
//! A client whose kubeconfig is [`ApiFaults::kubeconfig`] reaches the API server through it.
//! The proxy ends TLS with the API server's own certificate (it is for 127.0.0.1, where the
//! proxy listens too) and opens a TLS connection of its own to the server for each request: it
//! forwards every request with `Connection: close`, so each connection carries one request and
//! each request can be answered by the proxy instead. During a period set by
//! [`ApiFaults::misbehave`], a seeded share of the requests get `429 Too Many Requests` (with
//! `Retry-After: 1`, as API Priority and Fairness answers) or `500 Internal Server Error`, with a
//! `Status` body, and never reach the server. A period starts by closing every open connection,
//! so watches and requests in flight meet it too.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::rustls;

use crate::cluster::TestCluster;

#[derive(Clone, Copy, Debug)]
struct Period {
    status: u16,
    percent: u64,
    until: Instant,
    /// Only requests with this method meet the period (`None`: all of them).
    method: Option<&'static str>,
}

#[derive(Default)]
struct State {
    period: Option<Period>,
    rng: u64,
    requests: usize,
    failed: usize,
}

impl State {
    /// The status to answer the next request with, if the period says so.
    fn fault(&mut self, method: &str) -> Option<u16> {
        self.requests += 1;
        let p = self
            .period
            .filter(|p| Instant::now() < p.until && p.method.is_none_or(|m| m == method))?;
        self.rng = self
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.rng >> 33) % 100 < p.percent).then(|| {
            self.failed += 1;
            p.status
        })
    }
}

struct Shared {
    state: Mutex<State>,
    /// Bumped at the start of each period: open connections close.
    cut: watch::Sender<u64>,
}

/// The proxy; stops when dropped.
pub struct ApiFaults {
    pub addr: SocketAddr,
    /// A kubeconfig like the cluster's, with this proxy as the server.
    pub kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for ApiFaults {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiFaults {
    /// A proxy to `cluster`'s API server whose faults draw from `seed`.
    pub async fn start(cluster: &TestCluster, seed: u64) -> anyhow::Result<ApiFaults> {
        let key = cluster.ca_file.with_file_name("apiserver.key");
        let acceptor = spillway_k8s::identity::tls_acceptor(&spillway_k8s::identity::TlsFiles {
            cert: cluster.ca_file.clone(),
            key,
        })
        .context("the API server's certificate for the proxy")?;
        let connector = connector(&cluster.ca_file)?;
        let upstream: SocketAddr = cluster
            .server_url
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .context("the API server's address")?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let kubeconfig = cluster
            .dir
            .join(format!("kubeconfig-faults-{}", addr.port()));
        let text = std::fs::read_to_string(&cluster.kubeconfig)?
            .replace(&cluster.server_url, &format!("https://{addr}"));
        std::fs::write(&kubeconfig, text)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rng: seed,
                ..State::default()
            }),
            cut: watch::channel(0).0,
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (a, c, s) = (acceptor.clone(), connector.clone(), s.clone());
                tokio::spawn(async move {
                    let _ = serve(client, a, c, upstream, s).await;
                });
            }
        });
        Ok(ApiFaults {
            addr,
            kubeconfig,
            shared,
            task,
        })
    }

    /// For `lasting` from now, answers `percent` % of the requests with `status` (429 or 500),
    /// after closing every open connection.
    pub fn misbehave(&self, status: u16, percent: u64, lasting: Duration) {
        self.period(status, percent, lasting, None);
    }

    /// As [`ApiFaults::misbehave`], for requests with `method` only (`"PATCH"`: status and
    /// object writes fail while reads and watches work).
    pub fn misbehave_on(&self, method: &'static str, status: u16, percent: u64, lasting: Duration) {
        self.period(status, percent, lasting, Some(method));
    }

    fn period(&self, status: u16, percent: u64, lasting: Duration, method: Option<&'static str>) {
        self.state().period = Some(Period {
            status,
            percent: percent.min(100),
            until: Instant::now() + lasting,
            method,
        });
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// A client that reaches the API server through the proxy.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// (requests seen, requests answered with a fault).
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state();
        (s.requests, s.failed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A TLS client that trusts the certificates in `ca_file`.
fn connector(ca_file: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn serve(
    client: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    upstream: SocketAddr,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut cut = shared.cut.subscribe();
    let mut tls = acceptor.accept(client).await?;
    // The request head, and whatever of the body came with it.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        let n = tls.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let method = String::from_utf8_lossy(&buf[..end])
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let fault = shared
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .fault(&method);
    if let Some(status) = fault {
        let (reason, text) = match status {
            429 => ("TooManyRequests", "Too Many Requests"),
            _ => ("InternalError", "Internal Server Error"),
        };
        let body = format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"injected by the test's API fault proxy","reason":"{reason}","code":{status}}}"#
        );
        let retry = if status == 429 {
            "Retry-After: 1\r\n"
        } else {
            ""
        };
        let response = format!(
            "HTTP/1.1 {status} {text}\r\nContent-Type: application/json\r\n{retry}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(response.as_bytes()).await?;
        tls.shutdown().await?;
        return Ok(());
    }
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let head: Vec<&str> = head
        .split("\r\n")
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    let up = TcpStream::connect(upstream).await?;
    let name = rustls_pki_types::ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut up = connector.connect(name, up).await?;
    up.write_all(format!("{}\r\nConnection: close\r\n\r\n", head.join("\r\n")).as_bytes())
        .await?;
    up.write_all(&buf[end + 4..]).await?;
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut tls, &mut up) => {}
        _ = cut.changed() => {}
    }
    Ok(())
}
