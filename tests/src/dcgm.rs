//! What cannot exist here, NVIDIA's dcgm-exporter: an HTTP endpoint serving `/metrics` in its
//! exact exposition format (`DCGM_FI_DEV_GPU_UTIL` in percent, `DCGM_FI_PROF_GR_ENGINE_ACTIVE`
//! as a ratio, one series per GPU, labelled with the GPU and the pod using it), with the
//! figures a test sets. A real Prometheus scrapes it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One GPU of a pod, as dcgm-exporter reports it.
#[derive(Clone, Debug)]
pub struct GpuUse {
    pub namespace: String,
    pub pod: String,
    pub gpu: u32,
    /// `DCGM_FI_DEV_GPU_UTIL`, 0-100.
    pub util_percent: f64,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, 0-1 (`None`: the GPU has no profiling fields, as
    /// before Volta).
    pub engine_active: Option<f64>,
}

/// The endpoint; dropped, it stops.
pub struct DcgmExporter {
    pub addr: SocketAddr,
    gpus: Arc<Mutex<Vec<GpuUse>>>,
    task: JoinHandle<()>,
}

impl Drop for DcgmExporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DcgmExporter {
    pub async fn start() -> anyhow::Result<DcgmExporter> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let gpus: Arc<Mutex<Vec<GpuUse>>> = Arc::default();
        let served = gpus.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let gpus = served.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut read = 0;
                    while read < buf.len() {
                        match conn.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                        if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    let body = exposition(&gpus.lock().expect("gpus").clone());
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(body.as_bytes()).await;
                });
            }
        });
        Ok(DcgmExporter { addr, gpus, task })
    }

    /// Replaces what the endpoint reports.
    pub fn set(&self, gpus: Vec<GpuUse>) {
        *self.gpus.lock().expect("gpus") = gpus;
    }
}

/// dcgm-exporter's text: HELP and TYPE, then one line per GPU with its labels (those of a
/// Kubernetes deployment with pod mapping on).
pub fn exposition(gpus: &[GpuUse]) -> String {
    let labels = |g: &GpuUse| {
        let l: BTreeMap<&str, String> = BTreeMap::from([
            ("gpu", g.gpu.to_string()),
            (
                "UUID",
                format!("GPU-{:08x}-0000-0000-0000-{:012x}", g.gpu, g.pod.len()),
            ),
            ("pci_bus_id", format!("00000000:{:02X}:00.0", 0x10 + g.gpu)),
            ("device", format!("nvidia{}", g.gpu)),
            ("modelName", "NVIDIA A100-SXM4-80GB".into()),
            ("Hostname", "gpu-node".into()),
            ("DCGM_FI_DRIVER_VERSION", "550.54.15".into()),
            ("container", "train".into()),
            ("namespace", g.namespace.clone()),
            ("pod", g.pod.clone()),
        ]);
        l.iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = String::from(
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
    );
    for g in gpus {
        out.push_str(&format!(
            "DCGM_FI_DEV_GPU_UTIL{{{}}} {}\n",
            labels(g),
            g.util_percent
        ));
    }
    out.push_str("# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n");
    for g in gpus {
        if let Some(a) = g.engine_active {
            out.push_str(&format!(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{}}} {a:.6}\n",
                labels(g)
            ));
        }
    }
    out
}
