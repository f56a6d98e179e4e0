//! Step 4, continued: repatriation. A restartable job running in the cloud moves to private
//! GPUs left free by the private pass when finishing there is cheaper.
//!
//! The saving is what its cloud capacity would cost over its expected remaining time, minus
//! what the private GPUs cost over that time plus the work it loses (since its last checkpoint)
//! and the restart overhead, minus the idle time until scale-down of the instances it leaves
//! empty. Jobs with the most cloud spend ahead of them go first. A move takes only GPUs no
//! waiting job is promised (EASY reservations, conservative plans), and a BurstPolicy rule
//! `repatriate: never` keeps a job where it is.
//!
//! While its cloud pods stop, the job is [`JobState::Suspended`]: the private GPUs stay held
//! for it, and it starts there once the pods are gone.

use super::*;
use crate::Instance;
use crate::plan::Move;
use crate::policy::Repatriate;

/// A cloud job that could move home.
struct Candidate<'a> {
    job: &'a Job,
    started_at: Time,
    remaining: Duration,
    /// Its share of the instances it runs on, USD per hour.
    cloud_rate: f64,
    /// What the instances it would leave empty cost until they are scaled down, USD.
    idle_tail: f64,
    from_pool: &'a str,
}

impl<'a> Cycle<'a> {
    /// The nodes a suspended job holds, as indexes, while they all are schedulable private
    /// nodes.
    fn held_nodes(&self, nodes: &[String]) -> Option<Vec<usize>> {
        nodes
            .iter()
            .map(|n| self.node_at(n).filter(|&i| self.private.private[i]))
            .collect()
    }

    /// Step 1, continued: the GPUs suspended jobs hold are not free.
    pub(super) fn hold_for_suspended(&mut self) {
        let snap = self.snap;
        for k in 0..self.suspended.len() {
            let job = &snap.jobs[self.suspended[k]];
            if let JobState::Suspended { nodes, .. } = &job.state
                && let Some(held) = self.held_nodes(nodes)
            {
                for i in held {
                    self.private.take(i, job.gpus_per_replica);
                }
            }
        }
    }

    /// Step 2, continued: a suspended job starts on the nodes held for it once its cloud pods
    /// are gone, and waits until then. Returns false when those nodes are gone (it is planned
    /// again as a pending job).
    pub(super) fn resume(
        &mut self,
        job: &'a Job,
        nodes: &[String],
        pool: &str,
        ready: bool,
    ) -> bool {
        let Some(held) = self.held_nodes(nodes) else {
            return false;
        };
        if !ready {
            let message = self.say(|| {
                format!(
                    "Moving home to {} GPUs of private pool {pool}, held for it: waiting for its cloud pods to stop.",
                    job.total_gpus()
                )
            });
            self.decide_job(job, Outcome::Wait, Reason::Repatriating, message, None);
            return true;
        }
        let hourly = self.private_rate(pool, job);
        let message = self.say(|| {
            format!(
                "Moved home: its cloud pods have stopped; starting on the {} GPUs of private pool {pool} held for it.",
                job.total_gpus()
            )
        });
        self.start(
            job,
            Environment::Private,
            pool,
            held,
            Reason::Repatriated,
            message,
            None,
            hourly,
        );
        // Its GPUs were counted for its queue while it was suspended; `start` counts them again.
        if let Some(state) = self.state_mut(&job.queue) {
            state.private_gpus_in_use = state.private_gpus_in_use.saturating_sub(job.total_gpus());
            state.running_jobs = state.running_jobs.saturating_sub(1);
            state.pending_jobs += 1;
        }
        true
    }

    /// The hourly cost of `job` on private pool `pool`, when the pool says what its GPUs cost.
    fn private_rate(&self, pool: &str, job: &Job) -> Option<f64> {
        match self.pools.item(pool).map(|p| &p.kind) {
            Some(PoolKind::Private {
                gpu_cost_per_hour: Some(c),
            }) => Some(c * f64::from(job.total_gpus())),
            _ => None,
        }
    }

