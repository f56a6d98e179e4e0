//! Property tests of the invariants the core promises, on random snapshots.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use spillway_core::*;
use support::*;

#[derive(Debug, Clone)]
struct Scenario {
    snapshot: Snapshot,
    now: Time,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let nodes = prop::collection::vec((1u32..=8, 0u32..=8, 0usize..3, any::<bool>()), 0..6);
    let jobs = prop::collection::vec(
        (
            1u32..=3,
            1u32..=8,
            0i64..120,
            -5i32..5,
            any::<bool>(),
            0usize..4,
            0usize..3,
            any::<bool>(),
            0u8..3,
        ),
        0..12,
    );
    let queues = prop::collection::vec(
        (
            any::<bool>(),
            0u64..30,
            prop::option::of(0.0f64..60.0),
            prop::option::of(0.0f64..500.0),
            1u32..4,
        ),
        1..3,
    );
    let offers = prop::collection::vec(
        (0usize..4, any::<bool>(), prop::option::of(0i64..200)),
        0..6,
    );
    let pool_limits = (
        prop::option::of(0u32..4),
        prop::option::of(0u32..24),
        prop::option::of(0.0f64..80.0),
    );
    // A cluster pool "rc" at $1.50 per GPU-hour with an optional GPU limit.
    let remote_limit = prop::option::of(0u32..16);
    (
        nodes,
        jobs,
        queues,
        offers,
        pool_limits,
        0i64..240,
        remote_limit,
    )
        .prop_map(|(nodes, jobs, queues, offers, limits, now, remote_limit)| {
            let models = ["A100", "H100", "A10G"];
            let mut s = base();
            s.offerings.clear();
            s.queues = queues
                .iter()
                .enumerate()
                .map(|(i, &(enabled, wait, hourly, monthly, weight))| {
                    let mut q = bursting_queue(&format!("q{i}"), wait);
                    q.burst.enabled = enabled;
                    q.budget_hourly_usd = hourly;
                    q.budget_monthly_usd = monthly;
                    q.weight = weight;
                    q
                })
                .collect();
            s.pools[1].max_nodes = limits.0;
            s.pools[1].max_gpus = limits.1;
            s.pools[1].max_hourly_usd = limits.2;
            let mut rc = Pool::cluster("rc", 1.5);
            rc.max_gpus = remote_limit;
            s.pools.push(rc);
            s.nodes = nodes
                .iter()
                .enumerate()
                .map(|(i, &(gpus, free, m, remote))| {
                    let mut n = private_node(&format!("n{i}"), gpus, free.min(gpus), models[m]);
                    if remote {
                        n.pool = "rc".into();
                    }
                    n
                })
                .collect();
            let catalog = [
                ("g5.12xlarge", "A10G", 4, 5.67),
                ("g5.48xlarge", "A10G", 8, 16.29),
                ("p4d.24xlarge", "A100", 8, 21.96),
                ("p5.48xlarge", "H100", 8, 55.04),
            ];
            s.offerings = offers
                .iter()
                .map(|&(k, spot, unavailable)| {
                    let (t, m, g, p) = catalog[k];
                    let cap = if spot {
                        CapacityType::Spot
                    } else {
                        CapacityType::OnDemand
                    };
                    let mut o = offering(t, m, g, cap, if spot { p / 3.0 } else { p });
                    o.unavailable_until = unavailable.map(at_min);
                    o
                })
                .collect();
            s.datasets = vec![
                dataset("public", Classification::Public),
                dataset("secret", Classification::Restricted),
                dataset("conf", Classification::Confidential),
            ];
            let nq = s.queues.len();
            s.jobs = jobs
                .iter()
                .enumerate()
                .map(
                    |(i, &(replicas, gpus, queued, prio, restartable, ds, m, any_model, place))| {
                        let mut j = Job::new(
                            format!("ml/j{i}"),
                            format!("q{}", i % nq),
                            gpus,
                            at_min(queued),
                        );
                        j.replicas = replicas;
                        j.priority = prio;
                        j.restartable = restartable;
                        j.estimated_runtime = (i % 2 == 0).then(|| mins(30 + i as u64 * 7));
                        j.datasets = match ds {
                            1 => vec!["public".into()],
                            2 => vec!["secret".into()],
                            3 => vec!["conf".into(), "public".into()],
                            _ => vec![],
                        };
                        if !any_model {
                            j.gpu_models = vec![GpuModel::normalize(models[m])];
                        }
                        j.placement = [
                            Placement::Auto,
                            Placement::PrivateOnly,
                            Placement::CloudOnly,
                        ][place as usize];
                        j
                    },
                )
                .collect();
            Scenario {
                snapshot: s,
                now: at_min(now),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn restricted_data_never_leaves_private_nodes(sc in scenario()) {
        let plan = decide(&sc.snapshot, &NoPolicy, sc.now);
        for job in sc.snapshot.jobs.iter().filter(|j| j.datasets.iter().any(|d| d == "secret")) {
            prop_assert!(!plan.launches.iter().any(|l| l.job == job.id));
            prop_assert!(!plan.starts.iter().any(|s| s.job == job.id && s.environment != Environment::Private));
        }
        // Confidential data (no rule allows it) stays home too.
        for job in sc.snapshot.jobs.iter().filter(|j| j.datasets.iter().any(|d| d == "conf")) {
            prop_assert!(!plan.starts.iter().any(|s| s.job == job.id && s.environment == Environment::Remote));
        }
    }

    #[test]
    fn gangs_are_all_or_nothing_and_gpus_are_never_overcommitted(sc in scenario()) {
        let s = &sc.snapshot;
        let plan = decide(s, &NoPolicy, sc.now);
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        for start in &plan.starts {
            let job = s.jobs.iter().find(|j| j.id == start.job).unwrap();
            prop_assert_eq!(start.nodes.len() as u32, job.replicas, "one node per replica");
            for n in &start.nodes {
                *taken.entry(n.as_str()).or_default() += job.gpus_per_replica;
                let node = s.nodes.iter().find(|x| &x.name == n).unwrap();
                prop_assert!(job.accepts_model(node.gpu_model.as_ref()));
            }
            prop_assert!(job.placement != Placement::CloudOnly || start.environment == Environment::Cloud);
            prop_assert!(job.placement != Placement::PrivateOnly || start.environment == Environment::Private);
            // Each start is in the environment of its nodes' pool.
            for n in &start.nodes {
                let node = s.nodes.iter().find(|x| &x.name == n).unwrap();
                let pool = s.pools.iter().find(|p| p.name == node.pool).unwrap();
                prop_assert_eq!(pool.environment(), start.environment);
                prop_assert_eq!(&pool.name, &start.pool);
            }
        }
        for (n, gpus) in taken {
            let node = s.nodes.iter().find(|x| x.name == n).unwrap();
            prop_assert!(gpus <= node.free_gpus, "node {} gets {} GPUs but has {} free", n, gpus, node.free_gpus);
        }
        for l in &plan.launches {
            let job = s.jobs.iter().find(|j| j.id == l.job).unwrap();
            prop_assert!((l.offering.gpus_per_instance / job.gpus_per_replica) * l.count >= job.replicas, "the launch holds the whole gang");
            prop_assert!(job.placement != Placement::PrivateOnly);
            prop_assert!(l.offering.capacity_type == CapacityType::OnDemand || job.restartable);
        }
    }

    #[test]
    fn budgets_and_pool_limits_hold(sc in scenario()) {
        let s = &sc.snapshot;
        let plan = decide(s, &NoPolicy, sc.now);
        let pool = &s.pools[1];
        let count: u32 = plan.launches.iter().map(|l| l.count).sum();
        let gpus: u32 = plan.launches.iter().map(|l| l.count * l.offering.gpus_per_instance).sum();
        let hourly: f64 = plan.launches.iter().map(|l| l.count as f64 * l.offering.hourly_price).sum();
        if let Some(m) = pool.max_nodes { prop_assert!(count <= m); }
        if let Some(m) = pool.max_gpus { prop_assert!(gpus <= m); }
        if let Some(m) = pool.max_hourly_usd { prop_assert!(hourly <= m + 1e-6); }
        let remote = |q: Option<&str>| -> (u32, f64) {
            let gpus: u32 = plan.starts.iter()
                .filter(|st| st.environment == Environment::Remote)
                .map(|st| s.jobs.iter().find(|j| j.id == st.job).unwrap())
                .filter(|j| q.is_none_or(|q| j.queue == q))
                .map(|j| j.total_gpus())
                .sum();
            (gpus, gpus as f64 * 1.5)
        };
        if let Some(m) = s.pools[2].max_gpus { prop_assert!(remote(None).0 <= m); }
        for q in &s.queues {
            let launches: Vec<&Launch> = plan.launches.iter().filter(|l| l.queue == q.name).collect();
            let hourly: f64 = launches.iter().map(|l| l.count as f64 * l.offering.hourly_price).sum::<f64>() + remote(Some(&q.name)).1;
            if let Some(b) = q.budget_hourly_usd { prop_assert!(hourly <= b + 1e-6, "queue {} plans ${}/h over ${}/h", q.name, hourly, b); }
            if !q.burst.enabled {
                prop_assert!(launches.is_empty(), "queue {} does not burst", q.name);
                prop_assert_eq!(remote(Some(&q.name)).0, 0, "queue {} does not leave home", &q.name);
            }
        }
    }

    #[test]
    fn one_launch_per_need_and_the_same_plan_twice(sc in scenario()) {
        let plan = decide(&sc.snapshot, &NoPolicy, sc.now);
        let needs: BTreeSet<&str> = plan.launches.iter().map(|l| l.need.as_str()).collect();
        prop_assert_eq!(needs.len(), plan.launches.len());
        let again = decide(&sc.snapshot, &NoPolicy, sc.now);
        prop_assert_eq!(plan, again);
    }

    /// Buffers that served earlier cycles (of other worlds, larger and smaller) change no plan.
    #[test]
    fn a_reused_scratch_plans_what_a_new_one_plans(scs in prop::collection::vec(scenario(), 1..6)) {
        let mut scratch = Scratch::new();
        for sc in &scs {
            let plan = decide_with(&sc.snapshot, &NoPolicy, sc.now, &mut scratch);
            prop_assert_eq!(plan, decide(&sc.snapshot, &NoPolicy, sc.now));
        }
    }

    #[test]
    fn every_pending_job_gets_exactly_one_decision(sc in scenario()) {
        let plan = decide(&sc.snapshot, &NoPolicy, sc.now);
        for job in &sc.snapshot.jobs {
            let n = plan.decisions.iter().filter(|d| d.job == job.id).count();
            prop_assert_eq!(n, 1, "job {} has {} decisions", job.id, n);
        }
    }
}
