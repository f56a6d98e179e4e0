//! The decision loop: watch caches -> snapshot -> `decide` -> writes.
//!
//! One task owns the loop. It turns when a watched object changes (debounced, so a burst of
//! submissions makes one cycle), when the plan's `next_wake` comes (a wait threshold passing),
//! when a write fails, and every resync period. Each turn:
//!
//! 1. builds the snapshot from the caches plus the starts it has assumed but not yet seen;
//! 2. runs `decide` with the compiled BurstPolicies;
//! 3. assumes each start at once (its GPUs are taken for the next turn) and creates the gang's
//!    pods in the background; a failed create drops the assumption and the job is decided again;
//! 4. writes each job's status by server-side apply (field manager `spillway`) only when it
//!    changed, with an Event when the decision or the phase changed; deletes the pods of
//!    finished, failed or broken gangs; requeues or fails broken gangs;
//! 5. keeps GpuQueue and ComputePool status and the metrics current.
//!
//! Only the leader runs the loop; every replica keeps its caches warm.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::DeserializeGuard;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use spillway_api::job::JobPhase;
use spillway_api::pool::{ComputePoolStatus, PoolGpus, PoolNodes};
use spillway_api::queue::{GpuQueueStatus, GpusByEnvironment, QueueSpend};
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuJobStatus, GpuQueue};
use spillway_core::{self as core, Environment, Outcome, Time};
use spillway_policy::PolicyEngine;
use tokio::sync::{Notify, Semaphore, mpsc, watch};

use crate::cloud::{Cloud, CloudView};
use crate::metrics::Metrics;
use crate::status::{self, CostRate, round_cents};
use crate::world::{self, Assumed, Inputs, JobView, Lifecycle};
use crate::writes::{StatusKind, StatusOrder};
use crate::{http::Health, labels, pods};

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The core's knobs.
    pub core: core::Settings,
    /// BurstPolicy files loaded besides the cluster's BurstPolicies.
    pub policy_dir: Option<PathBuf>,
    /// A full turn at least this often, even with nothing changing.
    pub resync: Duration,
    /// How long to gather changes before a turn.
    pub debounce: Duration,
    /// Concurrent API writes.
    pub max_in_flight: usize,
    /// An assumed start whose pods have not all appeared after this long is dropped.
    pub assume_timeout: Duration,
    /// Reporting instance in Events (pod name or host name).
    pub instance: String,
    /// Cloud bursting; `None` runs private pools only (cloud pools get no offerings).
    pub cloud: Option<crate::cloud::CloudConfig>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            core: core::Settings::default(),
            policy_dir: None,
            resync: Duration::from_secs(30),
            debounce: Duration::from_millis(50),
            max_in_flight: 64,
            assume_timeout: Duration::from_secs(120),
            instance: "spillway".into(),
            cloud: None,
        }
    }
}

/// The watch caches, shared by the loop and the readiness check.
#[derive(Clone)]
pub struct Caches {
    pub jobs: Store<DeserializeGuard<GpuJob>>,
    pub queues: Store<DeserializeGuard<GpuQueue>>,
    pub pools: Store<DeserializeGuard<ComputePool>>,
    pub datasets: Store<DeserializeGuard<Dataset>>,
    pub policies: Store<DeserializeGuard<BurstPolicy>>,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub namespaces: Store<Namespace>,
}

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: Arc<Notify>,
    strip: fn(&mut K),
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .touched_objects();
    tasks.push(tokio::spawn(drain(
        stream,
        changed,
        K::kind(&()).into_owned(),
    )));
    reader
}

async fn drain<S, K>(stream: S, changed: Arc<Notify>, kind: String)
where
    S: Stream<Item = Result<K, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => changed.notify_one(),
            Err(e) => tracing::warn!(kind = %kind, error = %e, "watch error (retrying)"),
        }
    }
}

fn strip_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

fn strip_guard<K: Resource>(o: &mut DeserializeGuard<K>) {
    if let Ok(k) = o.0.as_mut() {
        k.meta_mut().managed_fields = None;
    }
}

impl Caches {
    /// Starts one watch per kind; `changed` is notified on every change. The watch tasks
    /// are returned for the caller to stop.
    pub fn start(
        client: &Client,
        changed: Arc<Notify>,
    ) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
        let cfg = watcher::Config::default;
        let c = &changed;
        let mut t = Vec::new();
        let caches = Caches {
            jobs: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            queues: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            pools: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            datasets: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            policies: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            nodes: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_meta,
                &mut t,
            ),
            pods: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_meta,
                &mut t,
            ),
            namespaces: spawn_reflector(
                Api::all(client.clone()),
                cfg(),
                c.clone(),
                strip_meta,
                &mut t,
            ),
        };
        (caches, t)
    }

    /// Waits until every cache has listed once.
    pub async fn ready(&self) -> anyhow::Result<()> {
        self.jobs.wait_until_ready().await?;
        self.queues.wait_until_ready().await?;
        self.pools.wait_until_ready().await?;
        self.datasets.wait_until_ready().await?;
        self.policies.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        Ok(())
    }
}

/// The readable GpuJobs, reusing the previous turn's copy of each unchanged object (by uid
/// and resourceVersion), so a turn does not deep-copy every job and its pod template.
fn valid_jobs(
    store: &Store<DeserializeGuard<GpuJob>>,
    cache: &mut HashMap<(String, String), Arc<GpuJob>>,
) -> Vec<Arc<GpuJob>> {
    let mut next = HashMap::with_capacity(cache.len());
    let jobs = store
        .state()
        .iter()
        .filter_map(|g| {
            let j = g.0.as_ref().ok()?;
            let key = (
                j.metadata.uid.clone().unwrap_or_default(),
                j.metadata.resource_version.clone().unwrap_or_default(),
            );
            let arc = cache.remove(&key).unwrap_or_else(|| Arc::new(j.clone()));
            next.insert(key, arc.clone());
            Some(arc)
        })
        .collect();
    *cache = next;
    jobs
}

fn valid<K: Clone>(store: &Store<DeserializeGuard<K>>) -> Vec<Arc<K>>
where
    DeserializeGuard<K>: Resource<DynamicType = ()>,
{
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok().cloned().map(Arc::new))
        .collect()
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn cloud_regions(pools: &[Arc<ComputePool>]) -> BTreeSet<String> {
    pools
        .iter()
        .filter_map(|p| p.spec.aws.as_ref().map(|a| a.region.clone()))
        .collect()
}

/// What a background write reports back: its failure.
#[derive(Debug)]
enum Failed {
    /// Creating a start's pods failed; the assumption must go.
    Start { job: String, error: String },
    /// A status write failed; it will be retried on the next resync.
    Status {
        kind: StatusKind,
        key: String,
        error: String,
    },
    /// A cloud launch failed (the offering cools down; the next turn picks another).
    Launch { job: String, error: String },
}

/// Policies, compiled once per change of their set.
struct Policies {
    key: Vec<(String, String)>,
    engine: Arc<PolicyEngine>,
}

