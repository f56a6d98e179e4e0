//! The status of GpuQueues, ComputePools, Datasets and BurstPolicies: counts, spend, and the
//! `Ready` condition every kind reports (a Warning Event when an object turns invalid); for
//! cloud pools the `LaunchHealthy` condition; objects that cannot be read at all.

use std::collections::{BTreeMap, BTreeSet};

use crate::hashing::{HashMap, HashMapExt};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use spillway_api::dataset::DatasetStatus;
use spillway_api::job::JobPhase;
use spillway_api::policy::BurstPolicyStatus;
use spillway_api::pool::{ComputePoolStatus, PoolGpus, PoolNodes};
use spillway_api::queue::{GpuQueueStatus, GpusByEnvironment, QueueSpend};
use spillway_core::{self as core, Time};

use super::policies::Verdict;
use super::{CloudInputs, State};
use crate::actions::{Action, StatusKind, StatusPatch};
use crate::clock::{self, k8s_time};
use crate::cloud::LAUNCH_ERROR_MEMORY;
use crate::metrics::Metrics;
use crate::spend::{Account, Rates};
use crate::status::{self, round_cents};
use crate::world::{self, Inputs, Lifecycle};

/// How old the spend in a status may get before it is written again (while it moves).
const SPEND_REFRESH: core::Duration = core::Duration::from_secs(60);

/// The kinds that report `Ready`, for the invalid-objects gauge.
const KINDS: [&str; 4] = ["GpuQueue", "ComputePool", "Dataset", "BurstPolicy"];

