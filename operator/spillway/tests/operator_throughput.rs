//! Throughput of the real operator binary: 1,000 one-GPU GpuJobs placed on 125 fake 8-GPU
//! nodes. A measurement, not a test (ignored by default): `scripts/bench-operator.sh` runs it
//! in release mode and prints jobs placed per second and the operator's peak memory, which
//! docs/performance.md reports.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode};

/// The operator's memory among 50,000 pods that are not Spillway's (`scripts/bench-pods.sh`).
#[path = "operator_throughput/foreign_pods.rs"]
mod foreign_pods;

/// The operator binary against the test control plane, alone (no election), quiet, its
/// metrics on a free loopback port: (the process, that port).
fn start_operator(cluster: &TestCluster, extra: &[&str]) -> (std::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let mut args = vec![
        "operator",
        "--kubeconfig",
        &kubeconfig,
        "--metrics-addr",
        &metrics,
        "--identity-addr",
        "127.0.0.1:0",
        "--leader-elect=false",
    ];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("operator");
    (child, port)
}

const JOBS: usize = 1000;
const NODES: usize = 125;

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run scripts/bench-operator.sh"]
async fn place_1000_jobs() {
    let (cluster, client) = TestCluster::with_crds().await;
    let ns = cluster.namespace(&client, "bench").await.expect("ns");
    let kubelet = FakeKubelet::start(client.clone());
    for i in 0..NODES {
        kubelet
            .register(FakeNode::gpu(format!("bench-{i:03}"), 8).label("bench", "yes"))
            .await
            .expect("node");
    }
    let queue: GpuQueue = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
        "metadata": {"name": "bench"}, "spec": {},
    }))
    .expect("queue");
    Api::<GpuQueue>::all(client.clone())
        .create(&PostParams::default(), &queue)
        .await
        .expect("queue");
    let pool: ComputePool = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
        "metadata": {"name": "bench"}, "spec": {"private": {"nodeSelector": {"bench": "yes"}}},
    }))
    .expect("pool");
    Api::<ComputePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool");
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    for i in 0..JOBS {
        let job: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": format!("job-{i:04}"), "namespace": ns},
            "spec": {"queue": "bench", "gpusPerReplica": 1,
                     "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        }))
        .expect("job");
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("create job");
    }

    let started = Instant::now();
    let (mut operator, port) = start_operator(cluster, &[]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Light polling (metadata only, 50 ms) so the measurement does not load the API server.
    let (mut first_pod, mut pods_at, mut status_at) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_status_check = Instant::now();
    while Instant::now() < deadline && status_at.is_none() {
        if pods_at.is_none() {
            let n = pods
                .list_metadata(&ListParams::default())
                .await
                .expect("pods")
                .items
                .len();
            if n > 0 && first_pod.is_none() {
                first_pod = Some(started.elapsed());
            }
            if n >= JOBS {
                pods_at = Some(started.elapsed());
            }
        } else if last_status_check.elapsed() > Duration::from_millis(500) {
            last_status_check = Instant::now();
            let running = jobs
                .list(&ListParams::default())
                .await
                .expect("jobs")
                .items
                .iter()
                .filter(|j| {
                    j.status.as_ref().and_then(|s| s.phase)
                        == Some(spillway_api::job::JobPhase::Running)
                })
                .count();
            if running >= JOBS {
                status_at = Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = peak_rss_kib(operator.id());
    let metrics = get_metrics(port).await.unwrap_or_default();
    let metric = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (cycles, cycle_s) = (
        metric("spillway_reconcile_duration_seconds_count"),
        metric("spillway_reconcile_duration_seconds_sum"),
    );
    let _ = operator.kill();
    let _ = operator.wait();
    let first_pod = first_pod.expect("a pod");
    let pods_at = pods_at.expect("all pods created within 10 minutes");
    let status_at = status_at.expect("all jobs Running within 10 minutes");
    println!(
        "operator throughput: {JOBS} jobs on {NODES} nodes x 8 GPUs; start-up to first pod {:.2} s; all pods created after {:.2} s ({:.0} jobs/s from the first pod to the last); all statuses Running after {:.2} s (status checked every 0.5 s; {:.0} jobs/s from start); peak RSS {} MiB; {cycles} decision cycles, {:.1} ms each on average",
        first_pod.as_secs_f64(),
        pods_at.as_secs_f64(),
        (JOBS - 1) as f64 / (pods_at - first_pod).as_secs_f64().max(1e-3),
        status_at.as_secs_f64(),
        JOBS as f64 / status_at.as_secs_f64(),
        peak.map(|k| format!("{:.1}", k as f64 / 1024.0))
            .unwrap_or_else(|| "?".into()),
        1000.0 * cycle_s / cycles.max(1.0),
    );
}

async fn get_metrics(port: u16) -> std::io::Result<String> {
    foreign_pods::get(port, "/metrics")
        .await
        .map(|(_, body)| body)
}
