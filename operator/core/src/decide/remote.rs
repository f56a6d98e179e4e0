//! Step 4, first half: a waiting job that may leave home takes free GPUs of another cluster
//! (`cluster` pools) before any cloud capacity, in its queue's order of such pools.
//!
//! A cluster pool is capacity that exists already, like an idle cloud node, with a price per
//! GPU-hour set by the platform team. The same gates as a burst apply (placement, data,
//! rules, the queue's `burst.enabled` and wait); then, pool by pool in order: a rule's
//! `regions` must name the pool's `location`, the job's and the rules' hourly caps, the pool's
//! `maxGpus` and `maxHourlyUSD`, the queue's budget (egress included), and the whole gang on
//! the pool's free GPUs.

use super::cloud::{cap_rule, hourly_cap, over_budget};
use super::*;

/// What kept a job from the cluster pools: the most telling exclusion, for its decision.
pub(super) type Excluded = (Reason, String, Option<String>);

/// What [`Cycle::remote_first`] did.
pub(super) enum RemoteFirst {
    /// The job's decision is made (started in another cluster, waits, or can never run).
    Decided,
    /// The cloud is next; with what excluded the clusters, if anything did.
    Cloud(Option<Excluded>),
}

/// The cluster pools of `pools` (indexes) in the order a queue that lists no pools tries
/// them: cheapest GPU-hour first, then by name.
pub fn cluster_pools_by_price(pools: &[crate::Pool]) -> Vec<usize> {
    let price = |p: usize| match pools[p].kind {
        PoolKind::Cluster {
            gpu_cost_per_hour, ..
        } => gpu_cost_per_hour,
        _ => 0.0,
    };
    let mut all: Vec<usize> = (0..pools.len())
        .filter(|&p| pools[p].is_cluster())
        .collect();
    all.sort_by(|&a, &b| {
        price(a)
            .total_cmp(&price(b))
            .then_with(|| pools[a].name.cmp(&pools[b].name))
    });
    all
}

impl<'a> Cycle<'a> {
    /// Places `job` in another cluster when it may go there; else, when rules keep it from
    /// the cloud, decides that it waits (or can never run).
    pub(super) fn remote_first(
        &mut self,
        job: &'a Job,
        w: &Waiting,
        wants_cloud: bool,
        trigger_text: &str,
        rule: &Option<String>,
    ) -> RemoteFirst {
        let queue = self
            .queue(&job.queue)
            .expect("a job's queue exists: `invalid` rejected the others");
        let mut remote_excluded = None;
        if self.has_remote_pools && !wants_cloud {
            match self.place_remote(job, w, trigger_text, rule.clone()) {
                Ok(()) => return RemoteFirst::Decided,
                Err(e) => remote_excluded = e,
            }
        }
        let required_remote = w
            .effects()
            .require
            .as_ref()
            .filter(|r| r.value == Environment::Remote);
        let Some((cloud_rule, why)) = w
            .effects()
            .forbids(Environment::Cloud)
            .map(|r| (r.to_string(), Reason::ForbiddenByPolicy))
            .or(required_remote.map(|r| (r.rule.clone(), Reason::RequiredByPolicy)))
        else {
            return RemoteFirst::Cloud(remote_excluded);
        };
        // Only other clusters are open to it (`cloud_blocker` let it through for them).
        if w.never_private && !self.could_ever_fit_remote(job, queue) {
            let message = self.say(|| format!("No private node and no node of the queue's cluster pools could ever hold one replica of {} GPUs{}, and rule {cloud_rule} keeps it from the cloud.", job.gpus_per_replica, models_text(job)));
            self.decide_job(
                job,
                Outcome::Reject,
                Reason::NeverFits,
                message,
                Some(cloud_rule),
            );
            return RemoteFirst::Decided;
        }
        let (reason, message, rule) = match remote_excluded {
            Some((reason, m, rule)) => (
                reason,
                self.say(|| format!("The job {trigger_text}, but rule {cloud_rule} keeps it from the cloud and no other cluster takes it: {m}.")),
                rule,
            ),
            None => (
                why,
                self.say(|| format!("The job {trigger_text}, but rule {cloud_rule} keeps it from the cloud and no cluster pool of the queue has room for the whole gang.")),
                Some(cloud_rule),
            ),
        };
        self.wait(job, w, reason, message, rule, None);
        RemoteFirst::Decided
    }

    /// The cluster pools `queue` may use, in the order it tries them (indexes into
    /// `snapshot.pools`): those its `burst.pools` names, in that order; with an empty list,
    /// every cluster pool, cheapest first, then by name.
    pub(super) fn remote_pools(&self, queue: &Queue) -> Vec<usize> {
        let snap = self.snap;
        if queue.burst.pools.is_empty() {
            cluster_pools_by_price(&snap.pools)
        } else {
            let mut listed = Vec::new();
            for name in &queue.burst.pools {
                if let Some(p) = self.pools.get(name)
                    && snap.pools[p].is_cluster()
                    && !listed.contains(&p)
                {
                    listed.push(p);
                }
            }
            listed
        }
    }