impl State {
    /// Every object's status and the gauges.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn objects(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        cloud: Option<CloudInputs<'_>>,
        rates: &Rates,
        metrics: &Metrics,
        now: Time,
    ) {
        let mut invalid: BTreeMap<&'static str, u64> = KINDS.iter().map(|k| (*k, 0)).collect();
        for key in built.invalid_objects.keys() {
            if let Some(kind) = KINDS.iter().find(|k| key.starts_with(&format!("{k}/"))) {
                *invalid.entry(kind).or_default() += 1;
            }
        }
        for u in &inputs.unreadable {
            if let Some(n) = invalid.get_mut(u.kind) {
                *n += 1;
            }
        }
        for v in self.policies.verdicts.values() {
            if matches!(v, Verdict::Invalid(_)) {
                *invalid.entry("BurstPolicy").or_default() += 1;
            }
        }
        metrics.set_invalid_objects(invalid);
        self.queues(built, inputs, rates, metrics, now);
        self.pools(built, inputs, cloud, rates, metrics, now);
        self.datasets(built, inputs, now);
        self.policy_status(inputs, now);
    }

    fn queues(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        rates: &Rates,
        metrics: &Metrics,
        now: Time,
    ) {
        // Jobs held back by their queue's budget, per queue (the plan reports only decisions
        // that changed; the scheduler keeps every job's current one).
        let mut budget_held: HashMap<&str, usize> = HashMap::new();
        for (id, view) in built.jobs.iter() {
            if matches!(view.lifecycle, Lifecycle::Pending)
                && self
                    .scheduler
                    .current(id)
                    .is_some_and(|(_, reason, _)| reason == core::Reason::BudgetExhausted)
            {
                *budget_held.entry(view.job.spec.queue.as_str()).or_default() += 1;
            }
        }
        let mut per_queue: BTreeMap<String, GpuQueueStatus> = inputs
            .queues
            .iter()
            .map(|q| (q.name_any(), GpuQueueStatus::default()))
            .collect();
        // Tallied per queue name (a run of jobs of one queue finds its tally without a lookup),
        // then named once per queue.
        let cloud_pools: BTreeSet<String> = inputs
            .pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .map(|p| p.name_any())
            .collect();
        let mut tallies: Vec<(&str, Tally)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut last: Option<usize> = None;
        let mut last_pool: Option<(&str, bool)> = None;
        for view in built.jobs.values() {
            let queue = view.job.spec.queue.as_str();
            let at = match last {
                Some(at) if tallies[at].0 == queue => at,
                _ => *index.entry(queue).or_insert_with(|| {
                    tallies.push((queue, Tally::default()));
                    tallies.len() - 1
                }),
            };
            last = Some(at);
            let t = &mut tallies[at].1;
            t.phases[phase_index(world::phase_of(view))] += 1;
            match &view.lifecycle {
                Lifecycle::Pending if view.invalid.is_none() => t.pending += 1,
                Lifecycle::Running { pool, .. } => {
                    t.running += 1;
                    // Jobs of one pool come in runs: the last pool is compared first.
                    let cloud = pool.as_deref().is_some_and(|p| match last_pool {
                        Some((name, cloud)) if name == p => cloud,
                        _ => {
                            let cloud = cloud_pools.contains(p);
                            last_pool = Some((p, cloud));
                            cloud
                        }
                    });
                    t.gpus[usize::from(cloud)] += (view.job.spec.replicas.max(1)
                        * view.job.spec.gpus_per_replica.max(1))
                        as u64;
                }
                _ => {}
            }
        }
        let mut job_counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut queue_gpus: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (queue, t) in tallies {
            let qs = per_queue.get_mut(queue);
            let label = if qs.is_some() { queue } else { "-" };
            for (phase, n) in PHASES.iter().zip(t.phases).filter(|(_, n)| *n > 0) {
                *job_counts
                    .entry((label.to_string(), format!("{phase:?}")))
                    .or_default() += n;
            }
            let Some(qs) = qs else { continue };
            qs.pending += t.pending;
            qs.running += t.running;
            if t.running > 0 {
                let by_env = qs
                    .gpus_in_use
                    .get_or_insert_with(GpusByEnvironment::default);
                by_env.private += t.gpus[0] as i64;
                by_env.cloud += t.gpus[1] as i64;
            }
            for (env, gpus) in ["private", "cloud"].into_iter().zip(t.gpus) {
                if gpus > 0 {
                    queue_gpus.insert((queue.to_string(), env.to_string()), gpus);
                }
            }
        }
        metrics.set_jobs(job_counts);
        let mut pool_gpus = BTreeMap::new();
        for p in &inputs.pools {
            let name = p.name_any();
            let (capacity, allocated) = gpus_of(built, &name);
            pool_gpus.insert((name.clone(), "capacity".into()), capacity as u64);
            pool_gpus.insert((name, "allocated".into()), allocated as u64);
        }
        metrics.set_gpus(queue_gpus, pool_gpus);

        let mut gauges = Vec::new();
        for q in &inputs.queues {
            let name = q.name_any();
            let Some(mut st) = per_queue.remove(&name) else {
                continue;
            };
            let current = q.status.clone().unwrap_or_default();
            let base = self
                .written
                .queues
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            st.gpus_in_use
                .get_or_insert_with(GpusByEnvironment::default);
            st.indicators = Some(self.queue_indicators(&name, base.indicators.as_ref(), now));
            st.conditions = base.conditions.clone();
            let problem = built.invalid_objects.get(&format!("GpuQueue/{name}"));
            let generation = q.metadata.generation;
            let problem = problem.map(|p| {
                format!(
                    "{p}. The queue is left out of decisions: its jobs wait (reason QueueInvalid) until it is fixed."
                )
            });
            self.ready(
                q.object_ref(&()),
                "GpuQueue",
                &mut st.conditions,
                problem.as_deref(),
                "The queue is valid and in use.",
                generation,
                now,
            );
            // BudgetExhausted: True while the budget holds jobs back from bursting.
            match &q.spec.budget {
                Some(_) if problem.is_none() => {
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
                        generation,
                        now,
                    );
                }
                _ => status::remove_condition(&mut st.conditions, "BudgetExhausted"),
            }
            // IndicatorsTruncated: True while the full indicator ledger holds less of this
            // queue's history than its windows cover.
            let series = crate::indicators::Book::queue_series(&name);
            match self.indicators.dropped.message(&series) {
                Some(message) => status::set_condition(
                    &mut st.conditions,
                    "IndicatorsTruncated",
                    true,
                    "LedgerFull",
                    &message,
                    generation,
                    now,
                ),
                None => status::remove_condition(&mut st.conditions, "IndicatorsTruncated"),
            }
            super::utilization::utilization_known(&mut st.conditions, inputs, generation, now);
            let hourly = round_cents(rates.queue_hourly.get(&name).copied().unwrap_or(0.0));
            let written = base.spend.clone().unwrap_or_default();
            st.spend = Some(
                match spend_to_write(
                    self.ledger.queues.get(&name),
                    written.this_month_usd,
                    written.accrued_through.as_ref().map(clock::core_micro_time),
                    written.hourly_usd != hourly
                        || self.opened_accounts.contains(&format!("GpuQueue/{name}")),
                    now,
                ) {
                    Some((usd, through)) => QueueSpend {
                        this_month_usd: usd,
                        hourly_usd: hourly,
                        accrued_through: Some(through),
                    },
                    None => QueueSpend {
                        hourly_usd: hourly,
                        ..written
                    },
                },
            );
            gauges.push(super::indicators::queue_gauges(q, &st));
            if !changed(&mut self.written.queues, &name, &st, &base, &current) {
                continue;
            }
            self.apply(
                StatusKind::GpuQueue,
                &name,
                "GpuQueue",
                serde_json::to_value(&st),
            );
        }
        metrics.set_queue_gauges(gauges);
    }

    fn pools(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        cloud: Option<CloudInputs<'_>>,
        rates: &Rates,
        metrics: &Metrics,
        now: Time,
    ) {
        let mut drift = BTreeMap::new();
        let mut environments = super::environment::environments(built, inputs, &mut self.node_sets);
        for p in &inputs.pools {
            let name = p.name_any();
            let nodes: Vec<&core::Node> = built
                .snapshot
                .nodes
                .iter()
                .filter(|n| n.pool == name)
                .collect();
            let (capacity, allocated) = gpus_of(built, &name);
            let current = p.status.clone().unwrap_or_default();
            let base = self
                .written
                .pools
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            let is_cloud = p.spec.aws.is_some();
            let billed = is_cloud || p.spec.cluster.is_some();
            let rate = rates.pool.get(&name).copied().unwrap_or((0, 0.0));
            let mut st = ComputePoolStatus {
                nodes: Some(PoolNodes {
                    total: nodes.len() as i64,
                    ready: nodes.iter().filter(|n| n.schedulable).count() as i64,
                    idle: nodes.iter().filter(|n| n.free_gpus >= n.gpus).count() as i64,
                }),
                gpus: Some(PoolGpus {
                    capacity: capacity as i64,
                    allocated: allocated as i64,
                }),
                instances: is_cloud.then_some(rate.0),
                hourly_usd: billed.then(|| round_cents(rate.1)),
                this_month_usd: base.this_month_usd,
                accrued_through: base.accrued_through.clone(),
                environment: environments.remove(&name),
                left_out: base.left_out.clone(),
                domains: crate::topology::pool_domains(p, &nodes),
                conditions: base.conditions.clone(),
            };
            if billed
                && let Some((usd, through)) = spend_to_write(
                    self.ledger.pools.get(&name),
                    base.this_month_usd.unwrap_or(0.0),
                    base.accrued_through.as_ref().map(clock::core_micro_time),
                    base.hourly_usd != st.hourly_usd
                        || self
                            .opened_accounts
                            .contains(&format!("ComputePool/{name}")),
                    now,
                )
            {
                st.this_month_usd = Some(usd);
                st.accrued_through = Some(through);
            }
            let problem = built
                .invalid_objects
                .get(&format!("ComputePool/{name}"))
                .map(|p| format!("{p}. The pool is left out of decisions until it is fixed."));
            let generation = p.metadata.generation;
            let valid = format!(
                "The pool is valid and in use: {} node(s), {capacity} GPU(s).",
                nodes.len()
            );
            match self.remote_problem(p, problem.is_some()) {
                Some((reason, message)) => {
                    self.not_ready(p, &mut st.conditions, reason, &message, now);
                }
                None => self.ready(
                    p.object_ref(&()),
                    "ComputePool",
                    &mut st.conditions,
                    problem.as_deref(),
                    &valid,
                    generation,
                    now,
                ),
            }
            match cloud {
                Some(c) if is_cloud => {
                    let (ok, reason, message) = launch_health(&name, c, now);
                    status::set_condition(
                        &mut st.conditions,
                        "LaunchHealthy",
                        ok,
                        reason,
                        &message,
                        generation,
                        now,
                    );
                }
                _ => status::remove_condition(&mut st.conditions, "LaunchHealthy"),
            }
            if cloud.is_some() && is_cloud {
                self.mismatches_in_health(&name, &mut st.conditions, generation, now);
                st.left_out = self.left_out(&name);
            }
            match super::environment::drift_condition(p, built) {
                Some((status, reason, message)) => {
                    if status != "Unknown" {
                        drift.insert(name.clone(), status == "True");
                    }
                    status::set_condition_status(
                        &mut st.conditions,
                        "EnvironmentDrift",
                        status,
                        reason,
                        &message,
                        generation,
                        now,
                    );
                }
                None => status::remove_condition(&mut st.conditions, "EnvironmentDrift"),
            }
            if !changed(&mut self.written.pools, &name, &st, &base, &current) {
                continue;
            }
            self.apply(
                StatusKind::ComputePool,
                &name,
                "ComputePool",
                serde_json::to_value(&st),
            );
        }
        metrics.set_environment_drift(drift);
    }

    fn datasets(&mut self, built: &world::Built, inputs: &Inputs, now: Time) {
        for d in &inputs.datasets {
            let name = d.name_any();
            let current = d.status.clone().unwrap_or_default();
            let base = self
                .written
                .datasets
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            let mut st = DatasetStatus {
                conditions: base.conditions.clone(),
            };
            let problem = built.invalid_objects.get(&format!("Dataset/{name}")).map(|p| {
                format!(
                    "{p}. The dataset is left out of decisions: jobs reading it wait (reason DatasetInvalid) until it is fixed."
                )
            });
            self.ready(
                d.object_ref(&()),
                "Dataset",
                &mut st.conditions,
                problem.as_deref(),
                "The dataset is valid and in use.",
                d.metadata.generation,
                now,
            );
            if !changed(&mut self.written.datasets, &name, &st, &base, &current) {
                continue;
            }
            self.apply(
                StatusKind::Dataset,
                &name,
                "Dataset",
                serde_json::to_value(&st),
            );
        }
    }

    fn policy_status(&mut self, inputs: &Inputs, now: Time) {
        for p in &inputs.policies {
            let name = p.name_any();
            let Some(verdict) = self.policies.verdicts.get(&name).cloned() else {
                continue;
            };
            let current = p.status.clone().unwrap_or_default();
            let base = self
                .written
                .policies
                .get(&name)
                .cloned()
                .unwrap_or(current.clone());
            let mut st = BurstPolicyStatus {
                rules: Some(0),
                conditions: base.conditions.clone(),
            };
            let problem = match &verdict {
                Verdict::Valid { rules } => {
                    st.rules = Some(*rules as i64);
                    None
                }
                Verdict::Invalid(why) => Some(format!(
                    "{why}. The policy is left out whole until it is fixed; the other policies apply."
                )),
            };
            self.ready(
                p.object_ref(&()),
                "BurstPolicy",
                &mut st.conditions,
                problem.as_deref(),
                "Every rule compiled; the policy is in force.",
                p.metadata.generation,
                now,
            );
            if !changed(&mut self.written.policies, &name, &st, &base, &current) {
                continue;
            }
            self.apply(
                StatusKind::BurstPolicy,
                &name,
                "BurstPolicy",
                serde_json::to_value(&st),
            );
        }
    }

    /// Objects of every kind that cannot be read as their type: GpuJobs get `Invalid`, the
    /// other kinds `Ready=False`; each once per message, with a Warning Event.
    pub(super) fn unreadable(&mut self, inputs: &Inputs, now: Time) {
        for u in &inputs.unreadable {
            if u.kind == "GpuJob" {
                self.unreadable_job(u, now);
                continue;
            }
            let key = format!("{}/{}", u.kind, u.name);
            let message = format!(
                "The {} cannot be read: {}. It is left out of decisions until it is fixed.",
                u.kind, u.error
            );
            if self.written.unreadable.get(&key) == Some(&message) {
                continue;
            }
            self.written.unreadable.insert(key, message.clone());
            let mut conditions = Vec::new();
            status::set_condition(
                &mut conditions,
                "Ready",
                false,
                "Invalid",
                &message,
                u.generation,
                now,
            );
            let kind = match u.kind {
                "GpuQueue" => StatusKind::GpuQueue,
                "ComputePool" => StatusKind::ComputePool,
                "Dataset" => StatusKind::Dataset,
                _ => StatusKind::BurstPolicy,
            };
            self.apply(
                kind,
                &u.name,
                u.kind,
                Ok(serde_json::json!({ "conditions": conditions })),
            );
            let regarding = ObjectReference {
                api_version: Some("spillway.io/v1alpha1".into()),
                kind: Some(u.kind.to_string()),
                name: Some(u.name.clone()),
                uid: u.uid.clone(),
                ..ObjectReference::default()
            };
            self.publish(regarding, true, "Invalid", "Validate", message);
        }
        let live: BTreeSet<String> = inputs
            .unreadable
            .iter()
            .map(|u| match &u.namespace {
                Some(ns) => format!("{}/{ns}/{}", u.kind, u.name),
                None => format!("{}/{}", u.kind, u.name),
            })
            .collect();
        self.written.unreadable.retain(|k, _| live.contains(k));
    }

    /// Sets `Ready` from `problem`, with a Warning Event when the object turns invalid (or its
    /// problem changes) and a Normal one when it turns valid again.
    #[allow(clippy::too_many_arguments)]
    fn ready(
        &mut self,
        regarding: ObjectReference,
        kind: &str,
        conditions: &mut Vec<Condition>,
        problem: Option<&str>,
        valid: &str,
        generation: Option<i64>,
        now: Time,
    ) {
        let before = conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.message.clone()));
        match problem {
            Some(message) => {
                status::set_condition(
                    conditions, "Ready", false, "Invalid", message, generation, now,
                );
                if before.as_ref().map(|(s, m)| (s.as_str(), m.as_str()))
                    != Some(("False", message))
                {
                    self.publish(regarding, true, "Invalid", "Validate", message.to_string());
                }
            }
            None => {
                status::set_condition(conditions, "Ready", true, "Valid", valid, generation, now);
                if before.is_some_and(|(s, _)| s == "False") {
                    self.publish(
                        regarding,
                        false,
                        "Valid",
                        "Validate",
                        format!("The {kind} is valid again and back in decisions."),
                    );
                }
            }
        }
    }

    fn apply(
        &mut self,
        kind: StatusKind,
        name: &str,
        type_name: &str,
        status: Result<serde_json::Value, serde_json::Error>,
    ) {
        let Ok(status) = status else { return };
        self.emit(Action::ApplyStatus(StatusPatch {
            kind,
            namespace: None,
            name: name.to_string(),
            body: serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": type_name,
                "metadata": {"name": name}, "status": status,
            }),
        }));
    }
}

