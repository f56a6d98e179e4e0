//! `decide`: one scheduling cycle over a snapshot, written as numbered steps.
//!
//! 1. Index the snapshot: free GPUs per node, usage per queue and pool, spend per queue.
//! 2. Jobs whose instances are launching: start them once every instance has joined.
//! 3. Private pass (`decide/private.rs`), in weighted fair-share order across queues and
//!    priority/arrival order within a queue: start each gang that fits whole on free private
//!    GPUs (best fit). What a job that does not fit gets depends on `Settings::order`: by
//!    default (conservative, `decide/conservative.rs`) a planned slot at the earliest time it
//!    fits, which later jobs may not delay, or an immediate burst when that slot is later than
//!    its wait allows; with EASY backfilling a reservation for the first blocked job per queue;
//!    in strict order nothing passes it; in greedy order (Starburst's) anything that fits
//!    starts.
//! 4. Burst pass over the jobs still waiting: a job may go to the cloud only if nothing forbids
//!    it (placement, data classification, queue, rules) and it has waited past its threshold
//!    (fixed or compute-wait), its planned private start comes after that threshold
//!    (conservative order), its deadline is at risk, or it can never run privately. It then
//!    takes idle cloud nodes that fit, or the cheapest offering (whole gang, egress included)
//!    within rules, pool limits and the queue's budget. Then repatriation
//!    (`decide/repatriate.rs`): a restartable job running in the cloud moves to private GPUs
//!    left free when finishing there is cheaper, lost work and restart included.
//! 5. Scale-down: cloud nodes idle past their pool's `idleTimeout` are terminated.

use std::collections::BTreeSet;

use crate::model::{JobState, QueueOrder, Settings, WaitMode};
use crate::profile::Profile;
use crate::refs::JobRefs;
pub use fast_map::FastMap;
use index::PrivateIndex;
use private::OrderKey;
pub use remote::cluster_pools_by_price;
pub use scratch::Scratch;
use wait::Allowance;

mod cloud;
mod conservative;
mod fast_map;
mod index;
mod invalid;
mod names;
pub(crate) mod offer_memo;
mod private;
mod reclaim;
mod remote;
mod repatriate;
mod requirements;
mod scratch;
mod settled;
mod topology;
mod usage;
mod wait;
use crate::plan::{Decision, Launch, OfferingChoice, Outcome, Plan, Reason, Start, Termination};
use crate::policy::{Effects, Policy, PolicyContext, QueueState, glob_match};
use crate::{
    CapacityType, Classification, Duration, Environment, Job, Placement, PoolKind, Queue, Snapshot,
    Time,
};

/// GPUs per replica and acceptable models.
pub(super) type ReplicaShape = (u32, Vec<crate::GpuModel>, crate::Requirements);

/// A replica's shape for the cloud's offerings: GPUs per replica, bound by a topology (only
/// EFA-capable types of an EFA pool), acceptable models.
pub(super) type OfferingShape = (u32, bool, Vec<crate::GpuModel>, crate::Requirements);

/// A gang's shape for fit memos: GPUs per replica, acceptable models, may use reserved GPUs.
type Shape = (u32, Vec<crate::GpuModel>, crate::Requirements, bool);

/// Runs one scheduling cycle. Pure: the same snapshot, policy and `now` give the same plan.
///
/// A world with nothing to place (every job running, none in the cloud that could move home)
/// takes a short path that only looks for idle cloud nodes (`decide/settled.rs`); its plan is
/// the one [`decide_in_full`] gives.
pub fn decide(snapshot: &Snapshot, policy: &dyn Policy, now: Time) -> Plan {
    decide_with(snapshot, policy, now, &mut Scratch::new())
}

/// [`decide`] building its working tables in `scratch`, which keeps their allocations for the
/// next call (a caller deciding cycle after cycle keeps one). The plan is the one [`decide`]
/// gives, whatever cycles the scratch served before.
pub fn decide_with(
    snapshot: &Snapshot,
    policy: &dyn Policy,
    now: Time,
    scratch: &mut Scratch,
) -> Plan {
    settled::decide(snapshot, None, policy, now)
        .unwrap_or_else(|| Cycle::new(snapshot, None, None, policy, now, scratch).run(scratch))
}

