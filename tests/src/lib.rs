//! Spillway's test harness: the real parts a test needs, started by the test itself.
//!
//! - [`cluster::TestCluster`]: a real etcd, `kube-apiserver`, `kube-scheduler` and
//!   `kube-controller-manager` on free loopback ports, started once per test process and
//!   shared by its tests, and torn down when the process exits (a watchdog per server kills it
//!   when the test process is gone, even after a crash).
//! - [`kubelet::FakeKubelet`]: what no machine here can be, a GPU node. It registers Nodes with
//!   `nvidia.com/gpu` capacity and keeps them Ready, and moves pods bound to them to Running and
//!   then Succeeded or Failed, as kwok does.
//! - [`operator::RunningOperator`]: the operator itself, run as a task of the test.
//! - [`kwok::Kwok`]: KWOK, built from its Go module, the kubelet of a thousand GPU nodes for
//!   the scale test: nodes Ready, pods run when bound and succeed after their stated time.
//! - [`machines::BootingMachines`]: instances in moto become Nodes after a boot delay.
//! - [`faults::FaultProxy`]: a proxy in front of moto that answers chosen EC2 actions with errors.
//! - [`moto::MotoServer`]: moto's EC2-compatible HTTP server, which the real AWS SDK talks to.
//! - [`workload`]: GpuJobs as the end-to-end tests submit and wait for them.
//! - [`otlp`]: a real OTLP/gRPC receiver and the operator's telemetry pointed at it.
//! - [`jobset::JobSetController`]: the real JobSet controller, built from its Go module.
//! - [`kueue::Kueue`]: Kueue's manager, built from its Go module, for the scale comparison.
//! - [`helm::Helm`]: real Helm 3 and Helm 4 binaries (with kubectl), each with isolated homes.
//! - [`apifaults::ApiFaults`]: an HTTPS proxy in front of the API server that answers 429 or
//!   500 for a while.
//! - [`prometheus::Prometheus`]: a real Prometheus server scraping a test's operator, with
//!   rules loaded; [`browser`]: headless Chromium checking a report page.
//! - [`dcgm::DcgmExporter`]: what no GPU here can feed, dcgm-exporter's `/metrics`, with the
//!   figures a test sets, for a real Prometheus to scrape.
//! - [`partition::Partition`]: a TCP proxy in front of the API server that cuts one replica off
//!   (its requests swallowed, the server's answers and watch events still flowing), and logs
//!   what it sends.
//!
//! Binaries come from `KUBEBUILDER_ASSETS` (the envtest convention) or from the cache that
//! `scripts/k8s-binaries.sh` fills; moto from `SPILLWAY_MOTO_SERVER` or `scripts/moto.sh`'s
//! cache. `scripts/test.sh` installs both before running the tests.

pub mod apifaults;
pub mod browser;
pub mod cluster;
pub mod dcgm;
pub mod faults;
pub mod helm;
pub mod jobset;
pub mod kubelet;
pub mod kuberay;
pub mod kueue;
pub mod kwok;
pub mod machines;
pub mod moto;
pub mod operator;
pub mod otlp;
pub mod partition;
mod peers;
pub mod placement;
mod process;
pub mod prometheus;
pub mod trainer;
pub use process::free_port;
pub mod workload;

/// A name unique within this test process, for namespaces, nodes and tags: `prefix-<pid>-<n>`.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// The harness's cache directory (`SPILLWAY_CACHE`, default `~/.cache/spillway`).
pub fn cache_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("SPILLWAY_CACHE") {
        return dir.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    std::path::PathBuf::from(home).join(".cache/spillway")
}
