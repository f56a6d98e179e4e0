//! KWOK (`sigs.k8s.io/kwok`, built from its Go module by `scripts/kwok.sh`) as the kubelet of
//! many GPU nodes: it keeps the nodes annotated [`NODE_ANNOTATION`] Ready through their leases,
//! runs a pod as soon as the scheduler binds it there, and (by the stage in
//! `tests/kwok/pod-complete.yaml`) has a Job's or GpuJob's pod succeed after the time its
//! annotation [`COMPLETE_AFTER`] states. Nodes without the annotation (the fake kubelet's) are
//! not its.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cluster::TestCluster;
use crate::peers;
use crate::process::{Server, free_port};

/// The release `scripts/kwok.sh` builds.
pub const VERSION: &str = "v0.8.0";

/// The annotation of the nodes KWOK keeps.
pub const NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// A pod's annotation: how long it runs before it succeeds (a Go duration, `90s`).
pub const COMPLETE_AFTER: &str = "pod-complete.stage.kwok.x-k8s.io/delay";

/// Where `scripts/kwok.sh` put the build: `SPILLWAY_KWOK`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    peers::build_dir(
        "SPILLWAY_KWOK",
        &format!("kwok-{VERSION}"),
        "kwok",
        "scripts/kwok.sh",
    )
}

/// The running KWOK controller.
pub struct Kwok {
    server: Server,
}

impl Kwok {
    /// KWOK against `cluster`, keeping the annotated nodes.
    pub async fn start(cluster: &TestCluster) -> anyhow::Result<Kwok> {
        let dir = build_dir()?;
        let port = free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", cluster.kubeconfig.display()),
            "--manage-all-nodes=false".into(),
            format!(
                "--manage-nodes-with-annotation-selector={}={}",
                NODE_ANNOTATION.0, NODE_ANNOTATION.1
            ),
            "--node-lease-duration-seconds=40".into(),
            // Pod IPs for ten thousands of pods at once.
            "--cidr=10.0.0.1/12".into(),
            format!("--server-address=127.0.0.1:{port}"),
        ];
        let mut stages: Vec<PathBuf> = std::fs::read_dir(dir.join("stages"))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        stages.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kwok/pod-complete.yaml"));
        stages.sort();
        for s in stages {
            args.push(format!("--config={}", s.display()));
        }
        let server = Server::start(cluster.dir(), "kwok", &dir.join("bin/kwok"), &args, &[])?;
        peers::wait_listening(port, &server, "KWOK").await?;
        Ok(Kwok { server })
    }

    /// The end of KWOK's log, for a failure's message.
    pub fn log_tail(&self) -> String {
        self.server.log_tail(4000)
    }
}

/// A GPU node for KWOK: `gpus` of `product` with GPU feature discovery's labels (driver
/// 550.54.15, CUDA 12.4), 64 CPUs, 512 GiB, 110 pods, and `labels`.
pub fn gpu_node(name: &str, gpus: u32, product: &str, labels: &[(&str, &str)]) -> Node {
    let mut l = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", name),
        ("type", "kwok"),
        ("nvidia.com/gpu.product", product),
        ("nvidia.com/gpu.count", &gpus.to_string()),
        ("nvidia.com/cuda.driver-version.full", "550.54.15"),
        ("nvidia.com/cuda.runtime-version.full", "12.4"),
    ]
    .into_iter()
    .chain(labels.iter().copied())
    {
        l.insert(k.to_string(), json!(v));
    }
    let resources = json!({"cpu": "64", "memory": "512Gi", "pods": "110",
                           "nvidia.com/gpu": gpus.to_string()});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": l,
                     "annotations": {NODE_ANNOTATION.0: NODE_ANNOTATION.1}},
        "status": {"capacity": resources, "allocatable": resources},
    }))
    .expect("a node")
}

/// Creates `nodes`, 32 at a time, without the not-ready taint (KWOK makes them Ready).
pub async fn create_nodes(client: &Client, nodes: Vec<Node>) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let (pp, patch) = (PostParams::default(), PatchParams::default());
    // The API server taints a new node not-ready; the node lifecycle controller, which the
    // test control plane does not run, would lift it once the node is Ready (KWOK's part).
    let untaint = Patch::Merge(json!({"spec": {"taints": null}}));
    let mut rest = nodes.into_iter().peekable();
    while rest.peek().is_some() {
        let batch: Vec<Node> = rest.by_ref().take(32).collect();
        let made = futures::future::join_all(batch.iter().map(|n| api.create(&pp, n))).await;
        for r in made {
            r?;
        }
        let names: Vec<String> = batch.iter().map(|n| n.name_any()).collect();
        let lifted =
            futures::future::join_all(names.iter().map(|n| api.patch(n, &patch, &untaint))).await;
        for r in lifted {
            r?;
        }
    }
    Ok(())
}
