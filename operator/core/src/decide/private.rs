//! Step 3 of a cycle: the private pass (fair share across queues, quotas, fitting gangs now,
//! and what each waiting job can expect: EASY reservations, strict order, or the conservative
//! plan of `conservative.rs`).

use super::topology::TopologyFit;
use super::*;

/// A candidate's place in its queue: priority (highest first), arrival, index in the snapshot.
pub(super) type OrderKey = (std::cmp::Reverse<i32>, Time, usize);

/// A queue's candidates in the private pass.
pub(super) struct Lane {
    /// Its queue (index into `snapshot.queues`).
    queue: usize,
    /// Private GPUs in use, including what this pass started.
    used: u32,
    weight: f64,
    /// Candidates' keys, the head last.
    jobs: Vec<OrderKey>,
    /// Strict order: its head did not fit, nothing behind it may start privately.
    blocked: bool,
    /// The job that blocked it (index into `snapshot.jobs`).
    blocked_by: Option<usize>,
    /// Its first blocked job has a reservation.
    reserved: bool,
}

impl<'a> Cycle<'a> {
    /// Step 3. Returns the jobs still waiting, in the order considered, with what the private
    /// side knows about them.
    /// `per_queue`: each queue's candidates (as `snapshot.queues`), in any order; their sort
    /// keys were copied out of the jobs (the jobs are large; the keys fit a cache line).
    pub(super) fn private_pass(&mut self, mut per_queue: Vec<Vec<OrderKey>>) -> Vec<Waiting> {
        let snap = self.snap;
        // Per queue: its candidates in priority, then arrival, then name order, the head last
        // (the index breaks ties of equal names, as the order of the snapshot did).
        let mut lanes = std::mem::take(&mut self.lanes);
        for (q, list) in per_queue.iter_mut().enumerate() {
            if list.is_empty() {
                continue;
            }
            let mut list = std::mem::take(list);
            list.sort_unstable_by(|b, a| {
                (a.0, a.1)
                    .cmp(&(b.0, b.1))
                    .then_with(|| snap.jobs[a.2].id.cmp(&snap.jobs[b.2].id))
                    .then(a.2.cmp(&b.2))
            });
            let queue = &snap.queues[q];
            lanes.push(Lane {
                queue: q,
                used: self.queue_state[q].private_gpus_in_use,
                weight: queue.weight.max(1) as f64,
                jobs: list,
                blocked: false,
                blocked_by: None,
                reserved: false,
            });
        }
        // One lane per queue, in name order (deterministic ties).
        lanes.sort_unstable_by_key(|lane| snap.queues[lane.queue].name.as_str());
        let mut waiting = std::mem::take(&mut self.waiting);
        loop {
            // A queue whose next job fits within its private quota goes first (its quota is
            // guaranteed); among the rest, weighted fair share: the queue using the fewest
            // private GPUs per unit of weight goes next.
            let mut next: Option<(bool, f64, usize)> = None;
            for (l, lane) in lanes.iter().enumerate() {
                let Some(&(_, _, head)) = lane.jobs.last() else {
                    continue;
                };
                let queue = &snap.queues[lane.queue];
                let borrowing = !within_quota(queue, lane.used, &snap.jobs[head]);
                let share = lane.used as f64 / lane.weight;
                if next.is_none_or(|(b, best, _)| (borrowing, share) < (b, best)) {
                    next = Some((borrowing, share, l));
                }
            }
            let Some((_, _, l)) = next else { break };
            let Some((_, _, i)) = lanes[l].jobs.pop() else {
                break;
            };
            let job = &snap.jobs[i];
            // No rules, no effects (and no large default record built and compared per job).
            let effects = if self.policy.is_empty() {
                None
            } else {
                let effects = self.effects(job);
                (effects != Effects::default()).then(|| Box::new(effects))
            };
            let mut w = Waiting {
                job: i,
                effects,
                private_estimate: None,
                never_private: false,
                private_block: None,
                topology_unfit: None,
            };

            if job.placement == Placement::CloudOnly {
                w.private_block = Some((Reason::CloudOnlyPlacement, None));
                waiting.push(w);
                continue;
            }
            if let Some(r) = w
                .effects()
                .require
                .as_ref()
                .filter(|r| r.value != Environment::Private)
            {
                w.private_block = Some((Reason::RequiredByPolicy, Some(r.rule.clone())));
                waiting.push(w);
                continue;
            }
            let queue = &snap.queues[lanes[l].queue];
            let in_use = lanes[l].used;
            if let Some(quota) = queue.quota_gpus
                && !queue.borrowing
                && in_use + job.total_gpus() > quota
            {
                w.private_block = Some((Reason::QuotaExhausted, None));
                waiting.push(w);
                continue;
            }
            if !self.can_ever_fit_private(job) {
                w.never_private = true;
                waiting.push(w);
                continue;
            }
            if lanes[l].blocked {
                // Strict order: nothing behind the blocked head starts privately. If its queue
                // never bursts either, the job can only keep waiting (the burst pass would find
                // the queue closed and decide just that), which needs no decision when the
                // caller asks for none.
                if self.settings.wait_decisions || queue.burst.enabled {
                    w.private_estimate = None;
                    waiting.push(w);
                }
                continue;
            }
            // Fits now? A job known to end before every reservation's time may use reserved
            // GPUs; any other job only unreserved ones.
            let ends_before_reservations = !self.reservations.is_empty()
                && job.planning_runtime().is_some_and(|r| {
                    self.reservations
                        .iter()
                        .all(|res| res.at.is_some_and(|at| self.now + r <= at))
                });
            // Free GPUs only shrink during the pass, so a shape that failed keeps failing.
            let shape_failed =
                self.fit_failures
                    .iter()
                    .any(|((g, models, req, ignore), replicas)| {
                        *g == job.gpus_per_replica
                            && *ignore == ends_before_reservations
                            && *replicas <= job.replicas
                            && job.same_accepts(models, req)
                    });
            // A gang bound to a topology level fits only within its domains
            // (`decide/topology.rs`); the estimates and plans of the orders below do not know
            // domains, so it gets none of them.
            let wish = job.topology.as_ref().filter(|_| job.replicas > 1);
            let mut domains: Vec<String> = Vec::new();
            let mut topology_unfit = None;
            // It fits now, but every place would delay a planned slot: no reclaim either.
            let mut refused_by_plan = false;
            let fit = if let Some(wish) = wish {
                match self.topology_fit(job, wish, ends_before_reservations) {
                    // In conservative order, only where it delays no planned slot.
                    TopologyFit::Fits(choices) => {
                        let conservative = self.settings.order == QueueOrder::Conservative;
                        let chosen = choices
                            .into_iter()
                            .find(|(nodes, _)| !conservative || self.take_now(job, nodes));
                        refused_by_plan = chosen.is_none();
                        chosen.map(|(nodes, d)| {
                            domains = d;
                            nodes
                        })
                    }
                    TopologyFit::Unfit(message) => {
                        topology_unfit = Some(message);
                        None
                    }
                    TopologyFit::NoRoom => None,
                    TopologyFit::Never(message) => {
                        w.never_private = true;
                        w.topology_unfit = Some(message);
                        waiting.push(w);
                        continue;
                    }
                }
            } else if self.settings.order == QueueOrder::Conservative {
                let hold = job.planning_runtime().is_none() && !lanes[l].reserved;
                match self.conservative(job, &mut w, hold) {
                    Some(nodes) => Some(nodes),
                    None if within_quota(queue, lanes[l].used, job) && self.reclaim(job) => {
                        continue;
                    }
                    None => {
                        lanes[l].reserved |= hold;
                        waiting.push(w);
                        continue;
                    }
                }
            } else if shape_failed {
                None
            } else {
                let fit = self.private.fit(
                    &snap.nodes,
                    job,
                    ends_before_reservations,
                    self.settings.packing,
                );
                if fit.is_none() {
                    self.fit_failures.push((
                        (
                            job.gpus_per_replica,
                            job.gpu_models.clone(),
                            job.requirements.clone(),
                            ends_before_reservations,
                        ),
                        job.replicas,
                    ));
                }
                fit
            };
            if let Some(nodes) = fit {
                let backfilled = !self.reservations.is_empty() || self.planned > 0;
                for &n in &nodes {
                    self.private.take(n, job.gpus_per_replica);
                    if let Some(r) = job.planning_runtime() {
                        self.releases.push((self.now + r, n, job.gpus_per_replica));
                        self.releases_sorted = false;
                    }
                }
                let pool = snap.nodes[nodes[0]].pool.clone();
                let hourly = match self.pools.item(&pool).map(|p| &p.kind) {
                    Some(PoolKind::Private {
                        gpu_cost_per_hour: Some(c),
                    }) => Some(c * job.total_gpus() as f64),
                    _ => None,
                };
                let within = match wish {
                    Some(w) if !domains.is_empty() => {
                        format!(" in {}={}", w.level, domains.join(","))
                    }
                    _ => String::new(),
                };
                let (reason, message) = if backfilled {
                    (
                        Reason::Backfilled,
                        self.say(|| format!(
                            "Started on free private GPUs ahead of a larger waiting job, without delaying its expected start ({} GPUs on {} node(s){within}).",
                            job.total_gpus(),
                            distinct(&nodes)
                        )),
                    )
                } else {
                    (
                        Reason::FitsPrivate,
                        self.say(|| format!(
                            "The whole gang fits on free private GPUs ({} GPUs on {} node(s) of pool {pool}{within}).",
                            job.total_gpus(),
                            distinct(&nodes)
                        )),
                    )
                };
                lanes[l].used += job.total_gpus();
                self.start(
                    job,
                    Environment::Private,
                    &pool,
                    nodes,
                    reason,
                    message,
                    None,
                    hourly,
                );
                continue;
            }
            // Does not fit now. Within its quota, it gets lent GPUs back.
            if !refused_by_plan && within_quota(queue, lanes[l].used, job) && self.reclaim(job) {
                continue;
            }
            if wish.is_some() {
                if self.settings.order == QueueOrder::Strict {
                    lanes[l].blocked = true;
                    lanes[l].blocked_by = Some(i);
                }
                w.topology_unfit = topology_unfit;
                w.private_estimate = None;
                waiting.push(w);
                continue;
            }
            match self.settings.order {
                QueueOrder::Backfill => {
                    if !lanes[l].reserved {
                        lanes[l].reserved = true;
                        let may_burst = self.cloud_blocker(job, w.effects()).is_none();
                        w.private_estimate = self.reserve(job, may_burst);
                    } else {
                        w.private_estimate = None;
                    }
                }
                QueueOrder::Strict => {
                    lanes[l].blocked = true;
                    lanes[l].blocked_by = Some(i);
                    w.private_estimate = if self.reservations.is_empty() {
                        self.estimate_only(job)
                    } else {
                        None
                    };
                    self.reservations.push(Reservation {
                        at: w.private_estimate,
                    });
                }
                // Whatever fits behind it starts; no estimate, no reservation. (Conservative
                // order planned the job above and never gets here.)
                QueueOrder::Greedy | QueueOrder::Conservative => w.private_estimate = None,
            }
            waiting.push(w);
        }
        self.note_quiet(&lanes);
        // The lists and lanes go back to the scratch, emptied.
        for lane in lanes.drain(..) {
            let mut list = lane.jobs;
            list.clear();
            per_queue[lane.queue] = list;
        }
        self.per_queue = per_queue;
        self.lanes = lanes;
        waiting
    }

