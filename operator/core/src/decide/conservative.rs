//! Step 3 under `QueueOrder::Conservative`: plan each waiting job on the profile of the private
//! nodes ([`crate::profile`]) and hold its slot, or let it burst at once when its slot is later
//! than its wait allows.

use super::{Cycle, Waiting};
use crate::profile::{Profile, Slot, each_node_holds};
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
        let now = self.now;
        if self.profile.is_none() && self.deferred.is_none() {
            self.defer_profile();
            if !self.put_off_profile {
                self.built_profile();
            }
        }
        w.private_estimate = None;
        let runtime = job.planning_runtime();
        // Most jobs take GPUs of any model and facts: then no node is asked.
        let any = job.accepts_any();
        let accepts = |i: usize| any || job.accepts_node(&nodes[i]);
        // Fits now? Capacity only shrinks during the pass, so a gang of this shape that did not
        // fit for as long keeps not fitting.
        let longer = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        let known_not_now = self
            .now_failures
            .iter()
            .any(|((g, models, req), replicas, d)| {
                *g == job.gpus_per_replica
                    && *replicas <= job.replicas
                    && job.same_accepts(models, req)
                    && longer(*d, runtime)
            });
        if !known_not_now {
            // The free-GPU index answers "does it fit at all now" cheaply; its choice usually
            // delays no slot, else every node is tried against the slots.
            if let Some(nodes) =
                self.private
                    .fit(&self.snap.nodes, job, true, self.settings.packing)
            {
                let holds = match self.deferred.as_mut() {
                    Some(d) => {
                        if d.holds_now(job, &nodes, &self.private.private) {
                            d.take(&nodes, job.gpus_per_replica, runtime);
                            return Some(nodes);
                        }
                        false
                    }
                    None => self.profile.as_mut()?.holds_now(job, &nodes, runtime),
                };
                let profile = self.built_profile()?;
                let slot = if holds {
                    Some(Slot { at: now, nodes })
                } else {
                    profile.now_slot(job, runtime, accepts)
                };
                if let Some(slot) = slot {
                    profile.take(job, &slot, runtime);
                    return Some(slot.nodes);
                }
            }
            self.now_failures.push((
                (
                    job.gpus_per_replica,
                    job.gpu_models.clone(),
                    job.requirements.clone(),
                ),
                job.replicas,
                runtime,
            ));
        }
        let profile = self.built_profile()?;
        if !profile.budget_left() {
            return None;
        }
        let slot = profile.earliest(job, runtime, accepts)?;
        if slot.at == now {
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

    /// Whether `job` may start now on `nodes` (chosen for its topology wish, not by the plan)
    /// without delaying a slot planned for an earlier job; if so the plan takes them.
    pub(super) fn take_now(&mut self, job: &Job, nodes: &[usize]) -> bool {
        let runtime = job.planning_runtime();
        if self.profile.is_none() && self.deferred.is_none() {
            self.defer_profile();
            if !self.put_off_profile {
                self.built_profile();
            }
        }
        if let Some(d) = self.deferred.as_mut()
            && d.holds_now(job, nodes, &self.private.private)
        {
            d.take(nodes, job.gpus_per_replica, runtime);
            return true;
        }
        let now = self.now;
        let Some(profile) = self.built_profile() else {
            return false;
        };
        if !profile.holds_now(job, nodes, runtime) {
            return false;
        }
        let slot = Slot {
            at: now,
            nodes: nodes.to_vec(),
        };
        profile.take(job, &slot, runtime);
        true
    }

    /// Puts off building the profile: while every job planned starts now, the profile is
    /// only asked whether GPUs free now stay free for the job's runtime, which they do (see
    /// [`Deferred`]).
    fn defer_profile(&mut self) {
        // In the buffers an earlier deferral left. GPUs held for a reclaiming job are not free
        // to plan with.
        let mut d = self.spare_deferred.take().unwrap_or_default();
        d.base.clear();
        d.base
            .extend((0..self.snap.nodes.len()).map(|i| self.private.effective(i)));
        d.free.clone_from(&d.base);
        d.releases = self.releases.len();
        d.takes.clear();
        d.taken_nodes.clear();
        d.work = 0;
        self.deferred = Some(d);
    }

    /// The profile, built now if it was put off (as it would have been at the first job
    /// planned, with the starts planned since taken from it); `None` if none was begun.
    pub(super) fn built_profile(&mut self) -> Option<&mut Profile> {
        if let Some(d) = self.deferred.take() {
            let private = &self.private;
            let mut profile = Profile::new_in(
                self.spare_profile.take(),
                self.now,
                &self.snap.nodes,
                &private.private,
                |i| d.base[i],
                &self.releases[..d.releases],
                self.settings.packing,
            );
            for &(from, to, gpus, runtime) in &d.takes {
                profile.take_at(self.now, &d.taken_nodes[from..to], gpus, runtime);
            }
            profile.add_work(d.work);
            self.profile = Some(profile);
            self.spare_deferred = Some(d);
        }
        self.profile.as_mut()
    }
}

/// The profile of a cycle not built yet: the private nodes' GPUs free when it was begun, how
/// many releases there were then, and the starts (all of them now) planned since.
///
/// The profile it stands for is, per node, the GPUs free then, rising at each release (capped
/// at the node's GPUs, which they never exceed), less each start from now for its runtime.
/// Every start was checked to fit when it was taken, so nothing was cut at zero, and a start
/// taken from now lowers the later steps no more than the first: each node's free GPUs never
/// fall below what is free now. So "do these GPUs stay free from now for the runtime" is "are
/// they free now", answered here without the profile, and the profile is built only when a
/// job has to be planned later (or another pass asks for it).
#[derive(Default)]
pub(super) struct Deferred {
    /// Per node: GPUs free when the profile was begun, and now (less the starts since).
    base: Vec<u32>,
    free: Vec<u32>,
    releases: usize,
    /// (start, end into `taken_nodes`, GPUs per replica, runtime) per start.
    takes: Vec<(usize, usize, u32, Option<Duration>)>,
    taken_nodes: Vec<usize>,
    /// What the profile's own checks would have counted against its planning budget.
    work: u64,
}

impl Deferred {
    /// [`Profile::holds_now`] on the profile this stands for.
    fn holds_now(&mut self, job: &Job, nodes: &[usize], private: &[bool]) -> bool {
        let (free, work) = (&self.free, &mut self.work);
        each_node_holds(nodes, job.gpus_per_replica, |n, need| {
            *work += 1;
            private[n] && free[n] >= need
        })
    }

    /// [`Profile::take_at`] from now.
    fn take(&mut self, nodes: &[usize], gpus: u32, runtime: Option<Duration>) {
        let from = self.taken_nodes.len();
        self.taken_nodes.extend_from_slice(nodes);
        self.takes
            .push((from, self.taken_nodes.len(), gpus, runtime));
        for &n in nodes {
            self.free[n] = self.free[n].saturating_sub(gpus);
        }
    }
}
