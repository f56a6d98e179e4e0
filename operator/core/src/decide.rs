//! `decide`: one scheduling cycle over a snapshot, written as numbered steps.
//!
//! 1. Index the snapshot: free GPUs per node, usage per queue and pool, spend per queue.
//! 2. Jobs whose instances are launching: start them once every instance has joined.
//! 3. Private pass, in weighted fair-share order across queues and priority/arrival order
//!    within a queue: start each gang that fits whole on free private GPUs (best fit). A job
//!    that does not fit gets a reservation (the nodes and the estimated time at which it will
//!    fit); later jobs may backfill only where they do not delay it.
//! 4. Burst pass over the jobs still waiting: a job may go to the cloud only if nothing forbids
//!    it (placement, data classification, queue, rules) and it has waited past its threshold
//!    (fixed or compute-wait), its deadline is at risk, or it can never run privately. It then
//!    takes idle cloud nodes that fit, or the cheapest offering (whole gang, egress included)
//!    within rules, pool limits and the queue's budget.
//! 5. Scale-down: cloud nodes idle past their pool's `idleTimeout` are terminated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::model::{JobState, Packing, QueueOrder, Settings, WaitMode};
use crate::profile::Profile;

mod conservative;
use crate::plan::{Decision, Launch, OfferingChoice, Outcome, Plan, Reason, Start, Termination};
use crate::policy::{Effects, Policy, PolicyContext, QueueState, glob_match};
use crate::{
    CapacityType, Classification, Duration, Environment, Job, Node, Placement, PoolKind, Queue,
    Snapshot, Time,
};

/// FNV-1a: the cycle hashes many short names; SipHash's protection against hash flooding is
/// not needed for names the cycle itself puts in.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A gang's shape for fit memos: GPUs per replica, acceptable models, may use reserved GPUs.
type Shape = (u32, Vec<crate::GpuModel>, bool);

/// Runs one scheduling cycle. Pure: the same snapshot, policy and `now` give the same plan.
pub fn decide(snapshot: &Snapshot, policy: &dyn Policy, now: Time) -> Plan {
    Cycle::new(snapshot, policy, now).run()
}

/// Free GPUs on private nodes, indexed for best-fit lookups.
struct PrivateIndex {
    /// Free GPUs per node (index into `snapshot.nodes`).
    free: Vec<u32>,
    /// GPUs held back for blocked jobs' reservations, per node.
    reserved: Vec<u32>,
    /// (free - reserved, node) for schedulable private nodes with some of it.
    by_effective: BTreeSet<(u32, usize)>,
    /// (free, node) for schedulable private nodes with some.
    by_free: BTreeSet<(u32, usize)>,
    private: Vec<bool>,
}

impl PrivateIndex {
    fn new(nodes: &[Node], private: Vec<bool>) -> PrivateIndex {
        let free: Vec<u32> = nodes.iter().map(|n| n.free_gpus.min(n.gpus)).collect();
        let mut idx = PrivateIndex {
            reserved: vec![0; nodes.len()],
            by_effective: BTreeSet::new(),
            by_free: BTreeSet::new(),
            free,
            private,
        };
        for (i, n) in nodes.iter().enumerate() {
            if idx.private[i] && n.schedulable {
                idx.insert(i);
            } else {
                idx.private[i] = false;
            }
        }
        idx
    }

    fn effective(&self, i: usize) -> u32 {
        self.free[i].saturating_sub(self.reserved[i])
    }

    fn insert(&mut self, i: usize) {
        if self.free[i] > 0 {
            self.by_free.insert((self.free[i], i));
        }
        let e = self.effective(i);
        if e > 0 {
            self.by_effective.insert((e, i));
        }
    }

    fn remove(&mut self, i: usize) {
        self.by_free.remove(&(self.free[i], i));
        self.by_effective.remove(&(self.effective(i), i));
    }

    fn take(&mut self, i: usize, gpus: u32) {
        self.remove(i);
        self.free[i] = self.free[i].saturating_sub(gpus);
        self.insert(i);
    }

    fn reserve(&mut self, i: usize, gpus: u32) {
        self.remove(i);
        self.reserved[i] = self.reserved[i].saturating_add(gpus);
        self.insert(i);
    }

    /// Nodes for a gang, one per replica, or `None` if the whole gang does not fit. Best fit:
    /// replicas go to the nodes with the least sufficient room first; first fit: to the
    /// first nodes in inventory order.
    fn fit(
        &self,
        nodes: &[Node],
        job: &Job,
        ignore_reservations: bool,
        packing: Packing,
    ) -> Option<Vec<usize>> {
        let g = job.gpus_per_replica;
        if g == 0 {
            return None;
        }
        let set = if ignore_reservations {
            &self.by_free
        } else {
            &self.by_effective
        };
        match set.last() {
            Some(&(largest, _)) if largest >= g => {}
            _ => return None,
        }
        let fits = set
            .range((g, 0)..)
            .filter(|&&(_, i)| job.accepts_model(nodes[i].gpu_model.as_ref()));
        let mut placed = Vec::with_capacity(job.replicas as usize);
        let mut take = |room: u32, i: usize| {
            let k = (room / g).min(job.replicas - placed.len() as u32);
            placed.extend(std::iter::repeat_n(i, k as usize));
            placed.len() as u32 == job.replicas
        };
        let done = match packing {
            Packing::BestFit => fits.into_iter().any(|&(room, i)| take(room, i)),
            Packing::FirstFit => {
                let mut rooms: Vec<(u32, usize)> = fits.copied().collect();
                rooms.sort_by_key(|&(_, i)| i);
                rooms.into_iter().any(|(room, i)| take(room, i))
            }
        };
        done.then_some(placed)
    }
}

