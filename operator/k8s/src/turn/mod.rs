//! The turn: from what the caches hold, what the cloud reported and the clock, to the actions
//! that bring the cluster to what the core decided. No I/O: everything arrives as an argument
//! and leaves as an [`Action`]; the executor carries the actions out and reports failures back
//! ([`State::feedback`]). Unit tests drive it with literal objects (`turn/tests`).
//!
//! One turn, in order:
//! 1. policies compiled (once per change of the set), each BurstPolicy's validity noted;
//! 2. the snapshot built from the caches plus the starts assumed but not yet visible
//!    ([`crate::world`]); cloud offerings, instances and idle cloud nodes laid over it; spend
//!    accrued ([`crate::spend`]);
//! 3. `decide`;
//! 4. preemptions carried out (the job requeued, its pods evicted: `turn/reclaim.rs`), moves
//!    home begun (the job suspended, its cloud pods evicted: `turn/repatriate.rs`), the
//!    interruption queues' notices acted on (`turn/interruptions.rs`); starts assumed at once
//!    (their GPUs are taken for the next turn) and their pods created;
//! 5. launches, scale-down, release of deleted jobs' instances, garbage collection;
//! 6. each job's status and Events; the pods of finished, failed or broken gangs deleted; the
//!    running jobs' GPU utilization and their queues' idle policies (`turn/utilization.rs`);
//! 7. the status of every GpuQueue, ComputePool, Dataset and BurstPolicy, with its `Ready`
//!    condition, and the metrics.
//!
//! The state kept between turns is what the loop has assumed or written and not yet seen in
//! the caches, and what it derived from the caches together with what it was derived from
//! (the jobs' views, `world::Memo`; the statuses that needed no write, `jobs::Quiet`), used
//! only while all of that is unchanged; everything else is derived again each turn.

mod cloud;
mod dispatch;
mod environment;
mod extras;
mod identity;
mod indicators;
mod interruptions;
mod jobs;
mod leftovers;
mod objects;
mod placement;
pub(crate) mod policies;
mod reclaim;
mod remote;
mod repatriate;
mod spans;
#[cfg(test)]
mod tests;
mod utilization;
mod workloads;

use crate::hashing::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Resource, ResourceExt};
use spillway_api::dataset::DatasetStatus;
use spillway_api::job::JobPhase;
use spillway_api::policy::BurstPolicyStatus;
use spillway_api::pool::ComputePoolStatus;
use spillway_api::queue::GpuQueueStatus;
use spillway_api::{ComputePool, GpuJobStatus, GpuQueue};
use spillway_core::{self as core, Time};

use crate::actions::{Action, Note, StatusKind};
use crate::cloud::{CloudConfig, CloudView};
use crate::executor::Failure;
use crate::metrics::Metrics;
use crate::spend::Ledger;
use crate::world::{self, Assumed, Inputs};

/// How many assume timeouts a workload's run (its home object patched, or a copy made in
/// another cluster) waits for its pods and for the caches to show its status.
const WORKLOAD_PATIENCE: u64 = 10;

/// The turn's knobs.
#[derive(Clone, Debug)]
pub struct TurnSettings {
    /// The core's knobs.
    pub core: core::Settings,
    /// An assumed start whose pods have not all appeared after this long is dropped.
    pub assume_timeout: core::Duration,
    /// Workload identity; `None` issues no tokens.
    pub identity: Option<crate::identity::IdentityConfig>,
    /// The OTLP endpoint of pods whose pool and queue name none.
    pub pod_otlp_endpoint: Option<String>,
    /// The spend ledger; `None` keeps spend in status only.
    pub spend_record: Option<crate::spend_record::RecordRef>,
    /// The indicator ledger; `None` keeps the indicators in memory (and status) only.
    pub indicator_record: Option<crate::spend_record::RecordRef>,
}

impl Default for TurnSettings {
    fn default() -> Self {
        TurnSettings {
            core: core::Settings::default(),
            assume_timeout: core::Duration::from_secs(120),
            identity: None,
            pod_otlp_endpoint: None,
            spend_record: None,
            indicator_record: None,
        }
    }
}

/// The cloud as one turn sees it.
#[derive(Clone, Copy)]
pub struct CloudInputs<'a> {
    pub config: &'a CloudConfig,
    pub view: &'a CloudView,
}