    /// Places `job` on the first of its queue's cluster pools whose free GPUs hold the whole
    /// gang within rules, caps, limits and budget. `Ok(())` when it started there; else what
    /// excluded the pools (`None`: no pool had room, or the queue may use none).
    pub(super) fn place_remote(
        &mut self,
        job: &'a Job,
        w: &Waiting,
        trigger_text: &str,
        rule: Option<String>,
    ) -> Result<(), Option<Excluded>> {
        let snap = self.snap;
        let queue = self
            .queue(&job.queue)
            .expect("a job's queue exists: `invalid` rejected the others");
        let effects = w.effects();
        if let Some(rule) = effects.forbids(Environment::Remote) {
            return Err(Some((
                Reason::ForbiddenByPolicy,
                self.say(|| format!("rule {rule} forbids other clusters for this job")),
                Some(rule.to_string()),
            )));
        }
        if let Some(why) = &job.not_portable {
            return Err(Some((
                Reason::NotPortable,
                self.say(|| format!("its pods cannot run in another cluster: {why}")),
                None,
            )));
        }
        let hours = job
            .planning_runtime()
            .unwrap_or(self.settings.default_runtime)
            .as_secs_f64()
            / 3600.0;
        let cap = hourly_cap(job, effects);
        let mut excluded: Vec<Excluded> = Vec::new();
        let mut exclude =
            |cycle: &Self, reason: Reason, rule: Option<String>, m: &dyn Fn() -> String| {
                if !excluded.iter().any(|(r, _, _)| *r == reason) {
                    excluded.push((reason, cycle.say(m), rule));
                }
            };
        for p in self.remote_pools(queue) {
            let pool = &snap.pools[p];
            let PoolKind::Cluster {
                gpu_cost_per_hour,
                location,
            } = &pool.kind
            else {
                continue;
            };
            if let Some(why) = pool
                .refuses_copies
                .as_ref()
                .filter(|_| job.kind != "GpuJob")
            {
                exclude(self, Reason::NotPortable, None, &|| {
                    format!("pool {} takes no copy of a {}: {why}", pool.name, job.kind)
                });
                continue;
            }
            if let Some(r) = &effects.regions
                && !location.as_ref().is_some_and(|l| r.value.contains(l))
            {
                exclude(
                    self,
                    Reason::ForbiddenByPolicy,
                    Some(r.rule.clone()),
                    &|| {
                        format!(
                            "rule {} allows only the locations {:?}, and pool {} is in {}",
                            r.rule,
                            r.value,
                            pool.name,
                            location.as_deref().unwrap_or("no stated location")
                        )
                    },
                );
                continue;
            }
            let gpus = job.total_gpus();
            let hourly = gpu_cost_per_hour * gpus as f64;
            if let Some(cap) = cap
                && hourly > cap + 1e-9
            {
                let rule = cap_rule(effects, cap);
                exclude(self, Reason::OverCostCap, rule, &|| {
                    format!(
                        "{gpus} GPUs of pool {} cost ${hourly:.2}/h, over the cap of ${cap:.2}/h",
                        pool.name
                    )
                });
                continue;
            }
            let (_, used, pool_hourly) = self.pool_usage[p];
            if pool.max_gpus.is_some_and(|m| used + gpus > m)
                || pool
                    .max_hourly_usd
                    .is_some_and(|m| pool_hourly + hourly > m + 1e-9)
            {
                exclude(self, Reason::PoolLimitReached, None, &|| {
                    format!("pool {} is at its limits", pool.name)
                });
                continue;
            }
            let egress = self.egress_to(job, &pool.name);
            let expected_total = hourly * hours + egress;
            let state = self.state(&job.queue).cloned().unwrap_or_default();
            if over_budget(queue, &state, hourly, expected_total) {
                exclude(self, Reason::BudgetExhausted, None, &|| {
                    format!(
                        "{gpus} GPUs of pool {} (${hourly:.2}/h, ${expected_total:.2} expected) would exceed queue {}'s budget",
                        pool.name, queue.name
                    )
                });
                continue;
            }
            let candidates: Vec<usize> = self
                .remote_nodes
                .iter()
                .copied()
                .filter(|&n| {
                    self.cloud_free[n] >= job.gpus_per_replica && snap.nodes[n].pool == pool.name
                })
                .collect();
            let Some(model) = candidates
                .iter()
                .find_map(|&n| {
                    snap.nodes[n]
                        .gpu_model
                        .as_ref()
                        .filter(|m| job.accepts_node(&snap.nodes[n]) && job.accepts_model(Some(m)))
                })
                .cloned()
                .or_else(|| {
                    job.gpu_models
                        .is_empty()
                        .then(|| crate::GpuModel::normalize(""))
                })
            else {
                continue;
            };
            if self.policy.filters_offerings()
                && let Err(rule) = self.remote_filter(job, queue, pool, model, location)
            {
                exclude(self, Reason::ForbiddenByPolicy, Some(rule.clone()), &|| {
                    format!("rule {rule} excludes pool {}", pool.name)
                });
                continue;
            }
            let Some(nodes) = self.fit_cloud(job, &candidates) else {
                continue;
            };
            let name = pool.name.clone();
            let message = self.say(|| {
                let at = location
                    .as_deref()
                    .map(|l| format!(" in {l}"))
                    .unwrap_or_default();
                format!(
                    "The job {trigger_text}; pool {name} (another cluster{at}) has free GPUs for the whole gang at ${gpu_cost_per_hour:.2} per GPU-hour (${hourly:.2}/h), the first of the queue's cluster pools that fits."
                )
            });
            let usage = &mut self.pool_usage[p];
            usage.1 += gpus;
            usage.2 += hourly;
            if let Some(state) = self.state_mut(&job.queue) {
                state.hourly_usd += hourly;
                state.spent_this_month_usd += expected_total;
            }
            self.start(
                job,
                Environment::Remote,
                &name,
                nodes,
                Reason::RemoteCapacity,
                message,
                rule,
                Some(hourly),
            );
            if let Some(d) = self.plan.decisions.last_mut() {
                d.estimated_total_cost = Some(expected_total);
            }
            return Ok(());
        }
        // The most telling exclusion: budget, then limits, then caps, then rules, then a pool
        // that takes no copy of this kind.
        for reason in [
            Reason::BudgetExhausted,
            Reason::PoolLimitReached,
            Reason::OverCostCap,
            Reason::ForbiddenByPolicy,
            Reason::NotPortable,
        ] {
            if let Some(e) = excluded.iter().find(|(r, _, _)| *r == reason) {
                return Err(Some(e.clone()));
            }
        }
        Err(None)
    }