/// A blocked job's claim on future private capacity.
struct Reservation {
    /// When it is expected to fit; `None`: not estimable (some running job has no runtime).
    at: Option<Time>,
}

/// Working state of one cycle.
struct Cycle<'a> {
    snap: &'a Snapshot,
    policy: &'a dyn Policy,
    now: Time,
    settings: &'a Settings,
    plan: Plan,
    queues: FastMap<&'a str, &'a Queue>,
    datasets: FastMap<&'a str, &'a crate::Dataset>,
    pools: FastMap<&'a str, &'a crate::Pool>,
    node_index: FastMap<&'a str, usize>,
    private: PrivateIndex,
    /// Free GPUs on cloud nodes (by node index), and whether the node is claimed.
    cloud_free: Vec<u32>,
    cloud_claimed: Vec<bool>,
    /// (end time, node, GPUs) of private work with a known end.
    releases: Vec<(Time, usize, u32)>,
    releases_sorted: bool,
    reservations: Vec<Reservation>,
    queue_state: FastMap<&'a str, QueueState>,
    /// Per cloud pool: instances, GPUs, USD/h (running and launching).
    pool_usage: FastMap<&'a str, (u32, u32, f64)>,
    needs_in_flight: BTreeSet<&'a str>,
    /// Replica slots per (GPUs per replica, models) on empty private nodes.
    capacity_slots: Vec<((u32, Vec<crate::GpuModel>), u32)>,
    /// Shapes (GPUs per replica, models, may use reserved GPUs) that did not fit this cycle,
    /// with the smallest gang that failed.
    fit_failures: Vec<(Shape, u32)>,
    /// Cloud nodes with free GPUs.
    cloud_nodes: Vec<usize>,
    /// Per offering: its pool, when that is a cloud pool.
    offering_pool: Vec<Option<&'a crate::Pool>>,
    /// The cheapest on-demand GPU-hour per queue, once computed this cycle.
    gpu_hour: FastMap<&'a str, f64>,
    /// Free private GPUs over time, built at the first job planned (conservative order).
    profile: Option<Profile>,
    /// Jobs holding a planned slot in `profile`.
    planned: u32,
    /// Gang shapes (GPUs per replica, models, replicas, runtime; None: unknown) that found no
    /// slot starting now.
    now_failures: Vec<(u32, Vec<crate::GpuModel>, u32, Option<Duration>)>,
}

