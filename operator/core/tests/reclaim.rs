//! Quota reclaim: a queue within its private quota gets back GPUs lent to other queues.

mod support;

use spillway_core::*;
use support::*;

/// Queue "team" with a quota of `quota` GPUs (no bursting) and queue "research" with none.
fn two_queues(quota: u32) -> Snapshot {
    let mut s = base();
    let mut team = Queue::new("team");
    team.quota_gpus = Some(quota);
    s.queues.push(team);
    s
}

fn team_job(id: &str, gpus: u32, queued_min: i64) -> Job {
    Job::new(format!("ml/{id}"), "team", gpus, at_min(queued_min))
}

fn restartable(mut j: Job) -> Job {
    j.restartable = true;
    j
}

fn preempted(plan: &Plan) -> Vec<&str> {
    plan.preemptions.iter().map(|p| p.job.as_str()).collect()
}

#[test]
fn a_queue_within_its_quota_gets_borrowed_gpus_back() {
    let mut s = two_queues(8);
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        restartable(running(job("borrower", 8, 0), &["n1"; 1], 5, None)),
        team_job("mine", 8, 10),
    ];
    let plan = run(&s, 12);
    assert_decision(&plan, "mine", Outcome::Wait, Reason::Reclaiming);
    assert_eq!(preempted(&plan), ["ml/borrower"]);
    let p = &plan.preemptions[0];
    assert_eq!(
        (p.queue.as_str(), p.by_queue.as_str(), p.for_job.as_str()),
        ("research", "team", "ml/mine")
    );
    assert_eq!(p.gpus, 8);
    assert!(p.message.contains("\"team\""), "{}", p.message);
    assert!(plan.starts.is_empty());
}

#[test]
fn jobs_that_are_not_restartable_are_preempted_only_when_their_queue_allows_it() {
    let mut s = two_queues(8);
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        running(job("borrower", 8, 0), &["n1"], 5, None),
        team_job("mine", 8, 10),
    ];
    let plan = run(&s, 12);
    assert!(plan.preemptions.is_empty());
    assert_ne!(plan.decision("ml/mine").unwrap().reason, Reason::Reclaiming);

    s.queues[0].preempt_non_restartable = true;
    let plan = run(&s, 12);
    assert_eq!(preempted(&plan), ["ml/borrower"]);
    assert!(!plan.preemptions[0].restartable);
    // All 7 minutes of 8 GPUs are lost.
    assert_eq!(plan.preemptions[0].lost_gpu_seconds, 7.0 * 60.0 * 8.0);
}

#[test]
fn victims_are_the_lowest_priority_then_the_latest_started_and_only_as_many_as_needed() {
    let mut s = two_queues(8);
    s.nodes = vec![
        private_node("n1", 4, 0, "A100"),
        private_node("n2", 4, 0, "A100"),
        private_node("n3", 4, 0, "A100"),
    ];
    let mut high = restartable(running(job("high", 4, 0), &["n1"], 1, None));
    high.priority = 5;
    let early = restartable(running(job("early", 4, 0), &["n2"], 1, None));
    let late = restartable(running(job("late", 4, 0), &["n3"], 3, None));
    s.jobs = vec![high, early, late, team_job("mine", 4, 10)];
    let plan = run(&s, 12);
    assert_decision(&plan, "mine", Outcome::Wait, Reason::Reclaiming);
    assert_eq!(preempted(&plan), ["ml/late"]);

    // A gang of two replicas needs two nodes: the two lowest-priority jobs, not the third.
    s.jobs[3].replicas = 2;
    let plan = run(&s, 12);
    let mut victims = preempted(&plan);
    victims.sort();
    assert_eq!(victims, ["ml/early", "ml/late"]);
}

#[test]
fn least_work_lost_breaks_ties_using_announced_checkpoints() {
    let mut s = two_queues(4);
    s.nodes = vec![
        private_node("n1", 4, 0, "A100"),
        private_node("n2", 4, 0, "A100"),
    ];
    let mut a = restartable(running(job("a", 4, 0), &["n1"], 2, None));
    a.checkpointed_at = Some(at_min(3));
    let mut b = restartable(running(job("b", 4, 0), &["n2"], 2, None));
    b.checkpointed_at = Some(at_min(11));
    s.jobs = vec![a, b, team_job("mine", 4, 10)];
    let plan = run(&s, 12);
    assert_eq!(preempted(&plan), ["ml/b"]);
    assert_eq!(plan.preemptions[0].lost_gpu_seconds, 60.0 * 4.0);
}

