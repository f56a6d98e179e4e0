//! Cluster pools: other clusters' free GPUs, after private nodes and before the cloud, in the
//! queue's order, within caps, limits, budgets and data rules.

mod support;

use spillway_core::policy::Ruled;
use spillway_core::*;
use support::*;

fn remote_node(name: &str, pool: &str, gpus: u32, free: u32) -> Node {
    Node {
        pool: pool.into(),
        ..private_node(name, gpus, free, "A100")
    }
}

/// `base()` with its one private node full, and two cluster pools: "near" ($1/GPU-h, 8 free
/// GPUs on one node) and "far" ($0.50/GPU-h, 8 free GPUs on one node).
fn with_remotes() -> Snapshot {
    let mut s = base();
    s.nodes = vec![
        private_node("p1", 8, 0, "A100"),
        remote_node("near-1", "near", 8, 8),
        remote_node("far-1", "far", 8, 8),
    ];
    s.pools.push(Pool::cluster("near", 1.0));
    s.pools.push(Pool::cluster("far", 0.5));
    s
}

fn start_of<'p>(plan: &'p Plan, id: &str) -> &'p Start {
    plan.starts
        .iter()
        .find(|s| s.job == format!("ml/{id}"))
        .unwrap_or_else(|| panic!("no start for {id}: {:#?}", plan.decisions))
}

#[test]
fn a_job_waits_its_max_wait_then_takes_the_cheapest_cluster_when_the_queue_lists_none() {
    let mut s = with_remotes();
    s.jobs = vec![job("a", 4, 0)];
    let plan = run(&s, 5);
    assert_decision(&plan, "a", Outcome::Wait, Reason::WaitingForPrivate);
    let plan = run(&s, 16);
    assert_decision(&plan, "a", Outcome::StartRemote, Reason::RemoteCapacity);
    let start = start_of(&plan, "a");
    assert_eq!(start.environment, Environment::Remote);
    assert_eq!(
        (start.pool.as_str(), start.nodes.as_slice()),
        ("far", &["far-1".to_string()][..])
    );
    let d = plan.decision("ml/a").unwrap();
    assert_eq!(d.estimated_hourly_cost, Some(2.0));
    assert!(plan.launches.is_empty());
}

#[test]
fn the_queues_order_of_cluster_pools_wins_over_price() {
    let mut s = with_remotes();
    s.queues[0].burst.pools = vec!["near".into(), "far".into(), "aws".into()];
    s.jobs = vec![job("a", 4, 0)];
    let plan = run(&s, 16);
    assert_eq!(start_of(&plan, "a").pool, "near");
    // A queue that lists only the cloud pool never uses the clusters.
    s.queues[0].burst.pools = vec!["aws".into()];
    let plan = run(&s, 16);
    assert_decision(&plan, "a", Outcome::StartCloud, Reason::MaxWaitExceeded);
    assert!(plan.starts.is_empty());
}

#[test]
fn free_private_gpus_come_first() {
    let mut s = with_remotes();
    s.nodes[0].free_gpus = 8;
    s.jobs = vec![job("a", 4, 0)];
    let plan = run(&s, 16);
    assert_decision(&plan, "a", Outcome::StartPrivate, Reason::FitsPrivate);
}

#[test]
fn a_gang_goes_whole_or_not_at_all() {
    let mut s = with_remotes();
    // 6 + 4 free GPUs in "near": a gang of two 4-GPU replicas fits; of three it does not.
    s.pools.retain(|p| p.name != "far");
    s.nodes = vec![
        private_node("p1", 8, 0, "A100"),
        remote_node("near-1", "near", 8, 6),
        remote_node("near-2", "near", 8, 4),
    ];
    let mut two = job("two", 4, 0);
    two.replicas = 2;
    s.jobs = vec![two];
    let plan = run(&s, 16);
    let start = start_of(&plan, "two");
    let mut nodes = start.nodes.clone();
    nodes.sort();
    assert_eq!(nodes, ["near-1", "near-2"]);

    let mut three = job("three", 4, 0);
    three.replicas = 3;
    s.jobs = vec![three];
    let plan = run(&s, 16);
    assert!(plan.starts.is_empty(), "{:#?}", plan.starts);
    assert_decision(
        &plan,
        "three",
        Outcome::StartCloud,
        Reason::NoPrivateCapacity,
    );
}

#[test]
fn restricted_data_never_leaves_and_confidential_needs_a_rule() {
    let mut s = with_remotes();
    s.datasets = vec![
        dataset("secret", Classification::Restricted),
        dataset("conf", Classification::Confidential),
    ];
    let mut r = job("r", 4, 0);
    r.datasets = vec!["secret".into()];
    let mut c = job("c", 4, 0);
    c.datasets = vec!["conf".into()];
    s.jobs = vec![r, c];
    let plan = run(&s, 60);
    assert!(plan.starts.is_empty());
    assert_decision(&plan, "r", Outcome::Wait, Reason::RestrictedData);
    assert_decision(&plan, "c", Outcome::Wait, Reason::ConfidentialData);
}

