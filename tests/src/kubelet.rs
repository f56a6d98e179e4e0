//! A fake kubelet, as kwok does: GPU nodes without machines.
//!
//! [`FakeKubelet::register`] creates a Node with `nvidia.com/gpu` capacity, a GPU model label
//! and a Ready condition (and removes the `not-ready` taint the API server adds, since no node
//! lifecycle controller runs), then keeps its heartbeat fresh. Pods that the real scheduler
//! binds to such a node become Running; with the annotation [`RUN_SECONDS`] they finish after
//! that many seconds, Succeeded, or Failed when [`EXIT_CODE`] is not `0`. Pods being deleted
//! on its nodes are removed at once, as a kubelet confirms a deletion.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

/// Annotation: seconds a pod runs before it finishes (absent: it runs until deleted).
pub const RUN_SECONDS: &str = "kubelet.spillway.io/run-seconds";
/// Annotation: exit code of the pod's containers when it finishes (default 0).
pub const EXIT_CODE: &str = "kubelet.spillway.io/exit-code";
/// Annotation: seconds the pod's containers take to stop once it is deleted (absent: at
/// once). As a real kubelet does, the stop is cut short at the pod's grace period.
pub const STOP_SECONDS: &str = "kubelet.spillway.io/stop-seconds";

/// A GPU node to register.
#[derive(Clone, Debug)]
pub struct FakeNode {
    pub name: String,
    pub gpus: u32,
    pub model: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<serde_json::Value>,
    pub provider_id: Option<String>,
}

impl FakeNode {
    /// A node with `gpus` GPUs and no model label.
    pub fn gpu(name: impl Into<String>, gpus: u32) -> Self {
        FakeNode {
            name: name.into(),
            gpus,
            model: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            provider_id: None,
        }
    }

    /// Sets the `spillway.io/gpu-model` label.
    pub fn model(mut self, model: &str) -> Self {
        self.model = Some(model.to_string());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints
            .push(json!({"key": key, "value": value, "effect": effect}));
        self
    }

    pub fn provider_id(mut self, id: &str) -> Self {
        self.provider_id = Some(id.to_string());
        self
    }
}

/// Plays the kubelet of the nodes it registered.
pub struct FakeKubelet {
    client: Client,
    nodes: Arc<Mutex<HashSet<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Starts watching pods (and beating the hearts of the nodes it will register).
    pub fn start(client: Client) -> FakeKubelet {
        let nodes: Arc<Mutex<HashSet<String>>> = Arc::default();
        let pods_task = tokio::spawn(run_pods(client.clone(), nodes.clone()));
        let heartbeat_task = tokio::spawn(heartbeat(client.clone(), nodes.clone()));
        FakeKubelet {
            client,
            nodes,
            tasks: vec![pods_task, heartbeat_task],
        }
    }

