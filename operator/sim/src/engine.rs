//! The discrete-event engine: a virtual clock, a simulated private cluster and a simulated
//! cloud, driven by the same `spillway_core::decide` the operator calls.
//!
//! Events are job arrivals, job completions, instances becoming nodes, spot interruptions and
//! wake-ups that `decide` asks for (wait thresholds, idle timeouts). All events at one instant
//! are applied first, then `decide` runs once and its plan is applied.
//!
//! Cloud model: an instance becomes a node `boot_delay` after launch; it is billed per second
//! from launch to termination with a 60 s minimum; a launch fails with a capacity error with
//! probability `capacity_error_rate`, which makes that offering unavailable for
//! `capacity_cooldown`; a spot instance is interrupted after an exponentially distributed time
//! with rate `spot_interruptions_per_hour`. Restartable jobs resume elsewhere with the work they
//! had left (they checkpoint); others start over.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use spillway_core::{
    CapacityType, Duration, GpuModel, Instance, Job, JobState, Node, Offering, Plan, Policy,
    Snapshot, Time,
};

use crate::trace::TraceJob;

/// Everything a replay needs besides the trace.
#[derive(Clone, Debug)]
pub struct World {
    pub snapshot: Snapshot,
    pub boot_delay: Duration,
    pub capacity_error_rate: f64,
    pub capacity_cooldown: Duration,
    pub spot_interruptions_per_hour: f64,
    pub seed: u64,
    /// Use each job's real runtime as its estimate (how Starburst's simulator works).
    pub oracle_runtimes: bool,
}

/// What happened to one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRecord {
    pub arrival_s: f64,
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    pub cloud: bool,
    pub gpus: u32,
    pub runtime_s: f64,
    pub rejected: bool,
    pub interruptions: u32,
}

/// A point of the time series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub t_s: f64,
    pub queued: u32,
    pub private_busy_gpus: u32,
    pub cloud_busy_gpus: u32,
    pub cloud_spend_usd: f64,
}

/// The outcome of a replay.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub jobs: Vec<JobRecord>,
    pub samples: Vec<Sample>,
    pub cloud_cost_usd: f64,
    pub cloud_gpu_seconds: f64,
    pub private_busy_gpu_seconds: f64,
    pub private_gpus: u32,
    pub instances_launched: u32,
    pub capacity_errors: u32,
    pub spot_interruptions: u32,
    pub decide_calls: u64,
    pub end_s: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Job (trace index) finishes, if it is still on attempt `attempt`.
    Finish {
        job: usize,
        attempt: u32,
    },
    /// Instance (index into `instances`) joins as a node.
    Ready {
        instance: usize,
    },
    /// Spot instance is reclaimed.
    Interrupt {
        instance: usize,
    },
    Wake,
}

/// SplitMix64: small, seedable, good enough for sampling failures.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
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
    snap: Snapshot,
    /// Position of a trace job in `snap.jobs`.
    pos: HashMap<usize, usize>,
    /// Trace index of each entry of `snap.jobs`.
    trace_of: Vec<usize>,
    node_pos: HashMap<String, usize>,
    /// Remaining work of each trace job, seconds.
    remaining: Vec<f64>,
    attempt: Vec<u32>,
    instances: Vec<SimInstance>,
    instance_by_id: HashMap<String, usize>,
    events: BinaryHeap<Reverse<(i64, u64, Event)>>,
    wakes: BTreeSet<i64>,
    seq: u64,
    rng: Rng,
    out: Outcome,
    next_arrival: usize,
    private_busy: u32,
    cloud_busy: u32,
    running: u32,
    last_t: i64,
    /// Consecutive cycles in which nothing but wake-ups happened and the plan changed nothing.
    idle_cycles: u32,
    /// Job id in the snapshot -> trace index.
    ids: HashMap<String, usize>,
}