    /// The rules' offering filters on cluster pool `pool`, seen as an offering of one
    /// replica's GPUs there (`poolKind` `cluster`, no instance type or zone, `region` its
    /// location).
    fn remote_filter(
        &self,
        job: &'a Job,
        queue: &'a Queue,
        pool: &crate::Pool,
        gpu_model: crate::GpuModel,
        location: &Option<String>,
    ) -> Result<(), String> {
        let PoolKind::Cluster {
            gpu_cost_per_hour, ..
        } = pool.kind
        else {
            return Ok(());
        };
        let offering = crate::Offering {
            pool: pool.name.clone(),
            instance_type: String::new(),
            gpu_memory_gib: gpu_model.memory_gib().unwrap_or(0.0),
            gpu_model,
            gpus: job.gpus_per_replica,
            capacity_type: crate::CapacityType::OnDemand,
            region: location.clone().unwrap_or_default(),
            zone: String::new(),
            hourly_price: gpu_cost_per_hour * job.gpus_per_replica as f64,
            unavailable_until: None,
            recent_interruptions: 0,
            efa: Default::default(),
            environment: Environment::Remote,
            facts: crate::Facts::default(),
        };
        let state = self.state(&job.queue).cloned().unwrap_or_default();
        let ctx = PolicyContext {
            job,
            queue,
            queue_state: &state,
            datasets: self.datasets_of(job),
            waited: self.waited(job),
            now: self.now,
        };
        self.policy.offering_allowed(&ctx, &offering)
    }

    /// Whether some cluster pool `queue` may use has a node that could ever hold one replica
    /// of `job` (its GPUs, its model), whatever runs there now.
    pub(super) fn could_ever_fit_remote(&self, job: &Job, queue: &Queue) -> bool {
        let snap = self.snap;
        let pools = self.remote_pools(queue);
        snap.nodes.iter().any(|n| {
            n.gpus >= job.gpus_per_replica
                && job.accepts_node(n)
                && self.pools.get(&n.pool).is_some_and(|p| pools.contains(&p))
        })
    }

    /// What moving the job's data to cloud pool `pool` (to cluster pool `pool`) costs: every
    /// dataset it reads with no cloud copy in the pool's region (no remote copy at the pool's
    /// location).
    pub(super) fn egress_to(&self, job: &Job, pool: &str) -> f64 {
        let Some((place, remote)) = self
            .snap
            .pools
            .iter()
            .find(|p| p.name == pool)
            .and_then(|p| match &p.kind {
                crate::PoolKind::Cloud { region, .. } => Some((Some(region.as_str()), false)),
                crate::PoolKind::Cluster { location, .. } => Some((location.as_deref(), true)),
                crate::PoolKind::Private { .. } => None,
            })
        else {
            return 0.0;
        };
        job.datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()))
            .filter(|d| {
                let copies = if remote {
                    &d.remote_locations
                } else {
                    &d.cloud_regions
                };
                !place.is_some_and(|p| copies.iter().any(|c| c == p))
            })
            .map(|d| d.size_gib * d.egress_usd_per_gib)
            .sum()
    }
}