    /// Lists the queues in which a newly arrived job would be passed over ([`crate::Quiet`]):
    /// blocked under strict order and never bursting, in a cycle that makes no wait decisions
    /// and has no rules. (A job over its queue's quota goes to the burst pass, which finds the
    /// queue closed and, without wait decisions, decides nothing either.)
    fn note_quiet(&mut self, lanes: &[Lane]) {
        if self.settings.wait_decisions
            || self.settings.order != QueueOrder::Strict
            || !self.policy.is_empty()
        {
            return;
        }
        let snap = self.snap;
        for lane in lanes {
            let q = &snap.queues[lane.queue];
            let (true, Some(head)) = (lane.blocked, lane.blocked_by) else {
                continue;
            };
            if q.burst.enabled {
                continue;
            }
            let head = &snap.jobs[head];
            self.plan.quiet.queues.push(crate::quiet::QuietQueue {
                queue: q.name.clone(),
                priority: head.priority,
                queued_at: head.queued_at,
                id: head.id.clone(),
            });
        }
        if !self.plan.quiet.queues.is_empty() {
            self.plan.quiet.private_nodes = snap
                .nodes
                .iter()
                .enumerate()
                .filter(|&(i, _)| self.private.private[i])
                .map(|(_, n)| (n.gpus, n.gpu_model.clone()))
                .collect();
        }
    }

