//! Quota reclaim, carried out: each preemption of the plan moves the job to its next attempt
//! (back in its queue), records a `Preempted` condition and an Event naming the queue that
//! reclaimed the GPUs, and evicts its pods with their grace period.

use crate::hashing::HashMap;
use std::sync::Arc;

use kube::Resource;
use spillway_api::GpuQueue;
use spillway_core::{self as core, Time};

use super::State;
use crate::status;
use crate::world::{self, JobView};

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECONDS: i64 = 30;

impl State {
    /// Carries out the plan's preemptions.
    pub(super) fn preemptions(
        &mut self,
        plan: &core::Plan,
        built: &world::Built,
        queues: &HashMap<String, Arc<GpuQueue>>,
        now: Time,
    ) {
        for p in &plan.preemptions {
            if let Some(view) = self.fresh_view(built, &p.job) {
                self.preempt(view, p, queues.get(&view.job.spec.queue), now);
            }
        }
    }

    fn preempt(
        &mut self,
        view: &JobView,
        p: &core::Preemption,
        queue: Option<&Arc<GpuQueue>>,
        now: Time,
    ) {
        let next = self.next_attempt(view);
        let grace = grace_seconds(view, queue.map(|q| q.as_ref()));
        let note = format!(
            "{} Its pods stop within {grace} s and the job is requeued (attempt {next}).",
            p.message
        );
        let st = self.last_status(view);
        self.stop_and_requeue(
            view,
            st,
            Stop {
                next,
                condition: ("Preempted", "QuotaReclaimed"),
                admitted: "Preempted",
                event: ("Preempted", "Preempt", !p.restartable),
                note,
                grace,
            },
            now,
        );
    }

    /// Puts a running job back in its queue under attempt `stop.next`: its condition, `Admitted`
    /// false, no `Running`, an Event, the status written and its pods evicted with
    /// `stop.grace`.
    pub(super) fn stop_and_requeue(
        &mut self,
        view: &JobView,
        mut st: spillway_api::GpuJobStatus,
        stop: Stop<'_>,
        now: Time,
    ) {
        let generation = view.job.metadata.generation;
        super::jobs::requeued(&mut st, stop.next);
        let (type_, reason) = stop.condition;
        status::set_condition(
            &mut st.conditions,
            type_,
            true,
            reason,
            &stop.note,
            generation,
            now,
        );
        status::set_condition(
            &mut st.conditions,
            "Admitted",
            false,
            stop.admitted,
            &stop.note,
            generation,
            now,
        );
        status::remove_condition(&mut st.conditions, "Running");
        let (event, action, warning) = stop.event;
        self.publish(view.job.object_ref(&()), warning, event, action, stop.note);
        self.apply_job_status(view, &st);
        self.evict_pods(view, stop.grace);
    }
}

/// How [`State::stop_and_requeue`] stops a job.
pub(super) struct Stop<'a> {
    /// The attempt it is requeued under.
    pub next: u32,
    /// The condition set true: (type, reason).
    pub condition: (&'a str, &'a str),
    /// The reason of `Admitted=False`.
    pub admitted: &'a str,
    /// The Event: (reason, action, warning).
    pub event: (&'a str, &'a str, bool),
    pub note: String,
    /// Seconds its pods may take to stop.
    pub grace: i64,
}

/// How long a preempted pod of `view` may take to stop: its template's
/// `terminationGracePeriodSeconds` (Kubernetes' 30 s without one), capped by its queue's
/// `preemption.maxGracePeriod`.
pub fn grace_seconds(view: &JobView, queue: Option<&GpuQueue>) -> i64 {
    let own = view
        .job
        .spec
        .pod_spec()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0);
    let cap = queue
        .and_then(|q| q.spec.preemption.as_ref())
        .and_then(|p| p.max_grace_period.as_deref())
        .and_then(|d| core::Duration::parse(d).ok())
        .map(|d| d.as_secs().min(i64::MAX as u64) as i64);
    cap.map_or(own, |c| own.min(c))
}