/// What one turn asks for.
#[derive(Debug, Default)]
pub struct Turn {
    pub actions: Vec<Action>,
    /// Turn again at this time at the latest (a wait threshold, a job's `maxRuntime`).
    pub wake: Option<Time>,
}

/// Statuses the loop wrote, by object, until the caches show them.
#[derive(Debug, Default)]
struct Written {
    jobs: HashMap<String, GpuJobStatus>,
    queues: HashMap<String, GpuQueueStatus>,
    pools: HashMap<String, ComputePoolStatus>,
    datasets: HashMap<String, DatasetStatus>,
    policies: HashMap<String, BurstPolicyStatus>,
    /// Objects that cannot be read, by `Kind/namespace/name`, with the message written.
    unreadable: HashMap<String, String>,
}

/// What the loop remembers between turns.
pub struct State {
    settings: TurnSettings,
    /// Starts decided whose pods may not all be visible yet, by job id.
    assumed: HashMap<String, Assumed>,
    /// Attempts jobs were moved to whose status write may not be visible yet.
    attempt_floor: HashMap<String, u32>,
    /// Since when each live copy of a workload in another cluster (by its uid) has shown no
    /// pod (`turn/dispatch.rs`).
    copy_waits: HashMap<String, Time>,
    /// The labelled workloads of this turn, and what was asked of them.
    workloads: workloads::Kept,
    written: Written,
    /// Jobs whose status needed no write at the last turn.
    quiet: jobs::QuietTable,
    /// Pods whose deletion was asked for (by uid).
    deleting: HashSet<String>,
    /// Pods asked for by jobs' earlier starts and not shown by the caches yet, by job id: the
    /// jobs' next attempts wait for them (`turn/leftovers.rs`).
    unseen_pods: HashMap<String, leftovers::Unseen>,
    /// Jobs whose wait was already observed in the wait histogram.
    wait_observed: HashSet<String>,
    policies: policies::Compiled,
    /// Deleted jobs whose cloud finalizer is being removed.
    releasing: HashSet<String>,
    /// Instances (`instance/ID`) and nodes (`node/NAME`) being retired.
    retiring: HashSet<String>,
    ledger: Ledger,
    /// Accounts opened from status this turn (`Kind/name`): their spend is written at once,
    /// so the gap a restart or failover left is billed and shown by the first turn.
    opened_accounts: HashSet<String>,
    /// Cloud nodes seen idle, since when.
    idle_since: HashMap<String, Time>,
    /// The indicators' book and what the queues' statuses show of it.
    indicators: indicators::Keeping,
    /// What the nodes state per pool, kept while the nodes are the same objects.
    node_sets: environment::NodeSets,
    /// Offerings (pool, instance type) whose instance fell short of its pool's environment.
    mismatched: HashMap<(String, String), environment::Mismatched>,
    /// Whether `mismatched` was taken up from the pools' `status.leftOut` (once a leadership).
    mismatched_seeded: bool,
    /// The spend ledger's data last written, until the cache shows it.
    spend_written: Option<std::collections::BTreeMap<String, String>>,
    /// The issuer's key ring last written, until the cache shows it.
    keys_written: Option<spillway_identity::KeyRing>,
    /// Tokens issued, by job id.
    tokens: HashMap<String, identity::TokenRecord>,
    /// Tokens Secrets at home that still hold the key of a job that stopped running, and when
    /// it is taken out at the latest (with the next token issued there, if that comes first).
    stale_tokens: std::collections::BTreeMap<identity::Target, Time>,
    /// Jobs whose trace context annotation was written (until the cache shows it).
    annotated: HashSet<String>,
    /// The decision core kept across turns: it decides again only when the world, the rules
    /// or the clock can change an outcome, and reports only decisions that changed.
    scheduler: core::Scheduler,
    /// The jobs' views, kept from one turn to the next while nothing of theirs changes.
    views: world::Memo,
    /// The version of the views' ids when the maps kept by job were last pruned of jobs gone.
    pruned_at: Option<u64>,
    /// Keeps views and quiet statuses across turns; off, every turn derives every view and
    /// works out every status (the reference the tests compare with).
    remember: bool,
    /// The rules the scheduler last decided with.
    engine_seen: Option<Arc<spillway_policy::PolicyEngine>>,
    /// The home views of the other clusters' nodes and pods made at the last turn.
    translations: crate::remote::view::Translations,
    /// This turn's view of the other clusters (connections, capacity, garbage).
    remote: crate::remote::view::Overlay,
    /// The interruption queues' messages being acted on.
    notices: interruptions::Keeping,
    /// When the utilization samples last acted on were taken (a turn without newer ones has
    /// nothing to measure).
    utilization_seen: Option<Time>,
    /// This turn's actions.
    out: Vec<Action>,
}

