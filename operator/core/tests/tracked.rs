//! `Tracked` against `decide` on a plain snapshot changed the same way: random histories of
//! arrivals, starts, finishes, requeues, nodes joining, leaving and being renamed (a running
//! job's node then is, or is again, a name the snapshot holds), queues changed whole and
//! offerings made unavailable for a while or repriced (the cycles keep the prices of priced
//! waits while the offerings stay the same, within the span their cooldowns allow); the
//! same snapshot and the same plan required at every step.

mod support;

use proptest::prelude::*;
use spillway_core::*;
use support::*;

#[derive(Clone, Debug)]
enum Step {
    /// The clock moves this many seconds.
    Wait(u32),
    /// A job arrives: GPUs, replicas, estimate in minutes (0: none), queue (2: one that does
    /// not exist).
    Arrive(u32, u32, u32, usize),
    /// The last plan's starts are carried out.
    Carry,
    /// The k-th running job finishes.
    Finish(usize),
    /// The k-th running job goes back to waiting.
    Requeue(usize),
    /// A node named `n{k}` joins (private or cloud), with this many GPUs.
    Join(usize, u32, bool),
    /// The k-th node leaves (the last takes its place).
    Leave(usize),
    /// The k-th node is renamed `n{j}`.
    Rename(usize, usize),
    /// The k-th node is cordoned or uncordoned (changed, not renamed).
    Cordon(usize),
    /// A queue is added in front of the others (every queue's index moves).
    QueueInFront,
    /// The k-th offering becomes unavailable for this many seconds (0: available again), its
    /// price doubled or not.
    Offering(usize, u32, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u32..3_000).prop_map(Step::Wait),
        4 => (1u32..=8, 1u32..=2, 0u32..240, 0usize..3)
            .prop_map(|(g, r, e, q)| Step::Arrive(g, r, e, q)),
        5 => Just(Step::Carry),
        2 => (0usize..8).prop_map(Step::Finish),
        1 => (0usize..8).prop_map(Step::Requeue),
        1 => (0usize..8, prop::sample::select(vec![2u32, 4, 8]), any::<bool>())
            .prop_map(|(k, g, c)| Step::Join(k, g, c)),
        1 => (0usize..8).prop_map(Step::Leave),
        1 => (0usize..8, 0usize..8).prop_map(|(k, j)| Step::Rename(k, j)),
        1 => (0usize..8).prop_map(Step::Cordon),
        1 => Just(Step::QueueInFront),
        2 => (0usize..8, prop::sample::select(vec![0u32, 30, 600, 5_000]), any::<bool>())
            .prop_map(|(k, s, p)| Step::Offering(k, s, p)),
    ]
}

fn start() -> impl Strategy<Value = Snapshot> {
    (
        0usize..3,
        prop::collection::vec(prop::sample::select(vec![2u32, 4, 8]), 1..4),
    )
        .prop_map(|(order, nodes)| {
            let mut s = base();
            s.settings.order = [
                QueueOrder::Conservative,
                QueueOrder::Greedy,
                QueueOrder::Strict,
            ][order];
            s.queues.push(bursting_queue("batch", 5));
            s.nodes = nodes
                .iter()
                .enumerate()
                .map(|(i, &g)| private_node(&format!("n{i}"), g, g, "A100"))
                .collect();
            s
        })
}

/// Changes both sides the same way: `Tracked` through its methods, the plain snapshot by hand.
struct Both {
    tracked: Tracked,
    plain: Snapshot,
    now: Time,
    last: Plan,
    arrived: usize,
    scratch: Scratch,
}

impl Both {
    fn running(&self) -> Vec<usize> {
        (self.plain.jobs.iter().enumerate())
            .filter(|(_, j)| matches!(j.state, JobState::Running { .. }))
            .map(|(p, _)| p)
            .collect()
    }