    /// Could the gang fit on the private nodes if they were empty? Computed once per shape
    /// (GPUs per replica and models) and cycle.
    pub(super) fn can_ever_fit_private(&mut self, job: &Job) -> bool {
        let g = job.gpus_per_replica;
        let cached = self
            .capacity_slots
            .iter()
            .find(|((cg, models, req), _)| *cg == g && job.same_accepts(models, req))
            .map(|(_, slots)| *slots);
        let slots = match cached {
            Some(s) => s,
            None => {
                let private = &self.private.private;
                let slots = crate::quiet::replica_slots(
                    self.snap
                        .nodes
                        .iter()
                        .enumerate()
                        .filter(|&(i, n)| private[i] && job.requirements.met_by(&n.facts))
                        .map(|(_, n)| (n.gpus, n.gpu_model.as_ref())),
                    job,
                );
                self.capacity_slots
                    .push(((g, job.gpu_models.clone(), job.requirements.clone()), slots));
                slots
            }
        };
        slots >= job.replicas
    }

    pub(super) fn sort_releases(&mut self) {
        // A profile put off is built from the releases as they were (only the orders that
        // plan no profile sort them today: this keeps it so if that changes).
        self.built_profile();
        if !self.releases_sorted {
            self.releases.sort_by_key(|&(t, n, g)| (t, n, g));
            self.releases_sorted = true;
        }
    }

