//! The chaos suite: the real `spillway operator` binary against the real control plane, the
//! fake kubelet and (for the cloud scenarios) moto behind the fault proxy, while something
//! breaks at seeded random moments. Invariants are checked over the whole history (the pods are
//! observed every 100 ms), not only at the end: no node ever holds more GPUs of live pods than
//! it has, no job ever has live pods of two attempts or more live pods than replicas, and every
//! job ends Succeeded. The seed is printed (`SPILLWAY_CHAOS_SEED` replays it).
//!
//! - `private.rs`: scenario 1, random kills (`SPILLWAY_CHAOS_JOBS`, `SPILLWAY_CHAOS_KILLS`);
//!   scenario 2, leader failovers (`SPILLWAY_CHAOS_FAILOVERS`); scenario 3, lost nodes
//!   (`SPILLWAY_CHAOS_NODE_LOSSES`); scenario 4, API-server restarts
//!   (`SPILLWAY_CHAOS_API_RESTARTS`) and periods of 429/500 answers
//!   (`SPILLWAY_CHAOS_API_FAULTS`).
//! - `soak.rs`: jobs arriving and finishing, nodes leaving and joining, for a while; memory,
//!   tasks, caches and cycle times sampled (`SPILLWAY_SOAK_JOBS`, `SPILLWAY_SOAK_SECONDS`).
//! - `cloud.rs`: scenario 1's cloud half, bursts under kills, and scenario 5, EC2 storms
//!   (`SPILLWAY_CHAOS_CLOUD_JOBS`, `SPILLWAY_CHAOS_STORM_SECONDS`), with the cloud invariants.
//!
//! Short forms here; `scripts/chaos.sh` runs the long forms through the same tests.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode, RUN_SECONDS};

mod cloud;
mod private;
mod soak;

const NODES: usize = 2;
const GPUS_PER_NODE: u32 = 8;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seeded generator for the jobs and the kill moments.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// The operator process; killed when dropped, so that a failing run leaves none behind.
struct Operator(Child);

impl Operator {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

fn start(kubeconfig: &str) -> Operator {
    start_with(kubeconfig, &["--leader-elect=false"])
}

fn start_with(kubeconfig: &str, extra: &[&str]) -> Operator {
    start_env(kubeconfig, extra, &[])
}

fn start_env(kubeconfig: &str, extra: &[&str], env: &[(&str, &str)]) -> Operator {
    Operator(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["operator", "--kubeconfig", kubeconfig])
            .args(
                ["--metrics-addr", "--identity-addr"]
                    .into_iter()
                    .filter(|flag| !extra.contains(flag))
                    .flat_map(|flag| [flag, "127.0.0.1:0"]),
            )
            .args(extra)
            .envs(env.iter().copied())
            // Warnings only, unless a run being looked into asks for more.
            .env(
                "RUST_LOG",
                std::env::var("SPILLWAY_CHAOS_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .spawn()
            .expect("the operator starts"),
    )
}

fn gpus_of(pod: &Pod) -> u32 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get("nvidia.com/gpu"))
        .filter_map(|q| q.0.parse::<u32>().ok())
        .sum()
}

/// Every broken invariant seen in one look at the pods; `capacity` gives a node's GPUs.
/// Pods on nodes in `gone` are dead with their machine (they stay in the API until the pod
/// garbage collector removes them) and do not count.
fn violations(
    pods: &[Pod],
    replicas: &BTreeMap<String, u32>,
    gone: &BTreeSet<String>,
    capacity: &dyn Fn(&str) -> u32,
) -> Vec<String> {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none_or(|n| !gone.contains(n))
        })
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    let mut out = Vec::new();
    let mut per_node: BTreeMap<&str, u32> = BTreeMap::new();
    for p in &live {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *per_node.entry(node).or_default() += gpus_of(p);
        }
    }
    for (node, gpus) in per_node {
        if gpus > capacity(node) {
            out.push(format!("node {node} holds {gpus} GPUs of live pods"));
        }
    }
    let mut per_job: BTreeMap<String, (BTreeSet<String>, u32)> = BTreeMap::new();
    for p in &live {
        let labels = p.labels();
        if let Some(job) = labels.get("spillway.io/job") {
            let e = per_job.entry(job.clone()).or_default();
            e.0.insert(
                labels
                    .get("spillway.io/attempt")
                    .cloned()
                    .unwrap_or_default(),
            );
            e.1 += 1;
        }
    }
    for (job, (attempts, n)) in per_job {
        if attempts.len() > 1 {
            out.push(format!("job {job} has live pods of attempts {attempts:?}"));
        }
        let want = replicas.get(&job).copied().unwrap_or(1);
        if n > want {
            out.push(format!("job {job} has {n} live pods for {want} replicas"));
        }
    }
    out
}

