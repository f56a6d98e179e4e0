//! Cluster placement groups: which launches want one, which offerings a topology-bound gang
//! may use in an EFA pool, the group in a job's status, and when a group is deleted.

use serde_json::json;
use spillway_cloud::InstanceTypeInfo;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::cloud::placement::GroupView;

/// Queue `q` bursting at once to pool `aws` (g6.xlarge, 1 GPU; g5.8xlarge, 1 GPU, dearer),
/// with EFA asked when `efa`; no private GPU.
fn world(efa: bool) -> crate::world::Inputs {
    let aws = json!({"region": "us-east-1", "amiId": "ami-12345678",
                     "instanceTypes": ["g6.xlarge", "g5.8xlarge"],
                     "capacityTypes": ["on-demand"], "efa": efa});
    crate::world::Inputs {
        queues: vec![queue(
            "q",
            json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]}}),
        )],
        pools: vec![aws_pool("aws", json!({"aws": aws}))],
        ..crate::world::Inputs::default()
    }
}

/// The provider's word on EFA for both types: g5.8xlarge has it, g6.xlarge has not.
fn described() -> Cloudy {
    let mut c = cloud();
    let facts = c.view.facts.entry("us-east-1".into()).or_default();
    for (t, model, efa) in [("g6.xlarge", "L4", false), ("g5.8xlarge", "A10G", true)] {
        facts.types.insert(
            t.into(),
            InstanceTypeInfo {
                instance_type: t.into(),
                gpus: 1,
                gpu_model: model.into(),
                gpu_memory_mib: 23028,
                efa_supported: Some(efa),
            },
        );
    }
    c
}

#[test]
fn a_gang_of_several_instances_or_with_a_topology_launches_together() {
    let mut i = world(false);
    i.jobs.push(job("solo").build());
    i.jobs.push(job("pair").replicas(2).build());
    let mut bound = job("bound");
    bound.0["spec"]["topology"] = json!({"preferred": "spillway.io/rack"});
    i.jobs.push(bound.build());
    let t = Loop::new().turn(&i, Some(&described()), noon());
    let together: Vec<(&str, u32, bool)> = launches(&t)
        .iter()
        .map(|l| (l.launch.job.as_str(), l.launch.count, l.launch.together))
        .collect();
    assert!(together.contains(&("team/solo", 1, false)), "{together:?}");
    assert!(together.contains(&("team/pair", 2, true)), "{together:?}");
    assert!(together.contains(&("team/bound", 1, true)), "{together:?}");
}

#[test]
fn in_an_efa_pool_a_topology_bound_gang_takes_only_types_with_efa() {
    let mut i = world(true);
    i.jobs.push(job("plain").replicas(2).build());
    let mut bound = job("bound").replicas(2);
    bound.0["spec"]["topology"] = json!({"required": "spillway.io/rack"});
    i.jobs.push(bound.build());
    let t = Loop::new().turn(&i, Some(&described()), noon());
    let chosen: Vec<(&str, &str)> = launches(&t)
        .iter()
        .map(|l| {
            (
                l.launch.job.as_str(),
                l.launch.offering.instance_type.as_str(),
            )
        })
        .collect();
    assert!(
        chosen.contains(&("team/plain", "g6.xlarge")),
        "the cheapest: {chosen:?}"
    );
    assert!(
        chosen.contains(&("team/bound", "g5.8xlarge")),
        "the type with EFA: {chosen:?}"
    );
    // Without the provider's word, no type is known to have EFA: the bound gang waits.
    let t = Loop::new().turn(&i, Some(&cloud()), noon());
    let jobs: Vec<&str> = launches(&t).iter().map(|l| l.launch.job.as_str()).collect();
    assert_eq!(jobs, ["team/plain"]);
    // Outside an EFA pool the bound gang takes the cheapest.
    let mut i = world(false);
    let mut bound = job("bound").replicas(2);
    bound.0["spec"]["topology"] = json!({"required": "spillway.io/rack"});
    i.jobs.push(bound.build());
    let t = Loop::new().turn(&i, Some(&described()), noon());
    let types: Vec<&str> = launches(&t)
        .iter()
        .map(|l| l.launch.offering.instance_type.as_str())
        .collect();
    assert_eq!(types, ["g6.xlarge"]);
}

fn group(since_minutes_ago: u64) -> GroupView {
    GroupView {
        name: "spillway-pg-1".into(),
        region: "us-east-1".into(),
        need: "team/train#0".into(),
        since: noon() - minutes(since_minutes_ago),
        in_use: false,
        deleting: false,
        retry_at: None,
    }
}

fn deletes(t: &crate::turn::Turn) -> Vec<(String, String)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePlacementGroup { region, name } => Some((region.clone(), name.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_placement_group_goes_once_nothing_is_in_it_or_launching_for_it() {
    let i = world(false);
    let turn = |g: GroupView, launching: bool, complete: bool| {
        let mut c = cloud();
        c.view.complete = complete;
        if launching {
            let l = launch_of(&g.need);
            c.view.launching.insert(g.need.clone(), l);
        }
        c.view.placement_groups = vec![g];
        deletes(&Loop::new().turn(&i, Some(&c), noon()))
    };
    let gone = vec![("us-east-1".to_string(), "spillway-pg-1".to_string())];
    assert_eq!(turn(group(2), false, true), gone, "idle past the grace");
    assert!(turn(group(0), false, true).is_empty(), "just made");
    assert!(
        turn(
            GroupView {
                in_use: true,
                ..group(2)
            },
            false,
            true
        )
        .is_empty(),
        "an instance is in it"
    );
    assert!(turn(group(2), true, true).is_empty(), "its need launches");
    assert!(
        turn(
            GroupView {
                deleting: true,
                ..group(2)
            },
            false,
            true
        )
        .is_empty(),
        "being deleted"
    );
    assert!(
        turn(
            GroupView {
                retry_at: Some(noon() + minutes(1)),
                ..group(2)
            },
            false,
            true
        )
        .is_empty(),
        "a failed delete waits"
    );
    assert!(
        turn(group(2), false, false).is_empty(),
        "not every region listed yet"
    );
}

#[test]
fn a_cloud_job_says_which_placement_group_it_is_in() {
    let mut i = world(false);
    i.jobs.push(
        job("train")
            .replicas(2)
            .status(json!({"phase": "Provisioning", "pool": "aws"}))
            .build(),
    );
    let mut c = cloud();
    for id in ["i-1", "i-2"] {
        c.instance(
            id,
            "aws",
            "team/train#0",
            "g6.xlarge",
            at("2026-03-10T11:59:30Z"),
        );
    }
    for inst in &mut c.view.instances {
        inst.placement_group = "spillway-pg-1".into();
    }
    let t = Loop::new().turn(&i, Some(&c), noon());
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Provisioning", "{st}");
    assert_eq!(st["placementGroup"], "spillway-pg-1", "{st}");
}
