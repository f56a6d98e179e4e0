//! The decision loop: caches -> [`turn`](crate::turn) -> actions -> [`executor`](crate::executor).
//!
//! One task owns the loop. It turns when a watched object changes (debounced, so a burst of
//! submissions makes one turn), when the plan's `next_wake` comes (a wait threshold passing),
//! when an action fails for good, and every resync period. A turn is pure
//! ([`crate::turn::State::turn`]); the loop feeds it the caches, the cloud's facts and the
//! clock, hands its actions to the executor, and hands the executor's failures back to the
//! turn's state, which undoes what it assumed.
//!
//! Only the leader runs the loop. The moment it stops leading (its renew deadline passed, or
//! another replica holds the Lease), the loop stops and every action not yet sent is
//! cancelled; on a clean stop the actions in flight may finish (up to 10 s) before the caller
//! releases the Lease.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use spillway_api::{BurstPolicy, ComputePool};
use spillway_core::{self as core, Time};
use tokio::sync::{Notify, watch};

use crate::actions::Action;
pub use crate::caches::Caches;
use crate::clock::now;
use crate::cloud::Cloud;
use crate::effects::KubeEffects;
use crate::error::Error;
use crate::executor::{Executor, ExecutorSettings, Fence, RetryPolicy};
use crate::http::Health;
use crate::metrics::Metrics;
use crate::turn::{CloudInputs, State, TurnSettings};

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
    /// API and cloud calls in flight at once.
    pub max_in_flight: usize,
    /// How failed actions are retried.
    pub retry: RetryPolicy,
    /// An assumed start whose pods have not all appeared after this long (ten times this for
    /// a labelled workload's run, which also waits for the caches to show its status) is
    /// dropped.
    pub assume_timeout: Duration,
    /// Reporting instance in Events (pod name or host name).
    pub instance: String,
    /// Cloud bursting; `None` runs private pools only (cloud pools get no offerings).
    pub cloud: Option<crate::cloud::CloudConfig>,
    /// Workload identity; `None` issues no tokens and serves no issuer.
    pub identity: Option<crate::identity::IdentityConfig>,
    /// The OTLP endpoint of pods whose pool and queue name none.
    pub pod_otlp_endpoint: Option<String>,
    /// The only namespaces whose GpuJobs run (`--job-namespaces`); `None`: every namespace.
    pub job_namespaces: Option<Arc<std::collections::BTreeSet<String>>>,
    /// The kinds of workload managed when labelled with a queue (`--integrations`, Kueue's
    /// names: `batch/job`); a kind whose API the cluster does not serve is skipped with a log
    /// line.
    pub integrations: Vec<String>,
    /// A test's crash at an exact instant ([`crate::executor::Crash`]); `None` in the operator.
    pub crash: Option<crate::executor::Crash>,
    /// Where each queue's and pool's month of spend is recorded besides their status (so it
    /// outlives them); `None` keeps it in status only.
    pub spend_record: Option<crate::spend_record::RecordRef>,
    /// Where the queues' indicators are recorded (so they outlive a restart or failover);
    /// `None` keeps them in memory and status only.
    pub indicator_record: Option<crate::spend_record::RecordRef>,
    /// GPU utilization from Prometheus (`--prometheus-url`); `None` reads none.
    pub utilization: Option<crate::utilization::UtilizationConfig>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            core: core::Settings::default(),
            policy_dir: None,
            resync: Duration::from_secs(30),
            debounce: Duration::from_millis(50),
            max_in_flight: 64,
            retry: RetryPolicy::default(),
            assume_timeout: Duration::from_secs(120),
            instance: "spillway".into(),
            cloud: None,
            identity: None,
            pod_otlp_endpoint: None,
            job_namespaces: None,
            integrations: vec![
                "batch/job".into(),
                "pod".into(),
                "jobset.x-k8s.io/jobset".into(),
                "trainer.kubeflow.org/trainjob".into(),
                "ray.io/rayjob".into(),
            ],
            crash: None,
            spend_record: None,
            indicator_record: None,
            utilization: None,
        }
    }
}

