//! Gangs with a topology wish: within one rack (`required`) or in as few racks as hold them
//! (`preferred`), best fit among racks, and reclaim that never leaves a required gang split.

mod support;

use spillway_core::*;
use support::*;

const RACK: &str = "spillway.io/rack";

fn racked(name: &str, rack: &str, free: u32) -> Node {
    let mut n = private_node(name, 8, free, "A100");
    n.domains = vec![(RACK.into(), rack.into())];
    n
}

fn gang(id: &str, replicas: u32, required: bool) -> Job {
    let mut j = job(id, 8, 0);
    j.replicas = replicas;
    j.topology = Some(TopologyWish {
        level: RACK.into(),
        required,
    });
    j
}

fn nodes_of(plan: &Plan, job: &str) -> Vec<String> {
    let start = plan
        .starts
        .iter()
        .find(|s| s.job == format!("ml/{job}"))
        .unwrap_or_else(|| panic!("{job} did not start: {:#?}", plan.decisions));
    let mut nodes = start.nodes.clone();
    nodes.sort();
    nodes
}

#[test]
fn a_required_gang_runs_in_the_smallest_rack_that_holds_it() {
    let mut s = base();
    s.nodes = vec![
        racked("a1", "big", 8),
        racked("a2", "big", 8),
        racked("a3", "big", 8),
        racked("a4", "big", 8),
        racked("b1", "small", 8),
        racked("b2", "small", 8),
    ];
    s.jobs = vec![gang("train", 2, true)];
    let plan = decide(&s, &NoPolicy, at_min(1));
    assert_eq!(
        nodes_of(&plan, "train"),
        ["b1", "b2"],
        "best fit: the big rack stays whole"
    );
    let d = plan.decision("ml/train").unwrap();
    assert_eq!(d.reason, Reason::FitsPrivate);
    assert!(
        d.message.contains("spillway.io/rack=small"),
        "{}",
        d.message
    );

    // Three replicas fit only in the big rack.
    s.jobs = vec![gang("train", 3, true)];
    let nodes = nodes_of(&run(&s, 1), "train");
    assert!(nodes.iter().all(|n| n.starts_with('a')), "{nodes:?}");
}

#[test]
fn a_required_gang_waits_when_no_rack_has_room_though_two_nodes_are_free() {
    let mut s = base();
    s.queues[0].burst.enabled = false;
    s.nodes = vec![
        racked("a1", "r1", 8),
        racked("a2", "r1", 0),
        racked("b1", "r2", 4),
        racked("b2", "r2", 8),
    ];
    s.jobs = vec![gang("train", 2, true)];
    let plan = run(&s, 1);
    assert_decision(&plan, "train", Outcome::Wait, Reason::TopologyUnfit);
    let d = plan.decision("ml/train").unwrap();
    assert!(
        d.message.contains("spillway.io/rack=r2 with 12 free GPUs"),
        "names the largest rack's free GPUs: {}",
        d.message
    );
    assert!(plan.starts.is_empty());

    // Preferred: it takes the two free nodes, across racks.
    s.jobs = vec![gang("train", 2, false)];
    assert_eq!(nodes_of(&run(&s, 1), "train"), ["a1", "b2"]);
    // And without a wish, the same.
    s.jobs[0].topology = None;
    assert_eq!(nodes_of(&run(&s, 1), "train"), ["a1", "b2"]);
}

#[test]
fn a_preferred_gang_takes_one_rack_when_one_holds_it_else_the_fewest() {
    let mut s = base();
    s.nodes = vec![
        racked("a1", "r1", 8),
        racked("b1", "r2", 8),
        racked("b2", "r2", 8),
        racked("b3", "r2", 8),
        racked("c1", "r3", 8),
        racked("c2", "r3", 8),
    ];
    s.jobs = vec![gang("train", 3, false)];
    assert_eq!(nodes_of(&run(&s, 1), "train"), ["b1", "b2", "b3"]);
    // Five: the roomiest racks first, two racks rather than three.
    s.jobs = vec![gang("train", 5, false)];
    assert_eq!(
        nodes_of(&run(&s, 1), "train"),
        ["b1", "b2", "b3", "c1", "c2"]
    );
    let d = run(&s, 1);
    let message = &d.decision("ml/train").unwrap().message;
    assert!(message.contains("spillway.io/rack=r2,r3"), "{message}");
}

#[test]
fn a_required_gang_no_rack_could_ever_hold_is_never_private() {
    let mut s = base();
    s.nodes = vec![racked("a1", "r1", 8), racked("b1", "r2", 8)];
    s.jobs = vec![gang("train", 2, true)];
    let plan = run(&s, 1);
    assert_decision(
        &plan,
        "train",
        Outcome::StartCloud,
        Reason::NoPrivateCapacity,
    );
    // Where it may not burst, it is rejected, and says why.
    s.queues[0].burst.enabled = false;
    let d = run(&s, 1).decision("ml/train").cloned().expect("decision");
    assert_eq!(d.outcome, Outcome::Reject, "{}", d.message);
    assert!(
        d.message.starts_with(
            "No spillway.io/rack domain could ever hold the whole gang (2 x 8 GPUs): the largest holds 1 of them."
        ),
        "{}",
        d.message
    );
}