/// A chaos run's world: a namespace, two private nodes of 8 GPUs, a queue and a pool, and the
/// jobs submitted (gangs of 1 to 2 replicas of 1, 2, 4 or 8 GPUs, running 1 to 5 s each).
struct Scenario {
    cluster: &'static TestCluster,
    client: kube::Client,
    ns: String,
    kubeconfig: String,
    /// Replicas per job name.
    replicas: BTreeMap<String, u32>,
    /// The jobs that read Restricted data.
    restricted: BTreeSet<String>,
    kubelet: Arc<FakeKubelet>,
    /// The label value that puts a node in the scenario's pool.
    label: String,
    /// Nodes registered, and those removed since.
    nodes: Vec<String>,
    gone: BTreeSet<String>,
}

/// The jobs and nodes of a scenario.
struct Shape {
    jobs: usize,
    restartable: bool,
    /// Private nodes of `GPUS_PER_NODE` GPUs.
    nodes: usize,
    /// GPUs per replica, drawn from these.
    sizes: &'static [u32],
    /// Jobs whose index is a multiple of this (not 0) read the dataset `restricted`.
    restricted_every: usize,
    /// Jobs whose index is one more than a multiple of this (0: none) are `CloudOnly`, so a
    /// cloud scenario bursts whatever the seed (its private node may otherwise finish them all).
    cloud_only_every: usize,
}

impl Shape {
    fn private(jobs: usize, restartable: bool) -> Shape {
        Shape {
            jobs,
            restartable,
            nodes: NODES,
            sizes: &[1, 2, 4, 8],
            restricted_every: 0,
            cloud_only_every: 0,
        }
    }
}

impl Scenario {
    async fn new(prefix: &str, jobs_n: usize, rng: &mut Rng, restartable: bool) -> Scenario {
        Scenario::build(prefix, rng, Shape::private(jobs_n, restartable)).await
    }

