//! The `Scheduler` against `decide` on the full snapshot: random histories (arrivals, plans
//! carried out, instances joining, jobs finishing, nodes changing, cooldowns, and above all
//! the clock moving with nothing else happening) fed to both, the same actions and the same
//! decision changes required at every step; and `decide` itself against the whole cycle
//! (`decide_in_full`, without its shortcuts: the short path for worlds with nothing to place,
//! and the profile of free private GPUs put off while every job planned starts now).

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use spillway_core::*;
use support::*;

#[derive(Clone, Debug)]
enum Step {
    /// The clock moves this many seconds; nothing else happens.
    Wait(u32),
    /// The last plan is carried out: starts run, launches become instances, terminations
    /// remove their nodes.
    Carry,
    /// Instances that have no node yet join.
    Join,
    /// The k-th running job finishes.
    Finish(usize),
    /// A job arrives: GPUs, replicas, estimate in minutes (0: none), queue.
    Arrive(u32, u32, u32, usize),
    /// The k-th private node is cordoned or uncordoned.
    Cordon(usize),
    /// The k-th offering cools down for this many seconds.
    Cooldown(usize, u32),
    /// The same job sent again unchanged (costs nothing).
    Resend(usize),
    /// The clock moves to this many milliseconds before the k-th running job's expected end,
    /// if that is later than now.
    NearEnd(usize, u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (1u32..3_000).prop_map(Step::Wait),
        5 => Just(Step::Carry),
        1 => Just(Step::Join),
        2 => (0usize..8).prop_map(Step::Finish),
        2 => (1u32..=8, 1u32..=2, 0u32..240, 0usize..2).prop_map(|(g, r, e, q)| Step::Arrive(g, r, e, q)),
        1 => (0usize..4).prop_map(Step::Cordon),
        1 => (0usize..4, 1u32..1_200).prop_map(|(k, s)| Step::Cooldown(k, s)),
        1 => (0usize..8).prop_map(Step::Resend),
        2 => (0usize..8, 0u32..2_500).prop_map(|(k, ms)| Step::NearEnd(k, ms)),
    ]
}

#[derive(Clone, Debug)]
struct History {
    start: Snapshot,
    steps: Vec<Step>,
}

fn history() -> impl Strategy<Value = History> {
    let settings = (0usize..4, any::<bool>(), 0usize..3, 0u64..30, any::<bool>());
    let nodes = prop::collection::vec((prop::sample::select(vec![2u32, 4, 8]), 0usize..2), 1..4);
    // Mostly busy nodes, whose running jobs end (or overrun) within the history.
    let running = prop::collection::vec((1u32..=8, 0u32..40, 5u32..120, 0usize..3), 0..6);
    let jobs = prop::collection::vec((1u32..=8, 1u32..=2, 0u32..240), 0..6);
    (
        settings,
        nodes,
        running,
        jobs,
        prop::collection::vec(step(), 1..60),
    )
        .prop_map(
            |((order, first_fit, mode, wait, research_bursts), nodes, running, jobs, steps)| {
                let mut s = base();
                s.settings.order = [
                    QueueOrder::Conservative,
                    QueueOrder::Greedy,
                    QueueOrder::Strict,
                    QueueOrder::Backfill,
                ][order];
                if first_fit {
                    s.settings.packing = Packing::FirstFit;
                }
                // A queue that never bursts lets a cycle without wait decisions pass over the
                // jobs behind a blocked head (strict order).
                s.queues[0].burst.enabled = research_bursts;
                let mut q2 = bursting_queue("batch", wait);
                q2.burst.wait_mode =
                    [WaitMode::Fixed, WaitMode::ComputeWait, WaitMode::CostAware][mode];
                q2.budget_hourly_usd = Some(40.0);
                // Some histories give "batch" a quota, which it reclaims from "research".
                q2.quota_gpus = (wait % 3 != 0).then_some((wait % 9) as u32);
                s.queues.push(q2);
                s.pools[1].idle_timeout = mins(5);
                let models = ["A100", "A10G"];
                s.nodes = nodes
                    .iter()
                    .enumerate()
                    .map(|(i, &(gpus, m))| private_node(&format!("n{i}"), gpus, gpus, models[m]))
                    .collect();
                let start = Time::from_millis(3_600_000);
                for (i, &(gpus, ago, est, k)) in running.iter().enumerate() {
                    let k = k % s.nodes.len();
                    let gpus = gpus.min(s.nodes[k].free_gpus);
                    if gpus == 0 {
                        continue;
                    }
                    s.nodes[k].free_gpus -= gpus;
                    let mut j = Job::new(
                        format!("ml/r{i}"),
                        "research",
                        gpus,
                        start - mins(ago as u64 + 5),
                    );
                    j.estimated_runtime = Some(mins(est as u64));
                    j.restartable = i % 2 == 0;
                    j.state = JobState::Running {
                        nodes: vec![s.nodes[k].name.clone()],
                        started_at: start - mins(ago as u64),
                        environment: Environment::Private,
                    };
                    s.jobs.push(j);
                }
                for (i, &(gpus, replicas, est)) in jobs.iter().enumerate() {
                    let mut j = Job::new(
                        format!("ml/p{i}"),
                        ["research", "batch"][i % 2],
                        gpus,
                        start,
                    );
                    j.replicas = replicas;
                    j.estimated_runtime = (est > 0).then(|| mins(est as u64));
                    // Restartable cloud jobs may move home.
                    j.restartable = i % 3 == 0;
                    s.jobs.push(j);
                }
                History { start: s, steps }
            },
        )
}