/// [`decide_with`] given each job's queue and nodes already found (`refs`, as
/// `snapshot.jobs`; [`crate::Tracked`] keeps them): the same plan, without looking them up by
/// name. `generation` numbers the state of the snapshot's offerings, pools and queues: what a
/// cycle finds out about the offerings is kept in `scratch` for the next cycle on the same
/// number ([`offer_memo`]).
pub(crate) fn decide_resolved(
    snapshot: &Snapshot,
    refs: &[JobRefs],
    generation: u64,
    policy: &dyn Policy,
    now: Time,
    scratch: &mut Scratch,
) -> Plan {
    settled::decide(snapshot, Some(refs), policy, now).unwrap_or_else(|| {
        Cycle::new(snapshot, Some(refs), Some(generation), policy, now, scratch).run(scratch)
    })
}

/// [`decide`] without its shortcuts: every step of the cycle, whatever the snapshot (no short
/// path for worlds with nothing to place), and the profile of free private GPUs built at the
/// first job planned (not put off while every job starts now). The reference the shortcuts
/// are tested against.
pub fn decide_in_full(snapshot: &Snapshot, policy: &dyn Policy, now: Time) -> Plan {
    let mut scratch = Scratch::new();
    let mut cycle = Cycle::new(snapshot, None, None, policy, now, &mut scratch);
    cycle.put_off_profile = false;
    cycle.run(&mut scratch)
}

/// A blocked job's claim on future private capacity.
pub(super) struct Reservation {
    /// When it is expected to fit; `None`: not estimable (some running job has no runtime).
    at: Option<Time>,
}

/// Working state of one cycle.
struct Cycle<'a> {
    snap: &'a Snapshot,
    /// Each job's queue and nodes, when the caller found them ([`decide_resolved`]).
    refs: Option<&'a [JobRefs]>,
    policy: &'a dyn Policy,
    now: Time,
    settings: &'a Settings,
    plan: Plan,
    /// Queue name -> index into `snapshot.queues` (and `queue_state`).
    queues: names::Names<'a, Queue>,
    /// Each job's queue (index into `snapshot.queues`), resolved once per cycle.
    job_queue: Vec<Option<usize>>,
    datasets: FastMap<&'a str, &'a crate::Dataset>,
    pools: names::Names<'a, crate::Pool>,
    /// Node name -> index into `snapshot.nodes`, built at first use (a cycle with no running
    /// job of known end and nothing provisioning never looks a node up by name).
    node_index: std::cell::OnceCell<names::NodeNames<'a>>,
    /// The buffer the node table is built in (from the caller's scratch).
    node_slots: std::cell::Cell<Vec<(u64, u32)>>,
    /// Buffers of the private pass (from the caller's scratch).
    per_queue: Vec<Vec<OrderKey>>,
    lanes: Vec<private::Lane>,
    waiting: Vec<Waiting>,
    private: PrivateIndex,
    /// Free GPUs on cloud and remote nodes (by node index), and whether the node is claimed.
    cloud_free: Vec<u32>,
    cloud_claimed: Vec<bool>,
    /// (end time, node, GPUs) of private work with a known end.
    releases: Vec<(Time, usize, u32)>,
    releases_sorted: bool,
    reservations: Vec<Reservation>,
    /// Per queue (as `snapshot.queues`): jobs, GPUs in use and spend, kept current by the cycle.
    queue_state: Vec<QueueState>,
    /// Per pool (as `snapshot.pools`): instances, GPUs, USD/h (running and launching).
    pool_usage: Vec<(u32, u32, f64)>,
    /// The needs of the instances, listed at the first provisioning job.
    needs_in_flight: std::cell::OnceCell<BTreeSet<&'a str>>,
    /// Replica slots per (GPUs per replica, models) on empty private nodes.
    capacity_slots: Vec<(ReplicaShape, u32)>,
    /// Shapes (GPUs per replica, models, may use reserved GPUs) that did not fit this cycle,
    /// with the smallest gang that failed.
    fit_failures: Vec<(Shape, u32)>,
    /// Cloud nodes with free GPUs.
    cloud_nodes: Vec<usize>,
    /// Nodes of cluster pools with free GPUs (their free GPUs are in `cloud_free`).
    remote_nodes: Vec<usize>,
    /// Some pool is a cluster pool: a job the rules keep from the cloud may still go there.
    has_remote_pools: bool,
    /// Per offering: its pool, when that is a cloud pool.
    /// Built at first use: most cycles price no offering.
    offering_pool: std::cell::OnceCell<Vec<Option<&'a crate::Pool>>>,
    /// Per gang shape (GPUs per replica, models): the offerings whose instances hold one
    /// replica, in snapshot order; and the GPU-hour prices of priced waits. Found at the first
    /// pricing in the cycle, or kept from an earlier cycle of the same tracked offerings.
    offerings: std::cell::RefCell<offer_memo::OfferingMemo>,
    /// The cheapest on-demand GPU-hour per queue, once computed this cycle.
    gpu_hour: FastMap<&'a str, f64>,
    /// Free private GPUs over time, built at the first job planned (conservative order).
    profile: Option<Profile>,
    /// An earlier cycle's profile, whose buffers `profile` is built in (from the scratch).
    spare_profile: Option<Profile>,
    /// The profile begun but not built yet (`decide/conservative.rs`), and buffers for one.
    deferred: Option<conservative::Deferred>,
    spare_deferred: Option<conservative::Deferred>,
    /// Whether the profile may be put off (always, but in [`decide_in_full`]).
    put_off_profile: bool,
    /// Jobs holding a planned slot in `profile`.
    planned: u32,
    /// Gang shapes (GPUs per replica, models, replicas, runtime; None: unknown) that found no
    /// slot starting now.
    now_failures: Vec<(ReplicaShape, u32, Option<Duration>)>,
    /// Jobs not running (pending, provisioning, suspended), in snapshot order: found in the
    /// first pass over the jobs so that later steps do not walk the running ones again.
    unplaced: Vec<usize>,
    /// Suspended jobs (indexes into `snapshot.jobs`).
    suspended: Vec<usize>,
    /// Some restartable job that may run privately runs in the cloud (repatriation has
    /// candidates).
    movable_in_cloud: bool,
    /// Jobs preempted this cycle (indexes into `snapshot.jobs`).
    preempted: BTreeSet<usize>,
    /// Private GPUs preempted this cycle, per victim queue.
    preempted_gpus: FastMap<&'a str, u32>,
}

