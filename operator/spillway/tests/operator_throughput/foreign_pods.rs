//! Memory of the real operator binary in a cluster full of pods that are not Spillway's:
//! 50,000 pods with realistic specs and statuses (a Deployment's labels and owner, two
//! containers with env, mounts, probes and resources, some asking for GPUs; Running with
//! conditions and container statuses) on 200 nodes. A measurement, not a test (ignored by
//! default): `scripts/bench-pods.sh` runs it and prints the operator's RSS, which
//! docs/performance.md reports.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use spillway_tests::cluster::TestCluster;

const PODS: usize = 50_000;
const NODES: usize = 200;

fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn foreign_pod(i: usize, ns: &str) -> Pod {
    let app = format!("svc-{}", i % 500);
    let gpus = if i.is_multiple_of(10) { 1 } else { 0 };
    let mut limits = json!({"cpu": "2", "memory": "4Gi"});
    if gpus > 0 {
        limits["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let env: Vec<_> = (0..12)
        .map(|k| json!({"name": format!("SETTING_{k}"), "value": format!("value-{app}-{k}")}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-7d9f8c6b5d-{i:06}"), "namespace": ns,
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": "prod",
                       "pod-template-hash": "7d9f8c6b5d", "team": format!("team-{}", i % 40)},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                            "kubectl.kubernetes.io/default-container": "app"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": format!("{app}-7d9f8c6b5d"),
                                 "uid": "3b1f5b2e-0c1d-4a7e-9f00-000000000000",
                                 "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": format!("node-{:03}", i % NODES),
            "serviceAccountName": "default",
            "containers": [
                {"name": "app", "image": format!("registry.example.com/{app}:1.42.{}", i % 7),
                 "args": ["--port=8080", "--log-format=json", "--metrics-port=9090"],
                 "ports": [{"containerPort": 8080, "protocol": "TCP"},
                           {"containerPort": 9090, "protocol": "TCP"}],
                 "env": env,
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": limits},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                                  {"name": "cache", "mountPath": "/var/cache/app"}],
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}},
                {"name": "log-shipper", "image": "registry.example.com/fluent-bit:3.1",
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                               "limits": {"cpu": "200m", "memory": "128Mi"}},
                 "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/app", "readOnly": true}]},
            ],
            "volumes": [{"name": "config", "configMap": {"name": format!("{app}-config")}},
                        {"name": "cache", "emptyDir": {}}],
        },
    }))
    .expect("pod")
}

fn running_status(i: usize) -> serde_json::Value {
    let t = "2026-12-01T08:00:00Z";
    let container = |name: &str, image: &str| {
        json!({"name": name, "image": image, "imageID": format!("{image}@sha256:{:064x}", i),
               "containerID": format!("containerd://{:064x}", i * 2 + name.len()),
               "ready": true, "restartCount": i % 3, "started": true,
               "state": {"running": {"startedAt": t}}})
    };
    let conditions: Vec<_> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|c| json!({"type": c, "status": "True", "lastTransitionTime": t}))
        .collect();
    json!({"status": {
        "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250 % 250, i % 250),
        "podIPs": [{"ip": format!("10.1.{}.{}", i / 250 % 250, i % 250)}],
        "startTime": t, "qosClass": "Burstable",
        "conditions": conditions,
        "containerStatuses": [container("app", "registry.example.com/app:1.42"),
                              container("log-shipper", "registry.example.com/fluent-bit:3.1")],
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run scripts/bench-pods.sh"]
async fn operator_memory_with_50000_foreign_pods() {
    let (cluster, client) = TestCluster::with_crds().await;
    let ns = cluster.namespace(&client, "foreign").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let filled = Instant::now();
    futures::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            let ns = ns.clone();
            async move {
                let pod = foreign_pod(i, &ns);
                let name = pod.metadata.name.clone().unwrap_or_default();
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("create pod");
                pods.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&running_status(i)),
                )
                .await
                .expect("pod status");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    eprintln!(
        "{PODS} pods created and Running in {:.0} s",
        filled.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let (mut operator, port) = super::start_operator(cluster, &["--cloud=false"]);
    // Ready (every cache listed), then a minute of turns (resync every 30 s).
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut ready_at = None;
    while Instant::now() < deadline && ready_at.is_none() {
        if let Ok((200, _)) = get(port, "/readyz").await {
            ready_at = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_at = ready_at.expect("ready within 10 minutes");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (peak, now) = (
        rss_kib(operator.id(), "VmHWM:"),
        rss_kib(operator.id(), "VmRSS:"),
    );
    let metrics = get(port, "/metrics").await.map(|m| m.1).unwrap_or_default();
    let cycles = metrics
        .lines()
        .find(|l| l.starts_with("spillway_reconcile_duration_seconds_count"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("?")
        .to_string();
    let _ = operator.kill();
    let _ = operator.wait();
    let mib = |k: Option<u64>| {
        k.map(|k| format!("{:.1}", k as f64 / 1024.0))
            .unwrap_or_else(|| "?".into())
    };
    println!(
        "foreign pods: {PODS} pods on {NODES} nodes; ready after {:.1} s; RSS after a minute of turns {} MiB, peak {} MiB; {cycles} decision cycles",
        ready_at.as_secs_f64(),
        mib(now),
        mib(peak),
    );
}

/// `GET path` on the operator's metrics port: (status code, body).
pub async fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Ok((code, body))
}
