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

/// The labels GPU feature discovery writes for a driver (`550.54.15`) and the CUDA version it
/// supports (`12.4`).
pub fn gfd_labels(driver: &str, cuda: &str) -> BTreeMap<String, String> {
    let d: Vec<&str> = driver.split('.').collect();
    let c: Vec<&str> = cuda.split('.').collect();
    let part = |v: &[&str], i: usize| v.get(i).copied().unwrap_or("").to_string();
    [
        ("nvidia.com/cuda.driver.major", part(&d, 0)),
        ("nvidia.com/cuda.driver.minor", part(&d, 1)),
        ("nvidia.com/cuda.driver.rev", part(&d, 2)),
        ("nvidia.com/cuda.runtime.major", part(&c, 0)),
        ("nvidia.com/cuda.runtime.minor", part(&c, 1)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

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
        BootingMachines::start_with_images(ec2, kubelet, cluster, boot_delay, HashMap::new())
    }

    /// As [`BootingMachines::start`], and a machine booted from an image of `images` gets that
    /// image's labels on its Node, as GPU feature discovery would write them from the driver
    /// the image really installs.
    pub fn start_with_images(
        ec2: aws_sdk_ec2::Client,
        kubelet: Arc<FakeKubelet>,
        cluster: String,
        boot_delay: Option<Duration>,
        images: HashMap<String, BTreeMap<String, String>>,
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
                    let mut fake = FakeNode::gpu(&id, gpus)
                        .model(model)
                        .label("spillway.io/pool", i.tag("spillway.io/pool"))
                        .label("spillway.io/instance-id", &id)
                        .label("node.kubernetes.io/instance-type", &itype)
                        .provider_id(&format!("aws:///{zone}/{id}"));
                    for (k, v) in images.get(&i.image_id).into_iter().flatten() {
                        fake = fake.label(k, v);
                    }
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