/// Allows Confidential data, in the locations given (none: anywhere).
struct AllowConfidential(Option<Vec<String>>);

impl Policy for AllowConfidential {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects {
            allowed_classifications: vec![Ruled {
                value: Classification::Confidential,
                rule: "p/conf".into(),
            }],
            regions: self.0.clone().map(|value| Ruled {
                value,
                rule: "p/where".into(),
            }),
            ..Effects::default()
        }
    }
}

#[test]
fn confidential_data_goes_only_to_the_locations_a_rule_allows() {
    let mut s = with_remotes();
    for p in &mut s.pools {
        if let PoolKind::Cluster { location, .. } = &mut p.kind {
            *location = Some(
                if p.name == "near" {
                    "dc-east"
                } else {
                    "partner"
                }
                .into(),
            );
        }
    }
    s.datasets = vec![dataset("conf", Classification::Confidential)];
    let mut c = job("c", 4, 0);
    c.datasets = vec!["conf".into()];
    s.jobs = vec![c];
    // "far" is cheaper, but only "dc-east" is allowed.
    let allow = AllowConfidential(Some(vec!["dc-east".into()]));
    let plan = decide(&s, &allow, at_min(16));
    assert_eq!(start_of(&plan, "c").pool, "near");
    // With no location allowed, the cloud's region rule applies too: nothing fits.
    let nowhere = AllowConfidential(Some(vec!["eu-west-1".into()]));
    let plan = decide(&s, &nowhere, at_min(16));
    assert!(plan.starts.is_empty());
    assert!(plan.launches.is_empty());
}

#[test]
fn clusters_come_before_idle_cloud_nodes_and_launches_and_cloud_only_skips_them() {
    let mut s = with_remotes();
    s.nodes.push(Node {
        instance_id: Some("i-1".into()),
        idle_since: Some(at_min(0)),
        domains: Vec::new(),
        ..remote_node("cloud-1", "aws", 8, 8)
    });
    s.jobs = vec![job("a", 4, 0)];
    let plan = run(&s, 16);
    assert_eq!(start_of(&plan, "a").pool, "far");
    s.jobs[0].placement = Placement::CloudOnly;
    let plan = run(&s, 1);
    assert_decision(
        &plan,
        "a",
        Outcome::StartCloud,
        Reason::FitsExistingCloudNodes,
    );
}

#[test]
fn caps_limits_and_budgets_count_remote_spend() {
    let mut s = with_remotes();
    s.pools.retain(|p| p.name != "near");
    s.nodes.retain(|n| n.pool != "near");
    s.offerings.clear();
    // A job already running in "far" on 4 GPUs: $2/h of the queue's $3/h.
    let mut running = running(job("old", 4, 0), &["far-1"], 0, Some(600));
    running.state = JobState::Running {
        nodes: vec!["far-1".into()],
        started_at: at_min(0),
        environment: Environment::Remote,
    };
    s.nodes[1].free_gpus = 4;
    s.queues[0].budget_hourly_usd = Some(3.0);
    s.jobs = vec![running, job("a", 4, 1)];
    let plan = run(&s, 20);
    assert_decision(&plan, "a", Outcome::Wait, Reason::BudgetExhausted);
    // Within budget but over the pool's GPU limit.
    s.queues[0].budget_hourly_usd = None;
    s.pools
        .iter_mut()
        .find(|p| p.name == "far")
        .unwrap()
        .max_gpus = Some(6);
    let plan = run(&s, 20);
    assert_decision(&plan, "a", Outcome::Wait, Reason::PoolLimitReached);
    // Within limits but over the job's own cap ($2/h for 4 GPUs).
    s.pools
        .iter_mut()
        .find(|p| p.name == "far")
        .unwrap()
        .max_gpus = None;
    s.jobs[1].max_hourly_cost = Some(1.5);
    let plan = run(&s, 20);
    assert_decision(&plan, "a", Outcome::Wait, Reason::OverCostCap);
    s.jobs[1].max_hourly_cost = None;
    let plan = run(&s, 20);
    assert_decision(&plan, "a", Outcome::StartRemote, Reason::RemoteCapacity);
}

#[test]
fn a_running_remote_job_is_neither_private_use_nor_idle_capacity() {
    let mut s = with_remotes();
    let mut r = job("r", 4, 0);
    r.state = JobState::Running {
        nodes: vec!["far-1".into()],
        started_at: at_min(0),
        environment: Environment::Remote,
    };
    s.nodes[2].free_gpus = 4;
    s.nodes[2].idle_since = Some(at_min(0));
    s.jobs = vec![r];
    let plan = run(&s, 600);
    assert!(plan.terminations.is_empty());
    // The private node is full with other work: a new 8-GPU job cannot count on "far-1".
    s.jobs.push(job("big", 8, 0));
    let plan = run(&s, 20);
    assert_eq!(start_of(&plan, "big").pool, "near");
}