    /// When would `job` fit if private work ended as estimated? Returns the time and the free
    /// GPUs per node at that time.
    pub(super) fn shadow(&mut self, job: &Job) -> Option<(Time, Vec<u32>)> {
        self.sort_releases();
        let g = job.gpus_per_replica;
        let nodes = &self.snap.nodes;
        let mut free: Vec<u32> = (0..nodes.len())
            .map(|i| self.private.effective(i))
            .collect();
        let accepts = |i: usize| self.private.private[i] && job.accepts_node(&nodes[i]);
        let mut slots: u32 = (0..nodes.len())
            .filter(|&i| accepts(i))
            .map(|i| free[i] / g)
            .sum();
        for &(t, n, gpus) in &self.releases {
            if !accepts(n) {
                continue;
            }
            let before = free[n] / g;
            free[n] = (free[n] + gpus).min(nodes[n].gpus);
            slots += free[n] / g - before;
            if slots >= job.replicas {
                return Some((t.max(self.now), free));
            }
        }
        None
    }

    pub(super) fn estimate_only(&mut self, job: &Job) -> Option<Time> {
        self.shadow(job).map(|(t, _)| t)
    }

    /// Reserves private GPUs for a blocked job; returns its estimated start.
    ///
    /// When the start cannot be estimated (running work without runtimes), a job that may
    /// burst gets no reservation: holding GPUs idle for an unknown time costs more than the
    /// cloud placement that ends its wait after `maxWait`. A job that can never burst reserves
    /// the nodes it would use once everything running has ended, so it cannot starve.
    pub(super) fn reserve(&mut self, job: &Job, may_burst: bool) -> Option<Time> {
        let g = job.gpus_per_replica;
        let nodes = &self.snap.nodes;
        let (at, room) = match self.shadow(job) {
            Some((t, free)) => (Some(t), free),
            None if may_burst => return None,
            None => (None, nodes.iter().map(|n| n.gpus).collect()),
        };
        // Best fit at that time; prefer nodes with more GPUs free now (they are closer).
        let mut order: Vec<usize> = (0..nodes.len())
            .filter(|&i| self.private.private[i] && room[i] >= g && job.accepts_node(&nodes[i]))
            .collect();
        order.sort_by_key(|&i| (room[i], std::cmp::Reverse(self.private.free[i]), i));
        let mut left = job.replicas;
        let mut claims = Vec::new();
        for i in order {
            let k = (room[i] / g).min(left);
            if k > 0 {
                claims.push((i, k * g));
                left -= k;
            }
            if left == 0 {
                break;
            }
        }
        if left > 0 {
            return None;
        }
        for (i, gpus) in claims {
            self.private.reserve(i, gpus);
        }
        self.reservations.push(Reservation { at });
        at
    }
}

/// Whether `job` starting would keep its queue within its private quota.
fn within_quota(queue: &Queue, used: u32, job: &Job) -> bool {
    queue
        .quota_gpus
        .is_some_and(|q| used.saturating_add(job.total_gpus()) <= q)
}
