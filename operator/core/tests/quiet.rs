//! `Plan::quiet`: a job that the last plan's quiet queues absorb changes nothing. On random
//! worlds in strict order without wait decisions, a plan that asked for nothing is compared
//! with `decide` run again, later, with the arrived jobs added: whenever `absorbs` says so for
//! every one of them, the two plans must be equal in full.

mod support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use spillway_core::*;
use support::*;

/// An arriving job: GPUs (0 is invalid), replicas, priority, minutes queued before it
/// arrives, queue (0 research, 1 batch, 2 none such), model (0 any, 1 A100, 2 H100),
/// dataset (0 none, 1 known, 2 missing), cloud-only.
type Arrival = (u32, u32, i32, u32, usize, usize, usize, bool);

fn arrival() -> impl Strategy<Value = Arrival> {
    // Mostly jobs that could be absorbed, each disqualifier now and then.
    (
        prop::sample::select(vec![0u32, 1, 1, 2, 2, 4, 4, 8, 8, 9]),
        1u32..=3,
        prop::sample::select(vec![-1i32, 0, 0, 0, 1]),
        0u32..90,
        prop::sample::select(vec![0usize, 0, 0, 1, 1, 2]),
        prop::sample::select(vec![0usize, 0, 0, 0, 1, 2]),
        prop::sample::select(vec![0usize, 0, 0, 0, 1, 2]),
        prop::bool::weighted(0.1),
    )
}

#[derive(Clone, Debug)]
struct Case {
    world: Snapshot,
    arrivals: Vec<Arrival>,
    /// Seconds after the first cycle that the jobs arrive.
    later_s: u32,
}

/// Busy private nodes (at most two GPUs free on each), a research head that needs a whole
/// node (blocked: research never bursts), jobs waiting behind it and in "batch" (none past its
/// wait yet), and jobs arriving later.
fn case() -> impl Strategy<Value = Case> {
    let nodes = prop::collection::vec(
        (
            prop::sample::select(vec![4u32, 8]),
            0usize..2,
            0u32..=2,
            55u32..170,
        ),
        1..4,
    );
    let waiting = prop::collection::vec((1u32..=4, 1u32..=2, -1i32..=0, 0u32..9, 0usize..2), 0..8);
    let queues = (any::<bool>(), 0usize..3, any::<bool>(), any::<bool>());
    (
        nodes,
        waiting,
        queues,
        prop::collection::vec(arrival(), 1..4),
        0u32..300,
    )
        .prop_map(
            |(
                nodes,
                waiting,
                (batch_bursts, batch_quota, first_fit, head_model),
                arrivals,
                later_s,
            )| {
                let mut s = base();
                s.settings.order = QueueOrder::Strict;
                s.settings.wait_decisions = false;
                if first_fit {
                    s.settings.packing = Packing::FirstFit;
                }
                s.queues[0].burst.enabled = false;
                let mut batch = bursting_queue("batch", 10);
                batch.burst.enabled = batch_bursts;
                // No quota, a quota it may borrow past, or a hard one.
                batch.quota_gpus = (batch_quota > 0).then_some(4);
                batch.borrowing = batch_quota == 1;
                s.queues.push(batch);
                s.datasets = vec![dataset("known", Classification::Internal)];
                let models = ["A100", "A10G"];
                let now = at_min(60);
                for (i, &(gpus, m, free, est)) in nodes.iter().enumerate() {
                    let name = format!("n{i}");
                    s.nodes.push(private_node(&name, gpus, free, models[m]));
                    let j = Job::new(format!("ml/r{i}"), "research", gpus - free, at_min(0));
                    s.jobs.push(running(j, &[&name], 10, Some(est as u64)));
                }
                let largest = s.nodes.iter().max_by_key(|n| n.gpus).cloned();
                let mut head = job("head", largest.as_ref().map_or(8, |n| n.gpus), 20);
                if head_model && let Some(model) = largest.and_then(|n| n.gpu_model) {
                    head.gpu_models = vec![model];
                }
                s.jobs.push(head);
                for (i, &(gpus, replicas, priority, ago, q)) in waiting.iter().enumerate() {
                    // Batch jobs do not fit the free GPUs either (so the plan may be empty).
                    let gpus = if q == 1 { gpus.max(3) } else { gpus };
                    let replicas = if gpus > 2 { 1 } else { replicas };
                    let mut j = Job::new(
                        format!("ml/w{i}"),
                        ["research", "batch"][q],
                        gpus,
                        now - mins(ago as u64),
                    );
                    j.replicas = replicas;
                    j.priority = priority;
                    s.jobs.push(j);
                }
                Case {
                    world: s,
                    arrivals,
                    later_s,
                }
            },
        )
}