    /// Step 4, continued.
    pub(super) fn repatriate(&mut self) {
        let snap = self.snap;
        let (mut candidates, protected_until) = self.repatriation_candidates();
        if let Some(t) = protected_until {
            self.wake(t);
        }
        if candidates.is_empty() {
            return;
        }
        candidates.sort_by(|a, b| {
            let spend = |c: &Candidate<'_>| c.cloud_rate * c.remaining.as_secs_f64();
            spend(b)
                .total_cmp(&spend(a))
                .then_with(|| a.job.id.cmp(&b.job.id))
        });
        for c in candidates {
            let job = c.job;
            // A gang with a topology wish comes home only within its domains.
            let fit = match job.topology.as_ref().filter(|_| job.replicas > 1) {
                Some(wish) => match self.topology_fit(job, wish, false) {
                    super::topology::TopologyFit::Fits(choices) => {
                        choices.into_iter().next().map(|(nodes, _)| nodes)
                    }
                    _ => None,
                },
                None => self
                    .private
                    .fit(&snap.nodes, job, false, self.settings.packing),
            };
            let Some(nodes) = fit else {
                continue;
            };
            let lost = job.work_at_risk(c.started_at, self.now);
            let busy = c.remaining + lost + self.settings.restart_overhead;
            if let Some(profile) = self.built_profile()
                && !profile.holds_now(job, &nodes, Some(busy))
            {
                continue;
            }
            let pool = snap.nodes[nodes[0]].pool.as_str();
            let private_rate = self.private_rate(pool, job).unwrap_or(0.0);
            let hours = |d: Duration| d.as_secs_f64() / 3600.0;
            let saving =
                c.cloud_rate * hours(c.remaining) - private_rate * hours(busy) - c.idle_tail;
            if saving <= 0.0 {
                continue;
            }
            let effects = self.effects(job);
            if effects
                .repatriate
                .as_ref()
                .is_some_and(|r| r.value == Repatriate::Never)
                || effects.forbids(Environment::Private).is_some()
                || effects
                    .require
                    .as_ref()
                    .is_some_and(|r| r.value == Environment::Cloud)
            {
                continue;
            }
            for &n in &nodes {
                self.private.take(n, job.gpus_per_replica);
            }
            let now = self.now;
            if let Some(profile) = self.built_profile() {
                profile.take_at(now, &nodes, job.gpus_per_replica, Some(busy));
            }
            let lost_gpu_seconds = lost.as_secs_f64() * f64::from(job.total_gpus());
            let message = self.say(|| {
                format!(
                    "Moving home from cloud pool {} to private pool {pool}: finishing its expected {} there saves about ${saving:.2} (${:.2}/h of cloud capacity; {} of work since its last checkpoint and {} to restart are counted).",
                    c.from_pool,
                    c.remaining,
                    c.cloud_rate,
                    lost,
                    self.settings.restart_overhead
                )
            });
            let names: Vec<String> = nodes.iter().map(|&n| snap.nodes[n].name.clone()).collect();
            self.plan.moves.push(Move {
                job: job.id.clone(),
                pool: pool.to_string(),
                nodes: names,
                from_pool: c.from_pool.to_string(),
                saving_usd: saving,
                lost_gpu_seconds,
                message: message.clone(),
            });
            self.decide_job(job, Outcome::Wait, Reason::Repatriating, message, None);
        }
    }

    /// Restartable jobs running in the cloud with a runtime estimate and time left; and the
    /// first time one that has not run its queue's minimum runtime yet may be moved.
    fn repatriation_candidates(&self) -> (Vec<Candidate<'a>>, Option<Time>) {
        let snap = self.snap;
        let movable = |j: &Job| {
            j.restartable
                && j.placement != Placement::CloudOnly
                && matches!(
                    j.state,
                    JobState::Running {
                        environment: Environment::Cloud,
                        ..
                    }
                )
        };
        if !self.movable_in_cloud {
            return (Vec::new(), None);
        }
        let by_node: FastMap<&str, &Instance> = snap
            .instances
            .iter()
            .filter_map(|i| Some((i.node.as_deref()?, i)))
            .collect();
        // Replicas of running jobs per cloud node: a move leaves a node empty when they are
        // all its own.
        let mut replicas_on: FastMap<&str, u32> = FastMap::default();
        for j in &snap.jobs {
            if let JobState::Running {
                nodes,
                environment: Environment::Cloud,
                ..
            } = &j.state
            {
                for n in nodes {
                    *replicas_on.entry(n.as_str()).or_default() += 1;
                }
            }
        }
        let mut out = Vec::new();
        let mut protected_until: Option<Time> = None;
        for job in snap.jobs.iter().filter(|j| movable(j)) {
            let JobState::Running {
                nodes, started_at, ..
            } = &job.state
            else {
                continue;
            };
            let min = self
                .queue(&job.queue)
                .map_or(Duration::ZERO, |q| q.min_runtime);
            let until = *started_at + min;
            if until > self.now {
                protected_until = Some(protected_until.map_or(until, |t| t.min(until)));
                continue;
            }
            let Some(runtime) = job.planning_runtime() else {
                continue;
            };
            let ran = self.now.since(*started_at);
            if runtime.as_millis() <= ran.as_millis() {
                // Past its estimate: nothing says how much is left.
                continue;
            }
            let remaining = Duration::from_millis(runtime.as_millis() - ran.as_millis());
            let mut cloud_rate = 0.0;
            let mut idle_tail = 0.0;
            let mut from_pool = None;
            let mut seen: Vec<&str> = Vec::new();
            for n in nodes {
                let Some(inst) = by_node.get(n.as_str()) else {
                    continue;
                };
                from_pool = Some(inst.pool.as_str());
                cloud_rate += inst.hourly_price * f64::from(job.gpus_per_replica)
                    / f64::from(inst.gpus.max(1));
                if seen.contains(&n.as_str()) {
                    continue;
                }
                seen.push(n.as_str());
                let own = nodes.iter().filter(|m| *m == n).count() as u32;
                if replicas_on.get(n.as_str()).copied().unwrap_or(0) == own {
                    let idle = self
                        .pools
                        .item(&inst.pool)
                        .map_or(Duration::ZERO, |p| p.idle_timeout);
                    idle_tail += inst.hourly_price * idle.as_secs_f64() / 3600.0;
                }
            }
            let Some(from_pool) = from_pool else {
                continue;
            };
            if cloud_rate <= 0.0 {
                continue;
            }
            out.push(Candidate {
                job,
                started_at: *started_at,
                remaining,
                cloud_rate,
                idle_tail,
                from_pool,
            });
        }
        (out, protected_until)
    }
}