    /// Registers a Ready GPU node.
    pub async fn register(&self, node: FakeNode) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut labels = node.labels.clone();
        labels.insert("kubernetes.io/hostname".into(), node.name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("type".into(), "spillway-fake-node".into());
        if let Some(m) = &node.model {
            labels.insert("spillway.io/gpu-model".into(), m.clone());
        }
        let mut spec = json!({});
        if let Some(p) = &node.provider_id {
            spec["providerID"] = json!(p);
        }
        let obj: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": labels},
            "spec": spec,
        }))?;
        nodes.create(&PostParams::default(), &obj).await?;
        self.nodes
            .lock()
            .expect("node set poisoned")
            .insert(node.name.clone());
        let resources = json!({
            "cpu": "96",
            "memory": "1024Gi",
            "pods": "110",
            "ephemeral-storage": "1000Gi",
            "nvidia.com/gpu": node.gpus.to_string(),
        });
        let now = now_rfc3339();
        nodes
            .patch_status(
                &node.name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "status": {
                        "capacity": resources,
                        "allocatable": resources,
                        "conditions": [ready_condition(&now)],
                        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                      {"type": "Hostname", "address": node.name}],
                        "nodeInfo": {
                            "architecture": "amd64", "operatingSystem": "linux",
                            "kubeletVersion": "v1.37.2-spillway-fake", "kubeProxyVersion": "v1.37.2",
                            "containerRuntimeVersion": "fake://1", "kernelVersion": "fake",
                            "osImage": "fake", "machineID": node.name, "systemUUID": node.name,
                            "bootID": node.name,
                        },
                    }
                })),
            )
            .await?;
        // The API server taints new nodes not-ready; the node lifecycle controller that would
        // lift it does not run here, so the kubelet sets the taints it wants.
        nodes
            .patch(
                &node.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": node.taints}})),
            )
            .await?;
        Ok(())
    }

    /// The node's kubelet stops posting (its machine hangs or is cut off): it is no longer
    /// heartbeaten and its pods are left as they are, and the harness does what the node
    /// lifecycle controller (which does not run here) would after its grace period: `Ready`
    /// becomes `Unknown` and the node is tainted `node.kubernetes.io/unreachable` (NoSchedule
    /// and NoExecute).
    pub async fn lose_contact(&self, name: &str) -> anyhow::Result<()> {
        self.nodes.lock().expect("node set poisoned").remove(name);
        let nodes: Api<Node> = Api::all(self.client.clone());
        let now = now_rfc3339();
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }]}})),
            )
            .await?;
        let taint = |effect: &str| json!({"key": "node.kubernetes.io/unreachable", "effect": effect, "timeAdded": now});
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"taints": [taint("NoSchedule"), taint("NoExecute")]}}),
                ),
            )
            .await?;
        Ok(())
    }

    /// Deletes the pods bound to `node`, as the taint manager does to pods of an unreachable
    /// node once their `tolerationSeconds` (300 by default) have passed.
    pub async fn evict_pods_of(&self, node: &str) -> anyhow::Result<usize> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let on = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        for p in &on.items {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let _ = Api::<Pod>::namespaced(self.client.clone(), &ns)
                .delete(&p.name_any(), &DeleteParams::default())
                .await;
        }
        Ok(on.items.len())
    }

    /// Deletes a node (as if its machine went away).
    pub async fn remove(&self, name: &str) -> anyhow::Result<()> {
        self.nodes.lock().expect("node set poisoned").remove(name);
        Api::<Node>::all(self.client.clone())
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn ready_condition(now: &str) -> serde_json::Value {
    json!({
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "fake kubelet is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    })
}

async fn heartbeat(client: Client, nodes: Arc<Mutex<HashSet<String>>>) {
    let api: Api<Node> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let names: Vec<String> = nodes
            .lock()
            .expect("node set poisoned")
            .iter()
            .cloned()
            .collect();
        for name in names {
            let now = now_rfc3339();
            let patch = json!({"status": {"conditions": [ready_condition(&now)]}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                tracing::debug!(node = %name, error = %e, "fake kubelet heartbeat failed");
            }
        }
    }
}

async fn run_pods(client: Client, nodes: Arc<Mutex<HashSet<String>>>) {
    let api: Api<Pod> = Api::all(client.clone());
    let started: Arc<Mutex<HashSet<String>>> = Arc::default();
    let stopping: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        if !nodes.lock().expect("node set poisoned").contains(&node) {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let key = format!("{ns}/{name}/{}", pod.uid().unwrap_or_default());
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if pod.metadata.deletion_timestamp.is_some() {
            // Confirm the deletion, as a kubelet does once the containers have stopped (after
            // STOP_SECONDS, at most the grace period).
            let stop = pod
                .annotations()
                .get(STOP_SECONDS)
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
                .min(
                    pod.metadata
                        .deletion_grace_period_seconds
                        .unwrap_or(0)
                        .max(0) as u64,
                );
            started.lock().expect("started set poisoned").remove(&key);
            if stopping.lock().expect("stopping set poisoned").insert(key) {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(stop)).await;
                    let gone = DeleteParams::default().grace_period(0);
                    keep_trying(&name, "confirm deletion", || pods.delete(&name, &gone)).await;
                });
            }
            continue;
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase != "Pending" && !phase.is_empty() {
            continue;
        }
        if !started
            .lock()
            .expect("started set poisoned")
            .insert(key.clone())
        {
            continue;
        }
        let containers: Vec<String> = pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let now = now_rfc3339();
        let running = json!({"status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "10.244.0.1",
            "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": containers.iter().map(|c| json!({
                "name": c, "ready": true, "restartCount": 0, "image": "fake", "imageID": "fake",
                "started": true, "state": {"running": {"startedAt": now}},
            })).collect::<Vec<_>>(),
        }});
        let annotations = pod.annotations();
        let run_for = annotations
            .get(RUN_SECONDS)
            .and_then(|s| s.parse::<f64>().ok());
        let exit_code: i32 = annotations
            .get(EXIT_CODE)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        tokio::spawn(async move {
            // As a kubelet keeps syncing a pod's status, a write that failed (or whose answer
            // was lost) while the API server was away is made again until it lands.
            let pp = PatchParams::default();
            let running = Patch::Merge(running);
            if !keep_trying(&name, "start pod", || {
                pods.patch_status(&name, &pp, &running)
            })
            .await
            {
                return;
            }
            let Some(run_for) = run_for else { return };
            tokio::time::sleep(Duration::from_secs_f64(run_for.max(0.0))).await;
            let now = now_rfc3339();
            let phase = if exit_code == 0 {
                "Succeeded"
            } else {
                "Failed"
            };
            let reason = if exit_code == 0 { "Completed" } else { "Error" };
            let done = json!({"status": {
                "phase": phase,
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                ],
                "containerStatuses": containers.iter().map(|c| json!({
                    "name": c, "ready": false, "restartCount": 0, "image": "fake", "imageID": "fake",
                    "started": false,
                    "state": {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": now}},
                })).collect::<Vec<_>>(),
            }});
            let done = Patch::Merge(done);
            keep_trying(&name, "finish pod", || pods.patch_status(&name, &pp, &done)).await;
        });
    }
}

/// Makes a write again every 500 ms while it fails for a reason other than the pod being gone
/// (the API server away, a connection cut, a 5xx), for two minutes at most. Returns whether it
/// landed.
async fn keep_trying<T, F>(pod: &str, what: &str, mut write: impl FnMut() -> F) -> bool
where
    F: std::future::Future<Output = kube::Result<T>>,
{
    for _ in 0..240 {
        match write().await {
            Ok(_) => return true,
            Err(kube::Error::Api(e)) if e.code == 404 => return false,
            Err(e) => {
                tracing::debug!(pod, error = %e, "fake kubelet could not {what}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    false
}