/// The decision loop's state.
pub struct Controller {
    client: Client,
    caches: Caches,
    settings: Settings,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    writes: Arc<Semaphore>,
    /// Keeps the status writes of one object in order (see [`StatusOrder`]).
    status_order: StatusOrder,
    feedback_tx: mpsc::UnboundedSender<Failed>,
    feedback_rx: mpsc::UnboundedReceiver<Failed>,
    assumed: HashMap<String, (Assumed, Instant)>,
    attempt_floor: HashMap<String, u32>,
    /// Job status last written, by job id (until the cache shows it).
    written: HashMap<String, GpuJobStatus>,
    queue_written: HashMap<String, GpuQueueStatus>,
    pool_written: HashMap<String, ComputePoolStatus>,
    /// Pods whose deletion was sent (by uid).
    deleting: HashSet<String>,
    /// Jobs whose wait was already observed in the wait histogram.
    wait_observed: HashSet<String>,
    policies: Option<Policies>,
    cloud: Option<Arc<Cloud>>,
    /// When bootstrap tokens were last swept.
    last_sweep: Option<Instant>,
    /// Deleted jobs whose cloud finalizer is being removed.
    releasing: HashSet<String>,
    /// Spend accounted up to when, per live instance.
    spend_marks: HashMap<String, Time>,
    /// Cloud spend this month per queue: (month `YYYY-MM`, USD).
    queue_month: HashMap<String, (String, f64)>,
    /// Current cloud spend rate per queue and per pool, USD/h (this turn).
    queue_hourly: HashMap<String, f64>,
    pool_cloud: HashMap<String, (i64, f64)>,
    /// Cloud nodes seen idle, since when.
    idle_since: HashMap<String, Time>,
    changed: Arc<Notify>,
    /// The previous turn's copies of the readable GpuJobs.
    job_copies: HashMap<(String, String), Arc<GpuJob>>,
    dir_policies: Vec<BurstPolicy>,
    dir_loaded: Option<Instant>,
}

