//! Step 3 under `QueueOrder::Conservative`: plan each waiting job on the profile of the private
//! nodes ([`crate::profile`]) and hold its slot, or let it burst at once when its slot is later
//! than its wait allows.

use super::{Cycle, Waiting};
use crate::profile::{Profile, Slot};
use crate::{Duration, Job};

impl<'a> Cycle<'a> {
    /// Plans `job`. Returns the nodes to start it on now (already taken from the profile), or
    /// `None` with `w.private_estimate` set to its planned start when it has one.
    ///
    /// A job without a runtime estimate can hold no slot of its own length; the first such
    /// job blocked in its queue (`hold_forever`) holds its GPUs from its earliest start on, as
    /// the head of an EASY-backfilling queue does, so later jobs cannot starve it.
    pub(super) fn conservative(
        &mut self,
        job: &'a Job,
        w: &mut Waiting,
        hold_forever: bool,
    ) -> Option<Vec<usize>> {
        let nodes = &self.snap.nodes;
        if self.profile.is_none() {
            // GPUs held for a reclaiming job are not free to plan with.
            let private = &self.private;
            self.profile = Some(Profile::new_in(
                self.spare_profile.take(),
                self.now,
                nodes,
                &private.private,
                |i| private.effective(i),
                &self.releases,
                self.settings.packing,
            ));
        }
        let profile = self.profile.as_mut()?;
        w.private_estimate = None;
        let runtime = job.planning_runtime();
        let accepts = |i: usize| job.accepts_model(nodes[i].gpu_model.as_ref());
        // Fits now? Capacity only shrinks during the pass, so a gang of this shape that did not
        // fit for as long keeps not fitting.
        let longer = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        let known_not_now = self.now_failures.iter().any(|(g, models, replicas, d)| {
            *g == job.gpus_per_replica
                && *replicas <= job.replicas
                && *models == job.gpu_models
                && longer(*d, runtime)
        });
        if !known_not_now {
            // The free-GPU index answers "does it fit at all now" cheaply; its choice usually
            // delays no slot, else every node is tried against the slots.
            if let Some(nodes) =
                self.private
                    .fit(&self.snap.nodes, job, true, self.settings.packing)
            {
                let slot = if profile.holds_now(job, &nodes, runtime) {
                    Some(Slot {
                        at: self.now,
                        nodes,
                    })
                } else {
                    profile.now_slot(job, runtime, accepts)
                };
                if let Some(slot) = slot {
                    profile.take(job, &slot, runtime);
                    return Some(slot.nodes);
                }
            }
            self.now_failures.push((
                job.gpus_per_replica,
                job.gpu_models.clone(),
                job.replicas,
                runtime,
            ));
        }
        if !profile.budget_left() {
            return None;
        }
        let slot = profile.earliest(job, runtime, accepts)?;
        if slot.at == self.now {
            profile.take(job, &slot, runtime);
            return Some(slot.nodes);
        }
        if runtime.is_none() && !hold_forever {
            return None;
        }
        let late = slot.at > job.queued_at + self.allowance(job, w.effects()).threshold;
        let may_burst = self.cloud_blocker(job, w.effects()).is_none();
        if !(late && may_burst) {
            if let Some(profile) = self.profile.as_mut() {
                profile.take(job, &slot, runtime);
            }
            self.planned += 1;
        }
        w.private_estimate = Some(slot.at);
        None
    }
}