impl State {
    pub fn new(settings: TurnSettings) -> State {
        State {
            settings,
            assumed: HashMap::new(),
            attempt_floor: HashMap::new(),
            copy_waits: HashMap::new(),
            workloads: workloads::Kept::default(),
            written: Written::default(),
            quiet: jobs::QuietTable::default(),
            deleting: HashSet::new(),
            unseen_pods: HashMap::new(),
            wait_observed: HashSet::new(),
            policies: policies::Compiled::default(),
            releasing: HashSet::new(),
            retiring: HashSet::new(),
            ledger: Ledger::default(),
            opened_accounts: HashSet::new(),
            idle_since: HashMap::new(),
            mismatched: HashMap::new(),
            mismatched_seeded: false,
            node_sets: environment::NodeSets::default(),
            indicators: indicators::Keeping::default(),
            keys_written: None,
            spend_written: None,
            tokens: HashMap::new(),
            stale_tokens: Default::default(),
            annotated: HashSet::new(),
            scheduler: core::Scheduler::default(),
            views: world::Memo::default(),
            pruned_at: None,
            remember: true,
            engine_seen: None,
            translations: Default::default(),
            remote: Default::default(),
            notices: Default::default(),
            utilization_seen: None,
            out: Vec::new(),
        }
    }

    /// A state that keeps no view or quiet status across turns: every turn derives all of them
    /// again, as the reference the kept ones are compared with.
    #[cfg(test)]
    pub(crate) fn forgetful(settings: TurnSettings) -> State {
        State {
            remember: false,
            ..State::new(settings)
        }
    }