impl Controller {
    pub fn new(
        client: Client,
        caches: Caches,
        settings: Settings,
        metrics: Arc<Metrics>,
        changed: Arc<Notify>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: labels::CONTROLLER.into(),
                instance: Some(settings.instance.clone()),
            },
        );
        let (feedback_tx, feedback_rx) = mpsc::unbounded_channel();
        let cloud = settings.cloud.clone().map(Cloud::new);
        Controller {
            writes: Arc::new(Semaphore::new(settings.max_in_flight.max(1))),
            status_order: StatusOrder::default(),
            client,
            caches,
            settings,
            metrics,
            recorder,
            feedback_tx,
            feedback_rx,
            assumed: HashMap::new(),
            attempt_floor: HashMap::new(),
            written: HashMap::new(),
            queue_written: HashMap::new(),
            pool_written: HashMap::new(),
            deleting: HashSet::new(),
            wait_observed: HashSet::new(),
            policies: None,
            job_copies: HashMap::new(),
            cloud,
            spend_marks: HashMap::new(),
            releasing: HashSet::new(),
            last_sweep: None,
            queue_month: HashMap::new(),
            queue_hourly: HashMap::new(),
            pool_cloud: HashMap::new(),
            idle_since: HashMap::new(),
            changed,
            dir_policies: Vec::new(),
            dir_loaded: None,
        }
    }

    /// Runs the loop until `stop` turns true. `changed` is the caches' change signal.
    pub async fn run(
        mut self,
        health: Arc<Health>,
        mut stop: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let changed = self.changed.clone();
        let _poller = self.cloud.clone().map(|cloud| {
            let pools = self.caches.pools.clone();
            AbortOnDrop(tokio::spawn(crate::cloud::poll(
                cloud,
                move || valid(&pools),
                self.metrics.clone(),
                changed.clone(),
            )))
        });
        let mut next_wake: Option<Time> = None;
        loop {
            if *stop.borrow() {
                // Let the writes in flight finish (bounded), so a clean stop loses none.
                let all = self.settings.max_in_flight.max(1) as u32;
                let _ =
                    tokio::time::timeout(Duration::from_secs(10), self.writes.acquire_many(all))
                        .await;
                return Ok(());
            }
            let started = Instant::now();
            let wake = self.turn();
            self.metrics.reconciled(started.elapsed().as_secs_f64());
            health.turned();
            next_wake = wake.or(next_wake.filter(|w| *w > now()));
            let sleep_for = next_wake
                .map(|w| Duration::from_millis(w.since(now()).as_millis() + 5))
                .unwrap_or(self.settings.resync)
                .min(self.settings.resync);
            tokio::select! {
                _ = changed.notified() => {
                    // Gather the rest of a burst of changes into the same turn.
                    tokio::time::sleep(self.settings.debounce).await;
                }
                Some(f) = self.feedback_rx.recv() => self.feedback(f),
                _ = tokio::time::sleep(sleep_for) => {}
                _ = stop.changed() => {}
            }
            while let Ok(f) = self.feedback_rx.try_recv() {
                self.feedback(f);
            }
        }
    }

    fn feedback(&mut self, f: Failed) {
        match f {
            Failed::Start { job, error } => {
                tracing::warn!(job = %job, error = %error, "creating pods failed; deciding again");
                self.assumed.remove(&job);
            }
            Failed::Launch { job, error } => {
                tracing::warn!(job = %job, error = %error, "cloud launch failed");
                let (ns, name) = job.split_once('/').unwrap_or(("", job.as_str()));
                let found = self.caches.jobs.state().iter().find_map(|g| {
                    g.0.as_ref()
                        .ok()
                        .filter(|j| j.namespace().as_deref() == Some(ns) && j.name_any() == name)
                        .cloned()
                });
                if let Some(j) = found {
                    self.publish_to(
                        j.object_ref(&()),
                        true,
                        "LaunchFailed".into(),
                        "Launch".into(),
                        error,
                    );
                }
            }
            Failed::Status { kind, key, error } => {
                tracing::warn!(kind = ?kind, object = %key, error = %error, "status write failed; retrying at the next resync");
                match kind {
                    StatusKind::GpuJob => self.written.remove(&key).map(|_| ()),
                    StatusKind::GpuQueue => self.queue_written.remove(&key).map(|_| ()),
                    StatusKind::ComputePool => self.pool_written.remove(&key).map(|_| ()),
                };
            }
        }
    }

    fn engine(&mut self, cluster: &[Arc<BurstPolicy>]) -> Arc<PolicyEngine> {
        if let Some(dir) = &self.settings.policy_dir
            && self
                .dir_loaded
                .is_none_or(|t| t.elapsed() > self.settings.resync)
        {
            self.dir_loaded = Some(Instant::now());
            match spillway_api::manifests::Manifests::load(dir) {
                Ok(m) => self.dir_policies = m.policies.into_iter().map(|l| l.object).collect(),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot load policy files; keeping the previous ones")
                }
            }
        }
        // Cluster objects win over files of the same name.
        let mut all: BTreeMap<String, BurstPolicy> = self
            .dir_policies
            .iter()
            .map(|p| (p.name_any(), p.clone()))
            .collect();
        for p in cluster {
            all.insert(p.name_any(), (**p).clone());
        }
        let key: Vec<(String, String)> = all
            .values()
            .map(|p| {
                (
                    p.name_any(),
                    p.resource_version()
                        .unwrap_or_else(|| serde_json::to_string(&p.spec).unwrap_or_default()),
                )
            })
            .collect();
        if let Some(p) = &self.policies
            && p.key == key
        {
            return p.engine.clone();
        }
        // Compile each policy alone first, so one broken policy does not disable the rest.
        let mut good = Vec::new();
        for p in all.values() {
            match PolicyEngine::compile(std::slice::from_ref(p)) {
                Ok(_) => good.push(p.clone()),
                Err(errors) => {
                    for e in errors {
                        tracing::error!(policy = %p.name_any(), error = %e, "BurstPolicy rule does not compile; the policy is ignored");
                    }
                }
            }
        }
        // Each compiled alone, so together they compile too; `empty` keeps this total.
        let engine =
            Arc::new(PolicyEngine::compile(&good).unwrap_or_else(|_| PolicyEngine::empty()));
        self.policies = Some(Policies {
            key,
            engine: engine.clone(),
        });
        engine
    }

    /// One turn of the loop; returns when to turn again at the latest.
    fn turn(&mut self) -> Option<Time> {
        let now = now();
        let inputs = Inputs {
            jobs: valid_jobs(&self.caches.jobs, &mut self.job_copies),
            queues: valid(&self.caches.queues),
            pools: valid(&self.caches.pools),
            datasets: valid(&self.caches.datasets),
            nodes: self.caches.nodes.state(),
            pods: self.caches.pods.state(),
            namespaces: self.caches.namespaces.state(),
            needs: HashMap::new(),
            finished: self
                .written
                .iter()
                .filter(|(_, st)| matches!(st.phase, Some(JobPhase::Succeeded | JobPhase::Failed)))
                .map(|(id, _)| id.clone())
                .collect(),
        };
        let mut inputs = inputs;
        let regions = cloud_regions(&inputs.pools);
        let cloud_view = self
            .cloud
            .as_ref()
            .map(|c| c.view(&regions))
            .unwrap_or_default();
        for i in &cloud_view.instances {
            inputs.needs.insert(i.need.clone(), i.pool.clone());
        }
        inputs.needs.extend(cloud_view.launching.clone());
        let engine = self.engine(&valid(&self.caches.policies));
        self.unreadable_jobs();

        // Assumptions whose pods are all visible, or that are too old, are done.
        let timeout = self.settings.assume_timeout;
        let assumed_now: HashMap<String, Assumed> = self
            .assumed
            .iter()
            .map(|(k, (a, _))| (k.clone(), a.clone()))
            .collect();
        let mut built = world::build(
            &inputs,
            &assumed_now,
            &self.attempt_floor,
            self.settings.core.clone(),
            now,
        );
        let mut settled = Vec::new();
        for (id, (a, since)) in &self.assumed {
            let visible = built
                .jobs
                .get(id)
                .map(|v| v.pods.len())
                .unwrap_or(usize::MAX);
            if visible >= a.nodes.len() || since.elapsed() > timeout {
                if visible < a.nodes.len() && visible != usize::MAX {
                    tracing::warn!(job = %id, "pods of an assumed start did not all appear; dropping the assumption");
                }
                settled.push(id.clone());
            }
        }
        if !settled.is_empty() {
            for id in &settled {
                self.assumed.remove(id);
            }
            let assumed_now: HashMap<String, Assumed> = self
                .assumed
                .iter()
                .map(|(k, (a, _))| (k.clone(), a.clone()))
                .collect();
            built = world::build(
                &inputs,
                &assumed_now,
                &self.attempt_floor,
                self.settings.core.clone(),
                now,
            );
        }

        self.add_cloud_facts(&mut built, &inputs, &cloud_view, now);
        self.account_spend(&mut built, &inputs, now);
        let plan = core::decide(&built.snapshot, engine.as_ref(), now);
        self.metrics.set_policy_errors(engine.runtime_errors());
        let pools: HashMap<String, Arc<ComputePool>> = inputs
            .pools
            .iter()
            .map(|p| (p.name_any(), p.clone()))
            .collect();

        // Starts: assume, then write.
        for start in &plan.starts {
            let Some(view) = built.jobs.get_mut(&start.job) else {
                continue;
            };
            let assumed = Assumed {
                attempt: view.attempt,
                pool: start.pool.clone(),
                environment: start.environment,
                nodes: start.nodes.clone(),
                at: now,
            };
            view.lifecycle = Lifecycle::Running {
                nodes: start.nodes.clone(),
                pool: Some(start.pool.clone()),
                started_at: now,
                all_running: false,
            };
            self.assumed
                .insert(start.job.clone(), (assumed, Instant::now()));
            let pool = pools.get(&start.pool).cloned();
            let pods: Vec<Pod> = start
                .nodes
                .iter()
                .enumerate()
                .map(|(r, node)| {
                    pods::replica_pod(&view.job, view.attempt, r as u32, node, pool.as_deref())
                })
                .collect();
            self.create_pods(start.job.clone(), view.namespace(), pods);
            self.metrics.job_waited(
                &view.job.spec.queue,
                now.since(view.queued_at).as_secs_f64(),
            );
            self.wait_observed.insert(view.id.clone());
        }

        self.launch_and_terminate(&plan, &pools, &built);
        self.release_deleted_jobs(&built, &inputs, &cloud_view);
        self.collect_garbage(&built, &inputs, &cloud_view, now);
        self.maybe_sweep_tokens(&built, &cloud_view, now);

        // Jobs: status, Events, cleanup.
        let mut wake: Option<Time> = plan.next_wake;
        let decisions: HashMap<&str, &core::Decision> =
            plan.decisions.iter().map(|d| (d.job.as_str(), d)).collect();
        let live: HashSet<String> = built.jobs.keys().cloned().collect();
        for view in built.jobs.values() {
            for pod in &view.surplus_pods {
                self.delete_pod(pod);
            }
            if let Lifecycle::Broken { message } = &view.lifecycle {
                self.broken(view, message, now);
                continue;
            }
            if let Lifecycle::Running { started_at, .. } = &view.lifecycle
                && let Some(max) = view
                    .job
                    .spec
                    .max_runtime
                    .as_deref()
                    .and_then(|m| core::Duration::parse(m).ok())
            {
                let at = *started_at + max;
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
            let pool = view.job.status.as_ref().and_then(|s| s.pool.clone());
            let pool_name = match &view.lifecycle {
                Lifecycle::Running { pool, .. } => pool.clone(),
                _ => pool,
            };
            let pool_spec = pool_name.as_ref().and_then(|p| pools.get(p));
            let environment = pool_spec.map(|p| {
                if p.spec.aws.is_some() {
                    Environment::Cloud
                } else {
                    Environment::Private
                }
            });
            let cloud_rate = cloud_job_rate(view, &built);
            let rate = CostRate {
                hourly_usd: cloud_rate.unwrap_or(0.0)
                    + pool_spec
                        .and_then(|p| p.spec.private.as_ref())
                        .and_then(|p| p.gpu_cost_per_hour)
                        .map(|c| {
                            c * view.job.spec.replicas.max(1) as f64
                                * view.job.spec.gpus_per_replica.max(1) as f64
                        })
                        .unwrap_or(0.0),
            };
            let decision = decisions.get(view.id.as_str()).copied();
            self.write_job_status(view, decision, environment, rate, now);
        }
        self.written.retain(|k, _| live.contains(k));
        self.attempt_floor.retain(|k, _| live.contains(k));
        self.wait_observed.retain(|k| live.contains(k));
        let active_uids: HashSet<String> = inputs
            .pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        self.deleting.retain(|u| active_uids.contains(u));

        // Jobs held back by their queue's budget, per queue.
        let mut budget_held: HashMap<&str, usize> = HashMap::new();
        for d in &plan.decisions {
            if d.reason == core::Reason::BudgetExhausted
                && let Some(view) = built.jobs.get(&d.job)
            {
                *budget_held.entry(view.job.spec.queue.as_str()).or_default() += 1;
            }
        }
        self.queue_and_pool_status(&built, &inputs, &budget_held, now);
        wake
    }

    /// Cloud offerings, instances and idle cloud nodes into the snapshot.
    fn add_cloud_facts(
        &mut self,
        built: &mut world::Built,
        inputs: &Inputs,
        view: &CloudView,
        now: Time,
    ) {
        let Some(cloud) = &self.cloud else { return };
        let aws_pools: Vec<Arc<ComputePool>> = inputs
            .pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .filter(|p| built.snapshot.pools.iter().any(|c| c.name == p.name_any()))
            .cloned()
            .collect();
        built.snapshot.offerings = cloud.offerings(&aws_pools, view, now);
        let node_of: HashMap<String, String> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| Some((n.instance_id.clone()?, n.name.clone())))
            .collect();
        for i in &view.instances {
            let (gpus, price) = cloud.describe(i, view);
            built.snapshot.instances.push(core::Instance {
                id: i.id.clone(),
                pool: i.pool.clone(),
                instance_type: i.instance_type.clone(),
                capacity_type: i.capacity_type,
                zone: i.zone.clone(),
                gpus,
                hourly_price: price,
                need: i.need.clone(),
                queue: i.queue.clone(),
                node: node_of.get(&i.id).cloned(),
                launched_at: i.launched_at,
            });
        }
        let cloud_pools: HashSet<String> = aws_pools.iter().map(|p| p.name_any()).collect();
        let mut idle = HashSet::new();
        for n in &mut built.snapshot.nodes {
            // A node whose instance is being terminated takes no new work (it is cordoned
            // too, but the watch may not have said so yet).
            if n.instance_id
                .as_ref()
                .is_some_and(|id| view.terminating.contains(id))
            {
                n.schedulable = false;
            }
            if cloud_pools.contains(&n.pool) && n.free_gpus >= n.gpus {
                n.idle_since = Some(*self.idle_since.entry(n.name.clone()).or_insert(now));
                idle.insert(n.name.clone());
            }
        }
        self.idle_since.retain(|k, _| idle.contains(k));
    }

    /// Accrues each live instance's price since the last turn into its queue's month and the
    /// spend counter; gives the core each queue's month-to-date spend (for monthly budgets).
    fn account_spend(&mut self, built: &mut world::Built, inputs: &Inputs, now: Time) {
        let month = month_of(now);
        for q in &inputs.queues {
            let name = q.name_any();
            let entry = self.queue_month.entry(name).or_insert_with(|| {
                let spent = q
                    .status
                    .as_ref()
                    .and_then(|s| s.spend.as_ref())
                    .map(|s| s.this_month_usd)
                    .unwrap_or(0.0);
                (month.clone(), spent)
            });
            if entry.0 != month {
                *entry = (month.clone(), 0.0);
            }
        }
        self.queue_hourly.clear();
        self.pool_cloud.clear();
        let mut live = HashSet::new();
        for i in &built.snapshot.instances {
            live.insert(i.id.clone());
            let last = self.spend_marks.insert(i.id.clone(), now).unwrap_or(now);
            let usd = i.hourly_price * now.since(last).as_secs_f64().max(0.0) / 3600.0;
            if usd > 0.0 {
                self.metrics
                    .spend(&i.queue, &i.pool, i.capacity_type.as_str(), usd);
                if let Some(m) = self.queue_month.get_mut(&i.queue) {
                    m.1 += usd;
                }
            }
            *self.queue_hourly.entry(i.queue.clone()).or_default() += i.hourly_price;
            let p = self.pool_cloud.entry(i.pool.clone()).or_default();
            p.0 += 1;
            p.1 += i.hourly_price;
        }
        self.spend_marks.retain(|id, _| live.contains(id));
        for q in &mut built.snapshot.queues {
            if let Some((_, usd)) = self.queue_month.get(&q.name) {
                q.spent_this_month_usd = *usd;
            }
        }
    }

    /// Every resync period, deletes the bootstrap tokens that are done.
    fn maybe_sweep_tokens(&mut self, built: &world::Built, view: &CloudView, now: Time) {
        let Some(cloud) = &self.cloud else { return };
        if cloud.config.join.is_none()
            || self
                .last_sweep
                .is_some_and(|t| t.elapsed() < self.settings.resync)
        {
            return;
        }
        self.last_sweep = Some(Instant::now());
        let joined_ids: HashSet<&str> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| n.instance_id.as_deref())
            .collect();
        let mut by_need: HashMap<&str, (usize, usize)> = HashMap::new();
        for i in &view.instances {
            let e = by_need.entry(i.need.as_str()).or_default();
            e.0 += 1;
            if joined_ids.contains(i.id.as_str()) {
                e.1 += 1;
            }
        }
        let joined: HashSet<String> = by_need
            .iter()
            .filter(|(_, (n, j))| n == j)
            .map(|(need, _)| need.to_string())
            .collect();
        let mut alive: HashSet<String> = by_need.keys().map(|n| n.to_string()).collect();
        alive.extend(view.launching.keys().cloned());
        tokio::spawn(sweep_tokens(self.client.clone(), joined, alive, now));
    }

    /// Carries out the plan's launches and scale-down terminations in the background.
    fn launch_and_terminate(
        &mut self,
        plan: &core::Plan,
        pools: &HashMap<String, Arc<ComputePool>>,
        built: &world::Built,
    ) {
        let Some(cloud) = self.cloud.clone() else {
            return;
        };
        for l in &plan.launches {
            let Some(pool) = pools.get(&l.offering.pool).cloned() else {
                continue;
            };
            if !cloud.start_launch(&l.need, &l.offering.pool) {
                continue;
            }
            let Some(job) = built.jobs.get(&l.job).map(|v| v.job.clone()) else {
                cloud.cancel_launch(&l.need);
                continue;
            };
            let (cloud, changed, tx, metrics, l) = (
                cloud.clone(),
                self.changed.clone(),
                self.feedback_tx.clone(),
                self.metrics.clone(),
                l.clone(),
            );
            let client = self.client.clone();
            tracing::info!(job = %l.job, need = %l.need, instance_type = %l.offering.instance_type,
                capacity = %l.offering.capacity_type.as_str(), count = l.count, "launching");
            tokio::spawn(async move {
                // No instance without the finalizer that releases it when the job is deleted.
                if let Err(e) = add_cloud_finalizer(&client, &job).await {
                    cloud.cancel_launch(&l.need);
                    let _ = tx.send(Failed::Launch {
                        job: l.job.clone(),
                        error: format!("cannot add the {} finalizer: {e}", labels::CLOUD_FINALIZER),
                    });
                    return;
                }
                let user_data = match join_material(&client, &cloud, &pool, &l).await {
                    Ok(u) => u,
                    Err(e) => {
                        cloud.cancel_launch(&l.need);
                        let _ = tx.send(Failed::Launch {
                            job: l.job.clone(),
                            error: format!("cannot create the bootstrap token: {e}"),
                        });
                        return;
                    }
                };
                let r = cloud.launch(&pool, &l, user_data, &changed).await;
                metrics.cloud_call("launch", r.is_ok());
                match r {
                    Ok(list) => {
                        let ids: Vec<&str> = list.iter().map(|i| i.id.as_str()).collect();
                        tracing::info!(job = %l.job, need = %l.need, instances = ?ids, "launched");
                    }
                    Err(e) => {
                        let _ = tx.send(Failed::Launch {
                            job: l.job.clone(),
                            error: format!(
                                "launching {} x {} ({}) for need {}: {e}",
                                l.count,
                                l.offering.instance_type,
                                l.offering.capacity_type.as_str(),
                                l.need
                            ),
                        });
                    }
                }
            });
        }
        for t in &plan.terminations {
            self.retire(
                t.instance_id.clone(),
                Some(t.node.clone()),
                "idle past the pool's idleTimeout",
            );
        }
    }

    /// Deleted jobs holding the cloud finalizer: terminate their instances (those whose node
    /// runs nothing else), then remove the finalizer so the deletion completes.
    fn release_deleted_jobs(&mut self, built: &world::Built, inputs: &Inputs, view: &CloudView) {
        for v in built.jobs.values() {
            let meta = &v.job.metadata;
            let ours = meta
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == labels::CLOUD_FINALIZER);
            if meta.deletion_timestamp.is_none() || !ours {
                continue;
            }
            let mine: Vec<&spillway_cloud::CloudInstance> =
                view.instances.iter().filter(|i| i.job == v.id).collect();
            let ns = v.job.namespace().unwrap_or_default();
            let name = v.job.name_any();
            for i in &mine {
                let node = built
                    .snapshot
                    .nodes
                    .iter()
                    .find(|n| n.instance_id.as_deref() == Some(i.id.as_str()))
                    .map(|n| n.name.clone());
                let shared = node.as_ref().is_some_and(|n| {
                    inputs.pods.iter().any(|p| {
                        world::pod_active(p)
                            && world::pod_node(p).as_deref() == Some(n.as_str())
                            && !(p.namespace().as_deref() == Some(ns.as_str())
                                && p.labels().get(labels::JOB_LABEL) == Some(&name))
                    })
                });
                if !shared {
                    self.retire(Some(i.id.clone()), node, "its GpuJob was deleted");
                }
            }
            let launching = view
                .launching
                .keys()
                .any(|need| need.rsplit_once('#').map(|(j, _)| j) == Some(v.id.as_str()));
            if mine.is_empty() && !launching && self.releasing.insert(v.id.clone()) {
                let (client, job, metrics) =
                    (self.client.clone(), v.job.clone(), self.metrics.clone());
                tokio::spawn(async move {
                    let r = remove_cloud_finalizer(&client, &job).await;
                    metrics.api_write("finalizer", r.is_ok());
                    if let Err(e) = r {
                        tracing::warn!(job = %job.name_any(), error = %e, "cannot remove the cloud finalizer");
                    }
                });
            }
        }
        let live: HashSet<String> = built.jobs.keys().cloned().collect();
        self.releasing.retain(|id| live.contains(id));
    }

    /// Terminates an instance (if any) and deletes its Node (if any), in the background.
    fn retire(&self, instance: Option<String>, node: Option<String>, why: &str) {
        let Some(cloud) = self.cloud.clone() else {
            return;
        };
        if let Some(id) = &instance
            && !cloud.start_terminate(id)
        {
            return;
        }
        tracing::info!(instance = ?instance, node = ?node, why, "retiring cloud capacity");
        let nodes: Api<Node> = Api::all(self.client.clone());
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            // Cordon first, so nothing new lands on the node while its instance goes.
            if let Some(n) = &node {
                let cordon = serde_json::json!({"spec": {"unschedulable": true}});
                let r = nodes
                    .patch(n, &PatchParams::default(), &Patch::Merge(&cordon))
                    .await;
                let ok = match &r {
                    Ok(_) => true,
                    Err(kube::Error::Api(s)) => s.code == 404,
                    Err(_) => false,
                };
                metrics.api_write("node-cordon", ok);
            }
            if let Some(id) = instance {
                // Only instances the poller listed are retired, so their region is known; an
                // unknown one is left for the next listing rather than asked of region "".
                let Some(region) = cloud.region_of(&id) else {
                    tracing::warn!(instance = %id, "not listed yet; terminating at a later turn");
                    return;
                };
                let r = cloud.terminate(&region, std::slice::from_ref(&id)).await;
                metrics.cloud_call("terminate", r.is_ok());
                if let Err(e) = r {
                    tracing::warn!(instance = %id, error = %e, "terminate failed; retrying next turn");
                    return;
                }
            }
            if let Some(n) = node {
                let r = nodes.delete(&n, &DeleteParams::default()).await;
                let ok = match &r {
                    Ok(_) => true,
                    Err(kube::Error::Api(s)) => s.code == 404,
                    Err(_) => false,
                };
                metrics.api_write("node-delete", ok);
            }
        });
    }

    /// Garbage collection: instances no need wants (or that never joined), and Nodes of cloud
    /// pools whose instance is gone. Only once every cloud region has been listed.
    fn collect_garbage(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        view: &CloudView,
        now: Time,
    ) {
        let Some(cloud) = self.cloud.clone() else {
            return;
        };
        if !view.complete {
            return;
        }
        let cfg = &cloud.config;
        let joined: HashSet<String> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| n.instance_id.clone())
            .collect();
        for i in &view.instances {
            if joined.contains(&i.id) {
                continue;
            }
            let age = now.since(i.launched_at).as_secs_f64();
            let wanted = built.jobs.get(&i.job).filter(|v| {
                matches!(v.lifecycle, Lifecycle::Provisioning { .. })
                    && format!("{}#{}", v.id, v.attempt) == i.need
            });
            match wanted {
                None if age > cfg.gc_grace.as_secs_f64() => {
                    self.metrics.garbage("instance");
                    self.retire(Some(i.id.clone()), None, "no need wants it (orphan)");
                }
                Some(v) if age > cfg.join_timeout.as_secs_f64() => {
                    self.metrics.garbage("instance");
                    self.retire(Some(i.id.clone()), None, "its node did not join in time");
                    // Plan the need again, under a new key.
                    self.attempt_floor.insert(v.id.clone(), v.attempt + 1);
                }
                _ => {}
            }
        }
        let live: HashSet<&str> = view.instances.iter().map(|i| i.id.as_str()).collect();
        let cloud_pools: HashSet<String> = inputs
            .pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .map(|p| p.name_any())
            .collect();
        for n in &inputs.nodes {
            let in_cloud_pool = built
                .node_pool
                .get(&n.name_any())
                .is_some_and(|p| cloud_pools.contains(p));
            let Some(id) = world::node_instance_id(n) else {
                continue;
            };
            let young = n.metadata.creation_timestamp.as_ref().is_some_and(|t| {
                now.since(Time::from_millis(t.0.as_millisecond()))
                    .as_secs_f64()
                    < 2.0 * cfg.poll.as_secs_f64()
            });
            if in_cloud_pool && !live.contains(id.as_str()) && !young {
                self.metrics.garbage("node");
                self.retire(None, Some(n.name_any()), "its instance is gone");
            }
        }
    }

    fn unreadable_jobs(&mut self) {
        for g in self.caches.jobs.state() {
            let Err(bad) = &g.0 else { continue };
            let (Some(ns), Some(name)) =
                (bad.metadata.namespace.clone(), bad.metadata.name.clone())
            else {
                continue;
            };
            let id = format!("{ns}/{name}");
            if self.written.contains_key(&id) {
                continue;
            }
            let message = format!("The GpuJob cannot be read: {}", bad.error);
            let mut st = GpuJobStatus {
                phase: Some(JobPhase::Queued),
                observed_generation: bad.metadata.generation,
                ..GpuJobStatus::default()
            };
            status::set_condition(
                &mut st.conditions,
                "Invalid",
                true,
                "InvalidSpec",
                &message,
                bad.metadata.generation,
                now(),
            );
            self.written.insert(id.clone(), st.clone());
            let api: Api<GpuJob> = Api::namespaced(self.client.clone(), &ns);
            let body = serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": name, "namespace": ns}, "status": st,
            });
            self.spawn_status(id, api, name, body);
        }
    }

    fn write_job_status(
        &mut self,
        view: &JobView,
        decision: Option<&core::Decision>,
        environment: Option<Environment>,
        rate: CostRate,
        now: Time,
    ) {
        // Build on what was last written, so a write in flight is not repeated.
        let base_status = self
            .written
            .get(&view.id)
            .or(view.job.status.as_ref())
            .cloned();
        let desired = status::desired(view, base_status.as_ref(), decision, environment, rate, now);
        if Some(&desired) == base_status.as_ref() {
            if view.job.status.as_ref() == Some(&desired) {
                self.written.remove(&view.id);
            }
            return;
        }
        let before = base_status.unwrap_or_default();
        self.events_for(view, &before, &desired);
        if matches!(desired.phase, Some(JobPhase::Running))
            && !self.wait_observed.contains(&view.id)
            && before.phase != Some(JobPhase::Running)
        {
            // Placed by an earlier leader or before a restart: wait already counted there.
            self.wait_observed.insert(view.id.clone());
        }
        self.written.insert(view.id.clone(), desired.clone());
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), &view.namespace());
        let body = status::apply_body(&view.job, &desired);
        self.spawn_status(view.id.clone(), api, view.job.name_any(), body);
    }

    fn events_for(&self, view: &JobView, before: &GpuJobStatus, after: &GpuJobStatus) {
        let key = |s: &GpuJobStatus| {
            s.decision
                .as_ref()
                .map(|d| (d.outcome.clone(), d.reason.clone(), d.rule.clone()))
        };
        let mut events = Vec::new();
        if key(before) != key(after)
            && let Some(d) = &after.decision
        {
            let outcome = d.outcome.clone().unwrap_or_default();
            let reason = d.reason.clone().unwrap_or_default();
            self.metrics.decision(&outcome, &reason);
            let warning = outcome == Outcome::Reject.as_str();
            events.push((
                warning,
                reason,
                outcome,
                d.message.clone().unwrap_or_default(),
            ));
        }
        if before.phase != after.phase
            && let Some(phase @ (JobPhase::Succeeded | JobPhase::Failed)) = after.phase
        {
            let cond = after
                .conditions
                .iter()
                .find(|c| c.type_ == "Running")
                .map(|c| (c.reason.clone(), c.message.clone()))
                .unwrap_or_default();
            events.push((
                phase == JobPhase::Failed,
                cond.0,
                format!("{phase:?}"),
                cond.1,
            ));
        }
        for (warning, reason, action, note) in events {
            self.publish_to(view.job.object_ref(&()), warning, reason, action, note);
        }
    }

    fn spawn_status(&self, key: String, api: Api<GpuJob>, name: String, body: serde_json::Value) {
        let tx = self.feedback_tx.clone();
        let metrics = self.metrics.clone();
        let writes = self.writes.clone();
        let ticket = self.status_order.issue(StatusKind::GpuJob, &key);
        tokio::spawn(async move {
            let Some(_turn) = ticket.wait().await else {
                return;
            };
            let _permit = writes.acquire_owned().await;
            let params = PatchParams::apply(labels::FIELD_MANAGER).force();
            let r = api.patch_status(&name, &params, &Patch::Apply(&body)).await;
            metrics.api_write("status", r.is_ok());
            if let Err(e) = r {
                let _ = tx.send(Failed::Status {
                    kind: StatusKind::GpuJob,
                    key,
                    error: e.to_string(),
                });
            }
        });
    }

    fn create_pods(&self, job: String, namespace: String, pods: Vec<Pod>) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let tx = self.feedback_tx.clone();
        let metrics = self.metrics.clone();
        let writes = self.writes.clone();
        for pod in pods {
            let (api, tx, metrics, writes, job) = (
                api.clone(),
                tx.clone(),
                metrics.clone(),
                writes.clone(),
                job.clone(),
            );
            tokio::spawn(async move {
                let _permit = writes.acquire_owned().await;
                let params = PostParams {
                    field_manager: Some(labels::FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match api.create(&params, &pod).await {
                    Ok(_) => metrics.api_write("pod", true),
                    // Already there: created before a restart; the caches will show it.
                    Err(kube::Error::Api(s)) if s.code == 409 => metrics.api_write("pod", true),
                    Err(e) => {
                        metrics.api_write("pod", false);
                        let _ = tx.send(Failed::Start {
                            job,
                            error: format!("creating pod {}: {e}", pod.name_any()),
                        });
                    }
                }
            });
        }
    }

    fn delete_pod(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if !self.deleting.insert(uid.clone()) {
            return;
        }
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let name = pod.name_any();
        let metrics = self.metrics.clone();
        let writes = self.writes.clone();
        tokio::spawn(async move {
            let _permit = writes.acquire_owned().await;
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            let r = api.delete(&name, &params).await;
            let ok = match &r {
                Ok(_) => true,
                Err(kube::Error::Api(s)) => s.code == 404 || s.code == 409,
                Err(_) => false,
            };
            metrics.api_write("pod-delete", ok);
        });
    }

    /// A gang with replicas missing: requeue it (restartable, or never fully started) or fail
    /// it; its other pods are being deleted.
    fn broken(&mut self, view: &JobView, message: &str, now: Time) {
        if self
            .attempt_floor
            .get(&view.id)
            .is_some_and(|a| *a > view.attempt)
        {
            return;
        }
        let base = self
            .written
            .get(&view.id)
            .cloned()
            .or_else(|| view.job.status.clone())
            .unwrap_or_default();
        let was_running = base
            .conditions
            .iter()
            .any(|c| c.type_ == "Running" && c.status == "True");
        let mut st = base.clone();
        let generation = view.job.metadata.generation;
        if view.job.spec.restartable || !was_running {
            let next = view.attempt + 1;
            self.attempt_floor.insert(view.id.clone(), next);
            st.restarts = Some(next as i32);
            st.phase = Some(JobPhase::Queued);
            st.nodes = Vec::new();
            st.pool = None;
            st.environment = None;
            st.started_at = None;
            let note = format!("{message} The job is requeued (attempt {next}).");
            status::set_condition(
                &mut st.conditions,
                "Admitted",
                false,
                "Requeued",
                &note,
                generation,
                now,
            );
            status::remove_condition(&mut st.conditions, "Running");
            self.publish(view, false, "Requeued", "Requeue", note);
        } else {
            st.phase = Some(JobPhase::Failed);
            st.finished_at = Some(status::k8s_time(now));
            let note = format!("{message} The job is not restartable, so it failed.");
            status::set_condition(
                &mut st.conditions,
                "Running",
                false,
                "ReplicaLost",
                &note,
                generation,
                now,
            );
            status::set_condition(
                &mut st.conditions,
                "Failed",
                true,
                "ReplicaLost",
                &note,
                generation,
                now,
            );
            self.publish(view, true, "ReplicaLost", "Failed", note);
        }
        self.written.insert(view.id.clone(), st.clone());
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), &view.namespace());
        self.spawn_status(
            view.id.clone(),
            api,
            view.job.name_any(),
            status::apply_body(&view.job, &st),
        );
    }

    fn publish(&self, view: &JobView, warning: bool, reason: &str, action: &str, note: String) {
        self.publish_to(
            view.job.object_ref(&()),
            warning,
            reason.to_string(),
            action.to_string(),
            note,
        );
    }

    /// Publishes an Event about `reference` in the background (as one of the writes in flight).
    fn publish_to(
        &self,
        reference: k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: String,
        action: String,
        note: String,
    ) {
        let recorder = self.recorder.clone();
        let metrics = self.metrics.clone();
        let writes = self.writes.clone();
        tokio::spawn(async move {
            let _permit = writes.acquire_owned().await;
            let ev = Event {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason,
                note: Some(truncate(&note, 1000)),
                action,
                secondary: None,
            };
            let r = recorder.publish(&ev, &reference).await;
            metrics.api_write("event", r.is_ok());
            if let Err(e) = r {
                tracing::debug!(error = %e, "could not publish an Event");
            }
        });
    }

    fn queue_and_pool_status(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        budget_held: &HashMap<&str, usize>,
        now: Time,
    ) {
        let mut per_queue: BTreeMap<String, GpuQueueStatus> = inputs
            .queues
            .iter()
            .map(|q| (q.name_any(), GpuQueueStatus::default()))
            .collect();
        let mut job_counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut queue_gpus: BTreeMap<(String, String), u64> = BTreeMap::new();
        let cloud_pools: BTreeSet<String> = inputs
            .pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .map(|p| p.name_any())
            .collect();
        for view in built.jobs.values() {
            let queue = &view.job.spec.queue;
            let phase = world::phase_of(view);
            let known = per_queue.contains_key(queue);
            let label = if known { queue.clone() } else { "-".into() };
            *job_counts
                .entry((label.clone(), format!("{phase:?}")))
                .or_default() += 1;
            let Some(qs) = per_queue.get_mut(queue) else {
                continue;
            };
            match &view.lifecycle {
                Lifecycle::Pending if view.invalid.is_none() => qs.pending += 1,
                Lifecycle::Running { pool, .. } => {
                    qs.running += 1;
                    let gpus = (view.job.spec.replicas.max(1)
                        * view.job.spec.gpus_per_replica.max(1))
                        as i64;
                    let by_env = qs
                        .gpus_in_use
                        .get_or_insert_with(GpusByEnvironment::default);
                    let cloud = pool.as_ref().is_some_and(|p| cloud_pools.contains(p));
                    if cloud {
                        by_env.cloud += gpus;
                    } else {
                        by_env.private += gpus;
                    }
                    let env = if cloud { "cloud" } else { "private" };
                    *queue_gpus.entry((label, env.into())).or_default() += gpus as u64;
                }
                _ => {}
            }
        }
        self.metrics.set_jobs(job_counts);
        for q in &inputs.queues {
            let name = q.name_any();
            let Some(mut st) = per_queue.remove(&name) else {
                continue;
            };
            let current = q.status.clone().unwrap_or_default();
            st.gpus_in_use
                .get_or_insert_with(GpusByEnvironment::default);
            st.conditions = current.conditions.clone();
            // BudgetExhausted: True while the budget holds jobs back from bursting.
            match &q.spec.budget {
                Some(_) => {
                    let held = budget_held.get(name.as_str()).copied().unwrap_or(0);
                    let (reason, message) = if held > 0 {
                        (
                            "BudgetExhausted",
                            format!(
                                "{held} job(s) wait: bursting them would pass the queue's budget"
                            ),
                        )
                    } else {
                        (
                            "WithinBudget",
                            "Bursting stays within the queue's budget".to_string(),
                        )
                    };
                    status::set_condition(
                        &mut st.conditions,
                        "BudgetExhausted",
                        held > 0,
                        reason,
                        &message,
                        q.metadata.generation,
                        now,
                    );
                }
                None => status::remove_condition(&mut st.conditions, "BudgetExhausted"),
            }
            let base = self
                .queue_written
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            let hourly = round_cents(self.queue_hourly.get(&name).copied().unwrap_or(0.0));
            let month = self.queue_month.get(&name).map(|m| m.1).unwrap_or(0.0);
            let base_spend = base.spend.clone().unwrap_or(QueueSpend {
                this_month_usd: 0.0,
                hourly_usd: 0.0,
            });
            // Month-to-date spend moves every turn; it is rewritten when the rate changes or
            // it moved by five minutes' worth (or a cent).
            let stale =
                (month - base_spend.this_month_usd).abs() >= (hourly * 300.0 / 3600.0).max(0.01);
            st.spend = Some(QueueSpend {
                this_month_usd: if stale || base_spend.hourly_usd != hourly {
                    round_cents(month)
                } else {
                    base_spend.this_month_usd
                },
                hourly_usd: hourly,
            });
            if !changed(&mut self.queue_written, &name, &st, &base, &current) {
                continue;
            }
            let body = serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
                "metadata": {"name": name}, "status": st,
            });
            self.spawn_cluster_status::<GpuQueue>(StatusKind::GpuQueue, name, body);
        }

        let mut pool_gpus: BTreeMap<(String, String), u64> = BTreeMap::new();
        for p in &inputs.pools {
            let name = p.name_any();
            let nodes: Vec<&core::Node> = built
                .snapshot
                .nodes
                .iter()
                .filter(|n| n.pool == name)
                .collect();
            let capacity: u32 = nodes.iter().map(|n| n.gpus).sum();
            let allocated: u32 = nodes.iter().map(|n| n.gpus - n.free_gpus.min(n.gpus)).sum();
            pool_gpus.insert((name.clone(), "capacity".into()), capacity as u64);
            pool_gpus.insert((name.clone(), "allocated".into()), allocated as u64);
            let current = p.status.clone().unwrap_or_default();
            let st =
                ComputePoolStatus {
                    nodes: Some(PoolNodes {
                        total: nodes.len() as i64,
                        ready: nodes.iter().filter(|n| n.schedulable).count() as i64,
                        idle: nodes.iter().filter(|n| n.free_gpus >= n.gpus).count() as i64,
                    }),
                    gpus: Some(PoolGpus {
                        capacity: capacity as i64,
                        allocated: allocated as i64,
                    }),
                    instances: p
                        .spec
                        .aws
                        .as_ref()
                        .map(|_| self.pool_cloud.get(&name).map(|c| c.0).unwrap_or(0)),
                    hourly_usd: p.spec.aws.as_ref().map(|_| {
                        round_cents(self.pool_cloud.get(&name).map(|c| c.1).unwrap_or(0.0))
                    }),
                    conditions: current.conditions.clone(),
                };
            let base = self
                .pool_written
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            if !changed(&mut self.pool_written, &name, &st, &base, &current) {
                continue;
            }
            let body = serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
                "metadata": {"name": name}, "status": st,
            });
            self.spawn_cluster_status::<ComputePool>(StatusKind::ComputePool, name, body);
        }
        self.metrics.set_gpus(queue_gpus, pool_gpus);
    }

    fn spawn_cluster_status<K>(&self, kind: StatusKind, name: String, body: serde_json::Value)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let tx = self.feedback_tx.clone();
        let metrics = self.metrics.clone();
        let writes = self.writes.clone();
        let ticket = self.status_order.issue(kind, &name);
        tokio::spawn(async move {
            let Some(_turn) = ticket.wait().await else {
                return;
            };
            let _permit = writes.acquire_owned().await;
            let params = PatchParams::apply(labels::FIELD_MANAGER).force();
            let r = api.patch_status(&name, &params, &Patch::Apply(&body)).await;
            metrics.api_write("status", r.is_ok());
            if let Err(e) = r {
                let _ = tx.send(Failed::Status {
                    kind,
                    key: name,
                    error: e.to_string(),
                });
            }
        });
    }
}

