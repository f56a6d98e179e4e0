//! What no test machine can do: boot. When an instance tagged for a cluster appears in moto,
//! [`BootingMachines`] registers a GPU Node for it after a delay (as a machine would boot and
//! its kubelet join), with the providerID, labels and GPUs the instance type implies; when the
//! instance is terminated, the Node goes away with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::kubelet::{FakeKubelet, FakeNode};
use crate::moto::cluster_instances;

/// GPUs and model of the instance types tests use.
pub fn gpus_of(instance_type: &str) -> (u32, &'static str) {
    match instance_type {
        "g6.xlarge" => (1, "L4"),
        "g5.xlarge" | "g5.8xlarge" => (1, "A10G"),
        "g6e.12xlarge" => (4, "L40S"),
        "g6e.xlarge" => (1, "L40S"),
        "g6.12xlarge" => (4, "L4"),
        "p5.4xlarge" => (1, "H100"),
        "p5.48xlarge" => (8, "H100"),
        "p4d.24xlarge" => (8, "A100"),
        "p4de.24xlarge" => (8, "A100-80GB"),
        "p3dn.24xlarge" => (8, "V100-32GB"),
        _ => (0, "unknown"),
    }
}

/// Plays the machines behind a cluster's instances.
pub struct BootingMachines {
    task: JoinHandle<()>,
    /// Instance id -> node name, for nodes registered.
    pub joined: Arc<Mutex<BTreeMap<String, String>>>,
}

impl BootingMachines {
    /// Joins a Node `boot_delay` after each instance tagged `spillway.io/cluster=cluster`
    /// appears (`None`: never, to test join timeouts).
    pub fn start(
        ec2: aws_sdk_ec2::Client,
        kubelet: Arc<FakeKubelet>,
        cluster: String,
        boot_delay: Option<Duration>,
    ) -> BootingMachines {
        let joined: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let j = joined.clone();
        let task = tokio::spawn(async move {
            let mut seen: HashMap<String, Instant> = HashMap::new();
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let Ok(listed) = cluster_instances(&ec2, &cluster).await else {
                    continue;
                };
                for i in listed {
                    let id = i.id.clone();
                    if id.is_empty() {
                        continue;
                    }
                    let node = j.lock().expect("joined").get(&id).cloned();
                    if i.gone() {
                        if let Some(node) = node {
                            let _ = kubelet.remove(&node).await;
                            j.lock().expect("joined").remove(&id);
                        }
                        continue;
                    }
                    let first = *seen.entry(id.clone()).or_insert_with(Instant::now);
                    let Some(delay) = boot_delay else { continue };
                    if node.is_some() || first.elapsed() < delay {
                        continue;
                    }
                    let itype = i.instance_type.clone();
                    let (gpus, model) = gpus_of(&itype);
                    let zone = i.zone.as_deref().unwrap_or("us-east-1a");
                    let fake = FakeNode::gpu(&id, gpus)
                        .model(model)
                        .label("spillway.io/pool", i.tag("spillway.io/pool"))
                        .label("spillway.io/instance-id", &id)
                        .label("node.kubernetes.io/instance-type", &itype)
                        .provider_id(&format!("aws:///{zone}/{id}"));
                    if kubelet.register(fake).await.is_ok() {
                        j.lock().expect("joined").insert(id.clone(), id.clone());
                    }
                }
            }
        });
        BootingMachines { task, joined }
    }
}

impl Drop for BootingMachines {
    fn drop(&mut self) {
        self.task.abort();
    }
}