    /// One turn; see the module documentation.
    pub fn turn(
        &mut self,
        mut inputs: Inputs,
        cloud: Option<CloudInputs<'_>>,
        metrics: &Metrics,
        now: Time,
    ) -> Turn {
        self.out.clear();
        self.remote = crate::remote::view::overlay(&mut inputs, &mut self.translations, now);
        inputs.finished = self
            .written
            .jobs
            .iter()
            .filter(|(_, st)| matches!(st.phase, Some(JobPhase::Succeeded | JobPhase::Failed)))
            .map(|(id, _)| id.clone())
            .collect();
        if let Some(c) = cloud {
            for i in &c.view.instances {
                inputs.needs.insert(i.need.clone(), i.pool.clone());
            }
            inputs.needs.extend(
                c.view
                    .launching
                    .iter()
                    .map(|(k, l)| (k.clone(), l.offering.pool.clone())),
            );
        }
        self.index_workloads(&inputs);
        self.assume_copies(&inputs, now);
        let engine = self.policies.engine(&inputs);
        self.unreadable(&inputs, now);

        let mut built = self.build(&inputs, now);
        // Views kept from the turn before; a second build below only derives again the views
        // of the jobs whose assumptions settled.
        let (mut derived, kept) = self.views.take_counts();
        // Assumptions whose pods are all visible (and, for a workload's run, whose status the
        // cache shows), or that are too old, are done.
        let timeout = self.settings.assume_timeout;
        let settled: Vec<String> = self
            .assumed
            .iter()
            .filter(|(id, a)| {
                let view = built.jobs.get(id.as_str());
                let visible = view.map(|v| v.pods.len()).unwrap_or(usize::MAX);
                // A workload's run also waits for the caches to show its status
                // (`world::shows_run`), unless the job moved on to another attempt.
                let done = visible >= a.nodes.len()
                    && view.is_none_or(|v| {
                        v.job.spec.workload_ref.is_none()
                            || v.attempt != a.attempt
                            || world::shows_run(v.job.status.as_ref(), a)
                    });
                // A workload's run waits longer for its controller's pods: a Job controller
                // behind on thousands of Jobs makes them minutes late, and the GPUs they were
                // placed on must not be handed out meanwhile. Its write may show in this
                // cache late too: a run decided again while the first one landed unseen would
                // be refused (a started Job's template is immutable). A write refused drops
                // the assumption at once (`feedback`).
                let patience = match built.jobs.get(id.as_str()) {
                    Some(v) if v.job.spec.workload_ref.is_some() => WORKLOAD_PATIENCE,
                    _ => 1,
                };
                let waited = core::Duration::from_millis(timeout.as_millis().saturating_mul(patience));
                if !done && now.since(a.at) > waited {
                    tracing::warn!(job = %id, "pods or status of an assumed start did not all appear; dropping the assumption");
                    return true;
                }
                done
            })
            .map(|(id, _)| id.clone())
            .collect();
        if !settled.is_empty() {
            for id in &settled {
                self.assumed.remove(id);
            }
            built = self.build(&inputs, now);
            derived += self.views.take_counts().0;
        }
        metrics.job_views(derived, kept);
        self.check_queue_identity(&mut built, &inputs);
        self.mark_refusing_pools(&mut built);
        let ring = self.keys(&inputs, now);
        let queues: HashMap<String, Arc<GpuQueue>> = inputs
            .queues
            .iter()
            .map(|q| (q.name_any(), q.clone()))
            .collect();

        let pools: HashMap<String, Arc<ComputePool>> = inputs
            .pools
            .iter()
            .map(|p| (p.name_any(), p.clone()))
            .collect();
        let mut facts_wake = None;
        if let Some(c) = cloud {
            self.add_cloud_facts(&mut built, &inputs, c, now);
            facts_wake = self.check_environments(&mut built, &inputs, c, metrics, now);
        }
        let rates = self.account_spend(&mut built, &inputs, cloud, metrics, now);
        self.account_indicators(&built, &inputs, metrics, now);
        if let Some(c) = cloud {
            // After the spend: what EC2 has not answered yet is not billed, but it is counted.
            cloud::add_launching(&mut built, c, now);
        }
        if !self
            .engine_seen
            .as_ref()
            .is_some_and(|e| Arc::ptr_eq(e, &engine))
        {
            self.scheduler.invalidate();
            self.engine_seen = Some(engine.clone());
        }
        if self.remember {
            // The jobs whose view changed, then the rest of the world.
            for change in self.views.take_job_changes() {
                self.scheduler.apply(change);
            }
            self.scheduler.sync_world(&built.snapshot);
        } else {
            self.scheduler.sync(&built.snapshot);
        }
        let skipped = self.scheduler.stats().skipped;
        let mut plan = self.scheduler.cycle(engine.as_ref(), now);
        metrics.decide_cycle(self.scheduler.stats().skipped > skipped);
        let unseen_wake = self.hold_for_unseen_clusters(&mut plan, &built, &queues, &inputs, now);
        let leftover_wake = self.hold_for_earlier_attempts(&mut plan, &built, &inputs, now);
        metrics.set_policy_errors(engine.runtime_errors());

        self.preemptions(&plan, &built, &queues, now);
        self.moves(&plan, &built, &queues, now);
        let notice_wake = cloud.and_then(|c| {
            let around = interruptions::Around {
                built: &built,
                inputs: &inputs,
                pools: &pools,
                queues: &queues,
                now,
            };
            self.interruptions(&around, c, metrics)
        });
        self.starts(&plan, &mut built, &pools, &queues, metrics, now);
        self.workloads(&built, &inputs);
        let identity_wake = self.tokens(&built, ring.as_ref(), &queues, &pools, now);
        if let Some(c) = cloud {
            self.forget_retired(&inputs, c);
            self.launches_and_terminations(&plan, &pools, &built, c, now);
            self.release_deleted_jobs(&built, &inputs, c);
            self.collect_garbage(&built, &inputs, c, metrics, now);
            self.collect_placement_groups(c, now);
        }
        self.collect_remote_garbage();
        self.keep_copies(&built);
        let wake = self.jobs(&plan, &built, &inputs, &pools, metrics, now);
        if let Some(samples) = inputs.utilization.clone() {
            self.utilization(&built, &samples, &queues, metrics, now);
        }
        let wake = [
            wake,
            identity_wake,
            facts_wake,
            unseen_wake,
            leftover_wake,
            notice_wake,
        ]
        .into_iter()
        .flatten()
        .min();
        self.objects(&built, &inputs, cloud, &rates, metrics, now);
        self.record_indicators(metrics, now);
        self.prune_shown(&inputs);
        Turn {
            actions: std::mem::take(&mut self.out),
            wake,
        }
    }

