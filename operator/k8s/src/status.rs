//! A GpuJob's status as it should be, from what was observed and decided.
//!
//! The desired status starts from the current one and changes only what changed: a decision
//! whose outcome, reason, rule and offering are unchanged keeps its old message, time and wait
//! estimate, and the accrued cost is refreshed only when it moved by five minutes' worth. So
//! `desired == current` means "nothing to write", and a job that keeps waiting for the same
//! reason costs no API writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use spillway_api::GpuJobStatus;
use spillway_api::job::{DecisionStatus, JobCost, JobPhase, OfferingStatus};
use spillway_core::{self as core, Environment, Outcome, Time};

use crate::clock::k8s_time;
use crate::world::{JobView, Lifecycle};

/// How stale the accrued cost may get before it is rewritten, in seconds of spend.
const COST_REFRESH_SECONDS: f64 = 300.0;

/// Sets a condition, keeping its `lastTransitionTime` when its status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Time,
) {
    let status = if status { "True" } else { "False" };
    set_condition_status(conditions, type_, status, reason, message, generation, now);
}

/// [`set_condition`] with the status as written: `True`, `False` or `Unknown`.
pub fn set_condition_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Time,
) {
    let status = status.to_string();
    let previous = conditions.iter().position(|c| c.type_ == type_);
    let last_transition_time = match previous.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => k8s_time(now),
    };
    let cond = Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time,
    };
    match previous {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
}

pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The status form of a core decision.
pub fn decision_status(d: &core::Decision, wait: Option<i64>, now: Time) -> DecisionStatus {
    DecisionStatus {
        outcome: Some(d.outcome.as_str().to_string()),
        reason: Some(d.reason.as_str().to_string()),
        message: Some(d.message.clone()),
        rule: d.rule.clone(),
        estimated_wait_seconds: wait.or(d.estimated_wait.map(|w| w.as_secs_f64().round() as i64)),
        estimated_hourly_cost: d.estimated_hourly_cost.map(round_cents),
        estimated_egress_usd: d.estimated_egress_usd.map(round_cents),
        offering: d.offering.as_ref().map(|o| OfferingStatus {
            instance_type: o.instance_type.clone(),
            capacity_type: o.capacity_type,
            zone: Some(o.zone.clone()),
            hourly_price: o.hourly_price,
        }),
        time: Some(k8s_time(now)),
    }
}

/// USD rounded to a hundredth of a cent, as status shows it.
pub(crate) fn round_cents(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

fn same_decision(a: &DecisionStatus, b: &DecisionStatus) -> bool {
    a.outcome == b.outcome && a.reason == b.reason && a.rule == b.rule && a.offering == b.offering
}

/// Keeps the current decision when the new one says the same thing.
pub fn merge_decision(current: Option<&DecisionStatus>, new: DecisionStatus) -> DecisionStatus {
    match current {
        Some(c) if same_decision(c, &new) => c.clone(),
        _ => new,
    }
}

/// A decision's reason and sentence, for a condition; the fallback when there is none.
fn reason_and_message(
    decision: Option<&DecisionStatus>,
    reason: &str,
    message: &str,
) -> (String, String) {
    match decision {
        Some(d) => (
            d.reason.clone().unwrap_or_default(),
            d.message.clone().unwrap_or_default(),
        ),
        None => (reason.to_string(), message.to_string()),
    }
}

/// What the controller knows about a job's placement cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct CostRate {
    /// USD per hour while running (private GPUs at their pool's cost, cloud at the price).
    pub hourly_usd: f64,
}