impl<'a> Cycle<'a> {
    fn new(
        snap: &'a Snapshot,
        refs: Option<&'a [JobRefs]>,
        generation: Option<u64>,
        policy: &'a dyn Policy,
        now: Time,
        scratch: &mut Scratch,
    ) -> Cycle<'a> {
        let mut offerings = std::mem::take(&mut scratch.offerings);
        offerings.begin(generation);
        let pools = names::Names::new_in(&snap.pools, scratch::take(&mut scratch.pool_slots));
        // One pool lookup per node (nodes of one pool mostly come together: looked up again
        // only when the name differs from the last node's): private, cloud, or neither.
        let mut last: Option<(&str, Option<Environment>)> = None;
        let mut private_flags = scratch::take(&mut scratch.private);
        let mut cloud_free = scratch::take(&mut scratch.cloud_free);
        let mut cloud_nodes = scratch::take(&mut scratch.cloud_nodes);
        let mut remote_nodes = Vec::new();
        for (i, n) in snap.nodes.iter().enumerate() {
            let env = match last {
                Some((name, env)) if name == n.pool => env,
                _ => {
                    let env = pools.item(&n.pool).map(crate::Pool::environment);
                    last = Some((n.pool.as_str(), env));
                    env
                }
            };
            private_flags.push(env == Some(Environment::Private));
            // Cloud and remote nodes: their free GPUs, taken as the cycle places jobs there.
            let free = if env.is_some_and(|e| e != Environment::Private) && n.schedulable {
                n.free_gpus.min(n.gpus)
            } else {
                0
            };
            cloud_free.push(free);
            if free > 0 {
                match env {
                    Some(Environment::Cloud) => cloud_nodes.push(i),
                    Some(Environment::Remote) => remote_nodes.push(i),
                    _ => {}
                }
            }
        }
        let mut cloud_claimed = scratch::take(&mut scratch.cloud_claimed);
        cloud_claimed.resize(snap.nodes.len(), false);
        let mut cycle = Cycle {
            snap,
            refs,
            policy,
            now,
            settings: &snap.settings,
            plan: Plan::default(),
            queues: names::Names::new_in(&snap.queues, scratch::take(&mut scratch.queue_slots)),
            datasets: snap.datasets.iter().map(|d| (d.name.as_str(), d)).collect(),
            node_index: std::cell::OnceCell::new(),
            node_slots: std::cell::Cell::new(std::mem::take(&mut scratch.node_slots)),
            per_queue: std::mem::take(&mut scratch.per_queue),
            lanes: scratch::take(&mut scratch.lanes),
            waiting: scratch::take(&mut scratch.waiting),
            private: PrivateIndex::new(
                &snap.nodes,
                private_flags,
                scratch::take(&mut scratch.free),
            ),
            pools,
            cloud_free,
            cloud_claimed,
            releases: scratch::take(&mut scratch.releases),
            profile: None,
            spare_profile: scratch.profile.take(),
            deferred: None,
            spare_deferred: scratch.deferred.take(),
            put_off_profile: true,
            planned: 0,
            now_failures: Vec::new(),
            unplaced: scratch::take(&mut scratch.unplaced),
            suspended: scratch::take(&mut scratch.suspended),
            movable_in_cloud: false,
            preempted: BTreeSet::new(),
            preempted_gpus: FastMap::default(),
            releases_sorted: false,
            reservations: scratch::take(&mut scratch.reservations),
            queue_state: scratch::take(&mut scratch.queue_state),
            job_queue: scratch::take(&mut scratch.job_queue),
            pool_usage: scratch::take(&mut scratch.pool_usage),
            needs_in_flight: std::cell::OnceCell::new(),
            capacity_slots: scratch::take(&mut scratch.capacity_slots),
            fit_failures: Vec::new(),
            cloud_nodes,
            remote_nodes,
            has_remote_pools: snap.pools.iter().any(crate::Pool::is_cluster),
            offering_pool: std::cell::OnceCell::new(),
            offerings: std::cell::RefCell::new(offerings),
            gpu_hour: FastMap::default(),
        };
        cycle.index_usage();
        cycle.hold_for_suspended();
        if policy.reads_clock() || snap.settings.order == QueueOrder::Backfill {
            // Rules may change with `waited` and `now`; EASY backfills depend on the clock.
            cycle.stable_until(now);
        }
        cycle
    }

    /// Hands the cycle's buffers back to `scratch` for the next cycle; returns the plan.
    fn finish(mut self, scratch: &mut Scratch) -> Plan {
        let node_slots = match self.node_index.take() {
            Some(names) => names.into_slots(),
            None => self.node_slots.take(),
        };
        let (free, private) = self.private.into_buffers();
        *scratch = Scratch {
            private,
            free,
            cloud_free: self.cloud_free,
            cloud_claimed: self.cloud_claimed,
            cloud_nodes: self.cloud_nodes,
            job_queue: self.job_queue,
            queue_state: self.queue_state,
            unplaced: self.unplaced,
            suspended: self.suspended,
            releases: self.releases,
            reservations: self.reservations,
            capacity_slots: self.capacity_slots,
            per_queue: self.per_queue,
            lanes: self.lanes,
            waiting: self.waiting,
            queue_slots: self.queues.into_slots(),
            pool_slots: self.pools.into_slots(),
            node_slots,
            pool_usage: self.pool_usage,
            profile: self.profile.or(self.spare_profile),
            deferred: self.deferred.or(self.spare_deferred),
            offerings: self.offerings.into_inner(),
        };
        self.plan
    }

    /// Whether some instance was launched for `need`.
    fn need_in_flight(&self, need: &str) -> bool {
        let snap = self.snap;
        self.needs_in_flight
            .get_or_init(|| snap.instances.iter().map(|i| i.need.as_str()).collect())
            .contains(need)
    }

    /// The index of the node named `name` in `snapshot.nodes`.
    fn node_at(&self, name: &str) -> Option<usize> {
        let snap = self.snap;
        self.node_index
            .get_or_init(|| names::NodeNames::new_in(&snap.nodes, self.node_slots.take()))
            .get(name)
    }

    fn run(mut self, scratch: &mut Scratch) -> Plan {
        let snap = self.snap;
        // Decisions are for the jobs not running (and the few moved home).
        self.plan.decisions.reserve(self.unplaced.len());
        // Step 2: provisioning jobs; the rest is rejected when it can never run, else goes
        // through the passes. One pass over the jobs not running (each is large: touched once
        // per cycle here), with the rejections decided after the provisioning jobs' decisions.
        let mut rejects: Vec<(usize, Reason, String)> = Vec::new();
        let mut per_queue = std::mem::take(&mut self.per_queue);
        per_queue.resize_with(snap.queues.len(), Vec::new);
        per_queue.iter_mut().for_each(Vec::clear);
        for i in std::mem::take(&mut self.unplaced) {
            let job = &snap.jobs[i];
            let plan_it = match &job.state {
                JobState::Pending => true,
                // Its launch failed or its instances are gone, or those left can no longer
                // hold it: plan it again.
                JobState::Provisioning { need, pool } => {
                    !(self.need_in_flight(need) && self.provisioning(job, need, pool))
                }
                // Its private nodes are gone: plan it again.
                JobState::Suspended { nodes, pool, ready } => {
                    !self.resume(job, nodes, pool, *ready)
                }
                JobState::Running { .. } => false,
            };
            if !plan_it {
                continue;
            }
            match (self.invalid(i, job), self.job_queue[i]) {
                (Some((reason, message)), _) => rejects.push((i, reason, message)),
                (None, Some(q)) => per_queue[q].push((
                    std::cmp::Reverse(job.priority),
                    self.plan_order(job, &snap.queues[q]),
                    i,
                )),
                // `invalid` rejects a job whose queue does not exist.
                (None, None) => {}
            }
        }
        for (i, reason, message) in rejects {
            self.decide_job(&snap.jobs[i], Outcome::Reject, reason, message, None);
        }

        // Step 3: private pass.
        let mut waiting = self.private_pass(per_queue);
        // Step 4: burst pass.
        for w in waiting.drain(..) {
            self.burst(w);
        }
        self.waiting = waiting;
        // Step 4, continued: restartable cloud jobs cheaper to finish on the private GPUs left
        // move home.
        self.repatriate();
        // Step 5: scale-down.
        self.scale_down();
        self.finish(scratch)
    }

    fn decide_job(
        &mut self,
        job: &Job,
        outcome: Outcome,
        reason: Reason,
        message: String,
        rule: Option<String>,
    ) {
        if outcome == Outcome::Reject
            && reason == Reason::NeverFits
            && let Some(why) = self.unmet_requirements(job)
        {
            if self.settings.wait_decisions {
                let d = Decision::new(&job.id, Outcome::Wait, Reason::RequirementsUnmet, why, None);
                self.plan.decisions.push(d);
            }
            return;
        }
        self.plan
            .decisions
            .push(Decision::new(&job.id, outcome, reason, message, rule));
    }

    /// Starts a provisioning job whose instances have all joined, or decides that it waits
    /// for them. `false` when they cannot hold it even once all have joined (a gang's need lost
    /// one of its instances before the job started: interrupted, or terminated by hand):
    /// nothing is claimed or decided, and the job is planned again like a pending one (the
    /// instances left are idle cloud capacity to place it or others on, or to scale down).
    fn provisioning(&mut self, job: &'a Job, need: &str, pool: &str) -> bool {
        let snap = self.snap;
        let instances: Vec<&crate::Instance> =
            snap.instances.iter().filter(|i| i.need == need).collect();
        if !job.fits_in_instances(instances.iter().map(|i| i.gpus)) {
            return false;
        }
        let mut joined: Vec<usize> = instances
            .iter()
            .filter_map(|i| i.node.as_deref())
            .filter_map(|n| self.node_at(n))
            .collect();
        // Every node of the need is the job's, ready or not: one that joined but is not
        // schedulable yet (not Ready) is not idle capacity to scale down under the job
        // waiting for it.
        for &n in &joined {
            self.cloud_claimed[n] = true;
        }
        joined.retain(|&n| snap.nodes[n].schedulable);
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
                self.say(|| {
                    format!(
                        "The {} instance(s) launched for job {} have joined; starting there.",
                        instances.len(),
                        job.id
                    )
                }),
                None,
                Some(hourly),
            );
            return true;
        }
        let message = self.say(|| {
            format!(
                "Waiting for {} of {} instance(s) launched for this job to join the cluster.",
                instances.len() - joined.len().min(instances.len()),
                instances.len()
            )
        });
        self.decide_job(job, Outcome::Wait, Reason::Provisioning, message, None);
        true
    }

    /// Places a gang on the given cloud nodes (best fit), taking their GPUs.
    fn fit_cloud(&mut self, job: &Job, candidates: &[usize]) -> Option<Vec<usize>> {
        let g = job.gpus_per_replica;
        let mut order: Vec<usize> = candidates.to_vec();
        order.sort_by_key(|&n| (self.cloud_free[n], n));
        order.dedup();
        let mut placed = Vec::new();
        for n in order {
            if !job.accepts_node(&self.snap.nodes[n]) {
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
        let outcome = match env {
            Environment::Private => Outcome::StartPrivate,
            Environment::Cloud => Outcome::StartCloud,
            Environment::Remote => Outcome::StartRemote,
        };
        self.plan.starts.push(Start {
            job: job.id.clone(),
            environment: env,
            pool: pool.to_string(),
            nodes: names,
        });
        let egress = (env != Environment::Private).then(|| self.egress_to(job, pool));
        self.plan.decisions.push(Decision {
            estimated_wait: Some(Duration::ZERO),
            estimated_hourly_cost: hourly,
            estimated_egress_usd: egress,
            ..Decision::new(&job.id, outcome, reason, message, rule)
        });
        if let Some(state) = self.state_mut(&job.queue) {
            state.pending_jobs = state.pending_jobs.saturating_sub(1);
            state.running_jobs += 1;
            match env {
                Environment::Private => state.private_gpus_in_use += job.total_gpus(),
                Environment::Cloud => state.cloud_gpus_in_use += job.total_gpus(),
                Environment::Remote => state.remote_gpus_in_use += job.total_gpus(),
            }
        }
    }

    /// Per offering: its pool, when that is a cloud pool.
    fn offering_pool(&self, i: usize) -> Option<&'a crate::Pool> {
        let pools = self.offering_pool.get_or_init(|| {
            // Offerings come grouped by pool: look a name up only when it changes.
            let mut last: Option<(&str, Option<&crate::Pool>)> = None;
            self.snap
                .offerings
                .iter()
                .map(|o| match last {
                    Some((name, pool)) if name == o.pool => pool,
                    _ => {
                        let pool = self.pools.item(&o.pool).filter(|p| p.is_cloud());
                        last = Some((o.pool.as_str(), pool));
                        pool
                    }
                })
                .collect()
        });
        pools[i]
    }

    /// The queue named `name`, if it exists.
    fn queue(&self, name: &str) -> Option<&'a Queue> {
        self.queues.item(name)
    }

    /// This cycle's figures of the queue named `name`, if it exists.
    fn state(&self, name: &str) -> Option<&QueueState> {
        self.queues.get(name).map(|q| &self.queue_state[q])
    }

    fn state_mut(&mut self, name: &str) -> Option<&mut QueueState> {
        self.queues.get(name).map(|q| &mut self.queue_state[q])
    }

    fn waited(&self, job: &Job) -> Duration {
        self.now.since(job.queued_at)
    }

    fn effects(&self, job: &'a Job) -> Effects {
        if self.policy.is_empty() {
            return Effects::default();
        }
        let Some(q) = self.queues.get(&job.queue) else {
            return Effects::default();
        };
        let (queue, state) = (&self.snap.queues[q], &self.queue_state[q]);
        let ctx = PolicyContext {
            job,
            queue,
            queue_state: state,
            datasets: self.datasets_of(job),
            waited: self.waited(job),
            now: self.now,
        };
        self.policy.effects(&ctx)
    }

    /// The datasets `job` reads that exist.
    fn datasets_of(&self, job: &Job) -> Vec<&'a crate::Dataset> {
        job.datasets
            .iter()
            .filter_map(|d| self.datasets.get(d.as_str()).copied())
            .collect()
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
        let queue = self.queue(&job.queue)?;
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
        // With cluster pools, a rule that forbids the cloud leaves them open: the burst pass
        // tries them and then says why the cloud is closed.
        if let Some(rule) = effects.forbids(Environment::Cloud)
            && !self.has_remote_pools
        {
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
}

