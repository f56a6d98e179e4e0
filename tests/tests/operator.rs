//! The operator end to end: the real API server and scheduler, the fake kubelet for GPU nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode, RUN_SECONDS};
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::{self, WAIT};

async fn setup() -> (&'static TestCluster, Client) {
    let cluster = TestCluster::shared().await;
    let client = cluster.client().await.expect("client");
    cluster
        .install_crds(&client, &spillway_api::crds())
        .await
        .expect("install CRDs");
    (cluster, client)
}

/// A test's own world: a namespace, a queue named after it, a private pool selecting nodes
/// labelled with it, and a fake kubelet.
struct World {
    client: Client,
    ns: String,
    queue: String,
    pool: String,
    kubelet: FakeKubelet,
}

impl World {
    async fn new(prefix: &str) -> World {
        let (cluster, client) = setup().await;
        // Private GPUs are shared by every queue: earlier tests' nodes (whose fake kubelets
        // are gone) would take this test's jobs, and their pending jobs would compete.
        spillway_tests::operator::clean_up_earlier_tests(&client, &["op-"]).await;
        let ns = cluster.namespace(&client, prefix).await.expect("namespace");
        let world = World {
            kubelet: FakeKubelet::start(client.clone()),
            queue: ns.clone(),
            pool: format!("{ns}-pool"),
            client,
            ns,
        };
        world.create_pool(&world.pool.clone()).await;
        world.create_queue(&world.queue.clone(), json!({})).await;
        world
    }

    async fn create_queue(&self, name: &str, spec: serde_json::Value) {
        let q: GpuQueue = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("queue JSON");
        Api::<GpuQueue>::all(self.client.clone())
            .create(&PostParams::default(), &q)
            .await
            .expect("create queue");
    }

