//! The discrete-event engine: a virtual clock, a simulated private cluster and a simulated
//! cloud, driven by the same `spillway_core::decide` the operator calls.
//!
//! Events are job arrivals, job completions, changes of the cloud (a machine finished booting,
//! a spot instance was reclaimed) and wake-ups that `decide` asks for (wait thresholds, idle
//! timeouts). All events at one instant are applied first, then `decide` runs once and its plan
//! is applied.
//!
//! The cloud is a [`SimCloud`]: the engine launches, looks up and terminates instances through
//! the `CloudProvider` trait the operator drives EC2 with. A running instance joins as a node;
//! it is billed per second from launch to termination with a 60 s minimum; a failed launch makes
//! that offering unavailable for `capacity_cooldown` (as in the operator); a reclaimed spot
//! instance stops its jobs and is remembered against its offering
//! (`offering.recentInterruptions`). Restartable jobs resume elsewhere with the work they had
//! left (they checkpoint); others start over.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use spillway_cloud::{CloudInstance, CloudProvider, Image, InstanceState, LaunchRequest};
use spillway_core::spot::SpotHistory;
use spillway_core::{
    Duration, FastMap, GpuModel, Instance, Job, JobState, Node, Offering, Plan, Policy, Snapshot,
    Time, Tracked,
};

mod outcome;
mod positions;
mod remote;
mod stops;

use positions::Positions;

pub use outcome::{JobRecord, Outcome, Sample};
pub use remote::PoolSpend;

use crate::cloud::{CloudModel, SimCloud, now_or_error};
use crate::trace::TraceJob;

/// The `spillway.io/cluster` tag of the simulator's instances.
const CLUSTER: &str = "simulate";

/// Everything a replay needs besides the trace.
#[derive(Clone, Debug)]
pub struct World {
    pub snapshot: Snapshot,
    pub boot_delay: Duration,
    pub capacity_error_rate: f64,
    pub capacity_cooldown: Duration,
    pub spot_interruptions_per_hour: f64,
    /// How long before a spot interruption the cloud warns of it; zero: no warning (the
    /// interruption is seen when the instance is gone).
    pub interruption_warning: Duration,
    pub seed: u64,
    /// The runtime estimates jobs carry.
    pub estimates: crate::estimates::Estimates,
    /// How often restartable jobs checkpoint (`None`: they lose no work when stopped).
    pub checkpoint_interval: Option<Duration>,
    /// Decide at every instant, never skipping one the last plan shows unchanged.
    pub decide_every_event: bool,
    /// Bind every gang of more than one replica to one rack (`--private-topology`).
    pub bind_gangs: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Job (trace index) finishes, if it is still on attempt `attempt`.
    Finish {
        job: usize,
        attempt: u32,
    },
    Wake,
}

struct SimInstance {
    core: Instance,
    gpu_model: GpuModel,
    alive: bool,
}

/// After this many fruitless wake-ups with nothing running or arriving, a replay stops and
/// reports the jobs left as unfinished.
const STALL_CYCLES: u32 = 1000;

/// Replays `trace` in `world` with `policy`.
pub fn run(world: &World, trace: &[TraceJob], policy: &dyn Policy) -> Outcome {
    Engine::new(world, trace, policy).run(&mut |_, _| {})
}

/// [`run`], calling `progress(arrived, total)` every few thousand arrivals.
pub fn run_with_progress(
    world: &World,
    trace: &[TraceJob],
    policy: &dyn Policy,
    progress: &mut dyn FnMut(usize, usize),
) -> Outcome {
    Engine::new(world, trace, policy).run(progress)
}

