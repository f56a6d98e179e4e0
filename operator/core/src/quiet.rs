//! [`Quiet`]: the queues in which a job that arrives after a cycle cannot change that cycle's
//! plan, so a caller need not decide again for it.
//!
//! Under strict order a queue whose head does not fit is blocked: nothing behind the head
//! starts privately. When the queue never bursts and the caller asks for no wait decisions
//! (`Settings::wait_decisions` off, as the simulator runs), a job behind that head gets no
//! decision, takes no GPUs, reserves nothing and sets no wake-up: the cycle passes it over.
//! A job arriving behind the head is passed over the same way, unless something about the job
//! itself gets it a decision (an invalid spec, a missing dataset, cloud-only placement, a gang
//! no private node could ever hold: rejected, as the queue never bursts) or rules could read
//! it.
//! `decide` lists such queues in [`crate::Plan::quiet`] (only when no rules are loaded) and
//! [`Quiet::absorbs`] tells whether a new job is one of those passed over.
//!
//! The contract for a caller that skips a cycle on it: the world is the one the plan was
//! decided on, plus the arrived jobs; the plan asked for nothing (no action, no decision, so
//! nothing of it was applied); and the clock is before the plan's `stable_until` and before
//! any offering's cooldown ends (as for [`crate::Scheduler`]). `tests/quiet.rs` checks on
//! random worlds that deciding again then gives the same plan.

use std::cmp::Reverse;

use crate::{GpuModel, Job, JobState, Placement, Snapshot, Time};

/// Queues whose newly arrived jobs a cycle would pass over; see the module documentation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quiet {
    pub(crate) queues: Vec<QuietQueue>,
    /// Schedulable private nodes: (GPUs, model).
    pub(crate) private_nodes: Vec<(u32, Option<GpuModel>)>,
}

/// A blocked queue that never bursts, and the job that blocked it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QuietQueue {
    pub(crate) queue: String,
    pub(crate) priority: i32,
    pub(crate) queued_at: Time,
    pub(crate) id: String,
}

impl Quiet {
    /// Whether no queue is quiet.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether deciding again with `job` added to `snapshot` (the world this plan was decided
    /// on) gives the same plan: `job` is pending, valid, in a quiet queue behind the job that
    /// blocked it, neither cloud-only nor too large for the private nodes ever.
    pub fn absorbs(&self, snapshot: &Snapshot, job: &Job) -> bool {
        let Some(q) = self.queues.iter().find(|q| q.queue == job.queue) else {
            return false;
        };
        matches!(job.state, JobState::Pending)
            && job.replicas >= 1
            && job.gpus_per_replica >= 1
            && job.placement != Placement::CloudOnly
            // Its requirements would need each node's facts: decided again.
            && job.requirements.is_empty()
            // Candidates are taken by priority, then arrival, then id.
            && (Reverse(job.priority), job.queued_at, job.id.as_str())
                > (Reverse(q.priority), q.queued_at, q.id.as_str())
            && job
                .datasets
                .iter()
                .all(|d| snapshot.datasets.iter().any(|x| x.name == *d))
            && self.private_slots(job) >= job.replicas
    }

    /// How many replicas of `job` the private nodes could hold if they were empty.
    fn private_slots(&self, job: &Job) -> u32 {
        replica_slots(
            self.private_nodes.iter().map(|(g, m)| (*g, m.as_ref())),
            job,
        )
    }
}

/// How many replicas of `job` nodes of (GPUs, model) could hold if they were empty: the
/// count both a cycle (`can_ever_fit_private`) and [`Quiet::absorbs`] use.
pub(crate) fn replica_slots<'m>(
    nodes: impl Iterator<Item = (u32, Option<&'m GpuModel>)>,
    job: &Job,
) -> u32 {
    let g = job.gpus_per_replica;
    nodes
        .filter(|&(gpus, model)| gpus >= g && job.accepts_model(model))
        .fold(0u32, |slots, (gpus, _)| slots.saturating_add(gpus / g))
}
