//! Steps 4 and 5 of a cycle: whether and where each waiting job bursts (triggers, data rules,
//! budgets, pool limits, the cheapest fitting offering), and scale-down of idle cloud nodes.

use super::*;

impl<'a> Cycle<'a> {
    /// Step 4 for one job.
    pub(super) fn burst(&mut self, w: Waiting) {
        let snap = self.snap;
        let job = &snap.jobs[w.job];
        let waited = self.waited(job);

        let confidential = self.confidential_dataset(job);
        let confidential_allowed = w
            .effects()
            .allowed_classifications
            .iter()
            .find(|r| r.value == Classification::Confidential)
            .map(|r| r.rule.clone());
        let forced = match &w.private_block {
            Some((Reason::CloudOnlyPlacement, _)) => Some((Reason::CloudOnlyPlacement, None)),
            Some((Reason::RequiredByPolicy, rule)) => {
                Some((Reason::RequiredByPolicy, rule.clone()))
            }
            _ => None,
        };
        let blocker = self.cloud_blocker(job, w.effects());
        if let Some((reason, message, rule)) = blocker {
            if w.never_private || forced.is_some() {
                let message = self.say(|| match (&forced, &w.topology_unfit) {
                    (None, Some(topology)) => {
                        format!("{topology} {message} It cannot run anywhere.")
                    }
                    (Some(_), _) => {
                        format!("{message} It cannot run anywhere: it may not run privately.")
                    }
                    (None, None) => format!(
                        "{message} It cannot run anywhere: no private node could ever hold it."
                    ),
                });
                self.decide_job(job, Outcome::Reject, Reason::NeverFits, message, rule);
            } else {
                self.wait(job, &w, reason, message, rule, None);
            }
            return;
        }

        // When to burst.
        let Allowance {
            mode,
            max_wait,
            threshold,
            reason: threshold_reason,
            rule: threshold_rule,
        } = self.allowance(job, w.effects());
        let runtime = job.planning_runtime();
        let deadline_risk = match (job.deadline, runtime) {
            (Some(deadline), Some(rt)) => match w.private_estimate {
                Some(start) => start + rt > deadline,
                None => true,
            },
            _ => false,
        };
        let trigger: Option<(Reason, Option<String>)> = if let Some(f) = forced {
            Some(f)
        } else if w.never_private {
            Some((Reason::NoPrivateCapacity, None))
        } else if deadline_risk {
            Some((Reason::DeadlineAtRisk, None))
        } else if self.settings.order == QueueOrder::Conservative
            && waited < threshold
            && w.private_estimate
                .is_some_and(|t| t > job.queued_at + threshold)
        {
            Some((Reason::PrivateStartTooLate, threshold_rule))
        } else if waited >= threshold {
            Some((threshold_reason, threshold_rule))
        } else {
            None
        };
        let Some((reason, rule)) = trigger else {
            let burst_at = job.queued_at + threshold;
            self.wake(burst_at);
            if let (Some(deadline), Some(rt)) = (job.deadline, runtime) {
                self.wake(deadline - rt);
            }
            let message = self.say(|| match w.private_estimate {
                Some(t) => format!(
                    "Waiting for private GPUs, expected in {}; may burst after {threshold} of waiting.",
                    t.since(self.now)
                ),
                None => format!(
                    "Waiting for private GPUs; may burst after {threshold} of waiting ({} so far).",
                    waited
                ),
            });
            let est = w
                .private_estimate
                .map(|t| t.since(self.now))
                .unwrap_or(burst_at.since(self.now))
                .min(burst_at.since(self.now));
            self.wait(job, &w, Reason::WaitingForPrivate, message, None, Some(est));
            return;
        };
        let soon_applies = self.settings.runtime_aware
            && !matches!(
                reason,
                Reason::CloudOnlyPlacement | Reason::RequiredByPolicy | Reason::DeadlineAtRisk
            );
        if soon_applies
            && let Some(t) = w.private_estimate
            && t > self.now + self.settings.cloud_ready_delay
        {
            // Not soon yet; it becomes so as the clock nears the planned start.
            self.stable_until(t - self.settings.cloud_ready_delay);
        }
        if soon_applies
            && let Some(t) = w.private_estimate
            && t <= self.now + self.settings.cloud_ready_delay
        {
            let message = self.say(|| {
                format!(
                    "Private GPUs are expected to free up in {}, sooner than a cloud node could be ready ({}).",
                    t.since(self.now),
                    self.settings.cloud_ready_delay
                )
            });
            self.wake(t);
            self.wait(
                job,
                &w,
                Reason::PrivateStartSoon,
                message,
                None,
                Some(t.since(self.now)),
            );
            return;
        }
        self.place_in_cloud(
            job,
            (mode == WaitMode::CostAware && reason == Reason::MaxWaitExceeded).then_some(max_wait),
            &w,
            reason,
            rule,
            confidential
                .is_some()
                .then_some(confidential_allowed)
                .flatten(),
        );
    }