#[test]
fn a_queue_is_never_taken_below_its_own_quota() {
    let mut s = two_queues(8);
    s.queues[0].quota_gpus = Some(4);
    s.nodes = vec![
        private_node("n1", 4, 0, "A100"),
        private_node("n2", 4, 0, "A100"),
    ];
    s.jobs = vec![
        restartable(running(job("x", 4, 0), &["n1"], 1, None)),
        restartable(running(job("y", 4, 0), &["n2"], 2, None)),
        team_job("mine", 8, 10),
    ];
    // research uses 8 with a quota of 4: only 4 GPUs are borrowed, not enough for 8.
    let plan = run(&s, 12);
    assert!(plan.preemptions.is_empty(), "{:?}", plan.preemptions);
    // A 4-GPU job gets the borrowed half back.
    s.jobs[2].gpus_per_replica = 4;
    let plan = run(&s, 12);
    assert_eq!(preempted(&plan), ["ml/y"]);
}

#[test]
fn beyond_its_quota_a_queue_waits_like_any_other() {
    let mut s = two_queues(4);
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        restartable(running(job("borrower", 8, 0), &["n1"], 5, None)),
        team_job("mine", 8, 10),
    ];
    let plan = run(&s, 12);
    assert!(plan.preemptions.is_empty());
    assert_ne!(plan.decision("ml/mine").unwrap().reason, Reason::Reclaiming);
}

#[test]
fn gpus_being_released_are_waited_for_and_held() {
    let mut s = two_queues(8);
    let mut n1 = private_node("n1", 8, 4, "A100");
    n1.releasing_gpus = 4;
    s.nodes = vec![n1];
    // The preempted job is back in its queue; its pods are stopping.
    s.jobs = vec![team_job("mine", 8, 10), restartable(job("borrower", 4, 0))];
    let plan = run(&s, 12);
    assert_decision(&plan, "mine", Outcome::Wait, Reason::Reclaiming);
    assert!(plan.preemptions.is_empty());
    // The 4 free GPUs are held for it: the borrower does not take them back.
    assert!(plan.starts.is_empty(), "{:?}", plan.starts);
}

#[test]
fn once_the_gpus_are_back_the_quota_queue_goes_first() {
    let mut s = two_queues(8);
    s.nodes = vec![private_node("n1", 8, 8, "A100")];
    // The preempted job queued long before; fair share alone would favour it (name order).
    s.jobs = vec![restartable(job("borrower", 8, 0)), team_job("mine", 8, 10)];
    s.queues[1].name = "alpha".into();
    s.jobs[1].queue = "alpha".into();
    let plan = run(&s, 12);
    assert_decision(&plan, "mine", Outcome::StartPrivate, Reason::FitsPrivate);
    assert_ne!(
        plan.decision("ml/borrower").unwrap().outcome,
        Outcome::StartPrivate
    );
}