/// The reference side: a snapshot changed by hand, `decide` on all of it, and each job's
/// current decision to tell changes.
struct World {
    snap: Snapshot,
    now: Time,
    last: Plan,
    current: HashMap<String, Key>,
    arrived: usize,
    joined: usize,
}

impl World {
    /// The history's world at its start, an hour after the epoch.
    fn new(start: &Snapshot) -> World {
        World {
            now: Time::from_millis(3_600_000),
            snap: start.clone(),
            last: Plan::default(),
            current: HashMap::new(),
            arrived: 0,
            joined: 0,
        }
    }

    fn job(&self, id: &str) -> usize {
        self.snap.jobs.iter().position(|j| j.id == id).expect("job")
    }

    /// Applies one step; returns the changes the scheduler gets for it.
    fn step(&mut self, step: &Step) -> Vec<Change> {
        let mut out = Vec::new();
        match *step {
            Step::Wait(s) => self.now = self.now + Duration::from_secs(s as u64),
            Step::Carry => {
                let plan = std::mem::take(&mut self.last);
                for st in &plan.starts {
                    let j = self.job(&st.job);
                    let g = self.snap.jobs[j].gpus_per_replica;
                    for n in &st.nodes {
                        let node = self.snap.nodes.iter_mut().find(|x| &x.name == n).unwrap();
                        node.free_gpus -= g;
                        node.idle_since = None;
                        out.push(Change::Node(node.clone()));
                    }
                    self.snap.jobs[j].state = JobState::Running {
                        nodes: st.nodes.clone(),
                        started_at: self.now,
                        environment: st.environment,
                    };
                    out.push(Change::Job(Box::new(self.snap.jobs[j].clone())));
                }
                for m in &plan.moves {
                    let j = self.job(&m.job);
                    let job = &mut self.snap.jobs[j];
                    if let JobState::Running { nodes, .. } = &job.state {
                        for n in nodes {
                            if let Some(node) = self.snap.nodes.iter_mut().find(|x| &x.name == n) {
                                node.free_gpus += job.gpus_per_replica;
                                out.push(Change::Node(node.clone()));
                            }
                        }
                    }
                    job.state = JobState::Suspended {
                        nodes: m.nodes.clone(),
                        pool: m.pool.clone(),
                        ready: true,
                    };
                    job.attempt += 1;
                    out.push(Change::Job(Box::new(job.clone())));
                }
                for p in &plan.preemptions {
                    let j = self.job(&p.job);
                    let job = &mut self.snap.jobs[j];
                    if let JobState::Running { nodes, .. } = &job.state {
                        for n in nodes {
                            let node = self.snap.nodes.iter_mut().find(|x| &x.name == n).unwrap();
                            node.free_gpus += job.gpus_per_replica;
                            out.push(Change::Node(node.clone()));
                        }
                    }
                    job.state = JobState::Pending;
                    job.attempt += 1;
                    out.push(Change::Job(Box::new(job.clone())));
                }
                for l in &plan.launches {
                    for c in 0..l.count {
                        let inst = Instance {
                            id: format!("i-{}-{c}", l.need),
                            pool: l.offering.pool.clone(),
                            instance_type: l.offering.instance_type.clone(),
                            capacity_type: l.offering.capacity_type,
                            zone: l.offering.zone.clone(),
                            gpus: l.offering.gpus_per_instance,
                            hourly_price: l.offering.hourly_price,
                            need: l.need.clone(),
                            queue: l.queue.clone(),
                            node: None,
                            launched_at: self.now,
                        };
                        out.push(Change::Instance(inst.clone()));
                        self.snap.instances.push(inst);
                    }
                    let j = self.job(&l.job);
                    self.snap.jobs[j].state = JobState::Provisioning {
                        need: l.need.clone(),
                        pool: l.offering.pool.clone(),
                    };
                    out.push(Change::Job(Box::new(self.snap.jobs[j].clone())));
                }
                for t in &plan.terminations {
                    self.snap.nodes.retain(|n| n.name != t.node);
                    out.push(Change::NodeGone(t.node.clone()));
                    if let Some(id) = &t.instance_id {
                        self.snap.instances.retain(|i| &i.id != id);
                        out.push(Change::InstanceGone(id.clone()));
                    }
                }
            }
            Step::Join => {
                for k in 0..self.snap.instances.len() {
                    if self.snap.instances[k].node.is_some() {
                        continue;
                    }
                    self.joined += 1;
                    let inst = &mut self.snap.instances[k];
                    let name = format!("cloud-{}", self.joined);
                    inst.node = Some(name.clone());
                    let node = Node {
                        facts: Default::default(),
                        name,
                        pool: inst.pool.clone(),
                        gpu_model: Some(GpuModel::normalize("A100")),
                        gpus: inst.gpus,
                        free_gpus: inst.gpus,
                        schedulable: true,
                        releasing_gpus: 0,
                        instance_id: Some(inst.id.clone()),
                        idle_since: Some(self.now),
                        domains: Vec::new(),
                    };
                    out.push(Change::Instance(inst.clone()));
                    out.push(Change::Node(node.clone()));
                    self.snap.nodes.push(node);
                }
            }
            Step::Finish(k) => {
                let running: Vec<usize> = (0..self.snap.jobs.len())
                    .filter(|&i| matches!(self.snap.jobs[i].state, JobState::Running { .. }))
                    .collect();
                if let Some(&j) = running.get(k % running.len().max(1)) {
                    let job = self.snap.jobs.remove(j);
                    if let JobState::Running { nodes, .. } = &job.state {
                        for n in nodes {
                            if let Some(node) = self.snap.nodes.iter_mut().find(|x| &x.name == n) {
                                node.free_gpus += job.gpus_per_replica;
                                if node.instance_id.is_some() && node.free_gpus == node.gpus {
                                    node.idle_since = Some(self.now);
                                }
                                out.push(Change::Node(node.clone()));
                            }
                        }
                    }
                    self.current.remove(&job.id);
                    out.push(Change::JobGone(job.id));
                }
            }
            Step::Arrive(gpus, replicas, est, q) => {
                self.arrived += 1;
                let mut j = Job::new(
                    format!("ml/a{}", self.arrived),
                    ["research", "batch"][q],
                    gpus,
                    self.now,
                );
                j.replicas = replicas;
                j.estimated_runtime = (est > 0).then(|| mins(est as u64));
                out.push(Change::Job(Box::new(j.clone())));
                self.snap.jobs.push(j);
            }
            Step::Cordon(k) => {
                let private: Vec<usize> = (0..self.snap.nodes.len())
                    .filter(|&i| self.snap.nodes[i].instance_id.is_none())
                    .collect();
                if let Some(&n) = private.get(k % private.len().max(1)) {
                    let node = &mut self.snap.nodes[n];
                    node.schedulable = !node.schedulable;
                    out.push(Change::Node(node.clone()));
                }
            }
            Step::Cooldown(k, s) => {
                let n = self.snap.offerings.len();
                self.snap.offerings[k % n].unavailable_until =
                    Some(self.now + Duration::from_secs(s as u64));
                out.push(Change::Offerings(self.snap.offerings.clone()));
            }
            Step::NearEnd(k, ms) => {
                let ends: Vec<Time> = self
                    .snap
                    .jobs
                    .iter()
                    .filter_map(|j| match (&j.state, j.planning_runtime()) {
                        (JobState::Running { started_at, .. }, Some(r)) => Some(*started_at + r),
                        _ => None,
                    })
                    .collect();
                if let Some(&end) = ends.get(k % ends.len().max(1)) {
                    self.now = self.now.max(end - Duration::from_millis(ms as u64));
                }
            }
            Step::Resend(k) => {
                if !self.snap.jobs.is_empty() {
                    let j = k % self.snap.jobs.len();
                    out.push(Change::Job(Box::new(self.snap.jobs[j].clone())));
                }
            }
        }
        out
    }

