//! Spillway at the scale of a real cluster: GPU nodes kept by KWOK (`tests/src/kwok.rs`) on the
//! real control plane, a stream of GpuJobs (1-8 GPU gangs, some of two 8-GPU nodes) arriving
//! over time, the real operator binary placing them, private only. The same stream can be sent
//! as labelled `batch/v1` Jobs (run by the Job controller once Spillway places them), and
//! through Kueue as the very same Jobs with Kueue's label.
//!
//! In the suite it is the small form (100 nodes, 1,000 jobs) and checks correctness: every job
//! ran once and succeeded, no node ever held more GPUs than it has. `scripts/scale.sh` runs it
//! larger (`SPILLWAY_SCALE_NODES`, `SPILLWAY_SCALE_JOBS`) and has it write its figures as JSON
//! (`SPILLWAY_SCALE_JSON`): starts per second, time to start split into queueing and
//! bind, API server requests per job, the operator's CPU and peak memory.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kwok::{self, Kwok};

#[path = "scale/figures.rs"]
mod figures;
use figures::{Figures, Timeline};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One job of the stream: when it arrives (seconds from the start), its gang, how long its
/// pods run.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at_s: f64,
    pub replicas: u32,
    pub gpus: u32,
    pub runtime_s: u32,
}

/// The stream's seed: `SPILLWAY_SCALE_SEED`, else the one the published figures used.
fn seed() -> u64 {
    std::env::var("SPILLWAY_SCALE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

const DEFAULT_SEED: u64 = 0x5ca1_ab1e;

/// `jobs` arrivals from `seed`: a tenth are gangs of two 8-GPU nodes, the rest 1, 2, 4 or 8
/// GPUs on one node; runtimes of 5 to 30 s; arrivals evenly random over the time the cluster's
/// `gpus` need to run them all, so the cluster runs near full and jobs queue.
pub fn stream(jobs: usize, gpus: u32, seed: u64) -> Vec<Arrival> {
    let mut state = seed;
    let mut draw = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out: Vec<Arrival> = (0..jobs)
        .map(|_| {
            let (replicas, gpus) = if draw() < 0.1 {
                (2, 8)
            } else {
                (1, [1, 1, 2, 4, 8][(draw() * 5.0) as usize])
            };
            Arrival {
                at_s: draw(),
                replicas,
                gpus,
                runtime_s: 5 + (draw() * 25.0) as u32,
            }
        })
        .collect();
    let work: f64 = out
        .iter()
        .map(|a| f64::from(a.replicas * a.gpus * a.runtime_s))
        .sum();
    let window = work / f64::from(gpus.max(1));
    for a in &mut out {
        a.at_s *= window;
    }
    out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    out
}

/// The operator process, killed when the test ends (a failing one too).
struct Operator(std::process::Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The operator binary against the cluster, alone (no election), quiet.
fn start_operator(cluster: &TestCluster) -> Operator {
    let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "operator",
            "--kubeconfig",
            &cluster.kubeconfig.display().to_string(),
            "--metrics-addr",
            "127.0.0.1:0",
            "--identity-addr",
            "127.0.0.1:0",
            "--leader-elect=false",
        ])
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("the operator");
    Operator(child)
}

/// What places the stream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum System {
    /// The operator binary, the jobs as GpuJobs of one GpuQueue on one private pool.
    Spillway,
    /// The operator binary, the jobs as the same batch Jobs as Kueue's, labelled with the
    /// GpuQueue instead (created suspended: no webhook runs here).
    SpillwayJobs,
    /// Kueue's manager, the jobs as `batch/v1` Jobs of one LocalQueue, its ClusterQueue holding
    /// every node's GPUs as nominal quota.
    Kueue,
}

/// The controller process of the run.
enum Controller {
    Spillway(Operator),
    Kueue(spillway_tests::kueue::Kueue),
}