    /// Gives a stopped job's GPUs back on both sides.
    fn release(&mut self, nodes: &[String], g: u32) {
        for n in nodes {
            if let Some(i) = self.plain.nodes.iter().position(|x| &x.name == n) {
                let node = &mut self.plain.nodes[i];
                node.free_gpus = (node.free_gpus + g).min(node.gpus);
                let mut t = self.tracked.node_mut(i);
                t.free_gpus = (t.free_gpus + g).min(t.gpus);
            }
        }
    }

    fn step(&mut self, step: &Step) {
        match *step {
            Step::Wait(s) => self.now = self.now + Duration::from_secs(s.into()),
            Step::Arrive(g, r, est, q) => {
                self.arrived += 1;
                let queue = ["research", "batch", "gone"][q];
                let mut j = Job::new(format!("ml/a{}", self.arrived), queue, g, self.now);
                j.replicas = r;
                j.estimated_runtime = (est > 0).then(|| mins(est.into()));
                self.plain.jobs.push(j.clone());
                self.tracked.push_job(j);
            }
            Step::Carry => {
                for start in std::mem::take(&mut self.last.starts) {
                    let Some(p) = self.plain.jobs.iter().position(|j| j.id == start.job) else {
                        continue;
                    };
                    let g = self.plain.jobs[p].gpus_per_replica;
                    for n in &start.nodes {
                        if let Some(i) = self.plain.nodes.iter().position(|x| &x.name == n) {
                            let node = &mut self.plain.nodes[i];
                            node.free_gpus = node.free_gpus.saturating_sub(g);
                            self.tracked.node_mut(i).free_gpus = node.free_gpus;
                        }
                    }
                    let state = JobState::Running {
                        nodes: start.nodes.clone(),
                        started_at: self.now,
                        environment: start.environment,
                    };
                    self.plain.jobs[p].state = state.clone();
                    self.tracked.job_mut(p).state = state;
                }
            }
            Step::Finish(k) | Step::Requeue(k) => {
                let running = self.running();
                let Some(&p) = running.get(k % running.len().max(1)) else {
                    return;
                };
                let JobState::Running { nodes, .. } = self.plain.jobs[p].state.clone() else {
                    return;
                };
                let g = self.plain.jobs[p].gpus_per_replica;
                self.release(&nodes, g);
                if matches!(step, Step::Finish(_)) {
                    self.plain.jobs.remove(p);
                    self.tracked.remove_job(p);
                } else {
                    self.plain.jobs[p].state = JobState::Pending;
                    self.tracked.job_mut(p).state = JobState::Pending;
                }
            }
            Step::Join(k, g, cloud) => {
                let name = format!("n{k}");
                if self.plain.nodes.iter().any(|n| n.name == name) {
                    return;
                }
                let mut node = private_node(&name, g, g, "A100");
                if cloud {
                    node.pool = "aws".into();
                    node.instance_id = Some(format!("i-{k}"));
                    node.idle_since = Some(self.now);
                }
                self.plain.nodes.push(node.clone());
                self.tracked.push_node(node);
            }
            Step::Leave(k) => {
                if self.plain.nodes.is_empty() {
                    return;
                }
                let k = k % self.plain.nodes.len();
                self.plain.nodes.swap_remove(k);
                self.tracked.swap_remove_node(k);
            }
            Step::Rename(k, j) => {
                let name = format!("n{j}");
                if self.plain.nodes.is_empty() || self.plain.nodes.iter().any(|n| n.name == name) {
                    return;
                }
                let k = k % self.plain.nodes.len();
                self.plain.nodes[k].name = name.clone();
                self.tracked.node_mut(k).name = name;
            }
            Step::Cordon(k) => {
                if self.plain.nodes.is_empty() {
                    return;
                }
                let k = k % self.plain.nodes.len();
                let node = &mut self.plain.nodes[k];
                node.schedulable = !node.schedulable;
                self.tracked.node_mut(k).schedulable = node.schedulable;
            }
            Step::QueueInFront => {
                let q = bursting_queue(&format!("q{}", self.plain.queues.len()), 1);
                self.plain.queues.insert(0, q.clone());
                self.tracked.change_whole(|s| s.queues.insert(0, q));
            }
            Step::Offering(k, secs, reprice) => {
                if self.plain.offerings.is_empty() {
                    return;
                }
                let k = k % self.plain.offerings.len();
                let o = &mut self.plain.offerings[k];
                o.unavailable_until =
                    (secs > 0).then(|| self.now + Duration::from_secs(secs.into()));
                if reprice {
                    o.hourly_price *= 2.0;
                }
                self.tracked.offerings_mut()[k] = o.clone();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every step leaves both sides the same snapshot, and `Tracked::decide` plans what
    /// `decide` plans on it, whether or not cycles come between the steps.
    #[test]
    fn tracked_plans_what_decide_plans(
        start in start(),
        steps in prop::collection::vec((step(), any::<bool>()), 1..60),
    ) {
        let mut both = Both {
            tracked: Tracked::new(start.clone()),
            plain: start,
            now: Time::from_millis(3_600_000),
            last: Plan::default(),
            arrived: 0,
            scratch: Scratch::new(),
        };
        for (i, (step, decide_now)) in steps.iter().enumerate() {
            both.step(step);
            prop_assert_eq!(both.tracked.snapshot(), &both.plain, "step {}: {:?}", i, step);
            // Some steps are taken together, with no cycle between them (as the simulator
            // takes an instant's arrivals and finishes).
            if !decide_now && i + 1 < steps.len() {
                continue;
            }
            let plan = both.tracked.decide(&NoPolicy, both.now, &mut both.scratch);
            let reference = decide(&both.plain, &NoPolicy, both.now);
            prop_assert_eq!(&plan, &reference, "step {}: {:?}", i, step);
            both.last = plan;
        }
    }
}

/// A running job whose node is renamed, or leaves, releases nothing there, and does again once
/// a node of its name is back: its node is found by name, whenever the names change.
#[test]
fn a_running_job_follows_its_node_by_name() {
    let mut s = base();
    s.settings.order = QueueOrder::Conservative;
    s.nodes = vec![private_node("n0", 8, 0, "A100")];
    s.jobs = vec![
        running(job("r", 8, 0), &["n0"], 0, Some(60)),
        job("w", 8, 10),
    ];
    let mut tracked = Tracked::new(s.clone());
    let mut scratch = Scratch::new();
    let now = at_min(10);
    let planned = |plan: &Plan| {
        plan.decisions
            .iter()
            .find(|d| d.job == "ml/w")
            .map(|d| d.message.clone())
    };
    let before = tracked.decide(&NoPolicy, now, &mut scratch);
    assert_eq!(before, decide(&s, &NoPolicy, now));

    tracked.node_mut(0).name = "m0".into();
    s.nodes[0].name = "m0".into();
    let renamed = tracked.decide(&NoPolicy, now, &mut scratch);
    assert_eq!(renamed, decide(&s, &NoPolicy, now));
    assert_ne!(
        planned(&renamed),
        planned(&before),
        "the release at n0 is gone"
    );

    tracked.node_mut(0).name = "n0".into();
    s.nodes[0].name = "n0".into();
    let back = tracked.decide(&NoPolicy, now, &mut scratch);
    assert_eq!(back, decide(&s, &NoPolicy, now));
    assert_eq!(planned(&back), planned(&before));

    // The node leaves, then one of its name joins.
    let node = tracked.swap_remove_node(0);
    s.nodes.clear();
    let gone = tracked.decide(&NoPolicy, now, &mut scratch);
    assert_eq!(gone, decide(&s, &NoPolicy, now));
    assert_ne!(planned(&gone), planned(&before));
    tracked.push_node(node.clone());
    s.nodes.push(node);
    let joined = tracked.decide(&NoPolicy, now, &mut scratch);
    assert_eq!(joined, decide(&s, &NoPolicy, now));
    assert_eq!(planned(&joined), planned(&before));
}