impl<'a> Cycle<'a> {
    fn new(snap: &'a Snapshot, policy: &'a dyn Policy, now: Time) -> Cycle<'a> {
        let pools: FastMap<&str, &crate::Pool> =
            snap.pools.iter().map(|p| (p.name.as_str(), p)).collect();
        let is_private = |n: &Node| {
            pools
                .get(n.pool.as_str())
                .is_some_and(|p| matches!(p.kind, PoolKind::Private { .. }))
        };
        let private_flags: Vec<bool> = snap.nodes.iter().map(is_private).collect();
        let cloud_free = snap
            .nodes
            .iter()
            .zip(&private_flags)
            .map(|(n, &p)| {
                let cloud = !p && pools.get(n.pool.as_str()).is_some_and(|p| p.is_cloud());
                if cloud && n.schedulable {
                    n.free_gpus.min(n.gpus)
                } else {
                    0
                }
            })
            .collect();
        let mut cycle = Cycle {
            snap,
            policy,
            now,
            settings: &snap.settings,
            plan: Plan::default(),
            queues: snap.queues.iter().map(|q| (q.name.as_str(), q)).collect(),
            datasets: snap.datasets.iter().map(|d| (d.name.as_str(), d)).collect(),
            node_index: snap
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect(),
            private: PrivateIndex::new(&snap.nodes, private_flags),
            pools,
            cloud_free,
            cloud_claimed: vec![false; snap.nodes.len()],
            releases: Vec::new(),
            profile: None,
            planned: 0,
            now_failures: Vec::new(),
            releases_sorted: false,
            reservations: Vec::new(),
            queue_state: FastMap::default(),
            pool_usage: FastMap::default(),
            needs_in_flight: BTreeSet::new(),
            capacity_slots: Vec::new(),
            fit_failures: Vec::new(),
            cloud_nodes: Vec::new(),
            offering_pool: Vec::new(),
            gpu_hour: FastMap::default(),
        };
        cycle.offering_pool = snap
            .offerings
            .iter()
            .map(|o| {
                cycle
                    .pools
                    .get(o.pool.as_str())
                    .copied()
                    .filter(|p| p.is_cloud())
            })
            .collect();
        cycle.cloud_nodes = (0..snap.nodes.len())
            .filter(|&n| cycle.cloud_free[n] > 0)
            .collect();
        cycle.index_usage();
        cycle
    }

    /// Step 1: usage per queue and pool, releases of private work, needs in flight.
    fn index_usage(&mut self) {
        let snap = self.snap;
        for q in &snap.queues {
            self.queue_state.insert(
                q.name.as_str(),
                QueueState {
                    spent_this_month_usd: q.spent_this_month_usd,
                    ..Default::default()
                },
            );
        }
        for job in &snap.jobs {
            let Some(state) = self.queue_state.get_mut(job.queue.as_str()) else {
                continue;
            };
            match &job.state {
                JobState::Pending => state.pending_jobs += 1,
                JobState::Provisioning { .. } => state.pending_jobs += 1,
                JobState::Running {
                    nodes,
                    started_at,
                    cloud,
                } => {
                    state.running_jobs += 1;
                    if *cloud {
                        state.cloud_gpus_in_use += job.total_gpus();
                    } else {
                        state.private_gpus_in_use += job.total_gpus();
                        let end = job.planning_runtime().map(|r| {
                            let end = *started_at + r;
                            // Overrunning its estimate: expect it to run as long again as it
                            // has overrun (at least a minute), so the expectation recedes while
                            // it keeps running instead of staying "soon" forever.
                            if end <= self.now {
                                self.now + self.now.since(end).max(Duration::from_secs(60))
                            } else {
                                end
                            }
                        });
                        if let Some(end) = end {
                            for n in nodes {
                                if let Some(&i) = self.node_index.get(n.as_str()) {
                                    self.releases.push((end, i, job.gpus_per_replica));
                                }
                            }
                        }
                    }
                }
            }
        }
        for inst in &snap.instances {
            self.needs_in_flight.insert(inst.need.as_str());
            if let Some(state) = self.queue_state.get_mut(inst.queue.as_str()) {
                state.hourly_usd += inst.hourly_price;
            }
            let usage = self
                .pool_usage
                .entry(inst.pool.as_str())
                .or_insert((0, 0, 0.0));
            usage.0 += 1;
            usage.1 += inst.gpus;
            usage.2 += inst.hourly_price;
        }
    }

    fn run(mut self) -> Plan {
        let snap = self.snap;
        self.plan.decisions.reserve(snap.jobs.len());
        // Step 2: provisioning jobs.
        let mut pending: Vec<usize> = Vec::new();
        for (i, job) in snap.jobs.iter().enumerate() {
            match &job.state {
                JobState::Pending => pending.push(i),
                JobState::Provisioning { need, pool } => {
                    if !self.needs_in_flight.contains(need.as_str()) {
                        // Its launch failed or its instances are gone: plan it again.
                        pending.push(i);
                    } else {
                        self.provisioning(job, need, pool);
                    }
                }
                JobState::Running { .. } => {}
            }
        }

        // Reject what can never run; everything else goes through the passes.
        let mut candidates: Vec<usize> = Vec::with_capacity(pending.len());
        for i in pending {
            let job = &snap.jobs[i];
            if let Some((reason, message)) = self.invalid(job) {
                self.decide_job(job, Outcome::Reject, reason, message, None);
            } else {
                candidates.push(i);
            }
        }

        // Step 3: private pass.
        let waiting = self.private_pass(&candidates);
        // Step 4: burst pass.
        for w in waiting {
            self.burst(w);
        }
        // Step 5: scale-down.
        self.scale_down();
        self.plan
    }

    fn invalid(&self, job: &Job) -> Option<(Reason, String)> {
        if job.replicas == 0 || job.gpus_per_replica == 0 {
            return Some((
                Reason::InvalidSpec,
                format!(
                    "Job {} asks for {} replicas of {} GPUs; both must be at least 1.",
                    job.id, job.replicas, job.gpus_per_replica
                ),
            ));
        }
        if !self.queues.contains_key(job.queue.as_str()) {
            return Some(match self.snap.invalid_queues.get(&job.queue) {
                Some(why) => (
                    Reason::QueueInvalid,
                    format!(
                        "GpuQueue {:?} is invalid and left out of decisions until it is fixed: {why}",
                        job.queue
                    ),
                ),
                None => (
                    Reason::QueueNotFound,
                    format!("GpuQueue {:?} does not exist.", job.queue),
                ),
            });
        }
        if let Some(missing) = job
            .datasets
            .iter()
            .find(|d| !self.datasets.contains_key(d.as_str()))
        {
            return Some(match self.snap.invalid_datasets.get(missing) {
                Some(why) => (
                    Reason::DatasetInvalid,
                    format!(
                        "Dataset {missing:?} is invalid and left out of decisions until it is fixed: {why}"
                    ),
                ),
                None => (
                    Reason::DatasetNotFound,
                    format!("Dataset {missing:?} does not exist."),
                ),
            });
        }
        None
    }

    fn decide_job(
        &mut self,
        job: &Job,
        outcome: Outcome,
        reason: Reason,
        message: String,
        rule: Option<String>,
    ) {
        self.plan
            .decisions
            .push(Decision::new(&job.id, outcome, reason, message, rule));
    }

    fn provisioning(&mut self, job: &'a Job, need: &str, pool: &str) {
        let snap = self.snap;
        let instances: Vec<&crate::Instance> =
            snap.instances.iter().filter(|i| i.need == need).collect();
        let joined: Vec<usize> = instances
            .iter()
            .filter_map(|i| i.node.as_deref())
            .filter_map(|n| self.node_index.get(n).copied())
            .filter(|&n| snap.nodes[n].schedulable)
            .collect();
        for &n in &joined {
            self.cloud_claimed[n] = true;
        }
        if joined.len() == instances.len()
            && let Some(nodes) = self.fit_cloud(job, &joined)
        {
            let hourly: f64 = instances.iter().map(|i| i.hourly_price).sum();
            self.start(
                job,
                Environment::Cloud,
                pool,
                nodes,
                Reason::InstancesReady,
                format!(
                    "The {} instance(s) launched for job {} have joined; starting there.",
                    instances.len(),
                    job.id
                ),
                None,
                Some(hourly),
            );
            return;
        }
        let message = format!(
            "Waiting for {} of {} instance(s) launched for this job to join the cluster.",
            instances.len() - joined.len().min(instances.len()),
            instances.len()
        );
        self.decide_job(job, Outcome::Wait, Reason::Provisioning, message, None);
    }

    /// Places a gang on the given cloud nodes (best fit), taking their GPUs.
    fn fit_cloud(&mut self, job: &Job, candidates: &[usize]) -> Option<Vec<usize>> {
        let g = job.gpus_per_replica;
        let mut order: Vec<usize> = candidates.to_vec();
        order.sort_by_key(|&n| (self.cloud_free[n], n));
        order.dedup();
        let mut placed = Vec::new();
        for n in order {
            if !job.accepts_model(self.snap.nodes[n].gpu_model.as_ref()) {
                continue;
            }
            let k = (self.cloud_free[n] / g).min(job.replicas - placed.len() as u32);
            placed.extend(std::iter::repeat_n(n, k as usize));
            if placed.len() as u32 == job.replicas {
                for &n in &placed {
                    self.cloud_free[n] -= g;
                    self.cloud_claimed[n] = true;
                }
                return Some(placed);
            }
        }
        None
    }

    /// What moving the job's data to the region of cloud pool `pool` costs: every dataset it
    /// reads with no copy there.
    fn egress_to(&self, job: &Job, pool: &str) -> f64 {
        let Some(region) = self
            .snap
            .pools
            .iter()
            .find(|p| p.name == pool)
            .and_then(|p| match &p.kind {
                crate::PoolKind::Cloud { region, .. } => Some(region.as_str()),
                crate::PoolKind::Private { .. } => None,
            })
        else {
            return 0.0;
        };
        job.datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()))
            .filter(|d| !d.cloud_regions.iter().any(|r| r == region))
            .map(|d| d.size_gib * d.egress_usd_per_gib)
            .sum()
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        job: &Job,
        env: Environment,
        pool: &str,
        nodes: Vec<usize>,
        reason: Reason,
        message: String,
        rule: Option<String>,
        hourly: Option<f64>,
    ) {
        let names: Vec<String> = nodes
            .iter()
            .map(|&n| self.snap.nodes[n].name.clone())
            .collect();
        let outcome = if env == Environment::Private {
            Outcome::StartPrivate
        } else {
            Outcome::StartCloud
        };
        self.plan.starts.push(Start {
            job: job.id.clone(),
            environment: env,
            pool: pool.to_string(),
            nodes: names,
        });
        let egress = (env == Environment::Cloud).then(|| self.egress_to(job, pool));
        self.plan.decisions.push(Decision {
            estimated_wait: Some(Duration::ZERO),
            estimated_hourly_cost: hourly,
            estimated_egress_usd: egress,
            ..Decision::new(&job.id, outcome, reason, message, rule)
        });
        if let Some(state) = self.queue_state.get_mut(job.queue.as_str()) {
            state.pending_jobs = state.pending_jobs.saturating_sub(1);
            state.running_jobs += 1;
            match env {
                Environment::Private => state.private_gpus_in_use += job.total_gpus(),
                Environment::Cloud => state.cloud_gpus_in_use += job.total_gpus(),
            }
        }
    }

    fn waited(&self, job: &Job) -> Duration {
        self.now.since(job.queued_at)
    }

    fn effects(&self, job: &'a Job) -> Effects {
        if self.policy.is_empty() {
            return Effects::default();
        }
        let Some(queue) = self.queues.get(job.queue.as_str()) else {
            return Effects::default();
        };
        let default_state = QueueState::default();
        let state = self
            .queue_state
            .get(job.queue.as_str())
            .unwrap_or(&default_state);
        let ctx = PolicyContext {
            job,
            queue,
            queue_state: state,
            datasets: job
                .datasets
                .iter()
                .filter_map(|d| self.datasets.get(d.as_str()).copied())
                .collect(),
            waited: self.waited(job),
            now: self.now,
        };
        self.policy.effects(&ctx)
    }

    /// Step 3. Returns the jobs still waiting, in the order considered, with what the private
    /// side knows about them.
    fn private_pass(&mut self, candidates: &[usize]) -> Vec<Waiting> {
        let snap = self.snap;
        // Per queue: its candidates in priority, then arrival, then name order.
        let mut by_queue: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in candidates {
            by_queue
                .entry(snap.jobs[i].queue.as_str())
                .or_default()
                .push(i);
        }
        for list in by_queue.values_mut() {
            list.sort_by(|&a, &b| {
                let (ja, jb) = (&snap.jobs[a], &snap.jobs[b]);
                jb.priority
                    .cmp(&ja.priority)
                    .then(ja.queued_at.cmp(&jb.queued_at))
                    .then(ja.id.cmp(&jb.id))
            });
            list.reverse(); // pop() takes the head
        }
        // One lane per queue, in name order (deterministic ties).
        let mut lanes: Vec<Lane<'_>> = by_queue
            .into_iter()
            .filter_map(|(name, jobs)| Some((self.queues.get(name).copied()?, name, jobs)))
            .map(|(queue, name, jobs)| Lane {
                queue,
                used: self
                    .queue_state
                    .get(name)
                    .map_or(0, |s| s.private_gpus_in_use),
                weight: queue.weight.max(1) as f64,
                jobs,
                blocked: false,
                reserved: false,
            })
            .collect();
        let mut waiting = Vec::new();
        loop {
            // Weighted fair share: the queue using the fewest private GPUs per unit of weight
            // goes next.
            let mut next: Option<(f64, usize)> = None;
            for (l, lane) in lanes.iter().enumerate() {
                if lane.jobs.is_empty() {
                    continue;
                }
                let share = lane.used as f64 / lane.weight;
                if next.is_none_or(|(best, _)| share < best) {
                    next = Some((share, l));
                }
            }
            let Some((_, l)) = next else { break };
            let Some(i) = lanes[l].jobs.pop() else { break };
            let job = &snap.jobs[i];
            let effects = self.effects(job);
            let effects = (effects != Effects::default()).then(|| Box::new(effects));
            let mut w = Waiting {
                job: i,
                effects,
                private_estimate: None,
                never_private: false,
                private_block: None,
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
                .filter(|r| r.value == Environment::Cloud)
            {
                w.private_block = Some((Reason::RequiredByPolicy, Some(r.rule.clone())));
                waiting.push(w);
                continue;
            }
            let queue = lanes[l].queue;
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
                w.private_estimate = None;
                waiting.push(w);
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
            let shape_failed = self
                .fit_failures
                .iter()
                .any(|((g, models, ignore), replicas)| {
                    *g == job.gpus_per_replica
                        && *ignore == ends_before_reservations
                        && *replicas <= job.replicas
                        && *models == job.gpu_models
                });
            let fit = if self.settings.order == QueueOrder::Conservative {
                let hold = job.planning_runtime().is_none() && !lanes[l].reserved;
                match self.conservative(job, &mut w, hold) {
                    Some(nodes) => Some(nodes),
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
                let hourly = match self.pools.get(pool.as_str()).map(|p| &p.kind) {
                    Some(PoolKind::Private {
                        gpu_cost_per_hour: Some(c),
                    }) => Some(c * job.total_gpus() as f64),
                    _ => None,
                };
                let (reason, message) = if backfilled {
                    (
                        Reason::Backfilled,
                        self.say(|| format!(
                            "Started on free private GPUs ahead of a larger waiting job, without delaying its expected start ({} GPUs on {} node(s)).",
                            job.total_gpus(),
                            distinct(&nodes)
                        )),
                    )
                } else {
                    (
                        Reason::FitsPrivate,
                        self.say(|| format!(
                            "The whole gang fits on free private GPUs ({} GPUs on {} node(s) of pool {pool}).",
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
            // Does not fit now.
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
        waiting
    }

    /// Could the gang fit on the private nodes if they were empty? Computed once per shape
    /// (GPUs per replica and models) and cycle.
    fn can_ever_fit_private(&mut self, job: &Job) -> bool {
        let g = job.gpus_per_replica;
        let cached = self
            .capacity_slots
            .iter()
            .find(|((cg, models), _)| *cg == g && *models == job.gpu_models)
            .map(|(_, slots)| *slots);
        let slots = match cached {
            Some(s) => s,
            None => {
                let mut slots = 0u32;
                for (i, n) in self.snap.nodes.iter().enumerate() {
                    if self.private.private[i]
                        && n.gpus >= g
                        && job.accepts_model(n.gpu_model.as_ref())
                    {
                        slots = slots.saturating_add(n.gpus / g);
                    }
                }
                self.capacity_slots
                    .push(((g, job.gpu_models.clone()), slots));
                slots
            }
        };
        slots >= job.replicas
    }

    fn sort_releases(&mut self) {
        if !self.releases_sorted {
            self.releases.sort_by_key(|&(t, n, g)| (t, n, g));
            self.releases_sorted = true;
        }
    }

    /// When would `job` fit if private work ended as estimated? Returns the time and the free
    /// GPUs per node at that time.
    fn shadow(&mut self, job: &Job) -> Option<(Time, Vec<u32>)> {
        self.sort_releases();
        let g = job.gpus_per_replica;
        let nodes = &self.snap.nodes;
        let mut free: Vec<u32> = (0..nodes.len())
            .map(|i| self.private.effective(i))
            .collect();
        let accepts =
            |i: usize| self.private.private[i] && job.accepts_model(nodes[i].gpu_model.as_ref());
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

    fn estimate_only(&mut self, job: &Job) -> Option<Time> {
        self.shadow(job).map(|(t, _)| t)
    }

    /// Reserves private GPUs for a blocked job; returns its estimated start.
    ///
    /// When the start cannot be estimated (running work without runtimes), a job that may
    /// burst gets no reservation: holding GPUs idle for an unknown time costs more than the
    /// cloud placement that ends its wait after `maxWait`. A job that can never burst reserves
    /// the nodes it would use once everything running has ended, so it cannot starve.
    fn reserve(&mut self, job: &Job, may_burst: bool) -> Option<Time> {
        let g = job.gpus_per_replica;
        let nodes = &self.snap.nodes;
        let (at, room) = match self.shadow(job) {
            Some((t, free)) => (Some(t), free),
            None if may_burst => return None,
            None => (None, nodes.iter().map(|n| n.gpus).collect()),
        };
        // Best fit at that time; prefer nodes with more GPUs free now (they are closer).
        let mut order: Vec<usize> = (0..nodes.len())
            .filter(|&i| {
                self.private.private[i]
                    && room[i] >= g
                    && job.accepts_model(nodes[i].gpu_model.as_ref())
            })
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

    fn confidential_dataset(&self, job: &Job) -> Option<&'a crate::Dataset> {
        job.datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()).copied())
            .find(|d| d.classification == Classification::Confidential)
    }

    /// What forbids the cloud for this job outright, if anything: placement, Restricted data,
    /// a rule, Confidential data no rule allows, or a queue that does not burst.
    fn cloud_blocker(
        &self,
        job: &Job,
        effects: &Effects,
    ) -> Option<(Reason, String, Option<String>)> {
        let queue = self.queues.get(job.queue.as_str())?;
        if job.placement == Placement::PrivateOnly {
            return Some((
                Reason::PrivateOnlyPlacement,
                self.say(|| {
                    "The job asks for private capacity only (placement: PrivateOnly).".into()
                }),
                None,
            ));
        }
        let restricted = job
            .datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()))
            .find(|d| d.classification == Classification::Restricted);
        if let Some(d) = restricted {
            return Some((
                Reason::RestrictedData,
                self.say(|| {
                    format!(
                        "The job reads Restricted dataset {:?}, which never leaves private nodes.",
                        d.name
                    )
                }),
                None,
            ));
        }
        if let Some(rule) = effects.forbids(Environment::Cloud) {
            return Some((
                Reason::ForbiddenByPolicy,
                self.say(|| format!("Rule {rule} forbids the cloud for this job.")),
                Some(rule.to_string()),
            ));
        }
        let allowed = effects
            .allowed_classifications
            .iter()
            .any(|r| r.value == Classification::Confidential);
        if let (Some(d), false) = (self.confidential_dataset(job), allowed) {
            return Some((
                Reason::ConfidentialData,
                self.say(|| format!("The job reads Confidential dataset {:?} and no rule allows it in the cloud.", d.name)),
                None,
            ));
        }
        if !queue.burst.enabled {
            return Some((
                Reason::BurstDisabled,
                self.say(|| format!("Queue {} does not allow bursting to the cloud.", queue.name)),
                None,
            ));
        }
        None
    }

    /// A decision message, built only when decisions are explained (`Settings::explain`).
    fn say(&self, message: impl FnOnce() -> String) -> String {
        if self.settings.explain {
            message()
        } else {
            String::new()
        }
    }

    /// Step 4 for one job.
    fn burst(&mut self, w: Waiting) {
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
                let why = if forced.is_some() {
                    "it may not run privately"
                } else {
                    "no private node could ever hold it"
                };
                let message = format!("{message} It cannot run anywhere: {why}.");
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
                .is_some_and(|t| self.planned_too_late(job, &w, t))
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
        if self.settings.runtime_aware
            && !matches!(
                reason,
                Reason::CloudOnlyPlacement | Reason::RequiredByPolicy | Reason::DeadlineAtRisk
            )
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

    /// How long `job` may wait for private GPUs before it bursts, and why: its compute-wait
    /// budget, else the queue's (or a rule's) `maxWait`.
    fn allowance(&self, job: &Job, effects: &Effects) -> Allowance {
        let queue = self.queues[job.queue.as_str()];
        let (mode, factor, mode_rule) = match &effects.wait_mode {
            Some(r) => (
                r.value.0,
                r.value.1.unwrap_or(queue.burst.compute_wait_factor),
                Some(r.rule.clone()),
            ),
            None => (queue.burst.wait_mode, queue.burst.compute_wait_factor, None),
        };
        let (max_wait, wait_rule) = match &effects.max_wait {
            Some(r) => (r.value, Some(r.rule.clone())),
            None => (queue.burst.max_wait, None),
        };
        match (mode, job.planning_runtime()) {
            (WaitMode::ComputeWait, Some(rt)) => {
                let secs = factor * job.total_gpus() as f64 * rt.as_secs_f64();
                Allowance {
                    mode,
                    max_wait,
                    threshold: Duration::from_millis((secs * 1000.0) as u64),
                    reason: Reason::ComputeWaitExceeded,
                    rule: mode_rule.or(wait_rule),
                }
            }
            _ => Allowance {
                mode,
                max_wait,
                threshold: max_wait,
                reason: Reason::MaxWaitExceeded,
                rule: wait_rule,
            },
        }
    }

    fn wake(&mut self, t: Time) {
        if t > self.now {
            self.plan.next_wake = Some(self.plan.next_wake.map_or(t, |w| w.min(t)));
        }
    }

    fn wait(
        &mut self,
        job: &Job,
        w: &Waiting,
        reason: Reason,
        message: String,
        rule: Option<String>,
        est: Option<Duration>,
    ) {
        let _ = w;
        self.plan.decisions.push(Decision {
            estimated_wait: est,
            ..Decision::new(&job.id, Outcome::Wait, reason, message, rule)
        });
    }

    /// Whether the queue may buy offering `i`: its pool is a cloud pool and in the queue's
    /// `burst.pools` (when it names any).
    fn offering_allowed(&self, queue: &Queue, i: usize) -> bool {
        self.offering_pool[i].is_some()
            && (queue.burst.pools.is_empty()
                || queue
                    .burst
                    .pools
                    .iter()
                    .any(|p| *p == self.snap.offerings[i].pool))
    }

    fn place_in_cloud(
        &mut self,
        job: &'a Job,
        cost_aware: Option<Duration>,
        w: &Waiting,
        trigger: Reason,
        trigger_rule: Option<String>,
        data_rule: Option<String>,
    ) {
        let snap = self.snap;
        let queue = self.queues[job.queue.as_str()];
        let trigger_text = match trigger {
            Reason::MaxWaitExceeded => {
                format!("waited {} (past its maximum wait)", self.waited(job))
            }
            Reason::ComputeWaitExceeded => {
                format!("waited {} (past its compute-wait budget)", self.waited(job))
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
        };
        let rule = trigger_rule.or(data_rule);

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
            let message =
                format!("The job {trigger_text}; idle cloud nodes in pool {pool} fit the gang.");
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
                let egress_text = if choice.egress > 0.0 {
                    format!(
                        ", ${:.2} of it moving its data to {}",
                        choice.egress, offering.region
                    )
                } else {
                    String::new()
                };
                let message = format!(
                    "The job {trigger_text}; launching {count} x {} ({}, {}) at ${:.2}/h, the cheapest fitting offering (expected ${:.2} in total{egress_text}).",
                    offering.instance_type,
                    offering.capacity_type,
                    offering.zone,
                    choice.hourly,
                    choice.expected_total
                );
                let usage = self
                    .pool_usage
                    .entry(
                        snap.pools
                            .iter()
                            .find(|p| p.name == offering.pool)
                            .map_or("", |p| p.name.as_str()),
                    )
                    .or_insert((0, 0, 0.0));
                usage.0 += count;
                usage.1 += count * offering.gpus_per_instance;
                usage.2 += choice.hourly;
                if let Some(state) = self.queue_state.get_mut(job.queue.as_str()) {
                    state.hourly_usd += choice.hourly;
                    state.spent_this_month_usd += choice.expected_total;
                }
                self.plan.launches.push(Launch {
                    job: job.id.clone(),
                    queue: job.queue.clone(),
                    need: job.need_key(),
                    offering: offering.clone(),
                    count,
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
            Err((reason, message, rule)) => {
                if w.never_private
                    && reason == Reason::NoFittingOffering
                    && !self.could_ever_fit_cloud(job, queue)
                {
                    self.decide_job(job, Outcome::Reject, Reason::NeverFits,
                        format!("No private node and no cloud offering could ever hold one replica of {} GPUs{}.", job.gpus_per_replica, models_text(job)), None);
                } else {
                    let message = format!("The job {trigger_text}, but cannot burst: {message}");
                    self.wait(job, w, reason, message, rule, None);
                }
            }
        }
    }

    /// The lowest on-demand price of one GPU-hour among the offerings a queue may use now
    /// (on-demand, so that spot prices, which only some jobs may use, do not stretch every
    /// other job's wait).
    /// The cheapest on-demand GPU-hour the queue can buy now (computed once per cycle).
    fn cheapest_gpu_hour(&mut self, queue: &'a Queue) -> f64 {
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

    fn could_ever_fit_cloud(&self, job: &Job, queue: &Queue) -> bool {
        self.snap.offerings.iter().enumerate().any(|(i, o)| {
            self.offering_allowed(queue, i)
                && o.gpus >= job.gpus_per_replica
                && job.accepts_model(Some(&o.gpu_model))
        })
    }

    /// The cheapest offering for the whole gang within rules, limits and budget.
    fn cheapest_offering(
        &self,
        job: &'a Job,
        queue: &Queue,
        effects: &Effects,
    ) -> Result<Choice, (Reason, String, Option<String>)> {
        let snap = self.snap;
        let runtime = job
            .planning_runtime()
            .unwrap_or(self.settings.default_runtime);
        let hours = runtime.as_secs_f64() / 3600.0;
        let state = self
            .queue_state
            .get(job.queue.as_str())
            .cloned()
            .unwrap_or_default();
        let ctx_datasets: Vec<&crate::Dataset> = job
            .datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()).copied())
            .collect();
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
        let cap = [
            job.max_hourly_cost,
            effects.max_hourly_cost.as_ref().map(|r| r.value),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min);

        let mut best: Option<Choice> = None;
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
        for (i, o) in snap.offerings.iter().enumerate() {
            if !self.offering_allowed(queue, i) {
                continue;
            }
            if o.gpus < job.gpus_per_replica || !job.accepts_model(Some(&o.gpu_model)) {
                continue;
            }
            if o.unavailable_until.is_some_and(|t| t > self.now) {
                continue;
            }
            let Some(pool) = self.offering_pool[i] else {
                continue;
            };
            let pool_types = match &pool.kind {
                PoolKind::Cloud { capacity_types, .. } => capacity_types.as_slice(),
                PoolKind::Private { .. } => &[],
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
                let rule = effects
                    .max_hourly_cost
                    .as_ref()
                    .filter(|r| (r.value - cap).abs() < 1e-9)
                    .map(|r| r.rule.clone());
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
                .pool_usage
                .get(o.pool.as_str())
                .copied()
                .unwrap_or((0, 0, 0.0));
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
            if queue
                .budget_hourly_usd
                .is_some_and(|b| state.hourly_usd + hourly > b + 1e-9)
                || queue
                    .budget_monthly_usd
                    .is_some_and(|b| state.spent_this_month_usd + expected_total > b + 1e-9)
            {
                exclude!(
                    Reason::BudgetExhausted,
                    None,
                    "{count} x {} (${hourly:.2}/h, ${expected_total:.2} expected) would exceed queue {}'s budget",
                    o.instance_type,
                    queue.name
                );
                continue;
            }
            let choice = Choice {
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
                rule: None,
            };
            let better = match &best {
                None => true,
                Some(b) => {
                    (
                        choice.expected_total,
                        choice.hourly,
                        &choice.offering.instance_type,
                        &choice.offering.zone,
                        choice.offering.capacity_type,
                    )
                        .partial_cmp(&(
                            b.expected_total,
                            b.hourly,
                            &b.offering.instance_type,
                            &b.offering.zone,
                            b.offering.capacity_type,
                        ))
                        == Some(std::cmp::Ordering::Less)
                }
            };
            if better {
                best = Some(choice);
            }
        }
        if let Some(mut b) = best {
            b.rule = effects.instance_types.first().map(|r| r.rule.clone());
            return Ok(b);
        }
        // Explain the most telling exclusion: budget, then limits, then caps, then rules.
        for reason in [
            Reason::BudgetExhausted,
            Reason::PoolLimitReached,
            Reason::OverCostCap,
            Reason::NoFittingOffering,
        ] {
            if let Some((r, m, rule)) = excluded.iter().find(|(r, _, _)| *r == reason) {
                return Err((*r, format!("{m}."), rule.clone()));
            }
        }
        Err((
            Reason::NoFittingOffering,
            format!(
                "no available offering fits {} replica(s) of {} GPUs{} within the queue's pools and capacity types.",
                job.replicas,
                job.gpus_per_replica,
                models_text(job)
            ),
            None,
        ))
    }

    /// Step 5.
    fn scale_down(&mut self) {
        let snap = self.snap;
        for (i, n) in snap.nodes.iter().enumerate() {
            let Some(pool) = self.pools.get(n.pool.as_str()) else {
                continue;
            };
            if !pool.is_cloud() || self.cloud_claimed[i] {
                continue;
            }
            let Some(idle_since) = n.idle_since else {
                continue;
            };
            if n.free_gpus < n.gpus {
                continue;
            }
            let idle_for = self.now.since(idle_since);
            if idle_for >= pool.idle_timeout {
                self.plan.terminations.push(Termination {
                    pool: pool.name.clone(),
                    node: n.name.clone(),
                    instance_id: n.instance_id.clone(),
                    idle_for,
                });
            } else {
                self.wake(idle_since + pool.idle_timeout);
            }
        }
    }
}

/// A queue's candidates in the private pass.
struct Lane<'q> {
    queue: &'q Queue,
    /// Private GPUs in use, including what this pass started.
    used: u32,
    weight: f64,
    /// Candidates, the head last.
    jobs: Vec<usize>,
    /// Strict order: its head did not fit, nothing behind it may start privately.
    blocked: bool,
    /// Its first blocked job has a reservation.
    reserved: bool,
}

/// A job that did not start in the private pass.
/// A job's wait allowance.
struct Allowance {
    mode: WaitMode,
    max_wait: Duration,
    threshold: Duration,
    /// The trigger once it is used up.
    reason: Reason,
    rule: Option<String>,
}

struct Waiting {
    job: usize,
    /// The rules' effects; `None` when no rule said anything (most jobs, kept small).
    effects: Option<Box<Effects>>,
    /// Estimated private start, when known.
    private_estimate: Option<Time>,
    /// No private node could ever hold the gang.
    never_private: bool,
    /// Why the private side was not tried.
    private_block: Option<(Reason, Option<String>)>,
}

/// The effects of no rule at all.
static NO_EFFECTS: Effects = Effects {
    forbid: Vec::new(),
    require: None,
    max_wait: None,
    wait_mode: None,
    max_hourly_cost: None,
    capacity_types: None,
    instance_types: Vec::new(),
    regions: None,
    allowed_classifications: Vec::new(),
};

impl Waiting {
    fn effects(&self) -> &Effects {
        self.effects.as_deref().unwrap_or(&NO_EFFECTS)
    }
}

struct Choice {
    offering: OfferingChoice,
    count: u32,
    hourly: f64,
    expected_total: f64,
    /// Data egress to the offering's region, USD (in `expected_total`).
    egress: f64,
    rule: Option<String>,
}

fn distinct(nodes: &[usize]) -> usize {
    nodes.iter().collect::<BTreeSet<_>>().len()
}

fn models_text(job: &Job) -> String {
    if job.gpu_models.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = job.gpu_models.iter().map(|m| m.as_str()).collect();
        format!(" ({})", names.join(" or "))
    }
}