impl Controller {
    fn pid(&self) -> Option<u32> {
        match self {
            Controller::Spillway(o) => Some(o.0.id()),
            Controller::Kueue(k) => k.pid(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_gangs_on_kwok_nodes_runs_each_job_once_within_capacity() {
    run(System::Spillway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scripts/scale.sh --peer kueue runs it (beside Kueue, the very same Jobs)"]
async fn the_same_stream_as_labelled_batch_jobs_runs_each_job_once_within_capacity() {
    run(System::SpillwayJobs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scripts/scale.sh --peer kueue runs it (Kueue is built by scripts/kueue.sh, not by the suite)"]
async fn kueue_runs_the_same_stream_of_batch_jobs_once_within_capacity() {
    run(System::Kueue).await;
}

/// The stream's objects for Spillway: its queue and pool.
async fn spillway_queue(client: &kube::Client) {
    let queue: GpuQueue = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
        "metadata": {"name": "scale"}, "spec": {}}))
    .unwrap();
    let pool: ComputePool = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
        "metadata": {"name": "kwok"},
        "spec": {"private": {"nodeSelector": {"spillway.io/pool": "kwok"}}}}))
    .unwrap();
    Api::<GpuQueue>::all(client.clone())
        .create(&PostParams::default(), &queue)
        .await
        .expect("queue");
    Api::<ComputePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool");
}

/// Job `name` of the stream as `system` takes it: a GpuJob, or a suspended batch Job of the
/// queue (either system's webhook would suspend it too) with one pod per replica.
fn job_object(system: System, ns: &str, name: &str, a: &Arrival) -> serde_json::Value {
    let runtime = json!({kwok::COMPLETE_AFTER: format!("{}s", a.runtime_s)});
    let label = match system {
        System::Kueue => spillway_tests::kueue::QUEUE_LABEL,
        _ => "spillway.io/queue",
    };
    match system {
        System::Spillway => json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queue": "scale", "replicas": a.replicas, "gpusPerReplica": a.gpus,
                     "template": {
                         "metadata": {"annotations": runtime},
                         "spec": {"containers": [{"name": "main", "image": "train"}]}}},
        }),
        System::Kueue | System::SpillwayJobs => json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {label: "scale"}},
            "spec": {"suspend": true, "parallelism": a.replicas, "completions": a.replicas,
                     "backoffLimit": 0,
                     "template": {
                         "metadata": {"annotations": runtime},
                         "spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "main", "image": "train",
                                      "resources": {"limits": {"nvidia.com/gpu": a.gpus}}}]}}},
        }),
    }
}