/// Why the loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Asked to (shutdown): actions in flight were let finish.
    Shutdown,
    /// This replica stopped leading: actions not yet sent were cancelled.
    Fenced,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The decision loop.
pub struct Controller {
    client: Client,
    caches: Caches,
    settings: Settings,
    metrics: Arc<Metrics>,
    changed: Arc<Notify>,
    state: State,
    cloud: Option<Arc<Cloud>>,
    /// The previous turn's copies of the readable GpuJobs and GpuQueues.
    copies: crate::caches::Copies,
    file_policies: Vec<Arc<BurstPolicy>>,
    files_loaded: Option<Instant>,
    /// The connections to the other clusters of cluster pools.
    remotes: crate::remote::Remotes,
    /// The utilization reader, when Prometheus is named.
    utilization: Option<Arc<crate::utilization::Utilization>>,
}

impl Controller {
    pub fn new(
        client: Client,
        caches: Caches,
        settings: Settings,
        metrics: Arc<Metrics>,
        changed: Arc<Notify>,
        remotes: crate::remote::Remotes,
    ) -> Self {
        let state = State::new(TurnSettings {
            core: settings.core.clone(),
            assume_timeout: core_duration(settings.assume_timeout),
            identity: settings.identity.clone(),
            pod_otlp_endpoint: settings.pod_otlp_endpoint.clone(),
            spend_record: settings.spend_record.clone(),
            indicator_record: settings.indicator_record.clone(),
        });
        let cloud = settings.cloud.clone().map(Cloud::new);
        let utilization = settings.utilization.clone().and_then(|c| {
            crate::utilization::Utilization::new(c)
                .inspect_err(|e| tracing::error!(error = %e, "cannot read GPU utilization"))
                .ok()
        });
        Controller {
            client,
            caches,
            settings,
            metrics,
            changed,
            state,
            cloud,
            copies: crate::caches::Copies::default(),
            file_policies: Vec::new(),
            files_loaded: None,
            remotes,
            utilization,
        }
    }

