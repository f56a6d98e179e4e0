//! GPU utilization, carried out: each running job that Prometheus reported on gets
//! `status.utilization` (the mean of its pods' GPU activity over the last 10 minutes, and since
//! when it has stayed under its queue's idle threshold), and its queue's idle policy: after
//! `after` below the threshold, `Warn` sets condition `Idle` and publishes a Warning Event
//! naming its GPUs, cost per hour and how long; `Suspend` requeues a restartable job (its GPUs
//! freed) and warns about any other; `None` does nothing. A job busy again loses `Idle`.
//!
//! A turn acts once per set of samples (they come every `--utilization-interval`). Writes are
//! few: the figure is written again when it moves by a point or more, when the job
//! turns idle or busy, and at least every 10 minutes. The queues' gauge
//! (`spillway_gpu_utilization_ratio`) is the GPU-weighted mean of their jobs' figures.

use crate::hashing::HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use spillway_api::job::{IDLE_EXEMPT_ANNOTATION, JobUtilization};
use spillway_api::queue::{DEFAULT_IDLE_AFTER, DEFAULT_IDLE_THRESHOLD, IdleAction};
use spillway_api::{GpuJobStatus, GpuQueue};
use spillway_core::{self as core, Environment, Time};

use super::State;
use super::reclaim::{Stop, grace_seconds};
use crate::clock::{core_time, k8s_time};
use crate::metrics::Metrics;
use crate::status;
use crate::utilization::{GPU_UTIL, GR_ENGINE_ACTIVE, Samples};
use crate::world::{self, JobView, Lifecycle};

/// The figure is written again at least this often while it holds.
const REWRITE_EVERY: core::Duration = core::Duration::from_secs(600);

/// A queue's idle policy, defaults applied.
struct Policy {
    threshold: f64,
    after: core::Duration,
    action: IdleAction,
    allow_exempt: bool,
}

fn policy(queue: Option<&GpuQueue>) -> Policy {
    let idle = queue.and_then(|q| q.spec.idle.as_ref());
    Policy {
        threshold: idle
            .and_then(|i| i.threshold)
            .unwrap_or(DEFAULT_IDLE_THRESHOLD),
        after: idle
            .and_then(|i| i.after.as_deref())
            .and_then(|d| core::Duration::parse(d).ok())
            .unwrap_or_else(|| {
                core::Duration::parse(DEFAULT_IDLE_AFTER).unwrap_or(core::Duration::ZERO)
            }),
        // A queue without an idle policy only measures.
        action: idle.map_or(IdleAction::None, |i| i.action.unwrap_or_default()),
        allow_exempt: idle.and_then(|i| i.allow_exempt).unwrap_or(true),
    }
}