    async fn build(prefix: &str, rng: &mut Rng, shape: Shape) -> Scenario {
        let (cluster, client) = TestCluster::with_crds().await;
        // Private pools are open to every queue: the nodes an earlier scenario left (whose fake
        // kubelet is gone) would take this one's jobs, and its unfinished jobs would compete.
        spillway_tests::operator::clean_up_earlier_tests(
            &client,
            &[
                "chaos-",
                "failover-",
                "nodeloss-",
                "apirestart-",
                "apifault-",
                "cloudkill-",
                "storm-",
            ],
        )
        .await;
        let ns = cluster.namespace(&client, prefix).await.expect("ns");
        let kubelet = Arc::new(FakeKubelet::start(client.clone()));
        let label = format!("chaos-{ns}");
        let mut nodes = Vec::new();
        for i in 0..shape.nodes {
            let name = format!("{ns}-node-{i}");
            kubelet
                .register(FakeNode::gpu(&name, GPUS_PER_NODE).label("spillway.test/pool", &label))
                .await
                .expect("node");
            nodes.push(name);
        }
        let queue: GpuQueue = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": label}, "spec": {"namespaces": [ns]},
        }))
        .expect("queue");
        Api::<GpuQueue>::all(client.clone())
            .create(&PostParams::default(), &queue)
            .await
            .expect("queue");
        let pool: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": label}, "spec": {"private": {"nodeSelector": {"spillway.test/pool": label}}},
        }))
        .expect("pool");
        Api::<ComputePool>::all(client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool");
        let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
        let mut replicas: BTreeMap<String, u32> = BTreeMap::new();
        let mut restricted = BTreeSet::new();
        for i in 0..shape.jobs {
            let name = format!("job-{i:03}");
            let gpus = shape.sizes[rng.below(shape.sizes.len() as u64) as usize];
            let r = 1 + rng.below(2) as u32;
            let seconds = 1 + rng.below(5);
            let reads = shape.restricted_every > 0 && i % shape.restricted_every == 0;
            let placement = if shape.cloud_only_every > 0 && i % shape.cloud_only_every == 1 {
                "CloudOnly"
            } else {
                "Auto"
            };
            let datasets: Vec<String> = reads
                .then(|| format!("{label}-restricted"))
                .into_iter()
                .collect();
            let job: GpuJob = serde_json::from_value(json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"queue": label, "replicas": r, "gpusPerReplica": gpus,
                         "restartable": shape.restartable, "datasets": datasets,
                         "placement": placement,
                         "template": {
                             "metadata": {"annotations": {RUN_SECONDS: seconds.to_string()}},
                             "spec": {"containers": [{"name": "c", "image": "x"}]}}},
            }))
            .expect("job");
            jobs.create(&PostParams::default(), &job)
                .await
                .expect("create job");
            if reads {
                restricted.insert(name.clone());
            }
            // The pods carry the job's name in their label.
            replicas.insert(name, r);
        }
        Scenario {
            cluster,
            client,
            ns,
            kubeconfig: cluster.kubeconfig.display().to_string(),
            replicas,
            restricted,
            kubelet,
            label,
            nodes,
            gone: BTreeSet::new(),
        }
    }

    /// The nodes registered and not lost.
    fn live_nodes(&self) -> Vec<String> {
        let live = self.nodes.iter().filter(|n| !self.gone.contains(*n));
        live.cloned().collect()
    }

    /// The machine of `node` goes away (its Node is deleted; its pods are left as they were)
    /// and a fresh node of the same size joins in its place.
    async fn lose_node(&mut self, node: &str) {
        self.kubelet.remove(node).await.expect("remove node");
        self.gone.insert(node.to_string());
        let name = format!("{}-node-{}", self.ns, self.nodes.len());
        self.kubelet
            .register(FakeNode::gpu(&name, GPUS_PER_NODE).label("spillway.test/pool", &self.label))
            .await
            .expect("replacement node");
        self.nodes.push(name);
    }

    /// The jobs not Succeeded, with their phase and last decision, for a failure message.
    async fn unfinished(&self) -> String {
        let jobs: Api<GpuJob> = Api::namespaced(self.client.clone(), &self.ns);
        let all = jobs.list(&ListParams::default()).await.expect("jobs").items;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let pods = pods.list(&ListParams::default()).await.expect("pods").items;
        let left: Vec<String> = all
            .iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.phase) != Some(JobPhase::Succeeded))
            .map(|j| {
                let st = j.status.clone().unwrap_or_default();
                // Its pods and their phases: a replica the kubelet never ran shows here.
                let its: Vec<String> = pods
                    .iter()
                    .filter(|p| p.labels().get("spillway.io/job") == Some(&j.name_any()))
                    .map(|p| {
                        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                        format!("{} {phase:?} on {node:?}", p.name_any())
                    })
                    .collect();
                format!(
                    "{} {:?} restarts {:?} nodes {:?} pods {its:?}: {:?}",
                    j.name_any(),
                    st.phase,
                    st.restarts,
                    st.nodes,
                    st.decision.and_then(|d| d.message)
                )
            })
            .collect();
        left.join("; ")
    }

    /// Looks at the pods and jobs: adds what breaks an invariant to `broken`; returns how many
    /// jobs succeeded once all have; panics when one failed.
    async fn look(&self, seed: u64, broken: &mut Vec<String>) -> Option<usize> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        // While the API server is down (scenario 4) there is nothing to look at.
        let list = pods.list(&ListParams::default()).await.ok()?.items;
        // Nodes' GPUs (cloud nodes come in several sizes); a node no longer listed had the
        // size of the private ones or held nothing.
        let nodes: Api<Node> = Api::all(self.client.clone());
        let sizes: BTreeMap<String, u32> = nodes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|n| {
                let gpus = n
                    .status
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref()?.get("nvidia.com/gpu"))
                    .and_then(|q| q.0.parse().ok())
                    .unwrap_or(0);
                (n.name_any(), gpus)
            })
            .collect();
        let capacity = |n: &str| sizes.get(n).copied().unwrap_or(GPUS_PER_NODE);
        for v in violations(&list, &self.replicas, &self.gone, &capacity) {
            if !broken.contains(&v) {
                broken.push(v);
            }
        }
        let jobs: Api<GpuJob> = Api::namespaced(self.client.clone(), &self.ns);
        let all = jobs.list(&ListParams::default()).await.ok()?.items;
        let phases: Vec<Option<JobPhase>> = all
            .iter()
            .map(|j| j.status.as_ref().and_then(|s| s.phase))
            .collect();
        if phases.contains(&Some(JobPhase::Failed)) {
            let failed: Vec<String> = all
                .iter()
                .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Failed))
                .map(|j| j.name_any())
                .collect();
            panic!("seed {seed}: jobs failed: {failed:?}");
        }
        phases
            .iter()
            .all(|p| *p == Some(JobPhase::Succeeded))
            .then_some(all.len())
    }
}