async fn run(system: System) {
    let nodes = env_or("SPILLWAY_SCALE_NODES", 100);
    let jobs = env_or("SPILLWAY_SCALE_JOBS", 1000);
    let (cluster, client) = TestCluster::with_crds().await;
    let kwok = Kwok::start(cluster).await.expect("KWOK");
    let ns = cluster.namespace(&client, "scale").await.expect("ns");
    kwok::create_nodes(
        &client,
        (0..nodes)
            .map(|i| {
                kwok::gpu_node(
                    &format!("gpu-{i:04}"),
                    8,
                    "NVIDIA-A100-SXM4-80GB",
                    &[("spillway.io/pool", "kwok")],
                )
            })
            .collect(),
    )
    .await
    .expect("nodes");
    let gpus = (nodes * 8) as u32;
    let controller = match system {
        System::Spillway | System::SpillwayJobs => {
            spillway_queue(&client).await;
            Controller::Spillway(start_operator(cluster))
        }
        System::Kueue => {
            let kueue = spillway_tests::kueue::Kueue::start(cluster)
                .await
                .expect("Kueue");
            kueue
                .queue(
                    &client,
                    &ns,
                    "scale",
                    gpus,
                    json!({"spillway.io/pool": "kwok"}),
                )
                .await
                .expect("Kueue's queues");
            Controller::Kueue(kueue)
        }
    };

    // Every pod change as it happens, on the test's clock.
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let t0 = Instant::now();
    let watch = {
        let timeline = timeline.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                let at = t0.elapsed().as_secs_f64();
                if let watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) = event {
                    timeline.lock().unwrap().observe(&pod, at);
                }
            }
        })
    };
    let before = figures::api_requests(&client).await;
    let cpu_before = controller.pid().map(figures::process_usage);

    let seed = seed();
    let arrivals = stream(jobs, gpus, seed);
    let api: Api<DynamicObject> = match system {
        System::Spillway => {
            Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<GpuJob>(&()))
        }
        System::Kueue | System::SpillwayJobs => Api::namespaced_with(
            client.clone(),
            &ns,
            &ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
        ),
    };
    // Each job created at its arrival, up to 64 creations in flight, so the stream keeps its
    // pace however long one request takes.
    let created: HashMap<String, (f64, Arrival)> =
        futures::stream::iter(arrivals.iter().cloned().enumerate())
            .map(|(i, a)| {
                let (api, ns) = (api.clone(), ns.clone());
                async move {
                    let wait = a.at_s - t0.elapsed().as_secs_f64();
                    if wait > 0.0 {
                        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                    }
                    let name = format!("job-{i:05}");
                    let job: DynamicObject =
                        serde_json::from_value(job_object(system, &ns, &name, &a)).expect("a job");
                    api.create(&PostParams::default(), &job)
                        .await
                        .expect("create job");
                    (name, (t0.elapsed().as_secs_f64(), a))
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;

    // Done when every job's pods succeeded.
    let pods_wanted: u32 = arrivals.iter().map(|a| a.replicas).sum();
    let deadline = Instant::now()
        + Duration::from_secs(env_or("SPILLWAY_SCALE_DEADLINE_S", 300 + jobs / 5) as u64);
    loop {
        let done = timeline.lock().unwrap().succeeded();
        if done >= pods_wanted as usize {
            break;
        }
        let log = match &controller {
            Controller::Kueue(k) => k.log_tail(),
            Controller::Spillway(_) => String::new(),
        };
        assert!(
            Instant::now() < deadline,
            "{done} of {pods_wanted} pods succeeded in time\nKWOK: {}\n{log}",
            kwok.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let end = t0.elapsed().as_secs_f64();
    let after = figures::api_requests(&client).await;
    let usage = controller
        .pid()
        .map(figures::process_usage)
        .unwrap_or_default();
    // The run's CPU: what the controller used from the stream's start.
    let usage = (usage.0 - cpu_before.map_or(0.0, |u| u.0), usage.1);
    drop(controller);
    watch.abort();

    let events = figures::events_by_reporter(&client).await;
    let kubernetes = (client.apiserver_version().await)
        .map(|v| v.git_version)
        .unwrap_or_default();
    let timeline = timeline.lock().unwrap();
    // Correctness: each job's pods made once and all succeeded; no node over its GPUs.
    let by_job = timeline.pods_by_job();
    for (name, (_, a)) in &created {
        let pods = by_job.get(name).map_or(0, |p| p.len());
        assert_eq!(pods, a.replicas as usize, "job {name}: {pods} pods made");
    }
    let peak: BTreeMap<String, u32> = timeline.peak_gpus_per_node();
    for (node, gpus) in &peak {
        assert!(*gpus <= 8, "node {node} held {gpus} GPUs at once");
    }
    assert!(
        peak.keys().all(|n| n.starts_with("gpu-")),
        "pods ran on KWOK's nodes only: {peak:?}"
    );

    let mut figures = Figures::of(
        &created,
        &timeline,
        end,
        (&before, &after),
        usage,
        nodes,
        kubernetes,
    );
    figures.system = match system {
        System::Spillway | System::SpillwayJobs => "spillway",
        System::Kueue => "kueue",
    };
    figures.jobs_as = match system {
        System::Spillway => "GpuJob",
        System::SpillwayJobs | System::Kueue => "batch/v1 Job",
    };
    figures.seed = seed;
    figures.events_per_job_by_reporter = figures::per_job(&events, created.len());
    if system == System::Kueue {
        let t = spillway_tests::kueue::Tuning::from_env();
        figures.peer_settings = format!(
            "clientConnection.qps {}, burst {}, Job.batch and Workload concurrency {}",
            t.qps,
            t.qps * 2,
            t.concurrency
        );
    }
    eprintln!("scale: {}", serde_json::to_string(&figures).unwrap());
    if let Ok(path) = std::env::var("SPILLWAY_SCALE_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&figures).unwrap()).expect("JSON");
    }
}