    async fn create_pool(&self, name: &str) {
        let p: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": name},
            "spec": {"private": {"nodeSelector": {"spillway.test/pool": name}, "gpuCostPerHour": 1.5}},
        }))
        .expect("pool JSON");
        Api::<ComputePool>::all(self.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .expect("create pool");
    }

    /// Registers `count` nodes of `gpus` GPUs in the test's pool; returns their names.
    async fn nodes(&self, count: usize, gpus: u32, model: Option<&str>) -> Vec<String> {
        let mut names = Vec::new();
        for _ in 0..count {
            let name = spillway_tests::unique_name(&format!("{}-n", self.ns));
            let mut node = FakeNode::gpu(&name, gpus).label("spillway.test/pool", &self.pool);
            if let Some(m) = model {
                node = node.model(m);
            }
            self.kubelet.register(node).await.expect("register node");
            names.push(name);
        }
        names
    }

    fn jobs(&self) -> Api<GpuJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Submits a job to the test's queue; `extra` is merged into the spec; `run_seconds`
    /// makes its pods finish (else they run until deleted).
    async fn submit(&self, name: &str, extra: serde_json::Value, run_seconds: Option<u32>) {
        self.submit_to(name, &self.queue.clone(), extra, run_seconds)
            .await;
    }

    async fn submit_to(
        &self,
        name: &str,
        queue: &str,
        extra: serde_json::Value,
        run_seconds: Option<u32>,
    ) {
        workload::submit(&self.jobs(), name, queue, extra, run_seconds).await;
    }

    async fn job(&self, name: &str) -> GpuJob {
        self.jobs().get(name).await.expect("get job")
    }

    async fn pods_of(&self, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("spillway.io/job={job}")))
            .await
            .expect("list pods")
            .items
    }

    async fn wait_phase(&self, name: &str, phase: JobPhase) -> GpuJob {
        workload::wait_phase(&self.jobs(), name, phase).await
    }

    /// Waits until every pod of the job is bound and Running.
    async fn wait_pods_running(&self, name: &str, replicas: usize) -> Vec<Pod> {
        eventually(WAIT, &format!("pods of {name} to run"), || async {
            let pods = self.pods_of(name).await;
            let running = pods
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                })
                .count();
            if running == replicas && pods.len() == replicas {
                Ok(pods)
            } else {
                Err(format!("{running} of {} running", pods.len()))
            }
        })
        .await
    }

    /// The API server's table for `kubectl get gpujobs` (server-side printing).
    async fn table(&self) -> (Vec<String>, Vec<Vec<serde_json::Value>>) {
        let req = http::Request::get(format!(
            "/apis/spillway.io/v1alpha1/namespaces/{}/gpujobs",
            self.ns
        ))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("request");
        let table: serde_json::Value = self.client.request(req).await.expect("table");
        let columns = table["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_string())
            .collect();
        let rows = table["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["cells"].as_array().cloned().unwrap_or_default())
            .collect();
        (columns, rows)
    }
}

fn condition(job: &GpuJob, type_: &str) -> Option<(String, String, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_first_jobs_run_on_private_nodes() {
    let _turn = serial().await;
    let w = World::new("op-private").await;
    w.nodes(2, 8, Some("A100-80GB")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("big", json!({"gpusPerReplica": 8}), None).await;
    w.submit("small-a", json!({"gpusPerReplica": 4}), None)
        .await;
    w.submit("small-b", json!({"gpusPerReplica": 4}), None)
        .await;

    let mut used_nodes = BTreeMap::new();
    for name in ["big", "small-a", "small-b"] {
        let job = w.wait_phase(name, JobPhase::Running).await;
        let st = job.status.clone().unwrap_or_default();
        assert_eq!(st.environment, Some(spillway_api::Environment::Private));
        assert_eq!(st.pool.as_deref(), Some(w.pool.as_str()));
        let d = st.decision.clone().expect("decision");
        assert_eq!(d.outcome.as_deref(), Some("StartPrivate"), "{d:?}");
        assert_eq!(d.reason.as_deref(), Some("FitsPrivate"), "{d:?}");
        let pods = w.wait_pods_running(name, 1).await;
        let pod = &pods[0];
        let spec = pod.spec.clone().unwrap_or_default();
        let node = spec.node_name.clone().expect("bound");
        assert_eq!(
            st.nodes,
            vec![node.clone()],
            "status.nodes names the bound node"
        );
        let limits = spec.containers[0]
            .resources
            .clone()
            .and_then(|r| r.limits)
            .unwrap_or_default();
        let want = if name == "big" { "8" } else { "4" };
        assert_eq!(
            limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
            Some(want)
        );
        assert_eq!(
            pod.labels().get("spillway.io/job").map(String::as_str),
            Some(name)
        );
        assert_eq!(
            pod.labels().get("spillway.io/replica").map(String::as_str),
            Some("0")
        );
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("GpuJob", name));
        *used_nodes.entry(node).or_insert(0) += want.parse::<u32>().unwrap_or(0);
    }
    assert!(
        used_nodes.values().all(|g| *g == 8),
        "two full nodes: {used_nodes:?}"
    );

    // `kubectl get gpujobs`: the printer columns show where and why.
    let (columns, rows) = w.table().await;
    let col = |n: &str| {
        columns
            .iter()
            .position(|c| c == n)
            .unwrap_or_else(|| panic!("column {n} in {columns:?}"))
    };
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row[col("Where")], json!("private"), "{row:?}");
        assert_eq!(row[col("Pool")], json!(w.pool), "{row:?}");
        assert_eq!(row[col("Phase")], json!("Running"), "{row:?}");
        assert_eq!(row[col("Reason")], json!("FitsPrivate"), "{row:?}");
    }

    // An Event records the decision, with the same reason.
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "a FitsPrivate Event for big", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big")
                    && e.reason.as_deref() == Some("FitsPrivate")
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} events", list.items.len()))
    })
    .await;

    // Queue and pool status follow.
    eventually(WAIT, "queue status", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let st = q.status.unwrap_or_default();
        match (st.running, st.gpus_in_use.as_ref().map(|g| g.private)) {
            (3, Some(16)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually(WAIT, "pool status", || async {
        let p = Api::<ComputePool>::all(w.client.clone())
            .get(&w.pool)
            .await
            .map_err(|e| e.to_string())?;
        let st = p.status.unwrap_or_default();
        match (
            st.gpus.as_ref().map(|g| (g.capacity, g.allocated)),
            st.nodes.as_ref().map(|n| n.total),
        ) {
            (Some((16, 16)), Some(2)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_waits_whole_until_two_nodes_are_free() {
    let _turn = serial().await;
    let w = World::new("op-gang").await;
    w.nodes(2, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("first", json!({"gpusPerReplica": 8}), Some(6))
        .await;
    w.wait_phase("first", JobPhase::Running).await;
    w.submit("gang", json!({"gpusPerReplica": 8, "replicas": 2}), Some(2))
        .await;

    // While `first` holds one node, the gang waits as a whole: no pod at all.
    let job = eventually(WAIT, "gang to get a Wait decision", || async {
        let j = w.job("gang").await;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        if d.as_ref().and_then(|d| d.outcome.as_deref()) == Some("Wait") {
            Ok(j)
        } else {
            Err(format!("{d:?}"))
        }
    })
    .await;
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));
    assert!(w.pods_of("gang").await.is_empty(), "no partial gang");
    assert!(w.job("first").await.status.and_then(|s| s.phase) == Some(JobPhase::Running));

    // `first` finishes; the gang starts on both nodes.
    w.wait_phase("first", JobPhase::Succeeded).await;
    let gang = w.wait_phase("gang", JobPhase::Running).await;
    let nodes = gang.status.unwrap_or_default().nodes;
    assert_eq!(nodes.len(), 2);
    assert_ne!(nodes[0], nodes[1], "one replica per node");
    let finished = w.wait_phase("gang", JobPhase::Succeeded).await;
    let st = finished.status.unwrap_or_default();
    assert!(st.finished_at.is_some());
    assert!(
        st.cost.map(|c| c.accrued_usd).unwrap_or(0.0) > 0.0,
        "private GPUs cost 1.5/h each"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_job_gets_a_condition_and_an_event_and_no_hot_loop() {
    let _turn = serial().await;
    let w = World::new("op-invalid").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let missing = format!("{}-missing", w.ns);
    w.submit_to("lost", &missing, json!({}), None).await;
    let job = eventually(WAIT, "Invalid condition", || async {
        let j = w.job("lost").await;
        match condition(&j, "Invalid") {
            Some((s, _, _)) if s == "True" => Ok(j),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_, reason, message) = condition(&job, "Invalid").unwrap_or_default();
    assert_eq!(reason, "QueueNotFound");
    assert!(message.contains(&missing), "{message}");
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "a Warning Event", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("QueueNotFound")
                    && e.type_.as_deref() == Some("Warning")
            })
            .map(|_| ())
            .ok_or_else(|| {
                format!(
                    "{:?}",
                    list.items
                        .iter()
                        .map(|e| e.reason.clone())
                        .collect::<Vec<_>>()
                )
            })
    })
    .await;

    // No hot loop: with nothing changing, several cycles (resync is 5 s) write nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = op.metrics.api_writes_total();
    tokio::time::sleep(Duration::from_secs(11)).await;
    let after = op.metrics.api_writes_total();
    assert_eq!(before, after, "API writes while nothing changed");

    // Fixing it (the queue appears) clears the condition and the job runs.
    w.create_queue(&missing, json!({})).await;
    let job = w.wait_phase("lost", JobPhase::Running).await;
    assert_eq!(condition(&job, "Invalid"), None);
    assert_eq!(
        condition(&job, "Admitted").map(|c| c.0),
        Some("True".to_string())
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_model_constraints_follow_node_labels() {
    let _turn = serial().await;
    let w = World::new("op-models").await;
    let a100 = w.nodes(1, 8, Some("A100-80GB")).await;
    let h100 = w.nodes(1, 8, Some("H100")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("wants-h100", json!({"gpuModels": ["H100"]}), None)
        .await;
    w.submit("wants-a100", json!({"gpuModels": ["A100-80GB"]}), None)
        .await;
    w.submit("wants-v100", json!({"gpuModels": ["V100"]}), None)
        .await;
    let h = w.wait_phase("wants-h100", JobPhase::Running).await;
    assert_eq!(h.status.unwrap_or_default().nodes, h100);
    let a = w.wait_phase("wants-a100", JobPhase::Running).await;
    assert_eq!(a.status.unwrap_or_default().nodes, a100);
    // No V100 anywhere and no cloud: it can never run, and says so.
    let v = eventually(WAIT, "V100 job rejected", || async {
        let j = w.job("wants-v100").await;
        match condition(&j, "Invalid") {
            Some((s, r, _)) if s == "True" => Ok(r),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(v, "NeverFits");
    assert!(w.pods_of("wants-v100").await.is_empty());
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_weighted_fair_share_between_two_queues() {
    let _turn = serial().await;
    let w = World::new("op-share").await;
    let light = format!("{}-light", w.ns);
    let heavy = format!("{}-heavy", w.ns);
    w.create_queue(&light, json!({"weight": 1})).await;
    w.create_queue(&heavy, json!({"weight": 3})).await;
    w.nodes(1, 8, None).await;
    // Everything is submitted before the operator starts, so one cycle sees it all.
    for i in 0..8 {
        w.submit_to(&format!("light-{i}"), &light, json!({}), None)
            .await;
        w.submit_to(&format!("heavy-{i}"), &heavy, json!({}), None)
            .await;
    }
    w.submit_to("light-urgent", &light, json!({"priority": 10}), None)
        .await;
    w.submit_to("heavy-urgent", &heavy, json!({"priority": 10}), None)
        .await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let running = eventually(WAIT, "8 GPUs in use", || async {
        let jobs = w
            .jobs()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<String> = jobs
            .items
            .iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Running))
            .map(|j| j.name_any())
            .collect();
        if running.len() == 8 {
            Ok(running)
        } else {
            Err(format!("{running:?}"))
        }
    })
    .await;
    let heavy_running = running.iter().filter(|n| n.starts_with("heavy-")).count();
    let light_running = running.iter().filter(|n| n.starts_with("light-")).count();
    assert_eq!(
        (light_running, heavy_running),
        (2, 6),
        "weights 1:3 share 8 GPUs 2:6: {running:?}"
    );
    assert!(
        running.contains(&"light-urgent".to_string()),
        "priority first: {running:?}"
    );
    assert!(
        running.contains(&"heavy-urgent".to_string()),
        "priority first: {running:?}"
    );
    // The rest wait, saying why.
    let waiting = w.job("light-7").await;
    let d = waiting.status.and_then(|s| s.decision).expect("decision");
    assert_eq!(d.outcome.as_deref(), Some("Wait"));
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_change_and_failure_are_reflected() {
    let _turn = serial().await;
    let w = World::new("op-fail").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    // A replica that exits non-zero fails the job, and its gang-mates are removed.
    let mut annotations = serde_json::Map::new();
    annotations.insert(RUN_SECONDS.into(), json!("1"));
    annotations.insert(spillway_tests::kubelet::EXIT_CODE.into(), json!("3"));
    w.submit(
        "crash",
        json!({"replicas": 2, "gpusPerReplica": 2, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "train", "image": "pytorch:2"}]},
        }}),
        None,
    )
    .await;
    let job = w.wait_phase("crash", JobPhase::Failed).await;
    let (_, reason, _) = condition(&job, "Failed").expect("Failed condition");
    assert_eq!(reason, "ReplicaFailed");
    // maxRuntime is enforced.
    w.submit("slow", json!({"maxRuntime": "3s"}), None).await;
    w.wait_phase("slow", JobPhase::Running).await;
    let job = w.wait_phase("slow", JobPhase::Failed).await;
    assert_eq!(
        condition(&job, "Failed").map(|c| c.1),
        Some("MaxRuntimeExceeded".to_string())
    );
    eventually(WAIT, "slow's pod to be deleted", || async {
        let pods = w.pods_of("slow").await;
        if pods.is_empty() {
            Ok(())
        } else {
            Err(format!("{} pods", pods.len()))
        }
    })
    .await;
    // A job patched by its owner gets a new observedGeneration.
    w.submit("patched", json!({"gpusPerReplica": 1}), None)
        .await;
    w.wait_phase("patched", JobPhase::Running).await;
    w.jobs()
        .patch(
            "patched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"priority": 5}})),
        )
        .await
        .expect("patch");
    eventually(WAIT, "observedGeneration 2", || async {
        let j = w.job("patched").await;
        let og = j.status.and_then(|s| s.observed_generation);
        if og == Some(2) {
            Ok(())
        } else {
            Err(format!("{og:?}"))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_in_the_middle_of_a_workload_loses_nothing() {
    let _turn = serial().await;
    let w = World::new("op-restart").await;
    w.nodes(2, 8, None).await;
    for i in 0..50 {
        w.submit(&format!("job-{i:02}"), json!({}), Some(2 + (i % 3)))
            .await;
    }
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let count = |phase: JobPhase| {
        let jobs = w.jobs();
        async move {
            let list = jobs
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            Ok::<usize, String>(
                list.items
                    .iter()
                    .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(phase))
                    .count(),
            )
        }
    };
    eventually(WAIT, "a third of the jobs to finish", || async {
        let done = count(JobPhase::Succeeded).await?;
        if done >= 16 {
            Ok(())
        } else {
            Err(format!("{done} succeeded"))
        }
    })
    .await;
    // Crash: no clean shutdown, writes in flight are cut off.
    op.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator again");
    eventually(
        Duration::from_secs(120),
        "all 50 jobs to succeed",
        || async {
            let done = count(JobPhase::Succeeded).await?;
            if done == 50 {
                Ok(())
            } else {
                Err(format!("{done} succeeded"))
            }
        },
    )
    .await;
    // No job ever had two sets of pods: one pod each, of one attempt.
    let pods = Api::<Pod>::namespaced(w.client.clone(), &w.ns)
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pods {
        *per_job
            .entry(
                p.labels()
                    .get("spillway.io/job")
                    .cloned()
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(per_job.len(), 50, "{per_job:?}");
    assert!(per_job.values().all(|n| *n == 1), "{per_job:?}");
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_and_handover_when_it_dies() {
    use k8s_openapi::api::coordination::v1::Lease;
    let _turn = serial().await;
    let w = World::new("op-leader").await;
    w.nodes(1, 8, None).await;
    let election = |identity: &str| spillway_k8s::Election {
        namespace: w.ns.clone(),
        name: "spillway-operator".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
    };
    let leases: Api<Lease> = Api::namespaced(w.client.clone(), &w.ns);
    let holder = || {
        let leases = leases.clone();
        async move {
            leases
                .get_opt("spillway-operator")
                .await
                .map_err(|e| e.to_string())
                .map(|l| l.and_then(|l| l.spec?.holder_identity))
        }
    };
    let a = RunningOperator::start(w.client.clone(), Some(election("replica-a")))
        .await
        .expect("a");
    eventually(WAIT, "replica-a to lead", || async {
        match holder().await? {
            Some(h) if h == "replica-a" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let b = RunningOperator::start(w.client.clone(), Some(election("replica-b")))
        .await
        .expect("b");
    eventually(WAIT, "replica-b to be ready", || async {
        match b.get("/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    w.submit("one", json!({}), None).await;
    w.wait_phase("one", JobPhase::Running).await;
    assert_eq!(
        b.metrics.api_writes_total(),
        0,
        "the standby writes nothing"
    );
    assert!(a.metrics.api_writes_total() > 0);
    assert!(
        b.get("/metrics")
            .await
            .expect("metrics")
            .1
            .contains("spillway_leader 0")
    );

    // The leader dies without releasing the lease; the standby takes over once it expires.
    a.kill();
    let killed = std::time::Instant::now();
    eventually(WAIT, "replica-b to lead", || async {
        match holder().await? {
            Some(h) if h == "replica-b" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let handover = killed.elapsed();
    // Lease 4 s, checks every 1 s: within the lease time plus two checks.
    assert!(
        handover < Duration::from_secs(7),
        "handover took {handover:?}"
    );
    w.submit("two", json!({}), None).await;
    w.wait_phase("two", JobPhase::Running).await;
    assert!(b.metrics.api_writes_total() > 0);

    // A clean stop releases the lease at once.
    b.stop().await.expect("clean stop");
    assert_eq!(holder().await.expect("lease"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_and_metrics_pass_promtool() {
    let _turn = serial().await;
    let w = World::new("op-metrics").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    eventually(WAIT, "/readyz", || async {
        match op.get("/readyz").await {
            Ok((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(op.get("/healthz").await.expect("healthz").0, 200);
    assert_eq!(op.get("/nope").await.expect("404").0, 404);
    w.submit("measured", json!({}), Some(1)).await;
    w.wait_phase("measured", JobPhase::Succeeded).await;
    let (code, body) = op.get("/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    for family in [
        "spillway_jobs{",
        "spillway_job_wait_seconds_bucket{",
        "spillway_decisions_total{outcome=\"StartPrivate\",reason=\"FitsPrivate\"}",
        "spillway_reconcile_duration_seconds_count",
        "spillway_leader 1",
    ] {
        assert!(body.contains(family), "{family} missing from:\n{body}");
    }
    let promtool = std::env::var("SPILLWAY_PROMTOOL").unwrap_or_else(|_| {
        spillway_tests::cache_dir()
            .join("prometheus/usr/bin/promtool")
            .display()
            .to_string()
    });
    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{promtool}: {e}; run scripts/promtool.sh (scripts/test.sh does)")
        });
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    op.stop().await.expect("clean stop");
}
