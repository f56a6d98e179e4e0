//! How long a waiting job may wait (compute-wait and priced budgets, a rule's `maxWait`) and
//! where its queue plans it.

mod support;

use spillway_core::*;
use support::*;

/// One private 8-GPU node, busy until t=60m with the job returned.
fn busy_until_60m(s: &mut Snapshot) -> Job {
    s.nodes = vec![private_node("n1", 8, 0, "A100")];
    running(job("busy", 8, -10), &["n1"], -10, Some(70))
}

#[test]
fn compute_wait_plans_the_jobs_that_save_most_per_hour_of_waiting_first() {
    let mut s = base();
    s.queues[0].burst.wait_mode = WaitMode::ComputeWait;
    s.queues[0].burst.compute_wait_factor = 0.2;
    // n1 is busy until t=60m. `early` (8 GPUs, 1 h: may wait 96m) came first; `big` (8 GPUs,
    // 10 h: may wait 16 h) a minute later.
    let busy = busy_until_60m(&mut s);
    let mut early = job("early", 8, 0);
    early.estimated_runtime = Some(mins(60));
    let mut big = job("big", 8, 1);
    big.estimated_runtime = Some(mins(600));
    s.jobs = vec![busy, early, big];
    // `big` is planned as if it had come 16 h earlier: it holds the slot at 60m, and `early`,
    // planned after it at 660m, later than it may wait, bursts at once.
    let plan = run(&s, 2);
    assert_decision(&plan, "big", Outcome::Wait, Reason::WaitingForPrivate);
    assert_decision(
        &plan,
        "early",
        Outcome::StartCloud,
        Reason::PrivateStartTooLate,
    );
    let wait = |plan: &Plan, j: &str| {
        plan.decisions
            .iter()
            .find(|d| d.job == format!("ml/{j}"))
            .and_then(|d| d.estimated_wait)
    };
    assert_eq!(wait(&plan, "big"), Some(mins(58)));

    // A fixed wait plans in arrival order: `early` holds the slot at 60m.
    s.queues[0].burst.wait_mode = WaitMode::Fixed;
    s.queues[0].burst.max_wait = mins(600);
    let plan = run(&s, 2);
    assert_decision(&plan, "early", Outcome::Wait, Reason::WaitingForPrivate);
    assert_eq!(wait(&plan, "early"), Some(mins(58)));
    assert_eq!(wait(&plan, "big"), Some(mins(118)));

    // So does a queue that never bursts: the order trades waits for cloud savings only.
    s.queues[0].burst.wait_mode = WaitMode::ComputeWait;
    s.queues[0].burst.enabled = false;
    let plan = run(&s, 2);
    assert_decision(&plan, "early", Outcome::Wait, Reason::BurstDisabled);
    assert!(plan.starts.is_empty() && plan.launches.is_empty());
}

/// A rule `maxWait: 2m` (and no rule `waitMode`).
struct Urgent;

impl Policy for Urgent {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects {
            max_wait: Some(policy::Ruled {
                value: mins(2),
                rule: "p/urgent".into(),
            }),
            ..Default::default()
        }
    }
}

#[test]
fn a_rules_max_wait_is_the_jobs_wait_in_a_compute_wait_queue() {
    let mut s = base();
    s.queues[0].burst.wait_mode = WaitMode::ComputeWait;
    s.queues[0].burst.compute_wait_factor = 0.2;
    let busy = busy_until_60m(&mut s);
    // 8 GPUs x 10 h: the queue alone would let it wait 16 h for the slot at 60m.
    let mut big = job("big", 8, 0);
    big.estimated_runtime = Some(mins(600));
    s.jobs = vec![busy, big];
    let plan = run(&s, 3);
    assert_decision(&plan, "big", Outcome::Wait, Reason::WaitingForPrivate);
    let plan = decide(&s, &Urgent, at_min(3));
    assert_decision(&plan, "big", Outcome::StartCloud, Reason::MaxWaitExceeded);
    let d = plan.decisions.iter().find(|d| d.job == "ml/big").unwrap();
    assert_eq!(d.rule.as_deref(), Some("p/urgent"));
}

#[test]
fn a_priced_wait_weighs_what_bursting_would_cost() {
    let mut s = base();
    assert_eq!(s.queues[0].burst.wait_mode, WaitMode::Priced, "the default");
    s.queues[0].burst.wait_cost_per_hour = 5.0;
    // n1 frees at t=60m. An 8-GPU, 30-minute job: on demand its cheapest fit is a g5.48xlarge
    // at $2.036 per GPU-hour, so it may wait 8 x 0.5 h x 2.036 / 5 = 98 minutes and waits for
    // the private slot.
    let busy = busy_until_60m(&mut s);
    let mut train = job("train", 8, 0);
    train.estimated_runtime = Some(mins(30));
    s.jobs = vec![busy.clone(), train.clone()];
    let plan = run(&s, 1);
    assert_decision(&plan, "train", Outcome::Wait, Reason::WaitingForPrivate);
    // Restartable, it may run on spot at $1.06 per GPU-hour: 51 minutes are worth less than
    // the slot's wait, so it bursts at once.
    train.restartable = true;
    s.jobs = vec![busy.clone(), train.clone()];
    let plan = run(&s, 1);
    assert_decision(
        &plan,
        "train",
        Outcome::StartCloud,
        Reason::PrivateStartTooLate,
    );
    // A dearer hour of waiting ($20): 24 minutes on demand, so it bursts too.
    train.restartable = false;
    s.jobs = vec![busy, train];
    s.queues[0].burst.wait_cost_per_hour = 20.0;
    let plan = run(&s, 1);
    assert_decision(
        &plan,
        "train",
        Outcome::StartCloud,
        Reason::PrivateStartTooLate,
    );
}
