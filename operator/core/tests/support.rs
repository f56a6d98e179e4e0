//! Builders for snapshots in tests.
#![allow(dead_code)]

use spillway_core::*;

pub fn mins(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

pub fn at_min(m: i64) -> Time {
    Time::from_millis(m * 60_000)
}

pub fn private_node(name: &str, gpus: u32, free: u32, model: &str) -> Node {
    Node {
        facts: Default::default(),
        name: name.into(),
        pool: "onprem".into(),
        gpu_model: Some(GpuModel::normalize(model)),
        gpus,
        free_gpus: free,
        schedulable: true,
        releasing_gpus: 0,
        instance_id: None,
        idle_since: None,
        domains: Vec::new(),
    }
}

pub fn offering(
    instance_type: &str,
    model: &str,
    gpus: u32,
    capacity: CapacityType,
    price: f64,
) -> Offering {
    Offering {
        facts: Default::default(),
        pool: "aws".into(),
        instance_type: instance_type.into(),
        gpu_model: GpuModel::normalize(model),
        gpus,
        capacity_type: capacity,
        region: "us-east-1".into(),
        zone: "us-east-1a".into(),
        hourly_price: price,
        unavailable_until: None,
        gpu_memory_gib: 0.0,
        recent_interruptions: 0,
        efa: Default::default(),
        environment: Environment::Cloud,
    }
}

pub fn bursting_queue(name: &str, max_wait_min: u64) -> Queue {
    let mut q = Queue::new(name);
    q.burst.enabled = true;
    q.burst.max_wait = mins(max_wait_min);
    q
}

/// One private pool "onprem", one cloud pool "aws", one bursting queue "research" (15m).
pub fn base() -> Snapshot {
    Snapshot {
        queues: vec![bursting_queue("research", 15)],
        pools: vec![Pool::private("onprem"), Pool::cloud("aws", "us-east-1")],
        offerings: vec![
            offering("g5.12xlarge", "A10G", 4, CapacityType::OnDemand, 5.672),
            offering("g5.48xlarge", "A10G", 8, CapacityType::OnDemand, 16.288),
            offering("p4d.24xlarge", "A100", 8, CapacityType::OnDemand, 21.96),
            offering("p4d.24xlarge", "A100", 8, CapacityType::Spot, 8.5),
        ],
        ..Default::default()
    }
}

pub fn job(id: &str, gpus: u32, queued_min: i64) -> Job {
    Job::new(format!("ml/{id}"), "research", gpus, at_min(queued_min))
}

pub fn running(mut j: Job, nodes: &[&str], started_min: i64, runtime_min: Option<u64>) -> Job {
    j.state = JobState::Running {
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        started_at: at_min(started_min),
        environment: Environment::Private,
    };
    j.estimated_runtime = runtime_min.map(mins);
    j
}

pub fn dataset(name: &str, class: Classification) -> Dataset {
    Dataset {
        name: name.into(),
        classification: class,
        cloud_regions: vec![],
        remote_locations: vec![],
        size_gib: 100.0,
        egress_usd_per_gib: 0.09,
    }
}

pub fn run(s: &Snapshot, now_min: i64) -> Plan {
    decide(s, &NoPolicy, at_min(now_min))
}

#[track_caller]
pub fn assert_decision(plan: &Plan, job: &str, outcome: Outcome, reason: Reason) {
    let d = plan
        .decision(&format!("ml/{job}"))
        .unwrap_or_else(|| panic!("no decision for {job}: {:#?}", plan.decisions));
    assert_eq!(
        (d.outcome, d.reason),
        (outcome, reason),
        "{job}: {}",
        d.message
    );
}
