//! The short path of a cycle for a world with nothing to place: every job runs, and none runs
//! in the cloud where it could move home. Then no step but scale-down can plan anything (there
//! is nothing to start, launch, reject, preempt for or move), so the cycle builds none of its
//! indexes: it looks for idle cloud nodes and works out until when its plan holds, as the full
//! cycle does. In a replay most instants at which only jobs finish are of this kind.
//!
//! `tests/scheduler.rs` requires the same plan, in full, as [`super::decide_in_full`] at every
//! step of its random histories.

use super::cloud::{scale_down, stable_until};
use super::*;

/// The plan of a world with nothing to place; `None` for any other world.
/// `refs`: each job's queue already found (as [`super::decide_resolved`] takes them).
pub(super) fn decide(
    snap: &Snapshot,
    refs: Option<&[JobRefs]>,
    policy: &dyn Policy,
    now: Time,
) -> Option<Plan> {
    let settled = snap.jobs.iter().all(|job| match &job.state {
        JobState::Running {
            environment: Environment::Cloud,
            ..
        } => !job.restartable || job.placement == Placement::CloudOnly,
        JobState::Running { .. } => true,
        _ => false,
    });
    if !settled {
        return None;
    }
    let mut plan = Plan::default();
    if policy.reads_clock() || snap.settings.order == QueueOrder::Backfill {
        stable_until(&mut plan, now, now);
    }
    // As step 1: a private job's expected end, for jobs of a known queue.
    let mut queues: Option<FastMap<&str, ()>> = None;
    let mut last: Option<(&str, bool)> = None;
    for (i, job) in snap.jobs.iter().enumerate() {
        let JobState::Running {
            started_at,
            environment: Environment::Private,
            ..
        } = &job.state
        else {
            continue;
        };
        let Some((_, stable)) = expected_end(job, *started_at, now) else {
            continue;
        };
        let known = match (refs, last) {
            (Some(refs), _) => refs[i].queue().is_some(),
            (None, Some((name, known))) if name == job.queue => known,
            _ => {
                let known = queues
                    .get_or_insert_with(|| {
                        snap.queues.iter().map(|q| (q.name.as_str(), ())).collect()
                    })
                    .contains_key(job.queue.as_str());
                last = Some((job.queue.as_str(), known));
                known
            }
        };
        if known {
            stable_until(&mut plan, now, stable);
        }
    }
    // Nothing is claimed: claims come from jobs placed or provisioning in the cycle. A pool
    // name given twice resolves to its last entry, as in the full cycle's table.
    scale_down(
        snap,
        now,
        &mut plan,
        |_| false,
        |name| snap.pools.iter().rev().find(|p| p.name == name),
    );
    Some(plan)
}