    /// `decide` on everything, and the decisions that changed. Also checks that it plans what
    /// the whole cycle plans (`decide_in_full`), and that a cycle asked for no wait decisions
    /// (as the simulator asks) plans the same, less those.
    fn decide(&mut self) -> (Plan, Vec<Key>) {
        let plan = decide(&self.snap, &NoPolicy, self.now);
        // The short path for worlds with nothing to place plans what the whole cycle plans.
        assert_eq!(
            plan,
            spillway_core::decide::decide_in_full(&self.snap, &NoPolicy, self.now)
        );
        let mut quiet_snap = self.snap.clone();
        quiet_snap.settings.wait_decisions = false;
        let quiet = decide(&quiet_snap, &NoPolicy, self.now);
        assert_eq!(quiet.starts, plan.starts);
        assert_eq!(quiet.launches, plan.launches);
        assert_eq!(quiet.terminations, plan.terminations);
        assert_eq!(quiet.preemptions, plan.preemptions);
        assert_eq!(quiet.moves, plan.moves);
        assert_eq!(quiet.next_wake, plan.next_wake);
        assert_eq!(quiet.stable_until, plan.stable_until);
        let kept: Vec<&Decision> = plan
            .decisions
            .iter()
            .filter(|d| {
                d.outcome != Outcome::Wait
                    || matches!(
                        d.reason,
                        Reason::Provisioning | Reason::Reclaiming | Reason::Repatriating
                    )
            })
            .collect();
        assert_eq!(quiet.decisions.iter().collect::<Vec<_>>(), kept);
        let mut changed = Vec::new();
        for d in &plan.decisions {
            let key = key(d);
            if self.current.get(&d.job) != Some(&key) {
                changed.push(key.clone());
            }
            self.current.insert(d.job.clone(), key);
        }
        self.last = plan.clone();
        (plan, changed)
    }
}