struct Engine<'a> {
    world: &'a World,
    trace: &'a [TraceJob],
    policy: &'a dyn Policy,
    /// The world `decide` sees, changed in place (jobs' queues and nodes found once).
    snap: Tracked,
    /// Position of each trace job in the snapshot's jobs, if it is there.
    pos: Positions,
    /// Trace index of each entry of the snapshot's jobs.
    trace_of: Vec<usize>,
    /// Remaining work of each trace job, seconds.
    remaining: Vec<f64>,
    attempt: Vec<u32>,
    /// When each trace job was last interrupted and has not run since.
    interrupted_at: Vec<Option<i64>>,
    instances: Vec<SimInstance>,
    instance_by_id: FastMap<String, usize>,
    /// Instances (indexes into `instances`) per need.
    instances_of_need: FastMap<String, Vec<usize>>,
    cloud: SimCloud,
    spot: SpotHistory,
    events: BinaryHeap<Reverse<(i64, u64, Event)>>,
    wakes: BTreeSet<i64>,
    seq: u64,
    out: Outcome,
    next_arrival: usize,
    private_busy: u32,
    cloud_busy: u32,
    remote: remote::RemoteUse,
    running: u32,
    last_t: i64,
    /// Consecutive cycles in which nothing but wake-ups happened and the plan changed nothing.
    idle_cycles: u32,
    /// The last plan, when it asked for nothing (so the world is still the one it was decided
    /// on, plus what arrived since) and has quiet queues: those, and until when it holds.
    quiet: Option<(spillway_core::Quiet, Option<i64>)>,
    /// Job id in the snapshot -> trace index.
    ids: FastMap<String, usize>,
    /// `decide`'s working buffers, kept from one cycle to the next.
    scratch: spillway_core::Scratch,
}