fn seed() -> u64 {
    env_or(
        "SPILLWAY_CHAOS_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    )
}

/// What a scenario does to the system while its jobs run.
trait Disruption {
    /// Does the next disruption when one is due; returns whether all of them are done.
    async fn step(&mut self, world: &mut Scenario) -> bool;
}

impl Scenario {
    /// Looks at the pods and jobs every 100 ms while `disruption` does its work, until every
    /// job succeeded and every disruption is done; returns the jobs and the looks. Fails on a
    /// broken invariant, a failed job, or jobs unfinished after `limit`.
    async fn drive(&mut self, seed: u64, limit: Duration, d: &mut impl Disruption) -> (usize, u64) {
        let deadline = Instant::now() + limit;
        let mut broken: Vec<String> = Vec::new();
        let mut looks = 0u64;
        let done = loop {
            if Instant::now() >= deadline {
                panic!(
                    "seed {seed}: not every job finished in time: {}",
                    self.unfinished().await
                );
            }
            let disrupted = d.step(self).await;
            looks += 1;
            if let Some(n) = self.look(seed, &mut broken).await
                && disrupted
            {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            broken.is_empty(),
            "seed {seed}: invariants broken: {broken:#?}"
        );
        (done, looks)
    }
}

/// The checker itself: it sees an overcommitted node, two attempts of one job alive at once,
/// and more live pods than replicas; finished and deleting pods do not count.
#[test]
fn the_invariants_see_what_they_guard() {
    let pod = |name: &str, job: &str, attempt: &str, node: &str, gpus: u32, phase: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"spillway.io/job": job, "spillway.io/attempt": attempt}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase},
        }))
        .expect("pod")
    };
    let replicas = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 1)]);
    let fine = [
        pod("a-0-0", "a", "0", "n1", 8, "Succeeded"),
        pod("a-1-0", "a", "1", "n1", 8, "Running"),
    ];
    let eight = |_: &str| GPUS_PER_NODE;
    assert!(violations(&fine, &replicas, &BTreeSet::new(), &eight).is_empty());
    let bad = [
        pod("a-0-0", "a", "0", "n1", 8, "Running"),
        pod("a-1-0", "a", "1", "n2", 4, "Running"),
        pod("b-0-0", "b", "0", "n1", 4, "Pending"),
    ];
    // On a node that is gone, the same pods are dead and break nothing.
    let gone = BTreeSet::from(["n1".to_string(), "n2".to_string()]);
    assert!(violations(&bad, &replicas, &gone, &eight).is_empty());
    // A node of 4 GPUs is overcommitted by one pod of 8.
    let four = |_: &str| 4;
    let v = violations(&fine[1..], &replicas, &BTreeSet::new(), &four);
    assert!(
        v.iter().any(|v| v.contains("node n1 holds 8 GPUs")),
        "{v:?}"
    );
    let v = violations(&bad, &replicas, &BTreeSet::new(), &eight);
    assert!(
        v.iter().any(|v| v.contains("node n1 holds 12 GPUs")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|v| v.contains("job a has live pods of attempts")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|v| v.contains("job a has 2 live pods for 1 replicas")),
        "{v:?}"
    );
}