impl State {
    /// Each running job's utilization and its queue's idle policy; the queues' gauge.
    pub(super) fn utilization(
        &mut self,
        built: &world::Built,
        samples: &Samples,
        queues: &HashMap<String, Arc<GpuQueue>>,
        metrics: &Metrics,
        now: Time,
    ) {
        let Some(at) = samples.at else {
            metrics.set_gpu_utilization(BTreeMap::new());
            return;
        };
        // Acted on already: the figures, the spells and the gauge are as these samples left
        // them until newer ones come.
        if self.utilization_seen == Some(at) {
            return;
        }
        self.utilization_seen = Some(at);
        // (queue, environment) -> (sum of percent x GPUs, GPUs).
        let mut gauge: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
        for view in built.jobs.values() {
            if !matches!(view.lifecycle, Lifecycle::Running { .. }) || self.moved_on(view) {
                continue;
            }
            let ns = view.job.namespace().unwrap_or_default();
            let uses: Vec<&crate::utilization::PodUse> = view
                .pods
                .iter()
                .filter_map(|p| samples.pods.get(&(ns.clone(), p.name_any())))
                .collect();
            if uses.is_empty() {
                continue;
            }
            let percent = uses.iter().map(|u| u.percent).sum::<f64>() / uses.len() as f64;
            let source = if uses.iter().all(|u| u.source == GR_ENGINE_ACTIVE) {
                GR_ENGINE_ACTIVE
            } else {
                GPU_UTIL
            };
            let queue = queues.get(&view.job.spec.queue).map(|q| q.as_ref());
            let p = policy(queue);
            let mut st = self.last_status(view);
            let env = match st.environment {
                Some(Environment::Cloud) => "cloud",
                Some(Environment::Remote) => "remote",
                _ => "private",
            };
            let gpus = f64::from(view.job.spec.replicas.max(1) as u32)
                * f64::from(view.job.spec.gpus_per_replica.max(1) as u32);
            let g = gauge
                .entry((view.job.spec.queue.clone(), env.to_string()))
                .or_default();
            g.0 += percent * gpus;
            g.1 += gpus;

            let prev = st.utilization.clone();
            let idle_since = (percent < p.threshold).then(|| {
                prev.as_ref()
                    .and_then(|u| u.idle_since.clone())
                    .unwrap_or_else(|| k8s_time(at))
            });
            let mut desired = JobUtilization {
                gpu_percent: (percent * 10.0).round() / 10.0,
                source: source.to_string(),
                sampled_at: k8s_time(at),
                idle_since,
                sampled_gpu_hours: 0.0,
                busy_gpu_hours: 0.0,
                idle_gpu_hours: 0.0,
            };
            accrue(&mut desired, prev.as_ref(), gpus, at);
            let mut write = prev.as_ref().is_none_or(|u| {
                (u.gpu_percent - desired.gpu_percent).abs() >= 1.0
                    || u.idle_since.is_some() != desired.idle_since.is_some()
                    || u.source != desired.source
                    || at.since(core_time(&u.sampled_at)) >= REWRITE_EVERY
            });
            if write {
                st.utilization = Some(desired.clone());
            }
            let idle_for = desired.idle_since.as_ref().map(|s| at.since(core_time(s)));
            let exempt = p.allow_exempt
                && view
                    .job
                    .annotations()
                    .get(IDLE_EXEMPT_ANNOTATION)
                    .is_some_and(|v| v == "true");
            let idle =
                p.action != IdleAction::None && !exempt && idle_for.is_some_and(|d| d >= p.after);
            // Warned of this spell (a suspension is of an earlier run: a new spell acts again).
            let flagged = st
                .conditions
                .iter()
                .any(|c| c.type_ == "Idle" && c.status == "True" && c.reason == "IdleGPUs");
            if idle && !flagged {
                let note = idle_note(view, &st, &desired, idle_for.unwrap_or_default(), &p);
                if p.action == IdleAction::Suspend && view.job.spec.restartable {
                    self.suspend_idle(view, st, queue, &note, now);
                    continue;
                }
                let why = if p.action == IdleAction::Suspend {
                    format!("{note} It is not restartable, so it is not suspended.")
                } else {
                    note
                };
                status::set_condition(
                    &mut st.conditions,
                    "Idle",
                    true,
                    "IdleGPUs",
                    &why,
                    view.job.metadata.generation,
                    now,
                );
                self.publish(view.job.object_ref(&()), true, "Idle", "Warn", why);
                write = true;
            } else if !idle && flagged {
                status::set_condition(
                    &mut st.conditions,
                    "Idle",
                    false,
                    "Busy",
                    &format!(
                        "Its GPUs are at {:.1}% (threshold {}%).",
                        desired.gpu_percent, p.threshold
                    ),
                    view.job.metadata.generation,
                    now,
                );
                write = true;
            }
            if write {
                self.apply_job_status(view, &st);
            }
        }
        metrics.set_gpu_utilization(
            gauge
                .into_iter()
                .filter(|(_, (_, gpus))| *gpus > 0.0)
                .map(|(k, (sum, gpus))| (k, (sum / gpus / 100.0 * 1e4).round() / 1e4))
                .collect(),
        );
    }

