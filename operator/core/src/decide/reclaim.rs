//! Quota reclaim, part of step 3: a job whose queue is within its private quota and that does
//! not fit because other queues borrowed the GPUs gets them back.
//!
//! GPUs already on their way back (pods of preempted jobs stopping) count first. Otherwise
//! the victims are running private jobs of queues using more than their own quota, taken in
//! order (lowest priority, then most recently started, then least work lost) until the gang
//! fits, and then pruned back to the fewest that still make it fit. A queue is never taken
//! below its own quota, a job that is not restartable is preempted only when its queue
//! allows it (`Queue::preempt_non_restartable`), and a job that has run for less than its
//! queue's `Queue::min_runtime` is not chosen (the cycle asks to decide again when it has).

use super::*;
use crate::plan::Preemption;

/// A running private job that could give its GPUs back.
struct Candidate {
    job: usize,
    priority: i32,
    started_at: Time,
    lost_gpu_seconds: f64,
}

impl<'a> Cycle<'a> {
    /// Tries to give `job` (of a queue within its quota) the GPUs it needs. Returns whether
    /// it decided the job: it waits with reason `Reclaiming`, the GPUs it will get are held
    /// for it for the rest of the cycle, and any victims are in the plan's preemptions.
    /// A gang that must stay within one topology domain gets GPUs back within one domain
    /// only (the smallest that could hold it first), never split across domains.
    pub(super) fn reclaim(&mut self, job: &'a Job) -> bool {
        match job
            .topology
            .as_ref()
            .filter(|t| t.required && job.replicas > 1)
        {
            None => self.reclaim_within(job, None, true),
            Some(t) => {
                let domains = self.domains_for(job, &t.level);
                // A domain whose GPUs are on their way back already comes first, so a reclaim
                // begun in one domain is not followed by victims in another.
                for victims in [false, true] {
                    for (pool, d) in &domains {
                        if self.reclaim_within(job, Some((&t.level, pool, d)), victims) {
                            return true;
                        }
                    }
                }
                false
            }
        }
    }

    /// [`Cycle::reclaim`] on the nodes of one domain (level, pool, value), or on every node;
    /// without `victims`, only with GPUs free or on their way back.
    fn reclaim_within(
        &mut self,
        job: &'a Job,
        domain: Option<(&str, &str, &str)>,
        victims: bool,
    ) -> bool {
        let snap = self.snap;
        let g = job.gpus_per_replica;
        if g == 0 {
            return false;
        }
        let usable: Vec<bool> = (0..snap.nodes.len())
            .map(|i| {
                let n = &snap.nodes[i];
                self.private.private[i]
                    && job.accepts_node(n)
                    && domain
                        .is_none_or(|(level, pool, d)| n.pool == pool && n.domain(level) == Some(d))
            })
            .collect();
        // Room per node: free (not held for another job) plus what is being released.
        let mut room: Vec<u32> = (0..snap.nodes.len())
            .map(|i| {
                if usable[i] {
                    let n = &snap.nodes[i];
                    (self.private.effective(i) + n.releasing_gpus.min(n.gpus)).min(n.gpus)
                } else {
                    0
                }
            })
            .collect();
        let fits = |room: &[u32]| room.iter().map(|r| r / g).sum::<u32>() >= job.replicas;
        let mut chosen: Vec<Candidate> = Vec::new();
        if !fits(&room) && !victims {
            return false;
        }
        if !fits(&room) {
            let (mut candidates, protected_until) = self.reclaim_candidates(job, &usable);
            if let Some(t) = protected_until {
                self.wake(t);
            }
            candidates.sort_by(|a, b| {
                (a.priority, std::cmp::Reverse(a.started_at))
                    .cmp(&(b.priority, std::cmp::Reverse(b.started_at)))
                    .then(a.lost_gpu_seconds.total_cmp(&b.lost_gpu_seconds))
                    .then_with(|| snap.jobs[a.job].id.cmp(&snap.jobs[b.job].id))
            });
            let mut taken: FastMap<&str, u32> = FastMap::default();
            for c in candidates {
                let v = &snap.jobs[c.job];
                if !self.may_take(v, taken.get(v.queue.as_str()).copied().unwrap_or(0)) {
                    continue;
                }
                *taken.entry(v.queue.as_str()).or_default() += v.total_gpus();
                self.give(&mut room, &usable, v, true);
                chosen.push(c);
                if fits(&room) {
                    break;
                }
            }
            if !fits(&room) {
                return false;
            }
            // The fewest victims: drop each one the gang can do without, latest chosen first.
            let mut k = chosen.len();
            while k > 0 {
                k -= 1;
                let v = &snap.jobs[chosen[k].job];
                self.give(&mut room, &usable, v, false);
                if fits(&room) {
                    chosen.remove(k);
                } else {
                    self.give(&mut room, &usable, v, true);
                }
            }
        }
        // Hold what is free now on the nodes the gang will use, best fit on the room.
        let mut order: Vec<usize> = (0..room.len()).filter(|&i| room[i] >= g).collect();
        order.sort_by_key(|&i| (room[i], i));
        let mut left = job.replicas;
        let mut held = false;
        for i in order {
            let k = (room[i] / g).min(left);
            let hold = (k * g).min(self.private.effective(i));
            if hold > 0 {
                self.private.reserve(i, hold);
                if let Some(profile) = self.built_profile() {
                    profile.hold(i, hold);
                }
                held = true;
            }
            left -= k;
            if left == 0 {
                break;
            }
        }
        if held {
            // No job may take held GPUs on the strength of ending before the reservations.
            self.reservations.push(Reservation { at: None });
        }
        let queue = job.queue.as_str();
        let mut gpus = 0;
        let mut victims = Vec::new();
        for c in &chosen {
            let v = &snap.jobs[c.job];
            gpus += v.total_gpus();
            victims.push(v.id.as_str());
            *self.preempted_gpus.entry(v.queue.as_str()).or_default() += v.total_gpus();
            self.preempted.insert(c.job);
            let message = self.say(|| {
                format!(
                    "Preempted: GpuQueue {queue:?} reclaimed the {} private GPUs this job borrowed beyond its queue's quota, for job {} ({}).",
                    v.total_gpus(),
                    job.id,
                    if v.restartable {
                        format!(
                            "restartable; about {:.0} GPU-seconds since its last checkpoint are lost",
                            c.lost_gpu_seconds
                        )
                    } else {
                        format!(
                            "not restartable; its {:.0} GPU-seconds of work are lost",
                            c.lost_gpu_seconds
                        )
                    }
                )
            });
            self.plan.preemptions.push(Preemption {
                job: v.id.clone(),
                queue: v.queue.clone(),
                by_queue: job.queue.clone(),
                for_job: job.id.clone(),
                gpus: v.total_gpus(),
                restartable: v.restartable,
                lost_gpu_seconds: c.lost_gpu_seconds,
                message,
            });
        }
        let message = self.say(|| {
            if victims.is_empty() {
                format!(
                    "Its queue {queue:?} is within its private quota; the GPUs it needs are being given back by borrowing jobs and it starts once they are free."
                )
            } else {
                format!(
                    "Its queue {queue:?} is within its private quota, so {gpus} GPUs lent to other queues are being reclaimed: preempting {}.",
                    victims.join(", ")
                )
            }
        });
        self.decide_job(job, Outcome::Wait, Reason::Reclaiming, message, None);
        true
    }

