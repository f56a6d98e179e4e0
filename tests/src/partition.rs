//! A TCP proxy in front of the API server that can partition one client from it.
//!
//! A replica whose kubeconfig points here reaches the API server through the proxy. When the
//! proxy is [`Partition::cut`], what the replica sends is swallowed (read and dropped, never
//! forwarded) while what the server sends still arrives, as in an asymmetric network
//! partition: the replica's watches keep showing changes, but none of its requests (Lease
//! renewals, writes) reach the server, and none is answered. [`Partition::heal`] closes the
//! connections that saw the cut, so a request held in them can never arrive late, and lets new
//! ones through. Every connection and every chunk the client sends is logged with the time it
//! arrived, so a test can show that a replica sent nothing after a given moment.
//!
//! TLS passes through untouched (the proxy never decrypts); the API server's certificate is
//! for 127.0.0.1, which is where the proxy listens too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use kube::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    /// Bumped by each heal: connections of an older epoch that saw a cut are closed.
    epoch: AtomicU64,
    /// (when, bytes) of each chunk a client sent, and (when) of each connection opened.
    sent: Mutex<Vec<(Instant, usize)>>,
    opened: Mutex<Vec<Instant>>,
    /// Connections relayed and not yet closed.
    open: AtomicUsize,
}

/// Counts a relayed connection as open until dropped.
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The proxy; stops when dropped.
pub struct Partition {
    pub addr: SocketAddr,
    upstream: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Partition {
    /// A proxy to the API server at `server_url` (`https://127.0.0.1:PORT`).
    pub async fn start(server_url: &str) -> anyhow::Result<Partition> {
        let upstream = server_url
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared: Arc<Shared> = Arc::default();
        let (s, up) = (shared.clone(), upstream.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                s.opened
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
                tokio::spawn(relay(client, up.clone(), s.clone()));
            }
        });
        Ok(Partition {
            addr,
            upstream,
            shared,
            task,
        })
    }

    /// A client for the test cluster whose every request goes through this proxy.
    pub async fn client(&self, cluster: &crate::cluster::TestCluster) -> anyhow::Result<Client> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let kubeconfig = Kubeconfig::read_from(&cluster.kubeconfig)?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        config.cluster_url = format!("https://{}", self.addr).parse()?;
        Ok(Client::try_from(config)?)
    }

    /// From now on nothing the client sends reaches the server.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
    }

    /// Closes every connection that saw the cut; new connections pass again.
    pub fn heal(&self) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Bytes the client sent after `since` (whether or not they were forwarded).
    pub fn bytes_sent_after(&self, since: Instant) -> usize {
        self.shared
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(at, _)| *at > since)
            .map(|(_, n)| n)
            .sum()
    }

    /// Connections the client opened after `since`.
    pub fn connections_after(&self, since: Instant) -> usize {
        self.shared
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|at| **at > since)
            .count()
    }

    /// Connections open through the proxy now (closed by either side or by a heal).
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// The API server this proxy forwards to (`127.0.0.1:PORT`).
    pub fn upstream(&self) -> &str {
        &self.upstream
    }
}

async fn relay(client: TcpStream, upstream: String, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _open = Open(shared.clone());
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let epoch = shared.epoch.load(Ordering::SeqCst);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let saw_cut = Arc::new(AtomicBool::new(false));
    let (s, seen) = (shared.clone(), saw_cut.clone());
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            s.sent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((Instant::now(), n));
            if s.cut.load(Ordering::SeqCst) {
                seen.store(true, Ordering::SeqCst);
                continue; // swallowed
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let (s, seen) = (shared.clone(), saw_cut.clone());
    let healed = async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if s.epoch.load(Ordering::SeqCst) != epoch && seen.load(Ordering::SeqCst) {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = healed => {}
    }
}