/// GPUs of a pool's nodes: (capacity, allocated).
fn gpus_of(built: &world::Built, pool: &str) -> (u32, u32) {
    let nodes = built.snapshot.nodes.iter().filter(|n| n.pool == pool);
    nodes.fold((0, 0), |(c, a), n| {
        (c + n.gpus, a + n.gpus - n.free_gpus.min(n.gpus))
    })
}

/// The spend pair to write, when the written one is stale: it moved and is over a minute
/// old, or none was written yet, or `now_please` says so (the rate changed, or the account
/// was just opened after a restart and billed the gap) and it moved.
fn spend_to_write(
    account: Option<&Account>,
    written_usd: f64,
    written_through: Option<Time>,
    now_please: bool,
    now: Time,
) -> Option<(
    f64,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
)> {
    let a = account?;
    let usd = round_cents(a.usd);
    let stale = match written_through {
        None => true,
        Some(t) => {
            (now_please && (usd != written_usd || a.through != t))
                || (usd != written_usd && now.since(t) >= SPEND_REFRESH)
        }
    };
    stale.then(|| (usd, clock::micro_time(a.through)))
}

/// A cloud pool's `LaunchHealthy`: False while an offering cools down after a failed launch
/// or the latest launch in the last 15 minutes failed.
fn launch_health(pool: &str, cloud: CloudInputs<'_>, now: Time) -> (bool, &'static str, String) {
    let health = cloud.view.health.get(pool).cloned().unwrap_or_default();
    let errors: Vec<_> = health
        .errors
        .iter()
        .filter(|e| now.since(e.at) < LAUNCH_ERROR_MEMORY)
        .collect();
    let mut cooling: Vec<String> = cloud
        .view
        .cooldowns
        .iter()
        .filter(|((p, ..), until)| p == pool && **until > now)
        .map(|((_, t, c, z), until)| format!("{t} {} {z} until {}", c.as_str(), k8s_time(*until).0))
        .collect();
    cooling.sort();
    let last_failed = errors
        .last()
        .is_some_and(|e| health.last_success.is_none_or(|ok| e.at > ok));
    let minutes = LAUNCH_ERROR_MEMORY.as_secs() / 60;
    if errors.is_empty() || (!last_failed && cooling.is_empty()) {
        let reason = if health.last_success.is_some() {
            "LaunchesSucceeding"
        } else {
            "NoRecentFailures"
        };
        return (
            true,
            reason,
            format!("No launch failed in the last {minutes}m."),
        );
    }
    let last = errors[errors.len() - 1];
    let reason = match last.kind {
        "capacity" => "CapacityErrors",
        "throttled" => "Throttled",
        "refused" => "LaunchRefused",
        _ => "LaunchErrors",
    };
    let mut message = format!(
        "{} launch failure(s) in the last {minutes}m; the last: {}: {}.",
        errors.len(),
        last.offering,
        last.message
    );
    if !cooling.is_empty() {
        message.push_str(&format!(" Cooling down: {}.", cooling.join(", ")));
    }
    (false, reason, message)
}

/// Whether an object's status `st` must be written, given what was last written (`base`) and
/// what the cache shows (`current`); records it as written when so, and forgets the record
/// once the cache has caught up.
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

/// One queue's jobs, as a turn counts them.
#[derive(Default)]
struct Tally {
    /// Jobs by phase, in the order of [`PHASES`].
    phases: [u64; 6],
    pending: i64,
    running: i64,
    /// GPUs of running jobs: private, cloud.
    gpus: [u64; 2],
}

const PHASES: [JobPhase; 6] = [
    JobPhase::Queued,
    JobPhase::Provisioning,
    JobPhase::Running,
    JobPhase::Succeeded,
    JobPhase::Failed,
    JobPhase::Suspended,
];

/// `phase`'s place in [`PHASES`] (a match, so that a new phase does not compile until it has
/// one).
fn phase_index(phase: JobPhase) -> usize {
    match phase {
        JobPhase::Queued => 0,
        JobPhase::Provisioning => 1,
        JobPhase::Running => 2,
        JobPhase::Succeeded => 3,
        JobPhase::Failed => 4,
        JobPhase::Suspended => 5,
    }
}