    /// Running private jobs of other queues that use more than their quota, on nodes `job`
    /// could use, that may be preempted; and the first time one that may not yet (it has not
    /// run its queue's minimum runtime) may.
    fn reclaim_candidates(&self, job: &Job, usable: &[bool]) -> (Vec<Candidate>, Option<Time>) {
        let mut out = Vec::new();
        let mut protected_until: Option<Time> = None;
        for (i, v) in self.snap.jobs.iter().enumerate() {
            let JobState::Running {
                nodes,
                started_at,
                environment: Environment::Private,
            } = &v.state
            else {
                continue;
            };
            if v.queue == job.queue || self.preempted.contains(&i) {
                continue;
            }
            let Some(queue) = self.queue(&v.queue) else {
                continue;
            };
            if !v.restartable && !queue.preempt_non_restartable {
                continue;
            }
            let useful = nodes
                .iter()
                .filter_map(|n| self.node_at(n))
                .any(|n| usable[n]);
            if !useful || !self.may_take(v, 0) {
                continue;
            }
            let until = *started_at + queue.min_runtime;
            if until > self.now {
                protected_until = Some(protected_until.map_or(until, |t| t.min(until)));
                continue;
            }
            out.push(Candidate {
                job: i,
                priority: v.priority,
                started_at: *started_at,
                lost_gpu_seconds: v.work_at_risk(*started_at, self.now).as_secs_f64()
                    * f64::from(v.total_gpus()),
            });
        }
        (out, protected_until)
    }

    /// Whether preempting `v` leaves its queue at or above its quota, with `more` GPUs of the
    /// same queue already chosen in this reclaim.
    fn may_take(&self, v: &Job, more: u32) -> bool {
        let quota = self.queue(&v.queue).and_then(|q| q.quota_gpus).unwrap_or(0);
        let used = self
            .state(&v.queue)
            .map_or(0, |s| s.private_gpus_in_use)
            .saturating_sub(
                self.preempted_gpus
                    .get(v.queue.as_str())
                    .copied()
                    .unwrap_or(0),
            )
            .saturating_sub(more);
        used >= quota.saturating_add(v.total_gpus())
    }

    /// Adds (or takes back) what stopping `v` frees on the usable nodes in `room`.
    fn give(&self, room: &mut [u32], usable: &[bool], v: &Job, add: bool) {
        let JobState::Running { nodes, .. } = &v.state else {
            return;
        };
        for n in nodes {
            let Some(i) = self.node_at(n) else {
                continue;
            };
            if usable[i] {
                room[i] = if add {
                    room[i].saturating_add(v.gpus_per_replica)
                } else {
                    room[i].saturating_sub(v.gpus_per_replica)
                };
            }
        }
    }
}