/// The status the job should have, starting from `base` (the status last written, else the
/// job's). `decision` is this cycle's decision for it, if the core made one.
pub fn desired(
    view: &JobView,
    base: Option<&GpuJobStatus>,
    decision: Option<&core::Decision>,
    environment: Option<Environment>,
    rate: CostRate,
    now: Time,
) -> GpuJobStatus {
    let job = &view.job;
    let none = GpuJobStatus::default();
    let current = base.unwrap_or(&none);
    let mut s = current.clone();
    let generation = job.metadata.generation;
    s.observed_generation = generation;
    s.queued_at = Some(
        current
            .queued_at
            .clone()
            .unwrap_or_else(|| k8s_time(view.queued_at)),
    );
    s.restarts = (view.attempt > 0).then_some(view.attempt as i32);

    match &view.lifecycle {
        Lifecycle::Done | Lifecycle::Broken { .. } => return current.clone(),
        Lifecycle::Suspended { .. } => {
            // Phase, pool, nodes and the Suspended condition were written when the move began.
            if let Some(d) = decision {
                s.decision = Some(merge_decision(
                    current.decision.as_ref(),
                    decision_status(d, None, now),
                ));
            }
            s.cost = current.cost.clone().map(|c| JobCost {
                hourly_usd: 0.0,
                ..c
            });
        }
        Lifecycle::Pending | Lifecycle::Provisioning { .. } => {
            let provisioning = match &view.lifecycle {
                Lifecycle::Provisioning { pool } => Some(pool.clone()),
                _ => None,
            };
            s.phase = Some(if provisioning.is_some() {
                JobPhase::Provisioning
            } else {
                JobPhase::Queued
            });
            s.environment = provisioning.as_ref().map(|_| Environment::Cloud);
            s.pool = provisioning.clone();
            s.nodes = Vec::new();
            s.started_at = None;
            s.cost = current
                .cost
                .clone()
                .filter(|c| c.accrued_usd > 0.0)
                .map(|c| JobCost {
                    hourly_usd: 0.0,
                    ..c
                });
            if let Some(why) = &view.invalid {
                let d = core::Decision::new(
                    &view.id,
                    Outcome::Reject,
                    core::Reason::InvalidSpec,
                    why.clone(),
                    None,
                );
                s.decision = Some(merge_decision(
                    current.decision.as_ref(),
                    decision_status(&d, None, now),
                ));
            } else if let Some(d) = decision {
                s.decision = Some(merge_decision(
                    current.decision.as_ref(),
                    decision_status(d, None, now),
                ));
            }
            let rejected = s
                .decision
                .as_ref()
                .is_some_and(|d| d.outcome.as_deref() == Some(Outcome::Reject.as_str()));
            let (reason, message) =
                reason_and_message(s.decision.as_ref(), "Queued", "Waiting for a decision.");
            if rejected {
                set_condition(
                    &mut s.conditions,
                    "Invalid",
                    true,
                    &reason,
                    &message,
                    generation,
                    now,
                );
            } else {
                remove_condition(&mut s.conditions, "Invalid");
            }
            set_condition(
                &mut s.conditions,
                "Admitted",
                false,
                &reason,
                &message,
                generation,
                now,
            );
            remove_condition(&mut s.conditions, "Running");
            if provisioning.is_some() {
                set_condition(
                    &mut s.conditions,
                    "Burst",
                    true,
                    "Provisioning",
                    "Cloud instances are launching for the job.",
                    generation,
                    now,
                );
            } else {
                remove_condition(&mut s.conditions, "Burst");
            }
        }
        Lifecycle::Running {
            nodes,
            pool,
            started_at,
            all_running,
        } => {
            s.phase = Some(JobPhase::Running);
            s.environment = environment;
            s.pool = pool.clone();
            s.nodes = nodes.clone();
            s.started_at = Some(
                current
                    .started_at
                    .clone()
                    .unwrap_or_else(|| k8s_time(*started_at)),
            );
            if s.first_started_at.is_none() {
                s.first_started_at = s.started_at.clone();
            }
            s.interrupted_at = None;
            let waited = started_at.since(view.queued_at).as_secs_f64().round() as i64;
            if let Some(d) = decision.filter(|d| {
                matches!(
                    d.outcome,
                    Outcome::StartPrivate | Outcome::StartCloud | Outcome::StartRemote
                )
            }) {
                s.decision = Some(decision_status(d, Some(waited), now));
            }
            remove_condition(&mut s.conditions, "Invalid");
            if s.conditions
                .iter()
                .any(|c| c.type_ == "Suspended" && c.status == "True")
            {
                set_condition(
                    &mut s.conditions,
                    "Suspended",
                    false,
                    "Resumed",
                    "The job runs again.",
                    generation,
                    now,
                );
            }
            let (reason, message) =
                reason_and_message(s.decision.as_ref(), "Placed", "The job was placed.");
            set_condition(
                &mut s.conditions,
                "Admitted",
                true,
                &reason,
                &message,
                generation,
                now,
            );
            if *all_running {
                set_condition(
                    &mut s.conditions,
                    "Running",
                    true,
                    "AllReplicasRunning",
                    "Every replica's pod is running.",
                    generation,
                    now,
                );
            } else {
                set_condition(
                    &mut s.conditions,
                    "Running",
                    false,
                    "ReplicasStarting",
                    "Waiting for every replica's pod to start.",
                    generation,
                    now,
                );
            }
            let elapsed = now.since(*started_at).as_secs_f64();
            s.cost = cost(
                current.cost.as_ref(),
                rate.hourly_usd,
                elapsed,
                egress(&s, environment),
                false,
            );
            if matches!(environment, Some(Environment::Cloud)) {
                set_condition(
                    &mut s.conditions,
                    "Burst",
                    true,
                    &reason,
                    "The job runs on cloud capacity.",
                    generation,
                    now,
                );
            }
        }
        Lifecycle::Succeeded { at } | Lifecycle::Failed { at, .. } => {
            let (phase, reason, message) = match &view.lifecycle {
                Lifecycle::Failed {
                    reason, message, ..
                } => (JobPhase::Failed, reason.to_string(), message.clone()),
                _ => (
                    JobPhase::Succeeded,
                    "Succeeded".to_string(),
                    "Every replica succeeded.".to_string(),
                ),
            };
            s.phase = Some(phase);
            s.finished_at = Some(k8s_time(*at));
            let started = current
                .started_at
                .as_ref()
                .map(|t| Time::from_millis(t.0.as_millisecond()))
                .unwrap_or(*at);
            let elapsed = at.since(started).as_secs_f64();
            let moved = egress(&s, s.environment);
            s.cost = cost(current.cost.as_ref(), rate.hourly_usd, elapsed, moved, true);
            set_condition(
                &mut s.conditions,
                "Running",
                false,
                &reason,
                &message,
                generation,
                now,
            );
            set_condition(
                &mut s.conditions,
                if phase == JobPhase::Failed {
                    "Failed"
                } else {
                    "Succeeded"
                },
                true,
                &reason,
                &message,
                generation,
                now,
            );
        }
    }
    s
}