/// A bootstrap token for the launch (a Secret expiring at the join timeout) and the rendered
/// user data, when the pool gets user data and the join address is known.
async fn join_material(
    client: &Client,
    cloud: &Cloud,
    pool: &ComputePool,
    launch: &core::Launch,
) -> Result<Option<String>, kube::Error> {
    let Some(join) = &cloud.config.join else {
        return Ok(None);
    };
    if !crate::bootstrap::needs_token(pool) {
        return Ok(None);
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "kube-system");
    let expires = now() + core::Duration::from_secs(cloud.config.join_timeout.as_secs());
    let token = loop {
        let token =
            crate::bootstrap::Token::generate().map_err(|e| kube::Error::Service(Box::new(e)))?;
        let secret = crate::bootstrap::token_secret(&token, &launch.need, expires);
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => break token,
            // A token id already taken: draw another.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e),
        }
    };
    Ok(crate::bootstrap::user_data(
        pool,
        join,
        &token,
        &cloud.config.cluster,
        &cloud.gpu_model(&launch.offering.instance_type),
    ))
}

/// Deletes Spillway's bootstrap tokens that are done: expired, or made for a need whose
/// instances have all joined, or for a need with no instance left (after two minutes).
async fn sweep_tokens(client: Client, joined: HashSet<String>, alive: HashSet<String>, now: Time) {
    use crate::bootstrap::{NEED_ANNOTATION, TOKEN_LABEL};
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, "kube-system");
    let Ok(list) = secrets
        .list(&ListParams::default().labels(&format!("{TOKEN_LABEL}=true")))
        .await
    else {
        return;
    };
    for s in list.items {
        let need = s
            .annotations()
            .get(NEED_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let expired = s
            .data
            .as_ref()
            .and_then(|d| d.get("expiration"))
            .and_then(|e| String::from_utf8(e.0.clone()).ok())
            .and_then(|e| e.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|t| t.as_millisecond() <= now.as_millis());
        let age = s
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| {
                now.since(Time::from_millis(t.0.as_millisecond()))
                    .as_secs_f64()
            })
            .unwrap_or(0.0);
        let done = joined.contains(&need) || (!alive.contains(&need) && age > 120.0);
        if expired || done {
            let _ = secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
    }
}

