//! The chaos suite's first scenario, random kills: the real `spillway operator` binary places a
//! burst of gangs of mixed sizes on private nodes of the test control plane while it is
//! SIGKILLed at seeded random moments and started again. Invariants are checked over the whole
//! history (the pods are observed every 100 ms), not only at the end: no node ever holds more
//! GPUs of live pods than it has, no job ever has live pods of two attempts or more live pods
//! than replicas, and every job ends Succeeded.
//!
//! Short form here (24 jobs, 6 kills); `scripts/chaos.sh` runs the long form (200 jobs, 20
//! kills) through the same test with `SPILLWAY_CHAOS_JOBS`, `SPILLWAY_CHAOS_KILLS` and
//! `SPILLWAY_CHAOS_SEED`. The seed is printed; the same seed gives the same jobs and kill
//! moments. The cloud side (moto behind the fault proxy) is not in this scenario yet.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode, RUN_SECONDS};

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
    Operator(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args([
                "operator",
                "--kubeconfig",
                kubeconfig,
                "--metrics-addr",
                "127.0.0.1:0",
                "--identity-addr",
                "127.0.0.1:0",
                "--leader-elect=false",
            ])
            .env("RUST_LOG", "warn")
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

/// Every broken invariant seen in one look at the pods.
fn violations(pods: &[Pod], replicas: &BTreeMap<String, u32>) -> Vec<String> {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
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
        if gpus > GPUS_PER_NODE {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_lose_nothing_and_never_place_twice() {
    let jobs_n = env_or("SPILLWAY_CHAOS_JOBS", 24) as usize;
    let kills = env_or("SPILLWAY_CHAOS_KILLS", 6) as usize;
    let seed = env_or(
        "SPILLWAY_CHAOS_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    println!(
        "chaos seed {seed}: {jobs_n} jobs, {kills} kills (SPILLWAY_CHAOS_SEED={seed} replays it)"
    );
    let mut rng = Rng(seed);

    let (cluster, client) = TestCluster::with_crds().await;
    let ns = cluster.namespace(&client, "chaos").await.expect("ns");
    let kubelet = FakeKubelet::start(client.clone());
    let label = format!("chaos-{ns}");
    for i in 0..NODES {
        kubelet
            .register(FakeNode::gpu(format!("{ns}-node-{i}"), GPUS_PER_NODE).label("chaos", &label))
            .await
            .expect("node");
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
        "metadata": {"name": label}, "spec": {"private": {"nodeSelector": {"chaos": label}}},
    }))
    .expect("pool");
    Api::<ComputePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool");

    // Gangs of 1 to 2 replicas of 1, 2, 4 or 8 GPUs, running 1 to 5 s each.
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    let mut replicas: BTreeMap<String, u32> = BTreeMap::new();
    for i in 0..jobs_n {
        let name = format!("job-{i:03}");
        let gpus = [1, 2, 4, 8][rng.below(4) as usize];
        let r = 1 + rng.below(2) as u32;
        let seconds = 1 + rng.below(5);
        let job: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queue": label, "replicas": r, "gpusPerReplica": gpus,
                     "template": {
                         "metadata": {"annotations": {RUN_SECONDS: seconds.to_string()}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        }))
        .expect("job");
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("create job");
        replicas.insert(format!("{ns}/{name}"), r);
    }
    // The pods carry the job's name in their label; key the gang sizes the same way.
    let replicas: BTreeMap<String, u32> = replicas
        .into_iter()
        .map(|(k, v)| (k.rsplit('/').next().unwrap_or(&k).to_string(), v))
        .collect();

    let kubeconfig = cluster.kubeconfig.display().to_string();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut operator = start(&kubeconfig);
    let mut next_kill = Instant::now() + Duration::from_millis(1000 + rng.below(4000));
    let (mut killed, mut looks) = (0, 0u64);
    let mut broken: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60 + 3 * jobs_n as u64);
    let done = loop {
        assert!(Instant::now() < deadline, "not every job finished in time");
        if killed < kills && Instant::now() >= next_kill {
            operator.kill();
            killed += 1;
            operator = start(&kubeconfig);
            next_kill = Instant::now() + Duration::from_millis(1000 + rng.below(4000));
        }
        let list = pods.list(&ListParams::default()).await.expect("pods").items;
        looks += 1;
        for v in violations(&list, &replicas) {
            if !broken.contains(&v) {
                broken.push(v);
            }
        }
        let all = jobs.list(&ListParams::default()).await.expect("jobs").items;
        let phases: Vec<Option<JobPhase>> = all
            .iter()
            .map(|j| j.status.as_ref().and_then(|s| s.phase))
            .collect();
        if killed >= kills && phases.iter().all(|p| *p == Some(JobPhase::Succeeded)) {
            break all.len();
        }
        if phases.contains(&Some(JobPhase::Failed)) {
            let failed: Vec<String> = all
                .iter()
                .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Failed))
                .map(|j| j.name_any())
                .collect();
            panic!("seed {seed}: jobs failed: {failed:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    operator.kill();
    println!(
        "chaos seed {seed}: {done} jobs succeeded through {killed} kills; {looks} looks at the pods"
    );
    assert_eq!(done, jobs_n);
    assert!(
        broken.is_empty(),
        "seed {seed}: invariants broken: {broken:#?}"
    );
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
    assert!(violations(&fine, &replicas).is_empty());
    let bad = [
        pod("a-0-0", "a", "0", "n1", 8, "Running"),
        pod("a-1-0", "a", "1", "n2", 4, "Running"),
        pod("b-0-0", "b", "0", "n1", 4, "Pending"),
    ];
    let v = violations(&bad, &replicas);
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