#[test]
fn cloud_jobs_and_unusable_nodes_are_not_victims() {
    let mut s = two_queues(8);
    s.nodes = vec![private_node("n1", 8, 0, "V100")];
    let mut mine = team_job("mine", 8, 10);
    mine.gpu_models = vec![GpuModel::normalize("A100")];
    s.nodes.push(private_node("n2", 8, 0, "A100"));
    let mut cloud = restartable(job("cloudy", 8, 0));
    cloud.state = JobState::Running {
        nodes: vec!["n2".into()],
        started_at: at_min(1),
        environment: Environment::Cloud,
    };
    s.jobs = vec![
        restartable(running(job("on-v100", 8, 0), &["n1"], 1, None)),
        cloud,
        mine,
    ];
    let plan = run(&s, 12);
    assert!(plan.preemptions.is_empty(), "{:?}", plan.preemptions);
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Random clusters: every preemption takes borrowed GPUs only (no queue ends below its quota),
/// only from jobs that may be preempted, for a job whose queue stays within its quota.
#[test]
fn no_queue_within_its_quota_is_ever_preempted() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut with_preemptions = 0;
    for round in 0..2000 {
        let mut s = base();
        s.queues.clear();
        let nq = 2 + rng.below(3) as usize;
        for q in 0..nq {
            let mut queue = Queue::new(format!("q{q}"));
            queue.quota_gpus = (rng.below(4) > 0).then(|| rng.below(17) as u32);
            queue.preempt_non_restartable = rng.below(3) == 0;
            queue.weight = 1 + rng.below(3) as u32;
            s.queues.push(queue);
        }
        let nn = 1 + rng.below(5) as usize;
        for n in 0..nn {
            s.nodes.push(private_node(&format!("n{n}"), 8, 8, "A100"));
        }
        // Running jobs fill the nodes at random.
        let mut id = 0;
        for n in 0..nn {
            while s.nodes[n].free_gpus > 0 && rng.below(4) > 0 {
                let g = [1u32, 2, 4, 8][rng.below(4) as usize].min(s.nodes[n].free_gpus);
                let q = rng.below(nq as u64) as usize;
                let mut j = Job::new(format!("ml/r{id}"), format!("q{q}"), g, at_min(0));
                j.restartable = rng.below(2) == 0;
                j.priority = rng.below(3) as i32;
                j.state = JobState::Running {
                    nodes: vec![format!("n{n}")],
                    started_at: at_min(rng.below(10) as i64),
                    environment: Environment::Private,
                };
                s.nodes[n].free_gpus -= g;
                s.jobs.push(j);
                id += 1;
            }
        }
        for p in 0..1 + rng.below(4) {
            let q = rng.below(nq as u64) as usize;
            let g = [1u32, 2, 4, 8][rng.below(4) as usize];
            let mut j = Job::new(format!("ml/p{p}"), format!("q{q}"), g, at_min(5));
            j.replicas = 1 + rng.below(2) as u32;
            s.jobs.push(j);
        }
        let plan = run(&s, 12);
        if !plan.preemptions.is_empty() {
            with_preemptions += 1;
        }
        let used = |q: &str| -> u32 {
            s.jobs
                .iter()
                .filter(|j| j.queue == q && matches!(j.state, JobState::Running { .. }))
                .map(|j| j.total_gpus())
                .sum()
        };
        for q in &s.queues {
            let taken: u32 = plan
                .preemptions
                .iter()
                .filter(|p| p.queue == q.name)
                .map(|p| p.gpus)
                .sum();
            if taken > 0 {
                let quota = q.quota_gpus.unwrap_or(0);
                assert!(
                    used(&q.name) - taken >= quota,
                    "round {round}: queue {} (quota {quota}, using {}) lost {taken} GPUs: {:#?}",
                    q.name,
                    used(&q.name),
                    plan.preemptions
                );
            }
        }
        for p in &plan.preemptions {
            let victim = s.jobs.iter().find(|j| j.id == p.job).unwrap();
            let queue = s.queues.iter().find(|q| q.name == victim.queue).unwrap();
            assert!(victim.restartable || queue.preempt_non_restartable);
            assert_ne!(p.queue, p.by_queue, "round {round}");
            let waiting = s.jobs.iter().find(|j| j.id == p.for_job).unwrap();
            let by = s.queues.iter().find(|q| q.name == p.by_queue).unwrap();
            assert!(
                used(&by.name) + waiting.total_gpus() <= by.quota_gpus.unwrap(),
                "round {round}: {} reclaimed beyond its quota",
                by.name
            );
            assert_eq!(
                plan.decision(&p.for_job).map(|d| d.reason),
                Some(Reason::Reclaiming)
            );
        }
        // Each job is preempted at most once.
        let mut victims = preempted(&plan);
        victims.sort();
        let n = victims.len();
        victims.dedup();
        assert_eq!(victims.len(), n, "round {round}");
    }
    assert!(
        with_preemptions > 100,
        "too few rounds exercised preemption: {with_preemptions}"
    );
}

#[test]
fn a_job_is_no_victim_before_it_has_run_its_queues_minimum_runtime() {
    let mut s = two_queues(8);
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    s.jobs = vec![
        restartable(running(job("borrower", 8, 0), &["n1"], 5, None)),
        team_job("mine", 8, 10),
    ];
    // The borrower's queue protects its jobs' first 15 minutes: at minute 12 it has run 7.
    s.queues[0].min_runtime = mins(15);
    let plan = run(&s, 12);
    assert!(plan.preemptions.is_empty(), "{:?}", preempted(&plan));
    assert_ne!(plan.decision("ml/mine").unwrap().reason, Reason::Reclaiming);
    // Decided again when the protection ends, and then it is reclaimed.
    assert_eq!(plan.next_wake, Some(at_min(20)));
    let plan = run(&s, 20);
    assert_eq!(preempted(&plan), ["ml/borrower"]);
}