type Key = (
    String,
    Outcome,
    Reason,
    Option<String>,
    Option<OfferingChoice>,
);

fn key(d: &Decision) -> Key {
    (
        d.job.clone(),
        d.outcome,
        d.reason,
        d.rule.clone(),
        d.offering.as_deref().cloned(),
    )
}

fn keys(plan: &Plan) -> Vec<Key> {
    plan.decisions.iter().map(key).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn the_scheduler_plans_what_decide_plans(h in history()) {
        let mut world = World::new(&h.start);
        let mut sched = Scheduler::new(h.start.clone());
        let (full, changed) = world.decide();
        let got = sched.cycle(&NoPolicy, world.now);
        prop_assert_eq!(&got.starts, &full.starts);
        prop_assert_eq!(keys(&got), changed);
        for (i, step) in h.steps.iter().enumerate() {
            for change in world.step(step) {
                sched.apply(change);
            }
            prop_assert_eq!(sched.snapshot(), &world.snap, "step {}: {:?}", i, step);
            let (full, changed) = world.decide();
            let got = sched.cycle(&NoPolicy, world.now);
            let ctx = format!("step {i} ({step:?}) at {}: skipped {:?}", world.now, sched.stats());
            prop_assert_eq!(&got.starts, &full.starts, "{}", ctx);
            prop_assert_eq!(&got.launches, &full.launches, "{}", ctx);
            prop_assert_eq!(&got.terminations, &full.terminations, "{}", ctx);
            prop_assert_eq!(&got.preemptions, &full.preemptions, "{}", ctx);
            prop_assert_eq!(&got.moves, &full.moves, "{}", ctx);
            prop_assert_eq!(keys(&got), changed, "{}", ctx);
            prop_assert_eq!(got.next_wake, full.next_wake, "{}", ctx);
        }
    }
}