    fn build(&mut self, inputs: &Inputs, now: Time) -> world::Built {
        let overlaid = self.with_suspensions(inputs);
        let inputs = overlaid.as_ref().unwrap_or(inputs);
        let settings = self.settings.core.clone();
        if !self.remember {
            return world::build(inputs, &self.assumed, &self.attempt_floor, settings, now);
        }
        world::build_kept(
            &mut self.views,
            inputs,
            &self.assumed,
            &self.attempt_floor,
            settings,
            now,
        )
    }

    /// Takes back what a failed action assumed; returns what to do about it now.
    pub fn feedback(&mut self, f: &Failure) -> Vec<Action> {
        match &f.action {
            Action::CreatePod { job, pod } => {
                tracing::warn!(job = %job, pod = ?pod.metadata.name, error = %f.error, "creating a pod failed; deciding again");
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                // Only a create of the start assumed now takes it back (a create of an earlier
                // attempt may fail late); the start's other pods may still land, so the job's
                // next attempt waits for them.
                let attempt = world::pod_attempt(pod);
                if self
                    .assumed
                    .get(job)
                    .is_some_and(|a| Some(a.attempt) == attempt)
                    && let Some(a) = self.assumed.remove(job)
                {
                    self.leave_unseen(job, &a, |_| false, Some(name));
                }
                self.create_failed(job, name);
                Vec::new()
            }
            Action::CreateRemotePod { job, .. } | Action::CreateRemoteCopy { job, .. } => {
                tracing::warn!(job = %job, error = %f.error, "creating pods failed; deciding again");
                self.assumed.remove(job);
                Vec::new()
            }
            Action::DeletePod { uid, .. } | Action::EvictPod { uid, .. } => {
                if f.error.category().retryable() {
                    // Asked again at the next turn while the caches show the pod.
                    tracing::warn!(error = %f.error, "deleting a pod failed; asking again at the next turn");
                    self.deleting.remove(uid);
                } else {
                    // Refused (no permission, a webhook): asking again at every turn would
                    // only be refused again; the job's next attempt waits for it meanwhile.
                    tracing::error!(error = %f.error, "deleting a pod was refused; it is not asked again while the operator runs");
                }
                Vec::new()
            }
            Action::PatchWorkload(p) => {
                tracing::warn!(kind = %p.kind, namespace = %p.namespace, name = %p.name, what = p.what, error = %f.error, "patching a workload failed");
                if let Some(job) = &p.job {
                    // Its start is decided again.
                    self.assumed.remove(job);
                }
                // A hold is asked again at the next turn.
                self.forget_workload_patch(p);
                Vec::new()
            }
            Action::ApplyWorkloadJob(j) => {
                tracing::warn!(job = ?j.metadata.name, namespace = ?j.metadata.namespace, error = %f.error, "writing a workload's GpuJob failed; writing it again at the next turn");
                self.forget_workload_job(j);
                Vec::new()
            }
            Action::DeleteRemoteCopy { pool, uid, .. } => {
                // Asked again at the next turn (the other cluster may be back by then).
                tracing::warn!(pool = %pool, error = %f.error, "deleting a workload's copy in another cluster failed; asking again at the next turn");
                self.deleting.remove(uid);
                Vec::new()
            }
            Action::DeleteRemotePod { pool, uid, .. } => {
                // Asked again at the next turn (the other cluster may be back by then).
                tracing::warn!(pool = %pool, error = %f.error, "deleting a pod in another cluster failed; asking again at the next turn");
                self.deleting.remove(uid);
                Vec::new()
            }
            Action::ApplyRemoteSecret { pool, secret } => {
                tracing::warn!(pool = %pool, error = %f.error, "writing a token Secret in another cluster failed; writing it again at the next turn");
                self.remote_tokens_failed(pool, secret.name());
                Vec::new()
            }
            Action::DeleteRemoteSecret {
                pool,
                namespace,
                name,
            } => {
                // Asked again while the job's pods there are garbage; else left there, holding
                // a token that expires.
                tracing::warn!(pool = %pool, secret = %name, error = %f.error, "deleting a token Secret in another cluster failed");
                self.deleting.remove(&format!("{pool}/{namespace}/{name}"));
                Vec::new()
            }
            Action::ApplyStatus(p) => {
                tracing::warn!(kind = p.kind.as_str(), object = %p.id(), error = %f.error, "status write failed; writing it again at the next turn");
                let id = p.id();
                match p.kind {
                    StatusKind::GpuJob => {
                        // The decision it carried is told again at the next turn.
                        self.scheduler.refresh(&id);
                        self.quiet.remove(&id);
                        self.written.jobs.remove(&id).map(|_| ())
                    }
                    StatusKind::GpuQueue => self.written.queues.remove(&id).map(|_| ()),
                    StatusKind::ComputePool => self.written.pools.remove(&id).map(|_| ()),
                    StatusKind::Dataset => self.written.datasets.remove(&id).map(|_| ()),
                    StatusKind::BurstPolicy => self.written.policies.remove(&id).map(|_| ()),
                };
                let key = format!("{}/{id}", p.kind.as_str());
                self.written.unreadable.remove(&key);
                Vec::new()
            }
            Action::Launch(order) => {
                let l = &order.launch;
                vec![Action::Publish(Note {
                    regarding: order.job.object_ref(&()),
                    warning: true,
                    reason: "LaunchFailed".into(),
                    action: "Launch".into(),
                    note: format!(
                        "Launching {} x {} ({}) for need {} failed: {}. The offering cools down and the next decision picks another.",
                        l.count,
                        l.offering.instance_type,
                        l.offering.capacity_type.as_str(),
                        l.need,
                        f.error
                    ),
                })]
            }
            Action::PatchFinalizer {
                namespace, name, ..
            } => {
                self.releasing.remove(&format!("{namespace}/{name}"));
                Vec::new()
            }
            Action::Annotate {
                namespace, name, ..
            } => {
                self.annotated.remove(&format!("{namespace}/{name}"));
                Vec::new()
            }
            Action::PinPod {
                namespace, name, ..
            } => {
                self.forget_pin(namespace, name);
                Vec::new()
            }
            Action::Terminate { instance, node, .. } => {
                self.retiring.remove(&format!("instance/{instance}"));
                if let Some(node) = node {
                    self.retiring.remove(&format!("node/{node}"));
                }
                Vec::new()
            }
            Action::ApplySecret(secret) => {
                tracing::warn!(secret = %format!("{}/{}", secret.namespace(), secret.name()), error = %f.error, "writing a Secret failed; writing it again at the next turn");
                let retryable = f.error.category().retryable();
                self.token_failed(secret.namespace(), secret.name(), retryable);
                Vec::new()
            }
            Action::RecordIndicators(_) => {
                tracing::warn!(error = %f.error, "writing the indicator ledger failed; writing it again at the next turn");
                self.indicators_failed();
                Vec::new()
            }
            Action::RecordSpend(_) => {
                tracing::warn!(error = %f.error, "writing the spend ledger failed; writing it again at the next turn");
                self.spend_written = None;
                Vec::new()
            }
            Action::MarkNode { .. } | Action::DeleteNotice { .. } => {
                self.notice_failed(&f.action);
                Vec::new()
            }
            Action::Cordon { node } | Action::DeleteNode { node, .. } => {
                self.retiring.remove(&format!("node/{node}"));
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Holds the starts and launches of the jobs in `held` (by job id, with why), their
    /// decisions a wait for `reason`, told again by the scheduler at the next cycle.
    fn hold_starts(
        &mut self,
        plan: &mut core::Plan,
        held: &std::collections::BTreeMap<String, String>,
        reason: core::Reason,
    ) {
        plan.starts.retain(|s| !held.contains_key(&s.job));
        plan.launches.retain(|l| !held.contains_key(&l.job));
        for d in plan.decisions.iter_mut() {
            if let Some(why) = held.get(&d.job) {
                *d = core::Decision::new(&d.job, core::Outcome::Wait, reason, why.clone(), None);
            }
        }
        for job in held.keys() {
            self.scheduler.refresh(job);
        }
    }

    fn emit(&mut self, action: Action) {
        self.out.push(action);
    }

    fn publish(
        &mut self,
        regarding: ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.emit(Action::Publish(Note {
            regarding,
            warning,
            reason: reason.to_string(),
            action: action.to_string(),
            note,
        }));
    }
}