    pub(super) fn wake(&mut self, t: Time) {
        wake(&mut self.plan, self.now, t);
    }

    /// The plan may change at `t` with nothing else happening, but calls for no wake-up
    /// (`Plan::stable_until`); `t <= now`: it may change at any time.
    pub(super) fn stable_until(&mut self, t: Time) {
        stable_until(&mut self.plan, self.now, t);
    }

    pub(super) fn wait(
        &mut self,
        job: &Job,
        w: &Waiting,
        reason: Reason,
        message: String,
        rule: Option<String>,
        est: Option<Duration>,
    ) {
        if !self.settings.wait_decisions {
            return;
        }
        // A gang waiting for a topology domain: that is why it waits, whatever else holds it.
        let (reason, message) = match &w.topology_unfit {
            Some(why) => (Reason::TopologyUnfit, format!("{why} {message}")),
            None => (reason, message),
        };
        self.plan.decisions.push(Decision {
            estimated_wait: est,
            ..Decision::new(&job.id, Outcome::Wait, reason, message, rule)
        });
    }

    /// Whether the queue may buy offering `i`: its pool is a cloud pool and in the queue's
    /// `burst.pools` (when it names any).
    pub(super) fn offering_allowed(&self, queue: &Queue, i: usize) -> bool {
        self.offering_pool(i).is_some()
            && (queue.burst.pools.is_empty()
                || queue
                    .burst
                    .pools
                    .iter()
                    .any(|p| *p == self.snap.offerings[i].pool))
    }