impl<'a> Engine<'a> {
    fn new(world: &'a World, trace: &'a [TraceJob], policy: &'a dyn Policy) -> Engine<'a> {
        let snap = &world.snapshot;
        let private_gpus = snap
            .nodes
            .iter()
            .filter(|n| {
                snap.pools.iter().any(|p| {
                    p.name == n.pool && p.environment() == spillway_core::Environment::Private
                })
            })
            .map(|n| n.gpus)
            .sum();
        Engine {
            world,
            trace,
            policy,
            snap: Tracked::new(snap.clone()),
            pos: Positions(vec![Positions::NONE; trace.len()]),
            trace_of: Vec::new(),
            remaining: trace.iter().map(|j| j.runtime_s).collect(),
            attempt: vec![0; trace.len()],
            interrupted_at: vec![None; trace.len()],
            instances: Vec::new(),
            instance_by_id: FastMap::default(),
            instances_of_need: FastMap::default(),
            cloud: SimCloud::new(
                CloudModel {
                    boot_delay: world.boot_delay,
                    capacity_error_rate: world.capacity_error_rate,
                    spot_interruptions_per_hour: world.spot_interruptions_per_hour,
                    interruption_warning: world.interruption_warning,
                    seed: world.seed,
                },
                world.snapshot.offerings.clone(),
            ),
            spot: SpotHistory::default(),
            events: BinaryHeap::new(),
            wakes: BTreeSet::new(),
            seq: 0,
            out: Outcome {
                jobs: trace
                    .iter()
                    .map(|j| JobRecord {
                        arrival_s: j.arrival_s,
                        gpus: j.gpus * j.replicas,
                        runtime_s: j.runtime_s,
                        gpu_percent: j.gpu_percent,
                        replicas: j.replicas.max(1),
                        ..Default::default()
                    })
                    .collect(),
                private_gpus,
                ..Default::default()
            },
            next_arrival: 0,
            private_busy: 0,
            cloud_busy: 0,
            remote: remote::RemoteUse::new(snap),
            running: 0,
            last_t: 0,
            idle_cycles: 0,
            quiet: None,
            ids: FastMap::default(),
            scratch: spillway_core::Scratch::new(),
        }
    }

    fn push(&mut self, t: i64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    fn ms(s: f64) -> i64 {
        (s * 1000.0).round() as i64
    }

    fn run(mut self, progress: &mut dyn FnMut(usize, usize)) -> Outcome {
        if let Some(first) = self.trace.first() {
            self.last_t = Self::ms(first.arrival_s);
        }
        loop {
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            let next_arrival = self
                .trace
                .get(self.next_arrival)
                .map(|j| Self::ms(j.arrival_s));
            let next_cloud = self.cloud.next_change().map(Time::as_millis);
            let Some(t) = [next_event, next_arrival, next_cloud]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            self.advance(t);
            let mut only_wakes = true;
            // Whether only jobs arrived, and from which position of `snap.jobs` on.
            let mut only_arrivals = true;
            let arrived_from = self.snap.snapshot().jobs.len();
            for need in self.cloud.advance_to(Time::from_millis(t)) {
                only_wakes = false;
                only_arrivals = false;
                self.sync_need(&need, t);
            }
            for (instance, _) in self.cloud.take_warnings() {
                only_wakes = false;
                only_arrivals = false;
                self.warned(&instance, t);
            }
            while self
                .trace
                .get(self.next_arrival)
                .is_some_and(|j| Self::ms(j.arrival_s) == t)
            {
                self.arrive(self.next_arrival, t);
                self.next_arrival += 1;
                if self.next_arrival.is_multiple_of(4096) {
                    progress(self.next_arrival, self.trace.len());
                }
            }
            while let Some(Reverse((et, _, _))) = self.events.peek() {
                if *et != t {
                    break;
                }
                let Some(Reverse((_, _, e))) = self.events.pop() else {
                    break;
                };
                only_wakes &= e == Event::Wake;
                only_arrivals = false;
                self.apply_event(e, t);
            }
            self.wakes.remove(&t);
            // Once anything was reclaimed, keep the offerings' counts current (they fall back
            // to zero as the window passes).
            if self.out.spot_interruptions > 0 {
                self.spot.forget(Time::from_millis(t));
                self.spot
                    .apply(self.snap.offerings_mut(), Time::from_millis(t));
            }
            if only_arrivals && self.unchanged_by_arrivals(arrived_from, t) {
                // Deciding again would give the last plan, which asked for nothing.
                self.out.cycles_skipped += 1;
                self.idle_cycles = 0;
                self.sample(t);
                continue;
            }
            let plan = self
                .snap
                .decide(self.policy, Time::from_millis(t), &mut self.scratch);
            self.out.decide_calls += 1;
            self.quiet = (!self.world.decide_every_event
                && !plan.quiet.is_empty()
                && plan.is_empty()
                && self.out.spot_interruptions == 0)
                .then(|| {
                    let until = plan.holds_until(self.snap.snapshot(), Time::from_millis(t));
                    (plan.quiet.clone(), until.map(Time::as_millis))
                });
            let launched_before = self.out.instances_launched;
            let progressed = !(plan.starts.is_empty()
                && plan.terminations.is_empty()
                && plan.preemptions.is_empty()
                && plan.moves.is_empty());
            self.apply_plan(plan, t);
            if self.world.bind_gangs {
                self.note_rack_waits();
            }
            let changed = progressed || self.out.instances_launched != launched_before;
            if only_wakes && !changed && self.next_arrival >= self.trace.len() && self.running == 0
            {
                // Nothing runs, nothing arrives, and deciding again changes nothing (for
                // example every offering keeps failing): the rest can never run.
                self.idle_cycles += 1;
                if self.idle_cycles > STALL_CYCLES {
                    self.sample(t);
                    break;
                }
            } else {
                self.idle_cycles = 0;
            }
            self.sample(t);
        }
        // Anything still running in the cloud is stopped at the end.
        let end = self.last_t;
        for i in 0..self.instances.len() {
            if self.instances[i].alive {
                self.terminate_instance(i, end);
            }
        }
        self.out.end_s = end as f64 / 1000.0;
        self.out.remote = std::mem::take(&mut self.remote).into_spend();
        self.out
    }

    /// Whether the jobs that arrived at `t` (from position `from` of the snapshot on) leave
    /// the last plan as it is: it asked for nothing, it holds at `t`, and its quiet queues
    /// pass every one of them over ([`spillway_core::Quiet`]). Offerings change with spot
    /// reclaims, so once one happened every instant is decided.
    fn unchanged_by_arrivals(&self, from: usize, t: i64) -> bool {
        let Some((quiet, until)) = &self.quiet else {
            return false;
        };
        let snap = self.snap.snapshot();
        from < snap.jobs.len()
            && until.is_none_or(|u| t < u)
            && snap.jobs[from..].iter().all(|j| quiet.absorbs(snap, j))
    }

    /// Moves the clock, accruing busy GPU time.
    fn advance(&mut self, t: i64) {
        let dt = (t - self.last_t).max(0) as f64 / 1000.0;
        self.out.private_busy_gpu_seconds += self.private_busy as f64 * dt;
        self.remote.advance(dt);
        self.last_t = self.last_t.max(t);
    }

    fn arrive(&mut self, i: usize, t: i64) {
        let tj = &self.trace[i];
        let queue = tj.queue.clone().unwrap_or_else(|| {
            self.snap
                .snapshot()
                .queues
                .first()
                .map(|q| q.name.clone())
                .unwrap_or_default()
        });
        let mut id = format!("trace/{}", tj.id);
        if self.ids.contains_key(&id) {
            id = format!("trace/{}#{i}", tj.id);
        }
        self.ids.insert(id.clone(), i);
        let mut job = Job::new(id, queue, tj.gpus, Time::from_millis(t));
        job.replicas = tj.replicas.max(1);
        if self.world.bind_gangs && job.replicas > 1 {
            job.topology = Some(crate::topology::wish());
        }
        job.priority = tj.priority;
        job.restartable = tj.restartable;
        if let Some(kind) = &tj.kind {
            job.kind = kind.clone();
        }
        if tj.restartable {
            job.checkpoint_interval = self.world.checkpoint_interval;
        }
        job.gpu_models = tj.gpu_models.clone();
        job.requirements = tj.requirements.clone();
        job.datasets = tj.datasets.clone();
        let estimate = self.world.estimates.of(tj, i, self.world.seed);
        job.estimated_runtime = estimate.map(|s| Duration::from_millis((s * 1000.0) as u64));
        self.pos.set(i, self.snap.snapshot().jobs.len());
        self.trace_of.push(i);
        self.snap.push_job(job);
    }

    fn remove_job(&mut self, i: usize) {
        let Some(p) = self.pos.remove(i) else { return };
        // Keep arrival order (decide sorts by arrival; sorted input sorts in linear time).
        self.snap.remove_job(p);
        self.trace_of.remove(p);
        for (q, &i) in self.trace_of.iter().enumerate().skip(p) {
            self.pos.set(i, q);
        }
    }

    fn apply_event(&mut self, e: Event, t: i64) {
        match e {
            Event::Wake => {}
            Event::Finish { job, attempt } => {
                if self.attempt[job] != attempt {
                    return;
                }
                let Some(p) = self.pos.get(job) else { return };
                let j = self.snap.job_mut(p);
                if let JobState::Running { nodes, .. } = &mut j.state {
                    // The job leaves the snapshot: its node list is taken, not copied.
                    let nodes = std::mem::take(nodes);
                    let g = j.gpus_per_replica;
                    self.release(&nodes, g, t);
                    self.out.jobs[job].finish_s = Some(t as f64 / 1000.0);
                    self.running -= 1;
                    self.remove_job(job);
                }
            }
        }
    }

    /// Asks the cloud about one need's instances (as the operator's poller lists them) and
    /// follows what changed: a running instance joins as a node; one that is gone without
    /// the engine terminating it was reclaimed, and its jobs stop.
    fn sync_need(&mut self, need: &str, t: i64) {
        let listed = match now_or_error(self.cloud.instances_for_need(CLUSTER, need)) {
            Ok(l) => l,
            // The simulated cloud always answers; were it not to, the next change retries.
            Err(_) => return,
        };
        let mine = self
            .instances_of_need
            .get(need)
            .cloned()
            .unwrap_or_default();
        let states: HashMap<&str, InstanceState> =
            listed.iter().map(|i| (i.id.as_str(), i.state)).collect();
        for idx in mine {
            if !self.instances[idx].alive {
                continue;
            }
            let id = self.instances[idx].core.id.clone();
            match states.get(id.as_str()).copied() {
                Some(InstanceState::Running) if self.instances[idx].core.node.is_none() => {
                    self.join(idx, t)
                }
                Some(s) if !s.is_gone() => {}
                _ => self.reclaimed(idx, t),
            }
        }
    }

    /// A running instance becomes a node.
    fn join(&mut self, instance: usize, t: i64) {
        let inst = &self.instances[instance].core;
        let name = format!("{}-{}", inst.instance_type, inst.id);
        // What its pool promised (see `environment`).
        let offered = (self.snap.snapshot().offerings.iter())
            .find(|o| o.pool == inst.pool && o.instance_type == inst.instance_type);
        let node = Node {
            facts: offered.map(|o| o.facts.clone()).unwrap_or_default(),
            name: name.clone(),
            pool: inst.pool.clone(),
            gpu_model: Some(self.instances[instance].gpu_model.clone()),
            gpus: inst.gpus,
            free_gpus: inst.gpus,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: Some(inst.id.clone()),
            idle_since: Some(Time::from_millis(t)),
            domains: Vec::new(),
        };
        self.snap.push_node(node);
        self.instances[instance].core.node = Some(name.clone());
        if let Some(si) = self
            .snap
            .instances_mut()
            .iter_mut()
            .find(|i| i.id == self.instances[instance].core.id)
        {
            si.node = Some(name);
        }
    }

    /// Gives a finished or stopped job's GPUs back.
    fn release(&mut self, nodes: &[String], g: u32, t: i64) {
        for n in nodes {
            let Some(i) = self.snap.node_position(n) else {
                continue;
            };
            let mut node = self.snap.node_mut(i);
            node.free_gpus = (node.free_gpus + g).min(node.gpus);
            let cloud = node.instance_id.is_some();
            if cloud {
                self.cloud_busy = self.cloud_busy.saturating_sub(g);
                if node.free_gpus == node.gpus {
                    node.idle_since = Some(Time::from_millis(t));
                }
            } else if self.remote.is_remote(&node.pool) {
                let pool = node.pool.clone();
                self.remote.give_back(&pool, g);
            } else {
                self.private_busy = self.private_busy.saturating_sub(g);
            }
        }
    }

    /// Terminates an instance through the provider, then forgets it.
    fn terminate_instance(&mut self, i: usize, t: i64) {
        if !self.instances[i].alive {
            return;
        }
        let ids = [self.instances[i].core.id.clone()];
        // A refused termination is asked again by the next plan.
        if now_or_error(self.cloud.terminate(&ids)).is_ok() {
            self.forget_instance(i, t);
        }
    }

    /// Bills an instance up to `t` and removes it and its node from the snapshot.
    fn forget_instance(&mut self, i: usize, t: i64) {
        let inst = &mut self.instances[i];
        if !inst.alive {
            return;
        }
        inst.alive = false;
        let secs = ((t - inst.core.launched_at.as_millis()) as f64 / 1000.0).max(60.0);
        let (cost, gpu_seconds) = (
            inst.core.hourly_price * secs / 3600.0,
            inst.core.gpus as f64 * secs,
        );
        self.out.cloud_cost_usd += cost;
        self.out.cloud_gpu_seconds += gpu_seconds;
        remote::add_spend(
            &mut self.out.cloud_by_pool,
            &inst.core.pool,
            gpu_seconds,
            cost,
        );
        let id = inst.core.id.clone();
        if let Some(node) = inst.core.node.as_deref()
            && let Some(p) = self.snap.node_position(node)
        {
            self.snap.swap_remove_node(p);
        }
        self.snap.instances_mut().retain(|x| x.id != id);
    }

    /// Marks each bound gang that waits although its replicas would fit on the private nodes
    /// if it could span racks.
    fn note_rack_waits(&mut self) {
        let snap = self.snap.snapshot();
        for (p, job) in snap.jobs.iter().enumerate() {
            if job.topology.is_some()
                && matches!(job.state, JobState::Pending)
                && crate::topology::held_by_racks(snap, job)
                && let Some(&i) = self.trace_of.get(p)
            {
                self.out.jobs[i].waited_for_domain = true;
            }
        }
    }

    fn apply_plan(&mut self, plan: Plan, t: i64) {
        for d in &plan.decisions {
            if d.outcome == spillway_core::Outcome::Reject
                && let Some(i) = self.trace_index(&d.job)
            {
                self.out.jobs[i].rejected = true;
                self.remove_job(i);
            }
        }
        // Preempted jobs stop at once (grace periods are not simulated); the GPUs go to the
        // reclaiming job at the next cycle, at the same instant.
        for p in &plan.preemptions {
            if let Some(i) = self.trace_index(&p.job) {
                self.out.preemptions += 1;
                self.out.preempted_gpu_seconds_lost += self.requeue(i, t);
                self.push(t, Event::Wake);
            }
        }
        for m in &plan.moves {
            if let Some(i) = self.trace_index(&m.job) {
                self.move_home(i, m, t);
            }
        }
        for start in plan.starts {
            let Some(i) = self.trace_index(&start.job) else {
                continue;
            };
            let Some(p) = self.pos.get(i) else { continue };
            let g = self.snap.snapshot().jobs[p].gpus_per_replica;
            if self.out.jobs[i].start_s.is_none() && self.out.jobs[i].replicas > 1 {
                self.out.jobs[i].racks =
                    crate::topology::racks_spanned(self.snap.snapshot(), start.nodes.iter());
            }
            let environment = start.environment;
            let cloud = environment == spillway_core::Environment::Cloud;
            for n in &start.nodes {
                if let Some(ni) = self.snap.node_position(n) {
                    let mut node = self.snap.node_mut(ni);
                    node.free_gpus = node.free_gpus.saturating_sub(g);
                    node.idle_since = None;
                }
                match environment {
                    spillway_core::Environment::Cloud => self.cloud_busy += g,
                    spillway_core::Environment::Remote => self.remote.take(&start.pool, g),
                    spillway_core::Environment::Private => self.private_busy += g,
                }
            }
            self.snap.job_mut(p).state = JobState::Running {
                nodes: start.nodes,
                started_at: Time::from_millis(t),
                environment,
            };
            self.running += 1;
            self.restarted(i, t);
            let rec = &mut self.out.jobs[i];
            if rec.start_s.is_none() {
                rec.start_s = Some(t as f64 / 1000.0);
            }
            if rec.moves == 0 {
                rec.cloud = cloud;
                rec.remote = environment == spillway_core::Environment::Remote;
            }
            let attempt = self.attempt[i];
            self.push(
                t.saturating_add(Self::ms(self.remaining[i])),
                Event::Finish { job: i, attempt },
            );
        }
        for launch in plan.launches {
            let Some(i) = self.trace_index(&launch.job) else {
                continue;
            };
            let Some(p) = self.pos.get(i) else { continue };
            let o = &launch.offering;
            let request = LaunchRequest {
                cluster: CLUSTER.to_string(),
                pool: o.pool.clone(),
                job: launch.job.clone(),
                queue: launch.queue.clone(),
                need: launch.need.clone(),
                instance_type: o.instance_type.clone(),
                capacity_type: o.capacity_type,
                zone: Some(o.zone.clone()),
                count: launch.count.max(1),
                image: Image::Ami("ami-simulated".into()),
                subnet_ids: Vec::new(),
                security_group_ids: Vec::new(),
                iam_instance_profile: None,
                tags: Default::default(),
                user_data: None,
                token_generation: 0,
                placement_group: None,
                efa: false,
            };
            let launched: Vec<CloudInstance> = match now_or_error(self.cloud.launch(&request)) {
                Ok(l) => l,
                Err(_) => {
                    // As in the operator: the offering cools down and the next decision
                    // picks another one.
                    self.out.capacity_errors += 1;
                    let until = Time::from_millis(t) + self.world.capacity_cooldown;
                    for off in self
                        .snap
                        .offerings_mut()
                        .iter_mut()
                        .filter(|x| same_offering(x, o))
                    {
                        off.unavailable_until = Some(until);
                    }
                    self.push(t, Event::Wake);
                    self.push(until.as_millis(), Event::Wake);
                    continue;
                }
            };
            let gpu_model = self
                .snap
                .snapshot()
                .offerings
                .iter()
                .find(|x| same_offering(x, o))
                .map(|x| x.gpu_model.clone())
                .unwrap_or_else(|| GpuModel::normalize("unknown"));
            for ci in launched {
                let idx = self.instances.len();
                let core = Instance {
                    id: ci.id.clone(),
                    pool: o.pool.clone(),
                    instance_type: o.instance_type.clone(),
                    capacity_type: o.capacity_type,
                    zone: o.zone.clone(),
                    gpus: o.gpus_per_instance,
                    hourly_price: o.hourly_price,
                    need: launch.need.clone(),
                    queue: launch.queue.clone(),
                    node: None,
                    launched_at: ci.launched_at,
                };
                self.snap.instances_mut().push(core.clone());
                self.instance_by_id.insert(ci.id, idx);
                self.instances_of_need
                    .entry(launch.need.clone())
                    .or_default()
                    .push(idx);
                self.instances.push(SimInstance {
                    core,
                    gpu_model: gpu_model.clone(),
                    alive: true,
                });
                self.out.instances_launched += 1;
            }
            self.snap.job_mut(p).state = JobState::Provisioning {
                need: launch.need.clone(),
                pool: o.pool.clone(),
            };
        }
        for term in plan.terminations {
            if let Some(id) = term.instance_id
                && let Some(&i) = self.instance_by_id.get(&id)
            {
                self.terminate_instance(i, t);
            }
        }
        if let Some(w) = plan.next_wake {
            let w = w.as_millis();
            if w > t && self.wakes.insert(w) {
                self.push(w, Event::Wake);
            }
        }
    }

    fn trace_index(&self, id: &str) -> Option<usize> {
        self.ids.get(id).copied()
    }

    fn sample(&mut self, t: i64) {
        let jobs = self.snap.snapshot().jobs.len() as u32;
        let queued = jobs - self.running.min(jobs);
        let s = Sample {
            t_s: t as f64 / 1000.0,
            queued,
            private_busy_gpus: self.private_busy,
            cloud_busy_gpus: self.cloud_busy,
            cloud_spend_usd: self.out.cloud_cost_usd + self.accrued_live(t),
            remote_busy_gpus: self.remote.busy(),
            remote_spend_usd: self.remote.cost(),
        };
        if self.out.samples.last().is_some_and(|l| l.t_s == s.t_s) {
            self.out.samples.pop();
        }
        self.out.samples.push(s);
    }

    fn accrued_live(&self, t: i64) -> f64 {
        // The snapshot holds exactly the live instances.
        self.snap
            .snapshot()
            .instances
            .iter()
            .map(|i| {
                i.hourly_price * ((t - i.launched_at.as_millis()) as f64 / 1000.0).max(60.0)
                    / 3600.0
            })
            .sum()
    }
}

fn same_offering(o: &Offering, c: &spillway_core::OfferingChoice) -> bool {
    o.pool == c.pool
        && o.instance_type == c.instance_type
        && o.capacity_type == c.capacity_type
        && o.zone == c.zone
}
