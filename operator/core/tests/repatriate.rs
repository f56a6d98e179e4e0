//! Repatriation: a restartable cloud job moves to free private GPUs when that is cheaper.

mod support;

use spillway_core::policy::Ruled;
use spillway_core::*;
use support::*;

/// A cloud node "c1" (one p4d.24xlarge at 21.96 USD/h) running `job`, started at minute 0 with
/// a 4-hour estimate, and an empty 8-GPU private node "n1".
fn world() -> Snapshot {
    let mut s = base();
    s.pools[1].idle_timeout = mins(10);
    s.nodes = vec![private_node("n1", 8, 8, "A100"), {
        let mut c = private_node("c1", 8, 0, "A100");
        c.pool = "aws".into();
        c.instance_id = Some("i-1".into());
        c
    }];
    s.instances = vec![Instance {
        id: "i-1".into(),
        pool: "aws".into(),
        instance_type: "p4d.24xlarge".into(),
        capacity_type: CapacityType::OnDemand,
        zone: "us-east-1a".into(),
        gpus: 8,
        hourly_price: 21.96,
        need: "ml/train#0".into(),
        queue: "research".into(),
        node: Some("c1".into()),
        launched_at: at_min(-3),
    }];
    let mut j = job("train", 8, -20);
    j.restartable = true;
    j.estimated_runtime = Some(mins(240));
    j.state = JobState::Running {
        nodes: vec!["c1".into()],
        started_at: at_min(0),
        environment: Environment::Cloud,
    };
    s.jobs = vec![j];
    s
}

#[test]
fn a_restartable_cloud_job_moves_home_when_private_gpus_free_up() {
    let s = world();
    let plan = run(&s, 30);
    assert_eq!(plan.moves.len(), 1, "{:#?}", plan.decisions);
    let m = &plan.moves[0];
    assert_eq!(
        (m.job.as_str(), m.pool.as_str(), m.from_pool.as_str()),
        ("ml/train", "onprem", "aws")
    );
    assert_eq!(m.nodes, ["n1"]);
    // 3.5 h left at 21.96 USD/h, minus 10 minutes of the instance idling before scale-down;
    // the private GPUs cost nothing here.
    let expected = 21.96 * 3.5 - 21.96 * 10.0 / 60.0;
    assert!((m.saving_usd - expected).abs() < 1e-6, "{}", m.saving_usd);
    assert_decision(&plan, "train", Outcome::Wait, Reason::Repatriating);
    assert!(plan.decision("ml/train").unwrap().message.contains("$"));
}

#[test]
fn no_move_without_a_saving() {
    // Not restartable.
    let mut s = world();
    s.jobs[0].restartable = false;
    assert!(run(&s, 30).moves.is_empty());
    // No estimate: nothing says what is left.
    let mut s = world();
    s.jobs[0].estimated_runtime = None;
    assert!(run(&s, 30).moves.is_empty());
    // Six minutes left: less than the instance would idle before scale-down.
    let s = world();
    assert!(run(&s, 234).moves.is_empty());
    // Private GPUs that cost as much as the cloud: the restart makes it dearer.
    let mut s = world();
    s.pools[0].kind = PoolKind::Private {
        gpu_cost_per_hour: Some(21.96 / 8.0),
    };
    assert!(run(&s, 30).moves.is_empty());
    // Cheap private GPUs still pay: the saving counts their cost over the remaining time,
    // the lost work and the restart overhead.
    let mut s = world();
    s.pools[0].kind = PoolKind::Private {
        gpu_cost_per_hour: Some(1.0),
    };
    s.jobs[0].checkpoint_interval = Some(mins(60));
    let plan = run(&s, 30);
    let busy_h = 3.5 + 0.5 + 5.0 / 60.0;
    let expected = 21.96 * 3.5 - 8.0 * busy_h - 21.96 * 10.0 / 60.0;
    assert!(
        (plan.moves[0].saving_usd - expected).abs() < 1e-6,
        "{}",
        plan.moves[0].saving_usd
    );
    assert_eq!(plan.moves[0].lost_gpu_seconds, 30.0 * 60.0 * 8.0);
}

struct Never;

impl Policy for Never {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects {
            repatriate: Some(Ruled {
                value: Repatriate::Never,
                rule: "p/stay".into(),
            }),
            ..Effects::default()
        }
    }
}

#[test]
fn a_rule_can_keep_a_job_in_the_cloud() {
    let s = world();
    assert!(decide(&s, &Never, at_min(30)).moves.is_empty());
}

#[test]
fn waiting_jobs_come_first() {
    let mut s = world();
    s.jobs.push(job("waiting", 8, 25));
    let plan = run(&s, 30);
    assert_decision(&plan, "waiting", Outcome::StartPrivate, Reason::FitsPrivate);
    assert!(plan.moves.is_empty());
}

#[test]
fn a_suspended_job_holds_its_nodes_and_starts_there_once_ready() {
    let mut s = world();
    s.jobs[0].state = JobState::Suspended {
        nodes: vec!["n1".into()],
        pool: "onprem".into(),
        ready: false,
    };
    s.jobs[0].attempt = 1;
    s.jobs.push(job("waiting", 8, 25));
    let plan = run(&s, 30);
    assert_decision(&plan, "train", Outcome::Wait, Reason::Repatriating);
    // The held GPUs are not free for anyone else.
    assert_ne!(
        plan.decision("ml/waiting").unwrap().outcome,
        Outcome::StartPrivate
    );

    if let JobState::Suspended { ready, .. } = &mut s.jobs[0].state {
        *ready = true;
    }
    let plan = run(&s, 31);
    assert_decision(&plan, "train", Outcome::StartPrivate, Reason::Repatriated);
    assert_eq!(plan.starts[0].nodes, ["n1"]);
    assert_ne!(
        plan.decision("ml/waiting").unwrap().outcome,
        Outcome::StartPrivate
    );

    // Its node is gone: it is planned again like any pending job.
    s.nodes.remove(0);
    let plan = run(&s, 32);
    assert_ne!(
        plan.decision("ml/train").unwrap().reason,
        Reason::Repatriated
    );
}

#[test]
fn a_cloud_job_moves_home_only_once_it_has_run_its_queues_minimum_runtime() {
    let mut s = world();
    s.queues[0].min_runtime = mins(45);
    let plan = run(&s, 30);
    assert!(plan.moves.is_empty(), "{:#?}", plan.moves);
    assert!(plan.next_wake.is_some_and(|t| t <= at_min(45)));
    assert_eq!(run(&s, 45).moves.len(), 1);
}