    pub(super) fn place_in_cloud(
        &mut self,
        job: &'a Job,
        cost_aware: Option<Duration>,
        w: &Waiting,
        trigger: Reason,
        trigger_rule: Option<String>,
        data_rule: Option<String>,
    ) {
        let snap = self.snap;
        let queue = self
            .queue(&job.queue)
            .expect("a job's queue exists: `invalid` rejected the others");
        // Sentences only when decisions are explained (the simulator reads none).
        let trigger_text = self.say(|| match trigger {
            Reason::MaxWaitExceeded => {
                format!("waited {} (past its maximum wait)", self.waited(job))
            }
            Reason::ComputeWaitExceeded => {
                format!("waited {} (past its wait budget)", self.waited(job))
            }
            Reason::DeadlineAtRisk => "would miss its deadline on private capacity".to_string(),
            Reason::PrivateStartTooLate => format!(
                "is planned to start privately later than it may wait (after {} of waiting)",
                self.waited(job)
            ),
            Reason::CloudOnlyPlacement => "asks for cloud capacity only".to_string(),
            Reason::RequiredByPolicy => "a rule requires the cloud".to_string(),
            Reason::NoPrivateCapacity => "fits on no private node".to_string(),
            other => other.to_string(),
        });
        let rule = trigger_rule.or(data_rule);

        // Other clusters first, in the queue's order, unless the job or a rule wants the cloud.
        let wants_cloud = job.placement == Placement::CloudOnly
            || w.effects()
                .require
                .as_ref()
                .is_some_and(|r| r.value == Environment::Cloud);
        let remote_excluded = match self.remote_first(job, w, wants_cloud, &trigger_text, &rule) {
            remote::RemoteFirst::Decided => return,
            remote::RemoteFirst::Cloud(excluded) => excluded,
        };

        // Idle cloud nodes first: no launch, no boot delay.
        let idle: Vec<usize> = self
            .cloud_nodes
            .iter()
            .copied()
            .filter(|&n| self.cloud_free[n] >= job.gpus_per_replica && !self.cloud_claimed[n])
            // `cloud_nodes` are all in cloud pools: only the queue's own list remains to check.
            .filter(|&n| {
                queue.burst.pools.is_empty()
                    || queue.burst.pools.iter().any(|p| *p == snap.nodes[n].pool)
            })
            .collect();
        if !idle.is_empty()
            && let Some(nodes) = self.fit_cloud(job, &idle)
        {
            let pool = snap.nodes[nodes[0]].pool.clone();
            let message = self.say(|| {
                format!("The job {trigger_text}; idle cloud nodes in pool {pool} fit the gang.")
            });
            self.start(
                job,
                Environment::Cloud,
                &pool,
                nodes,
                Reason::FitsExistingCloudNodes,
                message,
                rule,
                None,
            );
            return;
        }

        match self.cheapest_offering(job, queue, w.effects()) {
            Ok(choice) => {
                if let Some(max_wait) = cost_aware {
                    let reference = self.cheapest_gpu_hour(queue);
                    let per_gpu = choice.hourly / job.total_gpus().max(1) as f64;
                    let ratio = if reference > 0.0 {
                        (per_gpu / reference).max(1.0)
                    } else {
                        1.0
                    };
                    let extended =
                        Duration::from_millis((max_wait.as_millis() as f64 * ratio) as u64);
                    if self.waited(job) < extended {
                        let burst_at = job.queued_at + extended;
                        self.wake(burst_at);
                        let message = self.say(|| {
                            format!(
                                "Waiting for private GPUs: its cheapest cloud capacity costs ${per_gpu:.2} per GPU-hour, {ratio:.1}x the cheapest offering, so it waits up to {extended} before bursting."
                            )
                        });
                        self.wait(
                            job,
                            w,
                            Reason::WaitingForPrivate,
                            message,
                            None,
                            Some(burst_at.since(self.now)),
                        );
                        return;
                    }
                }
                let count = choice.count;
                let offering = choice.offering.clone();
                let message = self.say(|| {
                    let egress_text = if choice.egress > 0.0 {
                        format!(
                            ", ${:.2} of it moving its data to {}",
                            choice.egress, offering.region
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "The job {trigger_text}; launching {count} x {} ({}, {}) at ${:.2}/h, the cheapest fitting offering (expected ${:.2} in total{egress_text}).",
                        offering.instance_type,
                        offering.capacity_type,
                        offering.zone,
                        choice.hourly,
                        choice.expected_total
                    )
                });
                // (An offering of no known pool is never priced.)
                if let Some(p) = self.pools.get(&offering.pool) {
                    let usage = &mut self.pool_usage[p];
                    usage.0 += count;
                    usage.1 += count * offering.gpus_per_instance;
                    usage.2 += choice.hourly;
                }
                if let Some(state) = self.state_mut(&job.queue) {
                    state.hourly_usd += choice.hourly;
                    state.spent_this_month_usd += choice.expected_total;
                }
                self.plan.launches.push(Launch {
                    job: job.id.clone(),
                    queue: job.queue.clone(),
                    need: job.need_key(),
                    offering: offering.clone(),
                    count,
                    together: count > 1 || job.topology.is_some(),
                });
                self.plan.decisions.push(Decision {
                    estimated_wait: Some(self.settings.cloud_ready_delay),
                    estimated_hourly_cost: Some(choice.hourly),
                    estimated_total_cost: Some(choice.expected_total),
                    estimated_egress_usd: Some(choice.egress),
                    offering: Some(Box::new(offering)),
                    ..Decision::new(
                        &job.id,
                        Outcome::StartCloud,
                        trigger,
                        message,
                        rule.or(choice.rule),
                    )
                });
            }
            Err(cloud_excluded) => {
                // Of what kept it from the clusters and from the cloud, the more telling.
                let (reason, message, rule) = match remote_excluded {
                    Some(r) if telling(r.0) < telling(cloud_excluded.0) => {
                        (r.0, self.say(|| format!("{}.", r.1)), r.2)
                    }
                    _ => cloud_excluded,
                };
                if w.never_private
                    && reason == Reason::NoFittingOffering
                    && !self.could_ever_fit_cloud(job, queue)
                    && !(self.has_remote_pools
                        && !wants_cloud
                        && self.could_ever_fit_remote(job, queue))
                {
                    let message = match &w.topology_unfit {
                        Some(topology) => format!(
                            "{topology} No cloud offering could ever hold one replica of {} GPUs{}.",
                            job.gpus_per_replica,
                            models_text(job)
                        ),
                        None => format!(
                            "No private node and no cloud offering could ever hold one replica of {} GPUs{}.",
                            job.gpus_per_replica,
                            models_text(job)
                        ),
                    };
                    self.decide_job(job, Outcome::Reject, Reason::NeverFits, message, None);
                } else {
                    let message =
                        self.say(|| format!("The job {trigger_text}, but cannot burst: {message}"));
                    self.wait(job, w, reason, message, rule, None);
                }
            }
        }
    }

    /// The lowest on-demand price of one GPU-hour among the offerings a queue may use now
    /// (on-demand, so that spot prices, which only some jobs may use, do not stretch every
    /// other job's wait).
    /// The cheapest on-demand GPU-hour the queue can buy now (computed once per cycle).
    pub(super) fn cheapest_gpu_hour(&mut self, queue: &'a Queue) -> f64 {
        if let Some(&v) = self.gpu_hour.get(queue.name.as_str()) {
            return v;
        }
        let v = self
            .snap
            .offerings
            .iter()
            .enumerate()
            .filter(|(_, o)| o.gpus > 0 && o.capacity_type == CapacityType::OnDemand)
            .filter(|&(i, _)| self.offering_allowed(queue, i))
            .filter(|(_, o)| o.unavailable_until.is_none_or(|t| t <= self.now))
            .map(|(_, o)| o.hourly_price / o.gpus as f64)
            .fold(f64::INFINITY, f64::min);
        self.gpu_hour.insert(queue.name.as_str(), v);
        v
    }

    pub(super) fn could_ever_fit_cloud(&self, job: &Job, queue: &Queue) -> bool {
        self.offerings_for(job)
            .iter()
            .any(|&i| self.offering_allowed(queue, i))
    }

    /// The offerings whose instances hold one replica of `job` (enough GPUs, a model it
    /// accepts; for a gang with a topology, not a type its EFA pool cannot give EFA), in
    /// snapshot order: found once per gang shape and cycle, so that pricing a job looks only
    /// at those.
    pub(super) fn offerings_for(&self, job: &Job) -> std::sync::Arc<[usize]> {
        let mut memo = self.offerings.borrow_mut();
        let g = job.gpus_per_replica;
        let bound = job.topology.is_some();
        if let Some((_, found)) = memo.shapes.iter().find(|((mg, mb, models, req), _)| {
            *mg == g && *mb == bound && job.same_accepts(models, req)
        }) {
            return found.clone();
        }
        let found: std::sync::Arc<[usize]> = self
            .snap
            .offerings
            .iter()
            .enumerate()
            .filter(|(_, o)| {
                o.gpus >= g
                    && !(bound && o.efa == crate::Efa::Unsupported)
                    && job.accepts(Some(&o.gpu_model), &o.facts)
            })
            .map(|(i, _)| i)
            .collect();
        memo.shapes.push((
            (g, bound, job.gpu_models.clone(), job.requirements.clone()),
            found.clone(),
        ));
        found
    }

    /// The cheapest offering for the whole gang within rules, limits and budget.
    pub(super) fn cheapest_offering(
        &self,
        job: &'a Job,
        queue: &Queue,
        effects: &Effects,
    ) -> Result<Choice, (Reason, String, Option<String>)> {
        if let Some(why) = &job.cloud_closed {
            return Err((Reason::RequirementsUnmet, self.say(|| why.clone()), None));
        }
        let snap = self.snap;
        let runtime = job
            .planning_runtime()
            .unwrap_or(self.settings.default_runtime);
        let hours = runtime.as_secs_f64() / 3600.0;
        let state = self.state(&job.queue).cloned().unwrap_or_default();
        let ctx_datasets = self.datasets_of(job);
        let ctx = PolicyContext {
            job,
            queue,
            queue_state: &state,
            datasets: ctx_datasets.clone(),
            waited: self.waited(job),
            now: self.now,
        };
        let spot_by_rule = effects
            .capacity_types
            .as_ref()
            .is_some_and(|r| r.value.contains(&CapacityType::Spot));
        let cap = hourly_cap(job, effects);

        // (offering, instances, USD/h, expected USD, egress USD) of the cheapest so far.
        let mut best: Option<(usize, u32, f64, f64, f64)> = None;
        let mut excluded: Vec<(Reason, String, Option<String>)> = Vec::new();
        // One example per reason, written only when decisions are explained.
        macro_rules! exclude {
            ($reason:expr, $rule:expr, $($fmt:tt)*) => {
                if !excluded.iter().any(|(r, _, _)| *r == $reason) {
                    let message = if self.settings.explain { format!($($fmt)*) } else { String::new() };
                    excluded.push(($reason, message, $rule));
                }
            };
        }
        for &i in self.offerings_for(job).iter() {
            let o = &snap.offerings[i];
            if !self.offering_allowed(queue, i) {
                continue;
            }
            if o.unavailable_until.is_some_and(|t| t > self.now) {
                continue;
            }
            let Some(pool) = self.offering_pool(i) else {
                continue;
            };
            let pool_types = match &pool.kind {
                PoolKind::Cloud { capacity_types, .. } => capacity_types.as_slice(),
                PoolKind::Private { .. } | PoolKind::Cluster { .. } => &[],
            };
            let allowed =
                |types: &[CapacityType]| types.is_empty() || types.contains(&o.capacity_type);
            if !allowed(&queue.burst.capacity_types) || !allowed(pool_types) {
                continue;
            }
            if let Some(r) = &effects.capacity_types
                && !r.value.contains(&o.capacity_type)
            {
                continue;
            }
            if o.capacity_type == CapacityType::Spot && !job.restartable && !spot_by_rule {
                continue;
            }
            if !effects
                .instance_types
                .iter()
                .all(|r| r.value.iter().any(|p| glob_match(p, &o.instance_type)))
            {
                continue;
            }
            if let Some(r) = &effects.regions
                && !r.value.contains(&o.region)
            {
                continue;
            }
            if self.policy.filters_offerings()
                && let Err(rule) = self.policy.offering_allowed(&ctx, o)
            {
                exclude!(
                    Reason::NoFittingOffering,
                    Some(rule.clone()),
                    "rule {rule} excludes {}",
                    o.instance_type
                );
                continue;
            }
            let per_instance = o.gpus / job.gpus_per_replica;
            let count = job.replicas.div_ceil(per_instance);
            let hourly = o.hourly_price * count as f64;
            if let Some(cap) = cap
                && hourly > cap + 1e-9
            {
                let rule = cap_rule(effects, cap);
                exclude!(
                    Reason::OverCostCap,
                    rule,
                    "{} x {} costs ${hourly:.2}/h, over the cap of ${cap:.2}/h",
                    count,
                    o.instance_type
                );
                continue;
            }
            let (nodes, gpus, pool_hourly) = self
                .pools
                .get(&o.pool)
                .map_or((0, 0, 0.0), |p| self.pool_usage[p]);
            if pool.max_nodes.is_some_and(|m| nodes + count > m)
                || pool.max_gpus.is_some_and(|m| gpus + count * o.gpus > m)
                || pool
                    .max_hourly_usd
                    .is_some_and(|m| pool_hourly + hourly > m + 1e-9)
            {
                exclude!(
                    Reason::PoolLimitReached,
                    None,
                    "pool {} is at its limits",
                    o.pool
                );
                continue;
            }
            let egress: f64 = ctx_datasets
                .iter()
                .filter(|d| !d.cloud_regions.contains(&o.region))
                .map(|d| d.size_gib * d.egress_usd_per_gib)
                .sum();
            let expected_total = hourly * hours + egress;
            if over_budget(queue, &state, hourly, expected_total) {
                exclude!(
                    Reason::BudgetExhausted,
                    None,
                    "{count} x {} (${hourly:.2}/h, ${expected_total:.2} expected) would exceed queue {}'s budget",
                    o.instance_type,
                    queue.name
                );
                continue;
            }
            // Compared on the offering's own fields; its names are copied only for the one
            // chosen.
            let better = match best {
                None => true,
                Some((b, _, b_hourly, b_total, _)) => {
                    let b = &snap.offerings[b];
                    (
                        expected_total,
                        hourly,
                        &o.instance_type,
                        &o.zone,
                        o.capacity_type,
                    )
                        .partial_cmp(&(
                            b_total,
                            b_hourly,
                            &b.instance_type,
                            &b.zone,
                            b.capacity_type,
                        ))
                        == Some(std::cmp::Ordering::Less)
                }
            };
            if better {
                best = Some((i, count, hourly, expected_total, egress));
            }
        }
        if let Some((i, count, hourly, expected_total, egress)) = best {
            let o = &snap.offerings[i];
            return Ok(Choice {
                offering: OfferingChoice {
                    pool: o.pool.clone(),
                    instance_type: o.instance_type.clone(),
                    capacity_type: o.capacity_type,
                    region: o.region.clone(),
                    zone: o.zone.clone(),
                    hourly_price: o.hourly_price,
                    gpus_per_instance: o.gpus,
                },
                count,
                hourly,
                expected_total,
                egress,
                rule: effects.instance_types.first().map(|r| r.rule.clone()),
            });
        }
        // Explain the most telling exclusion: budget, then limits, then caps, then rules.
        for reason in [
            Reason::BudgetExhausted,
            Reason::PoolLimitReached,
            Reason::OverCostCap,
            Reason::NoFittingOffering,
        ] {
            if let Some((r, m, rule)) = excluded.iter().find(|(r, _, _)| *r == reason) {
                return Err((*r, self.say(|| format!("{m}.")), rule.clone()));
            }
        }
        Err((
            Reason::NoFittingOffering,
            self.say(|| {
                format!(
                    "no available offering fits {} replica(s) of {} GPUs{} within the queue's pools and capacity types.",
                    job.replicas,
                    job.gpus_per_replica,
                    models_text(job)
                )
            }),
            None,
        ))
    }

    /// Step 5.
    pub(super) fn scale_down(&mut self) {
        let (claimed, pools) = (&self.cloud_claimed, &self.pools);
        scale_down(
            self.snap,
            self.now,
            &mut self.plan,
            |i| claimed[i],
            |name| pools.item(name),
        );
    }
}

/// The lowest of the job's and the rules' hourly caps, if any.
pub(super) fn hourly_cap(job: &Job, effects: &Effects) -> Option<f64> {
    [
        job.max_hourly_cost,
        effects.max_hourly_cost.as_ref().map(|r| r.value),
    ]
    .into_iter()
    .flatten()
    .reduce(f64::min)
}

/// The rule whose `maxHourlyCost` is `cap`, when a rule's (not the job's) is the lowest.
pub(super) fn cap_rule(effects: &Effects, cap: f64) -> Option<String> {
    effects
        .max_hourly_cost
        .as_ref()
        .filter(|r| (r.value - cap).abs() < 1e-9)
        .map(|r| r.rule.clone())
}

/// Whether `hourly` more (and `expected_total` more this month) takes `queue` past its budget.
pub(super) fn over_budget(
    queue: &Queue,
    state: &QueueState,
    hourly: f64,
    expected_total: f64,
) -> bool {
    queue
        .budget_hourly_usd
        .is_some_and(|b| state.hourly_usd + hourly > b + 1e-9)
        || queue
            .budget_monthly_usd
            .is_some_and(|b| state.spent_this_month_usd + expected_total > b + 1e-9)
}

/// How telling an exclusion is, most first: budget, limits, caps, rules, no fit.
fn telling(reason: Reason) -> u8 {
    match reason {
        Reason::BudgetExhausted => 0,
        Reason::PoolLimitReached => 1,
        Reason::OverCostCap => 2,
        Reason::ForbiddenByPolicy => 3,
        // Its own pods keep it from every cluster pool, whatever their room.
        Reason::NotPortable => 4,
        _ => 5,
    }
}

/// Asks for a wake-up at `t` (if later than `now`); the plan holds until then.
pub(super) fn wake(plan: &mut Plan, now: Time, t: Time) {
    if t > now {
        plan.next_wake = Some(plan.next_wake.map_or(t, |w| w.min(t)));
    }
    stable_until(plan, now, t);
}

/// See [`Cycle::stable_until`].
pub(super) fn stable_until(plan: &mut Plan, now: Time, t: Time) {
    let t = t.max(now);
    plan.stable_until = Some(plan.stable_until.map_or(t, |u| u.min(t)));
}

/// Step 5: terminates the cloud nodes idle past their pool's `idleTimeout` (not `claimed` by
/// a job of this cycle), and wakes when the next one will be.
pub(super) fn scale_down<'a>(
    snap: &'a Snapshot,
    now: Time,
    plan: &mut Plan,
    claimed: impl Fn(usize) -> bool,
    pool_of: impl Fn(&str) -> Option<&'a crate::Pool>,
) {
    for (i, n) in snap.nodes.iter().enumerate() {
        // The node's own fields first: most nodes are busy, and the pool is a lookup.
        let Some(idle_since) = n.idle_since else {
            continue;
        };
        if n.free_gpus < n.gpus || claimed(i) {
            continue;
        }
        let Some(pool) = pool_of(n.pool.as_str()) else {
            continue;
        };
        if !pool.is_cloud() {
            continue;
        }
        let idle_for = now.since(idle_since);
        if idle_for >= pool.idle_timeout {
            plan.terminations.push(Termination {
                pool: pool.name.clone(),
                node: n.name.clone(),
                instance_id: n.instance_id.clone(),
                idle_for,
            });
        } else {
            wake(plan, now, idle_since + pool.idle_timeout);
        }
    }
}

pub(super) struct Choice {
    offering: OfferingChoice,
    count: u32,
    hourly: f64,
    expected_total: f64,
    /// Data egress to the offering's region, USD (in `expected_total`).
    egress: f64,
    rule: Option<String>,
}