/// The data egress a cloud job pays once, from its decision.
fn egress(s: &GpuJobStatus, environment: Option<Environment>) -> f64 {
    match environment {
        Some(Environment::Cloud) => s
            .decision
            .as_ref()
            .and_then(|d| d.estimated_egress_usd)
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

/// The cost so far (`one_time` is paid once, at the start): kept when within five minutes'
/// spend of the truth, unless `last`.
fn cost(
    current: Option<&JobCost>,
    hourly: f64,
    elapsed_s: f64,
    one_time: f64,
    last: bool,
) -> Option<JobCost> {
    // Once finished, the rate is the one it ran at (its nodes may be gone already).
    let hourly = if hourly > 0.0 {
        hourly
    } else {
        current.map(|c| c.hourly_usd).unwrap_or(0.0)
    };
    if hourly <= 0.0 && one_time <= 0.0 {
        return current.cloned();
    }
    let accrued = round_cents(hourly * elapsed_s.max(0.0) / 3600.0 + one_time);
    let fresh = JobCost {
        accrued_usd: accrued,
        hourly_usd: if last { 0.0 } else { round_cents(hourly) },
    };
    match current {
        Some(c)
            if !last
                && c.hourly_usd == fresh.hourly_usd
                && (accrued - c.accrued_usd).abs() < hourly * COST_REFRESH_SECONDS / 3600.0 =>
        {
            Some(c.clone())
        }
        _ => Some(fresh),
    }
}

/// The server-side apply body for a job's status.
pub fn apply_body(job: &spillway_api::GpuJob, status: &GpuJobStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "spillway.io/v1alpha1",
        "kind": "GpuJob",
        "metadata": {"name": job.name_any(), "namespace": job.namespace()},
        "status": status,
    })
}