#[test]
fn nothing_changed_is_not_decided_again() {
    let mut s = base();
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        running(job("busy", 8, 0), &["n1"], 0, Some(120)),
        job("waits", 8, 10),
    ];
    s.jobs[1].estimated_runtime = Some(mins(30));
    s.queues[0].burst.enabled = false;
    let mut sched = Scheduler::new(s);
    let first = sched.cycle(&NoPolicy, at_min(11));
    assert_eq!(first.decisions.len(), 1, "{:?}", first.decisions);
    assert_eq!(sched.current("ml/waits").map(|d| d.0), Some(Outcome::Wait));
    // Until a second before the busy job's expected end nothing can change.
    for m in [12, 30, 60, 119] {
        let plan = sched.cycle(&NoPolicy, at_min(m));
        assert!(plan.decisions.is_empty() && plan.starts.is_empty());
    }
    assert_eq!(
        sched.stats(),
        SchedulerStats {
            cycles: 5,
            skipped: 4
        }
    );
    // The same job sent again changes nothing.
    let same = sched.snapshot().jobs[1].clone();
    sched.apply(Change::Job(Box::new(same)));
    sched.cycle(&NoPolicy, at_min(119));
    assert_eq!(sched.stats().skipped, 5);
    // The busy job finishes: the waiting one starts.
    sched.apply(Change::JobGone("ml/busy".into()));
    sched.apply(Change::Node(private_node("n1", 8, 8, "A100")));
    let plan = sched.cycle(&NoPolicy, at_min(119));
    assert_eq!(plan.starts.len(), 1);
    assert_eq!(
        sched.current("ml/waits").map(|d| d.0),
        Some(Outcome::StartPrivate)
    );
}

/// Forbids the cloud to jobs that have waited less than 20 minutes: its effects change with
/// the clock alone.
struct PatientRule;

impl Policy for PatientRule {
    fn effects(&self, ctx: &PolicyContext<'_>) -> Effects {
        let mut e = Effects::default();
        if ctx.waited < mins(20) {
            e.forbid.push(spillway_core::policy::Ruled {
                value: Environment::Cloud,
                rule: "p/patient".into(),
            });
        }
        e
    }
}

#[test]
fn rules_that_read_the_clock_are_decided_at_every_cycle() {
    let mut s = base();
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.queues[0].burst.max_wait = mins(1);
    s.jobs = vec![job("waits", 8, 0)];
    let mut sched = Scheduler::new(s);
    let first = sched.cycle(&PatientRule, at_min(5));
    assert_eq!(first.decisions[0].reason, Reason::ForbiddenByPolicy);
    // No wake marks the rule's 20 minutes; the scheduler decides anyway.
    assert!(sched.cycle(&PatientRule, at_min(10)).launches.is_empty());
    assert_eq!(sched.cycle(&PatientRule, at_min(21)).launches.len(), 1);
    assert_eq!(sched.stats().skipped, 0);
}

#[test]
fn a_planned_start_coming_within_boot_time_is_decided_again() {
    let mut s = base();
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    // No money: the job may burst (its planned start is later than a fixed 15-minute wait)
    // but cannot.
    s.queues[0].burst.wait_mode = WaitMode::Fixed;
    s.queues[0].budget_hourly_usd = Some(0.0);
    s.jobs = vec![
        running(job("busy", 8, 0), &["n1"], 0, Some(40)),
        job("waits", 8, 0),
    ];
    s.jobs[1].estimated_runtime = Some(mins(30));
    let mut sched = Scheduler::new(s);
    let first = sched.cycle(&NoPolicy, at_min(1));
    assert_eq!(first.decisions.len(), 1);
    assert_ne!(first.decisions[0].reason, Reason::PrivateStartSoon);
    assert!(sched.cycle(&NoPolicy, at_min(20)).decisions.is_empty());
    assert_eq!(sched.stats().skipped, 1);
    // Three minutes (a cloud node's boot) before the busy job's end, waiting is better.
    let later = sched.cycle(&NoPolicy, at_min(38));
    assert_eq!(later.decisions.len(), 1, "{:?}", later.decisions);
    assert_eq!(later.decisions[0].reason, Reason::PrivateStartSoon);
}