async fn add_cloud_finalizer(client: &Client, job: &GpuJob) -> Result<(), kube::Error> {
    let api: Api<GpuJob> = Api::namespaced(client.clone(), &job.namespace().unwrap_or_default());
    let mut current = job.clone();
    let mut attempt = 0;
    loop {
        let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if finalizers.iter().any(|f| f == labels::CLOUD_FINALIZER) {
            return Ok(());
        }
        finalizers.push(labels::CLOUD_FINALIZER.to_string());
        // The resourceVersion makes it conditional: a concurrent change (our own status writes
        // included) makes it fail, not lose a finalizer; then it is read again and retried.
        let patch = serde_json::json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": current.metadata.resource_version,
        }});
        match api
            .patch(
                &job.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 5 => {
                attempt += 1;
                current = api.get(&job.name_any()).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn remove_cloud_finalizer(client: &Client, job: &GpuJob) -> Result<(), kube::Error> {
    let api: Api<GpuJob> = Api::namespaced(client.clone(), &job.namespace().unwrap_or_default());
    let fresh = api.get(&job.name_any()).await?;
    let finalizers: Vec<String> = fresh
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != labels::CLOUD_FINALIZER)
        .collect();
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": fresh.metadata.resource_version,
    }});
    api.patch(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

/// `YYYY-MM` of a time, in UTC.
fn month_of(t: Time) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
        .map(|ts| ts.strftime("%Y-%m").to_string())
        .unwrap_or_default()
}

