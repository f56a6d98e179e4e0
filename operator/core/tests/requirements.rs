//! A job's `requirements` (driver, CUDA, GPU product, memory): private placement, the cloud
//! offering, other clusters' nodes and the wait of a job nothing meets.

mod support;

use spillway_core::*;
use support::*;

fn facts(driver: &str, cuda: &str, product: &str, memory_gib: u64) -> Facts {
    Facts {
        driver: Some(driver.parse().unwrap()),
        cuda: Some(cuda.parse().unwrap()),
        product: Some(product.into()),
        gpu_memory_mib: Some(memory_gib * 1024),
    }
}

fn needs_cuda(mut j: Job, cuda: &str) -> Job {
    j.requirements.min_cuda = Some(cuda.parse().unwrap());
    j
}

/// Two free private A100 nodes: "old" (driver 535, CUDA 12.2) and "new" (550, CUDA 12.4).
fn two_drivers() -> Snapshot {
    let mut s = base();
    let mut old = private_node("old", 8, 8, "A100");
    old.facts = facts("535.104.05", "12.2", "NVIDIA-A100-SXM4-40GB", 40);
    let mut new = private_node("new", 8, 8, "A100");
    new.facts = facts("550.54.15", "12.4", "NVIDIA-A100-SXM4-40GB", 40);
    s.nodes = vec![old, new];
    s
}

fn start_nodes(plan: &Plan, id: &str) -> Vec<String> {
    plan.starts
        .iter()
        .find(|s| s.job == format!("ml/{id}"))
        .unwrap_or_else(|| panic!("no start for {id}: {:#?}", plan.decisions))
        .nodes
        .clone()
}

#[test]
fn a_job_needing_a_newer_cuda_skips_the_node_with_the_older_driver() {
    let mut s = two_drivers();
    // Best fit would take "old" first (same free GPUs, first in order).
    s.jobs = vec![needs_cuda(job("a", 8, 0), "12.4"), job("b", 8, 0)];
    let plan = run(&s, 0);
    assert_decision(&plan, "a", Outcome::StartPrivate, Reason::FitsPrivate);
    assert_eq!(start_nodes(&plan, "a"), ["new"]);
    // A job without requirements takes what is left.
    assert_eq!(start_nodes(&plan, "b"), ["old"]);
}

#[test]
fn a_node_without_feature_discovery_labels_meets_no_requirement() {
    let mut s = base();
    s.nodes = vec![private_node("bare", 8, 8, "A100")];
    s.offerings.clear();
    s.jobs = vec![needs_cuda(job("a", 8, 0), "12.0"), job("b", 8, 0)];
    let plan = run(&s, 0);
    assert_decision(&plan, "b", Outcome::StartPrivate, Reason::FitsPrivate);
    let d = plan.decision("ml/a").unwrap();
    assert_eq!(
        (d.outcome, d.reason),
        (Outcome::Wait, Reason::RequirementsUnmet)
    );
    assert!(d.message.contains("minCudaVersion 12.0"), "{}", d.message);
    assert!(d.message.contains("no known CUDA version"), "{}", d.message);
}

#[test]
fn with_only_older_drivers_at_home_it_bursts_at_once_to_an_image_that_has_the_version() {
    let mut s = two_drivers();
    s.nodes.retain(|n| n.name == "old");
    for o in &mut s.offerings {
        o.facts = facts("550.54.15", "12.4", o.gpu_model.as_str(), 40);
    }
    s.jobs = vec![needs_cuda(job("a", 8, 0), "12.4")];
    let plan = run(&s, 0);
    assert_decision(&plan, "a", Outcome::StartCloud, Reason::NoPrivateCapacity);
    assert_eq!(plan.launches.len(), 1, "{:#?}", plan.decisions);
}

#[test]
fn the_offering_choice_honours_memory_and_product() {
    let mut s = base();
    s.nodes.clear();
    s.offerings = vec![
        offering("p4d.24xlarge", "A100", 8, CapacityType::OnDemand, 21.96),
        offering(
            "p4de.24xlarge",
            "A100-80GB",
            8,
            CapacityType::OnDemand,
            27.45,
        ),
        offering("p5.48xlarge", "H100", 8, CapacityType::OnDemand, 55.04),
    ];
    for o in &mut s.offerings {
        let gib = o.gpu_model.memory_gib().unwrap() as u64;
        o.facts = facts("550.54", "12.4", o.gpu_model.as_str(), gib);
    }
    let mut big = job("big", 8, 0);
    big.requirements.min_gpu_memory_gib = Some(80);
    let mut hopper = job("hopper", 8, 0);
    hopper.requirements.gpu_products = vec!["*h100*".into()];
    s.jobs = vec![big, hopper];
    let plan = run(&s, 0);
    let types: Vec<(&str, &str)> = plan
        .launches
        .iter()
        .map(|l| (l.need.as_str(), l.offering.instance_type.as_str()))
        .collect();
    assert!(types.contains(&("ml/big#0", "p4de.24xlarge")), "{types:?}");
    assert!(types.contains(&("ml/hopper#0", "p5.48xlarge")), "{types:?}");
}

#[test]
fn a_job_nothing_meets_waits_naming_the_requirement_and_the_closest_facts() {
    let mut s = two_drivers();
    for o in &mut s.offerings {
        o.facts = facts("535.104.05", "12.2", o.gpu_model.as_str(), 40);
    }
    s.jobs = vec![needs_cuda(job("a", 8, 0), "12.6")];
    let plan = run(&s, 0);
    let d = plan.decision("ml/a").unwrap();
    assert_eq!(
        (d.outcome, d.reason),
        (Outcome::Wait, Reason::RequirementsUnmet),
        "{}",
        d.message
    );
    assert!(d.message.contains("minCudaVersion 12.6"), "{}", d.message);
    assert!(
        d.message.contains("the closest is new (CUDA 12.4)"),
        "{}",
        d.message
    );
    assert!(plan.launches.is_empty() && plan.starts.is_empty());
    // Too big for anything is still never fitting, requirements or not.
    s.jobs = vec![needs_cuda(job("huge", 16, 0), "12.6")];
    assert_decision(&run(&s, 0), "huge", Outcome::Reject, Reason::NeverFits);
}

#[test]
fn other_clusters_nodes_are_held_to_the_same_requirements() {
    let mut s = base();
    s.offerings.clear();
    let mut home = private_node("p1", 8, 0, "A100");
    home.facts = facts("550.54", "12.4", "NVIDIA-A100", 40);
    let mut old = private_node("near-1", 8, 8, "A100");
    old.pool = "near".into();
    old.facts = facts("535.104", "12.2", "NVIDIA-A100", 40);
    let mut new = private_node("far-1", 8, 8, "A100");
    new.pool = "far".into();
    new.facts = facts("550.54", "12.4", "NVIDIA-A100", 40);
    s.nodes = vec![home, old, new];
    s.pools.push(Pool::cluster("near", 0.5));
    s.pools.push(Pool::cluster("far", 1.0));
    s.queues[0].burst.pools = vec!["near".into(), "far".into()];
    s.jobs = vec![needs_cuda(job("a", 8, 0), "12.4")];
    let plan = run(&s, 20);
    assert_decision(&plan, "a", Outcome::StartRemote, Reason::RemoteCapacity);
    assert_eq!(start_nodes(&plan, "a"), ["far-1"]);
}