fn arrived(k: usize, a: &Arrival, at: Time) -> Job {
    let &(gpus, replicas, priority, ago, queue, model, dataset, cloud_only) = a;
    let queue = ["research", "batch", "nowhere"][queue];
    let mut j = Job::new(format!("ml/new{k}"), queue, gpus, at - mins(ago as u64));
    j.replicas = replicas;
    j.priority = priority;
    if model > 0 {
        j.gpu_models = vec![GpuModel::normalize(["A100", "H100"][model - 1])];
    }
    if dataset > 0 {
        j.datasets = vec![["known", "missing"][dataset - 1].to_string()];
    }
    if cloud_only {
        j.placement = Placement::CloudOnly;
    }
    j
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        max_global_rejects: 200_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_absorbed_arrival_leaves_the_plan_as_it_was(c in case()) {
        let now = at_min(60);
        let first = decide(&c.world, &NoPolicy, now);
        prop_assume!(first.is_empty());
        let later = now + Duration::from_secs(c.later_s as u64);
        prop_assume!(first.holds_until(&c.world, now).is_none_or(|u| later < u));
        let mut world = c.world.clone();
        for (k, a) in c.arrivals.iter().enumerate() {
            world.jobs.push(arrived(k, a, later));
        }
        let n = c.world.jobs.len();
        prop_assume!(world.jobs[n..].iter().all(|j| first.quiet.absorbs(&c.world, j)));
        let again = decide(&world, &NoPolicy, later);
        prop_assert_eq!(again, first);
    }
}

/// The property above is not empty: on the same random worlds, many arrivals are absorbed,
/// and arrivals that are not often do change the plan (so `absorbs` cannot simply say yes).
#[test]
fn the_random_worlds_absorb_some_arrivals_and_not_others() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut absorbed, mut refused_and_changed) = (0, 0);
    for _ in 0..3000 {
        let c = case().new_tree(&mut runner).unwrap().current();
        let now = at_min(60);
        let first = decide(&c.world, &NoPolicy, now);
        if !first.is_empty() {
            continue;
        }
        let mut world = c.world.clone();
        let job = arrived(0, &c.arrivals[0], now);
        let absorbs = first.quiet.absorbs(&c.world, &job);
        world.jobs.push(job);
        if absorbs {
            absorbed += 1;
        } else if decide(&world, &NoPolicy, now) != first {
            refused_and_changed += 1;
        }
    }
    assert!(absorbed >= 200, "only {absorbed} arrivals absorbed");
    assert!(
        refused_and_changed >= 200,
        "only {refused_and_changed} refused arrivals changed the plan"
    );
}

#[test]
fn quiet_queues_are_listed_only_without_wait_decisions_in_strict_order() {
    let mut s = base();
    s.queues[0].burst.enabled = false;
    s.settings.order = QueueOrder::Strict;
    s.settings.wait_decisions = false;
    s.nodes = vec![private_node("n0", 8, 2, "A100")];
    s.jobs = vec![job("big", 8, 0), job("next", 1, 1)];
    let plan = run(&s, 5);
    assert!(plan.is_empty(), "{plan:#?}");
    assert!(!plan.quiet.is_empty());
    // A small job behind the blocked head would fit, but strict order holds it back.
    assert!(plan.quiet.absorbs(&s, &job("small", 1, 4)));
    // Ahead of the head by priority: it starts.
    let mut urgent = job("urgent", 1, 4);
    urgent.priority = 1;
    assert!(!plan.quiet.absorbs(&s, &urgent));
    // Too large for any private node: rejected, as the queue never bursts.
    assert!(!plan.quiet.absorbs(&s, &job("huge", 16, 4)));

    for (order, wait_decisions, bursts) in [
        (QueueOrder::Strict, true, false),
        (QueueOrder::Conservative, false, false),
        (QueueOrder::Strict, false, true),
    ] {
        let mut t = s.clone();
        t.settings.order = order;
        t.settings.wait_decisions = wait_decisions;
        t.queues[0].burst.enabled = bursts;
        assert!(
            run(&t, 5).quiet.is_empty(),
            "{order:?} {wait_decisions} {bursts}"
        );
    }
}