/// Whether a cluster-scoped object's status `st` must be written, given what was last written
/// (`base`) and what the cache shows (`current`); records it as written when so, and forgets
/// the record once the cache has caught up.
fn changed<S: Clone + PartialEq>(
    written: &mut HashMap<String, S>,
    name: &str,
    st: &S,
    base: &S,
    current: &S,
) -> bool {
    if st == base {
        if st == current {
            written.remove(name);
        }
        return false;
    }
    written.insert(name.to_string(), st.clone());
    true
}

/// What a cloud job costs per hour: its share of each instance it runs on.
fn cloud_job_rate(view: &JobView, built: &world::Built) -> Option<f64> {
    let Lifecycle::Running { nodes, .. } = &view.lifecycle else {
        return None;
    };
    let per_replica = view.job.spec.gpus_per_replica.max(1) as f64;
    let mut total = 0.0;
    let mut any = false;
    for n in nodes {
        let Some(i) = built
            .snapshot
            .instances
            .iter()
            .find(|i| i.node.as_deref() == Some(n.as_str()))
        else {
            continue;
        };
        any = true;
        total += i.hourly_price * per_replica / f64::from(i.gpus.max(1));
    }
    any.then_some(total)
}

trait ViewExt {
    fn namespace(&self) -> String;
}

impl ViewExt for JobView {
    fn namespace(&self) -> String {
        self.job.namespace().unwrap_or_default()
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Wall-clock now, as the core's time.
pub fn now() -> Time {
    Time::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}