    /// Runs the loop until `stop` turns true or `fence` drops.
    pub async fn run(
        mut self,
        health: Arc<Health>,
        fence: Fence,
        mut stop: watch::Receiver<bool>,
    ) -> Result<Stopped, Error> {
        let changed = self.changed.clone();
        let effects = Arc::new(KubeEffects::new(
            self.client.clone(),
            &self.settings.instance,
            self.cloud.clone(),
            self.metrics.clone(),
            changed.clone(),
            self.remotes.clone(),
        ));
        let (mut executor, mut failures) = Executor::new(
            effects,
            &ExecutorSettings {
                max_in_flight: self.settings.max_in_flight,
                retry: self.settings.retry.clone(),
                crash: self.settings.crash.clone(),
            },
            fence.clone(),
            self.metrics.clone(),
        );
        let _poller = self.cloud.clone().map(|cloud| {
            let caches = self.caches.clone();
            AbortOnDrop(tokio::spawn(crate::cloud::poll(
                cloud,
                move || caches.pools(),
                self.metrics.clone(),
                changed.clone(),
            )))
        });
        let _utilization = self.utilization.clone().map(|u| {
            AbortOnDrop(tokio::spawn(crate::utilization::poll(
                u,
                self.metrics.clone(),
                changed.clone(),
            )))
        });
        let _notices = self.cloud.clone().map(|cloud| {
            let caches = self.caches.clone();
            AbortOnDrop(tokio::spawn(crate::cloud::notices::poll(
                cloud,
                move || caches.pools(),
                self.metrics.clone(),
                changed.clone(),
            )))
        });
        let mut next_wake: Option<Time> = None;
        loop {
            if !fence.leading() {
                executor.cancel();
                return Ok(Stopped::Fenced);
            }
            if *stop.borrow() {
                // Let the actions in flight finish (bounded), so a clean stop loses none.
                executor.drain(Duration::from_secs(10)).await;
                return Ok(Stopped::Shutdown);
            }
            let started = Instant::now();
            let wake = self.turn(&mut executor);
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
                Some(f) = failures.recv() => {
                    for a in self.state.feedback(&f) {
                        executor.submit(a);
                    }
                }
                _ = tokio::time::sleep(sleep_for) => {}
                r = stop.changed() => if r.is_err() {
                    executor.drain(Duration::from_secs(10)).await;
                    return Ok(Stopped::Shutdown);
                },
                _ = fence.lost() => {}
            }
            while let Ok(f) = failures.try_recv() {
                for a in self.state.feedback(&f) {
                    executor.submit(a);
                }
            }
        }
    }

    /// One turn: read the caches and the cloud, decide, hand the actions over.
    fn turn(&mut self, executor: &mut Executor) -> Option<Time> {
        let now = now();
        let mut inputs = self.caches.inputs(&mut self.copies);
        self.metrics.set_cache_objects(inputs.cached());
        self.metrics.set_runtime_tasks(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
        );
        inputs.file_policies = self.file_policies();
        inputs.remote = self.remotes.clusters();
        inputs.job_namespaces = self.settings.job_namespaces.clone();
        inputs.utilization = self.utilization.as_ref().map(|u| u.samples());
        let view = self
            .cloud
            .as_ref()
            .map(|c| c.view(&cloud_regions(&inputs.pools)));
        let cloud = match (&self.cloud, &view) {
            (Some(c), Some(v)) => Some(CloudInputs {
                config: &c.config,
                view: v,
            }),
            _ => None,
        };
        let jobs = inputs.jobs.len();
        let started = std::time::SystemTime::now();
        let turn = self.state.turn(inputs, cloud, &self.metrics, now);
        let actions = turn.actions.len();
        for a in turn.actions {
            match a {
                // Spans go straight to the exporter's queue (which never blocks).
                Action::Span(record) => crate::otel::record(&record),
                other => executor.submit(other),
            }
        }
        cycle_span(started, jobs, actions);
        turn.wake
    }

    /// The BurstPolicies of `--policy-dir`, read again every resync period; a directory that
    /// does not load keeps the previous set.
    fn file_policies(&mut self) -> Vec<Arc<BurstPolicy>> {
        if let Some(dir) = &self.settings.policy_dir
            && self
                .files_loaded
                .is_none_or(|t| t.elapsed() > self.settings.resync)
        {
            self.files_loaded = Some(Instant::now());
            match spillway_api::manifests::Manifests::load(dir) {
                Ok(m) => {
                    self.file_policies =
                        m.policies.into_iter().map(|l| Arc::new(l.object)).collect()
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot load policy files; keeping the previous ones")
                }
            }
        }
        self.file_policies.clone()
    }
}

/// One span per decision cycle, with its size.
fn cycle_span(started: std::time::SystemTime, jobs: usize, actions: usize) {
    use opentelemetry::trace::{Span as _, Tracer as _};
    let tracer = opentelemetry::global::tracer(crate::otel::SCOPE);
    let mut span = tracer
        .span_builder("spillway.cycle")
        .with_start_time(started)
        .with_attributes([
            opentelemetry::KeyValue::new("spillway.cycle.jobs", jobs as i64),
            opentelemetry::KeyValue::new("spillway.cycle.actions", actions as i64),
        ])
        .start(&tracer);
    span.end();
}

fn cloud_regions(pools: &[Arc<ComputePool>]) -> BTreeSet<String> {
    pools
        .iter()
        .filter_map(|p| p.spec.aws.as_ref().map(|a| a.region.clone()))
        .collect()
}

fn core_duration(d: Duration) -> core::Duration {
    core::Duration::from_millis(d.as_millis().min(u64::MAX as u128) as u64)
}