impl<'a> Engine<'a> {
    fn new(world: &'a World, trace: &'a [TraceJob], policy: &'a dyn Policy) -> Engine<'a> {
        let snap = world.snapshot.clone();
        let private_gpus = snap
            .nodes
            .iter()
            .filter(|n| snap.pools.iter().any(|p| p.name == n.pool && !p.is_cloud()))
            .map(|n| n.gpus)
            .sum();
        let node_pos = snap
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Engine {
            world,
            trace,
            policy,
            snap,
            pos: HashMap::new(),
            trace_of: Vec::new(),
            node_pos,
            remaining: trace.iter().map(|j| j.runtime_s).collect(),
            attempt: vec![0; trace.len()],
            instances: Vec::new(),
            instance_by_id: HashMap::new(),
            events: BinaryHeap::new(),
            wakes: BTreeSet::new(),
            seq: 0,
            rng: Rng(world.seed ^ 0x5eed_5eed),
            out: Outcome {
                jobs: trace
                    .iter()
                    .map(|j| JobRecord {
                        arrival_s: j.arrival_s,
                        gpus: j.gpus * j.replicas,
                        runtime_s: j.runtime_s,
                        ..Default::default()
                    })
                    .collect(),
                private_gpus,
                ..Default::default()
            },
            next_arrival: 0,
            private_busy: 0,
            cloud_busy: 0,
            running: 0,
            last_t: 0,
            idle_cycles: 0,
            ids: HashMap::new(),
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
            let t = match (next_event, next_arrival) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (Some(a), Some(b)) => a.min(b),
            };
            self.advance(t);
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
            let mut only_wakes = true;
            while let Some(Reverse((et, _, _))) = self.events.peek() {
                if *et != t {
                    break;
                }
                let Some(Reverse((_, _, e))) = self.events.pop() else {
                    break;
                };
                only_wakes &= e == Event::Wake;
                self.apply_event(e, t);
            }
            self.wakes.remove(&t);
            let plan = spillway_core::decide(&self.snap, self.policy, Time::from_millis(t));
            self.out.decide_calls += 1;
            let launched_before = self.out.instances_launched;
            let progressed = !(plan.starts.is_empty() && plan.terminations.is_empty());
            self.apply_plan(plan, t);
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
        self.out
    }

    /// Moves the clock, accruing busy GPU time.
    fn advance(&mut self, t: i64) {
        let dt = (t - self.last_t).max(0) as f64 / 1000.0;
        self.out.private_busy_gpu_seconds += self.private_busy as f64 * dt;
        self.last_t = self.last_t.max(t);
    }

    fn arrive(&mut self, i: usize, t: i64) {
        let tj = &self.trace[i];
        let queue = tj.queue.clone().unwrap_or_else(|| {
            self.snap
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
        job.priority = tj.priority;
        job.restartable = tj.restartable;
        job.gpu_models = tj.gpu_models.clone();
        job.datasets = tj.datasets.clone();
        let estimate = if self.world.oracle_runtimes {
            Some(tj.runtime_s)
        } else {
            tj.estimated_runtime_s
        };
        job.estimated_runtime = estimate.map(|s| Duration::from_millis((s * 1000.0) as u64));
        self.pos.insert(i, self.snap.jobs.len());
        self.trace_of.push(i);
        self.snap.jobs.push(job);
    }

    fn remove_job(&mut self, i: usize) {
        let Some(p) = self.pos.remove(&i) else { return };
        // Keep arrival order (decide sorts by arrival; sorted input sorts in linear time).
        self.snap.jobs.remove(p);
        self.trace_of.remove(p);
        for (q, &i) in self.trace_of.iter().enumerate().skip(p) {
            self.pos.insert(i, q);
        }
    }

    fn apply_event(&mut self, e: Event, t: i64) {
        match e {
            Event::Wake => {}
            Event::Finish { job, attempt } => {
                if self.attempt[job] != attempt {
                    return;
                }
                let Some(&p) = self.pos.get(&job) else { return };
                if let JobState::Running { nodes, .. } = self.snap.jobs[p].state.clone() {
                    let g = self.snap.jobs[p].gpus_per_replica;
                    self.release(&nodes, g, t);
                    self.out.jobs[job].finish_s = Some(t as f64 / 1000.0);
                    self.running -= 1;
                    self.remove_job(job);
                }
            }
            Event::Ready { instance } => {
                if !self.instances[instance].alive {
                    return;
                }
                let inst = &self.instances[instance].core;
                let name = format!("{}-{}", inst.instance_type, inst.id);
                let node = Node {
                    name: name.clone(),
                    pool: inst.pool.clone(),
                    gpu_model: Some(self.instances[instance].gpu_model.clone()),
                    gpus: inst.gpus,
                    free_gpus: inst.gpus,
                    schedulable: true,
                    instance_id: Some(inst.id.clone()),
                    idle_since: Some(Time::from_millis(t)),
                };
                self.node_pos.insert(name.clone(), self.snap.nodes.len());
                self.snap.nodes.push(node);
                self.instances[instance].core.node = Some(name.clone());
                if let Some(si) = self
                    .snap
                    .instances
                    .iter_mut()
                    .find(|i| i.id == self.instances[instance].core.id)
                {
                    si.node = Some(name);
                }
                let rate = self.world.spot_interruptions_per_hour;
                if self.instances[instance].core.capacity_type == CapacityType::Spot && rate > 0.0 {
                    let u = self.rng.next_f64().max(1e-12);
                    let after_s = -u.ln() / rate * 3600.0;
                    self.push(t + Self::ms(after_s), Event::Interrupt { instance });
                }
            }
            Event::Interrupt { instance } => {
                if !self.instances[instance].alive {
                    return;
                }
                self.out.spot_interruptions += 1;
                let node = self.instances[instance].core.node.clone();
                if let Some(node) = node {
                    let victims: Vec<usize> = self
                        .snap
                        .jobs
                        .iter()
                        .enumerate()
                        .filter(|(_, j)| matches!(&j.state, JobState::Running { nodes, .. } if nodes.contains(&node)))
                        .map(|(p, _)| self.trace_of[p])
                        .collect();
                    for v in victims {
                        self.requeue(v, t);
                    }
                }
                self.terminate_instance(instance, t);
            }
        }
    }

    /// Stops a running job and puts it back in its queue.
    fn requeue(&mut self, job: usize, t: i64) {
        let Some(&p) = self.pos.get(&job) else { return };
        let j = &self.snap.jobs[p];
        if let JobState::Running {
            nodes, started_at, ..
        } = j.state.clone()
        {
            let g = j.gpus_per_replica;
            let done = (t - started_at.as_millis()) as f64 / 1000.0;
            if j.restartable {
                self.remaining[job] = (self.remaining[job] - done).max(1.0);
            }
            self.release(&nodes, g, t);
            self.running -= 1;
            self.attempt[job] += 1;
            self.out.jobs[job].interruptions += 1;
            let j = &mut self.snap.jobs[p];
            j.attempt += 1;
            j.state = JobState::Pending;
        }
    }

    /// Gives a finished or stopped job's GPUs back.
    fn release(&mut self, nodes: &[String], g: u32, t: i64) {
        for n in nodes {
            let Some(&i) = self.node_pos.get(n) else {
                continue;
            };
            let node = &mut self.snap.nodes[i];
            node.free_gpus = (node.free_gpus + g).min(node.gpus);
            let cloud = node.instance_id.is_some();
            if cloud {
                self.cloud_busy = self.cloud_busy.saturating_sub(g);
                if node.free_gpus == node.gpus {
                    node.idle_since = Some(Time::from_millis(t));
                }
            } else {
                self.private_busy = self.private_busy.saturating_sub(g);
            }
        }
    }

    fn terminate_instance(&mut self, i: usize, t: i64) {
        let inst = &mut self.instances[i];
        if !inst.alive {
            return;
        }
        inst.alive = false;
        let secs = ((t - inst.core.launched_at.as_millis()) as f64 / 1000.0).max(60.0);
        self.out.cloud_cost_usd += inst.core.hourly_price * secs / 3600.0;
        self.out.cloud_gpu_seconds += inst.core.gpus as f64 * secs;
        let id = inst.core.id.clone();
        if let Some(node) = inst.core.node.clone()
            && let Some(p) = self.node_pos.remove(&node)
        {
            self.snap.nodes.swap_remove(p);
            if p < self.snap.nodes.len() {
                let moved = self.snap.nodes[p].name.clone();
                self.node_pos.insert(moved, p);
            }
        }
        self.snap.instances.retain(|x| x.id != id);
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
        for start in plan.starts {
            let Some(i) = self.trace_index(&start.job) else {
                continue;
            };
            let Some(&p) = self.pos.get(&i) else { continue };
            let g = self.snap.jobs[p].gpus_per_replica;
            let cloud = start.environment == spillway_core::Environment::Cloud;
            for n in &start.nodes {
                if let Some(&ni) = self.node_pos.get(n) {
                    let node = &mut self.snap.nodes[ni];
                    node.free_gpus = node.free_gpus.saturating_sub(g);
                    node.idle_since = None;
                }
                if cloud {
                    self.cloud_busy += g;
                } else {
                    self.private_busy += g;
                }
            }
            self.snap.jobs[p].state = JobState::Running {
                nodes: start.nodes,
                started_at: Time::from_millis(t),
                cloud,
            };
            self.running += 1;
            let rec = &mut self.out.jobs[i];
            if rec.start_s.is_none() {
                rec.start_s = Some(t as f64 / 1000.0);
            }
            rec.cloud = cloud;
            let attempt = self.attempt[i];
            self.push(
                t + Self::ms(self.remaining[i]),
                Event::Finish { job: i, attempt },
            );
        }
        for launch in plan.launches {
            let Some(i) = self.trace_index(&launch.job) else {
                continue;
            };
            let Some(&p) = self.pos.get(&i) else { continue };
            let o = &launch.offering;
            if self.world.capacity_error_rate > 0.0
                && self.rng.next_f64() < self.world.capacity_error_rate
            {
                self.out.capacity_errors += 1;
                let until = Time::from_millis(t) + self.world.capacity_cooldown;
                for off in self
                    .snap
                    .offerings
                    .iter_mut()
                    .filter(|x| same_offering(x, o))
                {
                    off.unavailable_until = Some(until);
                }
                // Decide again at once: the next offering is tried.
                self.push(t, Event::Wake);
                self.push(until.as_millis(), Event::Wake);
                continue;
            }
            for _ in 0..launch.count {
                let idx = self.instances.len();
                let id = format!("i-{idx:08x}");
                let core = Instance {
                    id: id.clone(),
                    pool: o.pool.clone(),
                    instance_type: o.instance_type.clone(),
                    capacity_type: o.capacity_type,
                    zone: o.zone.clone(),
                    gpus: o.gpus_per_instance,
                    hourly_price: o.hourly_price,
                    need: launch.need.clone(),
                    queue: launch.queue.clone(),
                    node: None,
                    launched_at: Time::from_millis(t),
                };
                let gpu_model = self
                    .snap
                    .offerings
                    .iter()
                    .find(|x| same_offering(x, o))
                    .map(|x| x.gpu_model.clone())
                    .unwrap_or_else(|| GpuModel::normalize("unknown"));
                self.snap.instances.push(core.clone());
                self.instance_by_id.insert(id, idx);
                self.instances.push(SimInstance {
                    core,
                    gpu_model,
                    alive: true,
                });
                self.out.instances_launched += 1;
                self.push(
                    t + self.world.boot_delay.as_millis() as i64,
                    Event::Ready { instance: idx },
                );
            }
            self.snap.jobs[p].state = JobState::Provisioning {
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
        let queued = self.snap.jobs.len() as u32 - self.running.min(self.snap.jobs.len() as u32);
        let s = Sample {
            t_s: t as f64 / 1000.0,
            queued,
            private_busy_gpus: self.private_busy,
            cloud_busy_gpus: self.cloud_busy,
            cloud_spend_usd: self.out.cloud_cost_usd + self.accrued_live(t),
        };
        if self.out.samples.last().is_some_and(|l| l.t_s == s.t_s) {
            self.out.samples.pop();
        }
        self.out.samples.push(s);
    }

    fn accrued_live(&self, t: i64) -> f64 {
        // The snapshot holds exactly the live instances.
        self.snap
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