#[test]
fn the_last_second_before_a_release_is_decided_again() {
    let mut s = base();
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![running(job("busy", 8, 0), &["n1"], 0, Some(40))];
    let mut sched = Scheduler::new(s);
    sched.cycle(&NoPolicy, at_min(1));
    assert_eq!(sched.cycle(&NoPolicy, at_min(39)).next_wake, None);
    assert_eq!(sched.stats().skipped, 1);
    sched.cycle(&NoPolicy, at_min(40) - Duration::from_millis(500));
    assert_eq!(
        sched.stats().skipped,
        1,
        "within the last second it decides"
    );
}

/// EASY backfilling lets a job pass a reservation only while it ends before it, which the
/// clock alone changes: under that order the scheduler decides at every cycle.
#[test]
fn the_backfilling_order_is_decided_at_every_cycle() {
    let mut s = base();
    s.settings.order = QueueOrder::Backfill;
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        running(job("busy", 8, 0), &["n1"], 0, Some(120)),
        job("waits", 8, 10),
    ];
    let mut sched = Scheduler::new(s);
    sched.cycle(&NoPolicy, at_min(11));
    sched.cycle(&NoPolicy, at_min(12));
    assert_eq!(sched.stats().skipped, 0);
}

/// A job still running in a queue that is gone (deleted while it runs) plans no release, in
/// the short path for worlds with nothing to place as in the whole cycle: its expected end
/// does not bound how long the plan holds.
#[test]
fn a_running_job_of_a_queue_that_is_gone_plans_no_release() {
    let mut s = base();
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    let mut orphan = running(job("orphan", 4, 0), &["n1"], 0, Some(20));
    orphan.queue = "gone".into();
    s.jobs = vec![orphan, running(job("busy", 4, 0), &["n1"], 0, Some(40))];
    let plan = decide(&s, &NoPolicy, at_min(1));
    assert_eq!(
        plan,
        spillway_core::decide::decide_in_full(&s, &NoPolicy, at_min(1))
    );
    assert_eq!(plan.stable_until, Some(at_min(40) - Duration::from_secs(1)));
}

/// The jobs in another order (a watch cache's order carries no meaning): a seeded shuffle.
fn shuffled(s: &Snapshot, seed: u64) -> Snapshot {
    let mut s = s.clone();
    let mut x = seed | 1;
    for i in (1..s.jobs.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.jobs.swap(i, (x % (i as u64 + 1)) as usize);
    }
    s
}

fn by_job(mut keys: Vec<Key>) -> Vec<Key> {
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys
}

/// The starts by job: jobs whose cloud nodes joined start in the jobs' order.
fn starts(plan: &Plan) -> Vec<Start> {
    let mut starts = plan.starts.clone();
    starts.sort_by(|a, b| a.job.cmp(&b.job));
    starts
}