/// Forbids the cloud (EC2); other clusters stay open.
struct NoCloud;

impl Policy for NoCloud {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects {
            forbid: vec![Ruled {
                value: Environment::Cloud,
                rule: "p/no-cloud".into(),
            }],
            ..Effects::default()
        }
    }
}

/// Forbids other clusters.
struct NoRemote;

impl Policy for NoRemote {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects {
            forbid: vec![Ruled {
                value: Environment::Remote,
                rule: "p/no-remote".into(),
            }],
            ..Effects::default()
        }
    }
}

#[test]
fn rules_forbid_the_cloud_and_other_clusters_separately() {
    let mut s = with_remotes();
    s.jobs = vec![job("a", 4, 0)];
    let plan = decide(&s, &NoCloud, at_min(16));
    assert_decision(&plan, "a", Outcome::StartRemote, Reason::RemoteCapacity);
    // No room in any cluster: it waits, saying the rule keeps it from the cloud.
    for n in &mut s.nodes {
        n.free_gpus = 0;
    }
    let plan = decide(&s, &NoCloud, at_min(16));
    assert_decision(&plan, "a", Outcome::Wait, Reason::ForbiddenByPolicy);
    assert!(plan.launches.is_empty());
    let d = plan.decision("ml/a").unwrap();
    assert_eq!(d.rule.as_deref(), Some("p/no-cloud"));

    let s = with_remotes();
    let mut s2 = s.clone();
    s2.jobs = vec![job("a", 4, 0)];
    let plan = decide(&s2, &NoRemote, at_min(16));
    assert_decision(&plan, "a", Outcome::StartCloud, Reason::MaxWaitExceeded);
}

#[test]
fn a_job_no_private_node_can_hold_goes_to_a_cluster_at_once() {
    let mut s = with_remotes();
    s.nodes[0] = private_node("p1", 4, 4, "A100");
    s.jobs = vec![job("a", 8, 0)];
    let plan = run(&s, 0);
    assert_decision(&plan, "a", Outcome::StartRemote, Reason::RemoteCapacity);
}

#[test]
fn moving_data_to_a_cluster_costs_egress_unless_a_copy_is_there() {
    let mut s = with_remotes();
    s.pools.retain(|p| p.name != "far");
    s.nodes.retain(|n| n.pool != "far");
    for p in &mut s.pools {
        if let PoolKind::Cluster { location, .. } = &mut p.kind {
            *location = Some("dc-east".into());
        }
    }
    // 100 GiB at $0.09: $9 to move, unless a remote copy is in dc-east.
    s.datasets = vec![dataset("imagenet", Classification::Internal)];
    let mut a = job("a", 4, 0);
    a.datasets = vec!["imagenet".into()];
    s.jobs = vec![a];
    let egress = |s: &Snapshot| run(s, 16).decision("ml/a").unwrap().estimated_egress_usd;
    assert_eq!(egress(&s), Some(9.0));
    // A cloud copy in a region of that name is not a copy beside the cluster.
    s.datasets[0].cloud_regions = vec!["dc-east".into()];
    assert_eq!(egress(&s), Some(9.0));
    s.datasets[0].remote_locations = vec!["dc-east".into()];
    assert_eq!(egress(&s), Some(0.0));
    assert_decision(
        &run(&s, 16),
        "a",
        Outcome::StartRemote,
        Reason::RemoteCapacity,
    );
}

#[test]
fn a_pool_that_refuses_copies_takes_gpu_jobs_but_no_workload() {
    let mut s = with_remotes();
    s.pools
        .iter_mut()
        .find(|p| p.name == "far")
        .expect("far")
        .refuses_copies = Some("its Jobs cannot be watched".into());
    let mut workload = job("w", 4, 0);
    workload.kind = "Job".into();
    s.jobs = vec![workload, job("g", 4, 1)];
    let plan = run(&s, 16);
    // The batch Job skips the cheaper pool that refuses copies; the GpuJob takes it.
    assert_eq!(start_of(&plan, "w").pool, "near");
    assert_eq!(start_of(&plan, "g").pool, "far");
    // With no other cluster, the workload is told why.
    s.pools.retain(|p| p.name != "near");
    s.nodes.retain(|n| n.pool != "near");
    s.jobs.truncate(1);
    s.queues[0].burst.pools = vec!["far".into()];
    let plan = run(&s, 16);
    let d = plan.decision("ml/w").expect("decision");
    assert_eq!(d.reason, Reason::NotPortable, "{d:?}");
    assert!(
        d.message
            .contains("pool far takes no copy of a Job: its Jobs cannot be watched"),
        "{}",
        d.message
    );
}