#[test]
fn one_replica_ignores_the_wish_and_unlabelled_nodes_are_in_no_rack() {
    let mut s = base();
    s.queues[0].burst.enabled = false;
    s.nodes = vec![
        private_node("x1", 8, 8, "A100"),
        private_node("x2", 8, 8, "A100"),
    ];
    s.jobs = vec![gang("one", 1, true)];
    assert_eq!(nodes_of(&run(&s, 1), "one"), ["x1"]);
    // Two replicas required in a rack: no node is in one, so none ever could hold it.
    s.jobs = vec![gang("two", 2, true)];
    let plan = run(&s, 1);
    let d = plan.decision("ml/two").unwrap();
    assert_eq!(d.outcome, Outcome::Reject, "{}", d.message);
    assert!(
        d.message.starts_with(
            "No spillway.io/rack domain could ever hold the whole gang (2 x 8 GPUs): no node of its pools is in a spillway.io/rack domain."
        ),
        "{}",
        d.message
    );
    // Preferred: unlabelled nodes each count as a domain of their own.
    s.jobs = vec![gang("two", 2, false)];
    assert_eq!(nodes_of(&run(&s, 1), "two"), ["x1", "x2"]);
}

#[test]
fn a_reclaim_for_a_required_gang_frees_one_rack_not_two() {
    let mut s = base();
    let mut team = Queue::new("team");
    team.quota_gpus = Some(16);
    s.queues.push(team);
    s.nodes = vec![
        racked("a1", "r1", 0),
        racked("a2", "r1", 8),
        racked("b1", "r2", 0),
        racked("b2", "r2", 8),
    ];
    let borrower = |id: &str, node: &str| {
        let mut j = running(job(id, 8, 0), &[node], 1, None);
        j.restartable = true;
        j
    };
    let mut mine = gang("mine", 2, true);
    mine.queue = "team".into();
    mine.queued_at = at_min(10);
    s.jobs = vec![borrower("x", "a1"), borrower("y", "b1"), mine];
    let plan = run(&s, 12);
    assert_decision(&plan, "mine", Outcome::Wait, Reason::Reclaiming);
    let victims: Vec<&str> = plan.preemptions.iter().map(|p| p.job.as_str()).collect();
    assert_eq!(
        victims,
        ["ml/x"],
        "one rack's borrower, so the gang fits in r1 whole"
    );
}

#[test]
fn racks_of_one_name_in_two_pools_are_two_racks() {
    let mut s = base();
    s.pools.push(Pool::private("lab"));
    let mut other = racked("l1", "r1", 8);
    other.pool = "lab".into();
    s.nodes = vec![racked("a1", "r1", 8), other];
    s.jobs = vec![gang("train", 2, true)];
    let plan = run(&s, 1);
    assert_decision(
        &plan,
        "train",
        Outcome::StartCloud,
        Reason::NoPrivateCapacity,
    );
}

#[test]
fn a_rack_bound_gang_comes_home_from_the_cloud_only_within_one_rack() {
    let mut s = base();
    s.pools[1].idle_timeout = mins(10);
    let cloud = |name: &str| {
        let mut c = private_node(name, 8, 0, "A100");
        c.pool = "aws".into();
        c.instance_id = Some(format!("i-{name}"));
        c
    };
    s.nodes = vec![
        racked("n1", "r1", 8),
        racked("n2", "r2", 8),
        cloud("c1"),
        cloud("c2"),
    ];
    s.instances = ["c1", "c2"]
        .iter()
        .map(|c| Instance {
            id: format!("i-{c}"),
            pool: "aws".into(),
            instance_type: "p4d.24xlarge".into(),
            capacity_type: CapacityType::OnDemand,
            zone: "us-east-1a".into(),
            gpus: 8,
            hourly_price: 21.96,
            need: "ml/train#0".into(),
            queue: "research".into(),
            node: Some(c.to_string()),
            launched_at: at_min(-3),
        })
        .collect();
    let mut j = gang("train", 2, true);
    j.restartable = true;
    j.estimated_runtime = Some(mins(240));
    j.state = JobState::Running {
        nodes: vec!["c1".into(), "c2".into()],
        started_at: at_min(0),
        environment: Environment::Cloud,
    };
    s.jobs = vec![j];
    let plan = run(&s, 30);
    assert!(
        plan.moves.is_empty(),
        "not split over two racks: {:#?}",
        plan.moves
    );

    // With both free nodes in one rack, it moves home there.
    s.nodes[1].domains = vec![(RACK.into(), "r1".into())];
    let plan = run(&s, 30);
    assert_eq!(plan.moves.len(), 1, "{:#?}", plan.decisions);
    let mut nodes = plan.moves[0].nodes.clone();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
}