fn jobs_by_id(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    s.jobs.sort_by(|a, b| a.id.cmp(&b.id));
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The operator's way: the whole world handed over at every step (`sync`), its jobs in an
    /// order that changes from one step to the next; the scheduler takes what differs. It
    /// holds the same world (its jobs in its own order), and plans what `decide` plans on the
    /// world, whose plans do not depend on the jobs' order either (but for the order of the
    /// decisions, and of the starts of jobs whose cloud nodes joined).
    #[test]
    fn a_scheduler_synced_with_whole_snapshots_plans_what_decide_plans(
        h in history(),
        seed in any::<u64>(),
    ) {
        let mut world = World::new(&h.start);
        let mut sched = Scheduler::default();
        sched.sync(&shuffled(&world.snap, seed));
        let (full, changed) = world.decide();
        let got = sched.cycle(&NoPolicy, world.now);
        prop_assert_eq!(starts(&got), starts(&full));
        prop_assert_eq!(by_job(keys(&got)), by_job(changed));
        for (i, step) in h.steps.iter().enumerate() {
            world.step(step);
            let given = shuffled(&world.snap, seed.wrapping_add(i as u64 + 1));
            let objects = sched.sync(&given);
            let ctx = format!("step {i} ({step:?}) at {}", world.now);
            prop_assert_eq!(jobs_by_id(sched.snapshot()), jobs_by_id(&world.snap), "{}", ctx);
            if matches!(step, Step::Wait(_) | Step::NearEnd(..) | Step::Resend(_)) {
                prop_assert_eq!(objects, 0, "{}", ctx);
            }
            let (full, changed) = world.decide();
            let reordered = decide(&given, &NoPolicy, world.now);
            prop_assert_eq!(starts(&reordered), starts(&full), "{}", ctx);
            prop_assert_eq!(&reordered.launches, &full.launches, "{}", ctx);
            prop_assert_eq!(&reordered.terminations, &full.terminations, "{}", ctx);
            prop_assert_eq!(&reordered.preemptions, &full.preemptions, "{}", ctx);
            prop_assert_eq!(&reordered.moves, &full.moves, "{}", ctx);
            prop_assert_eq!(reordered.next_wake, full.next_wake, "{}", ctx);
            prop_assert_eq!(reordered.stable_until, full.stable_until, "{}", ctx);
            prop_assert_eq!(by_job(keys(&reordered)), by_job(keys(&full)), "{}", ctx);
            let got = sched.cycle(&NoPolicy, world.now);
            prop_assert_eq!(starts(&got), starts(&full), "{}", ctx);
            prop_assert_eq!(&got.launches, &full.launches, "{}", ctx);
            prop_assert_eq!(&got.terminations, &full.terminations, "{}", ctx);
            prop_assert_eq!(&got.preemptions, &full.preemptions, "{}", ctx);
            prop_assert_eq!(&got.moves, &full.moves, "{}", ctx);
            prop_assert_eq!(by_job(keys(&got)), by_job(changed), "{}", ctx);
            prop_assert_eq!(got.next_wake, full.next_wake, "{}", ctx);
        }
    }
}

#[test]
fn sync_takes_only_what_changed() {
    let mut s = base();
    s.nodes = vec![
        private_node("n1", 8, 0, "A100"),
        private_node("n2", 8, 0, "A100"),
    ];
    s.queues[0].burst.enabled = false;
    s.jobs = vec![
        running(job("busy", 8, 0), &["n1"], 0, Some(120)),
        running(job("busy2", 8, 0), &["n2"], 0, Some(120)),
        job("a", 8, 10),
        job("b", 8, 10),
    ];
    let mut sched = Scheduler::default();
    assert!(sched.sync(&s) > 0);
    assert_eq!(sched.sync(&s), 0, "the same world again");
    sched.cycle(&NoPolicy, at_min(11));
    assert!(sched.current("ml/a").is_some());
    // The same jobs in another order: nothing changed, the scheduler keeps its order.
    let mut r = s.clone();
    r.jobs.reverse();
    assert_eq!(sched.sync(&r), 0);
    assert_eq!(sched.snapshot().jobs, s.jobs);
    sched.cycle(&NoPolicy, at_min(12));
    assert_eq!(sched.stats().skipped, 1);
    // One job changed, in place.
    r.jobs[0].priority = 5;
    assert_eq!(sched.sync(&r), 1);
    assert_eq!(sched.snapshot().jobs[3].priority, 5);
    // One gone: removed, its decision forgotten, the others still found by id.
    r.jobs.retain(|j| j.id != "ml/a");
    assert_eq!(sched.sync(&r), 1);
    assert_eq!(sched.snapshot().jobs.len(), 3);
    assert_eq!(sched.current("ml/a"), None);
    r.jobs[0].priority = 7;
    assert_eq!(sched.sync(&r), 1);
    assert_eq!(sched.snapshot().jobs[2].priority, 7);
    // Nodes in another order are a change (first fit places in that order), taken as given.
    r.nodes.reverse();
    assert_eq!(sched.sync(&r), 1);
    assert_eq!(sched.snapshot().nodes, r.nodes);
    // A node that changed in place.
    r.nodes[0].schedulable = false;
    assert_eq!(sched.sync(&r), 1);
    assert_eq!(sched.snapshot(), &{
        let mut want = r.clone();
        want.jobs = sched.snapshot().jobs.clone();
        want
    });
}