/// A job that did not start in the private pass.
pub(super) struct Waiting {
    job: usize,
    /// The rules' effects; `None` when no rule said anything (most jobs, kept small).
    effects: Option<Box<Effects>>,
    /// Estimated private start, when known.
    private_estimate: Option<Time>,
    /// No private node could ever hold the gang.
    never_private: bool,
    /// Why the private side was not tried.
    private_block: Option<(Reason, Option<String>)>,
    /// A gang that must stay within one topology domain and none has room now: why.
    topology_unfit: Option<String>,
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
    repatriate: None,
};

impl Waiting {
    fn effects(&self) -> &Effects {
        self.effects.as_deref().unwrap_or(&NO_EFFECTS)
    }
}

/// When a job running privately since `started_at` is expected to end, and until when that
/// expectation (and the release it plans) stays as it is; `None`: no runtime to go by.
fn expected_end(job: &Job, started_at: Time, now: Time) -> Option<(Time, Time)> {
    let r = job.planning_runtime()?;
    let end = started_at + r;
    if end > now {
        // Past `end - 1 s` the planner clamps the release to a second from now.
        Some((end, end - Duration::from_secs(1)))
    } else {
        // Overrunning its estimate: expect it to run as long again as it has overrun (at least
        // a minute), so the expectation recedes while it keeps running instead of staying
        // "soon" forever; it moves with the clock.
        Some((now + now.since(end).max(Duration::from_secs(60)), now))
    }
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