    /// Requeues an idle restartable job: its next attempt, condition `Idle` (reason
    /// `Suspended`), a Warning Event, its pods evicted with their grace period.
    fn suspend_idle(
        &mut self,
        view: &JobView,
        st: GpuJobStatus,
        queue: Option<&GpuQueue>,
        note: &str,
        now: Time,
    ) {
        let grace = grace_seconds(view, queue);
        let next = self.next_attempt(view);
        let note = format!(
            "{note} Its queue suspends idle jobs: its pods stop within {grace} s and it is requeued (attempt {next}), freeing its GPUs."
        );
        self.stop_and_requeue(
            view,
            st,
            Stop {
                next,
                condition: ("Idle", "Suspended"),
                admitted: "Idle",
                event: ("Idle", "Suspend", true),
                note,
                grace,
            },
            now,
        );
    }
}

/// The run's GPU-hours so far into `next` (the figure at `at`): those of `prev`, and the stretch
/// since `prev`'s figure at that figure's activity, when it is at most [`STRETCH_MAX`] long (a
/// longer gap went unsampled).
fn accrue(next: &mut JobUtilization, prev: Option<&JobUtilization>, gpus: f64, at: Time) {
    let Some(prev) = prev else { return };
    next.sampled_gpu_hours = prev.sampled_gpu_hours;
    next.busy_gpu_hours = prev.busy_gpu_hours;
    next.idle_gpu_hours = prev.idle_gpu_hours;
    let stretch = at.since(core_time(&prev.sampled_at));
    if stretch > STRETCH_MAX {
        return;
    }
    let h = gpus * stretch.as_secs_f64() / 3600.0;
    next.sampled_gpu_hours += h;
    next.busy_gpu_hours += h * prev.gpu_percent / 100.0;
    if prev.idle_since.is_some() {
        next.idle_gpu_hours += h;
    }
    for v in [
        &mut next.sampled_gpu_hours,
        &mut next.busy_gpu_hours,
        &mut next.idle_gpu_hours,
    ] {
        *v = (*v * 1e4).round() / 1e4;
    }
}

/// The longest stretch between two figures that counts as sampled (figures are written at
/// least every 10 minutes while Prometheus answers).
const STRETCH_MAX: core::Duration = core::Duration::from_secs(900);

/// What an idle job's condition and Event say: its GPUs, their use, how long, what they cost.
fn idle_note(
    view: &JobView,
    st: &GpuJobStatus,
    u: &JobUtilization,
    idle_for: core::Duration,
    p: &Policy,
) -> String {
    let gpus = view.job.spec.replicas.max(1) * view.job.spec.gpus_per_replica.max(1);
    let nodes = if st.nodes.is_empty() {
        String::new()
    } else {
        format!(" on {}", st.nodes.join(", "))
    };
    let hourly = st.cost.as_ref().map_or(0.0, |c| c.hourly_usd);
    let cost = if hourly > 0.0 {
        format!(", costing ${hourly:.2} per hour")
    } else {
        String::new()
    };
    let cloud = if st.environment == Some(Environment::Cloud) {
        " It runs in the cloud: its instances bill while its GPUs idle."
    } else {
        ""
    };
    format!(
        "Its {gpus} GPU(s){nodes} have been below {}% for {idle_for} (now {:.1}%, {}){cost}.{cloud}",
        p.threshold, u.gpu_percent, u.source
    )
}

/// `UtilizationKnown` on a queue while utilization is read (`--prometheus-url`): whether the
/// latest query of Prometheus answered; absent when it is not read.
pub(super) fn utilization_known(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    inputs: &world::Inputs,
    generation: Option<i64>,
    now: Time,
) {
    match inputs.utilization.as_deref() {
        None => status::remove_condition(conditions, "UtilizationKnown"),
        Some(s) => match &s.error {
            Some((error, since)) => status::set_condition(
                conditions,
                "UtilizationKnown",
                false,
                "PrometheusUnreachable",
                &format!(
                    "GPU utilization is not current: queries of Prometheus fail since {} ({error}). Jobs run on; idle policies wait.",
                    crate::clock::rfc3339(*since)
                ),
                generation,
                now,
            ),
            None if s.at.is_some() => status::set_condition(
                conditions,
                "UtilizationKnown",
                true,
                "PrometheusAnswers",
                "Prometheus answers: jobs' GPU utilization is current.",
                generation,
                now,
            ),
            None => {}
        },
    }
}
