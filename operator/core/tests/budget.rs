//! Budgets that count private GPU time (`budget.countsPrivate`).

mod support;

use spillway_core::*;
use support::*;

/// Two private nodes at $1 per GPU-hour, one busy with an 8-GPU job of the queue ($8/h), one
/// free with 4 GPUs; the queue's budget is $12/h.
fn world(counts_private: bool) -> Snapshot {
    let mut s = base();
    s.pools[0].kind = PoolKind::Private {
        gpu_cost_per_hour: Some(1.0),
    };
    s.nodes = vec![
        private_node("busy", 8, 0, "A100"),
        private_node("free", 4, 4, "A100"),
    ];
    s.queues[0].budget_hourly_usd = Some(12.0);
    s.queues[0].budget_counts_private = counts_private;
    s.jobs = vec![running(job("old", 8, 0), &["busy"], 0, Some(600))];
    s
}

#[test]
fn private_time_counts_against_the_budget_only_when_the_queue_says_so() {
    // A 4-GPU A10G job bursts to a g5.12xlarge at $5.67/h: within $12/h alone, not with the
    // private job's $8/h counted.
    let mut burst = job("burst", 4, 0);
    burst.gpu_models = vec![GpuModel::normalize("A10G")];
    let mut s = world(false);
    s.jobs.push(burst.clone());
    assert_decision(
        &run(&s, 16),
        "burst",
        Outcome::StartCloud,
        Reason::NoPrivateCapacity,
    );
    let mut s = world(true);
    s.jobs.push(burst);
    assert_decision(
        &run(&s, 16),
        "burst",
        Outcome::Wait,
        Reason::BudgetExhausted,
    );
}

#[test]
fn private_jobs_still_start_when_the_budget_is_spent() {
    let mut s = world(true);
    s.queues[0].budget_hourly_usd = Some(1.0);
    s.jobs.push(job("small", 4, 0));
    assert_decision(
        &run(&s, 1),
        "small",
        Outcome::StartPrivate,
        Reason::FitsPrivate,
    );
}
