//! The cloud: bursting, budgets, scale-down, spend, garbage and launch health.

use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::cloud::{LaunchError, LaunchHealth};
use crate::error::Error;
use crate::executor::Failure;

/// Queue `q` bursting to pool `aws` after `max_wait`; one private GPU, busy with job `busy`.
fn bursting(max_wait: &str, budget: Option<serde_json::Value>) -> crate::world::Inputs {
    let mut spec = json!({"burst": {"enabled": true, "maxWait": max_wait, "pools": ["aws"]}});
    if let Some(b) = budget {
        spec["budget"] = b;
    }
    let busy = job("busy")
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    crate::world::Inputs {
        queues: vec![queue("q", spec)],
        pools: vec![private_pool("onprem"), aws_pool("aws", json!({}))],
        nodes: vec![node("a", "onprem", 1)],
        pods: vec![pod(&busy, 0, 0, "a", "Running")],
        jobs: vec![busy],
        ..crate::world::Inputs::default()
    }
}

#[test]
fn a_job_past_its_max_wait_launches_the_cheapest_fitting_instance() {
    let mut i = bursting("5m", None);
    i.jobs.push(job("train").build());
    let c = cloud();
    let mut l = Loop::new();
    // Created 11:59: at noon it waits...
    let t = l.turn(&i, Some(&c), noon());
    assert!(launches(&t).is_empty());
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Queued");
    // ...and at 12:05 it bursts.
    let t = l.turn(&i, Some(&c), noon() + minutes(5));
    let l0 = launches(&t);
    assert_eq!(l0.len(), 1, "{:?}", kinds(&t));
    assert_eq!(l0[0].launch.need, "team/train#0");
    assert_eq!(l0[0].launch.offering.instance_type, "g6.xlarge");
    assert_eq!(l0[0].pool.metadata.name.as_deref(), Some("aws"));
}

#[test]
fn a_launching_need_is_provisioning_and_not_launched_again() {
    let mut i = bursting("0s", None);
    i.jobs.push(job("train").build());
    let mut c = cloud();
    c.view
        .launching
        .insert("team/train#0".into(), launch_of("team/train#0"));
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Provisioning");
    assert_eq!(st["decision"]["reason"], "Provisioning");
}

/// A RunInstances EC2 has not answered yet (slow, throttled, retried) costs what it will cost:
/// the next job may not launch past the queue's hourly budget meanwhile (launches under way
/// used to count for nothing until their instances were listed).
#[test]
fn a_launch_under_way_counts_against_the_hourly_budget() {
    let mut i = bursting("0s", Some(json!({"hourlyUSD": 1.0})));
    i.jobs.push(job("train").build());
    i.jobs.push(job("eval").build());
    let mut c = cloud();
    c.view
        .launching
        .insert("team/train#0".into(), launch_of("team/train#0"));
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "eval").expect("status");
    assert_eq!(st["decision"]["reason"], "BudgetExhausted", "{st}");
    // Once the launch has failed (no instance, nothing under way), the budget is free again.
    c.view.launching.clear();
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert_eq!(launches(&t).len(), 1, "{:?}", kinds(&t));
}

#[test]
fn a_budget_below_one_instance_holds_the_job_and_says_so_on_the_queue() {
    let mut i = bursting("0s", Some(json!({"hourlyUSD": 0.5})));
    i.jobs.push(job("train").build());
    let c = cloud();
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(launches(&t).is_empty());
    let job = status_of(&t, StatusKind::GpuJob, "train").expect("job");
    assert_eq!(job["decision"]["reason"], "BudgetExhausted");
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue");
    let (status, reason, _) = condition(&q, "BudgetExhausted").expect("condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "BudgetExhausted")
    );
}

#[test]
fn restricted_data_never_launches() {
    let mut i = bursting("0s", None);
    i.datasets = vec![dataset("patients", json!({"classification": "Restricted"}))];
    i.jobs.push(job("train").datasets(&["patients"]).build());
    let c = cloud();
    let t = Loop::new().turn(&i, Some(&c), noon() + minutes(60));
    assert!(launches(&t).is_empty());
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["decision"]["reason"], "RestrictedData");
}

#[test]
fn a_node_whose_instance_is_not_listed_yet_is_not_retired_as_idle() {
    // A launch whose answer was lost: its machine joined before any listing showed the
    // instance (and so the need it was launched for).
    let mut i = bursting("0s", None);
    i.nodes.push(cloud_node("ip-lost", "aws", 1, "i-lost"));
    let mut c = cloud();
    let mut l = Loop::new();
    let retired = |t: &crate::turn::Turn| {
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Terminate { .. } | Action::Cordon { .. }))
    };
    let t = l.turn(&i, Some(&c), noon());
    assert!(!retired(&t), "{:?}", kinds(&t));
    let t = l.turn(&i, Some(&c), noon() + minutes(11));
    assert!(!retired(&t), "{:?}", kinds(&t));
    // Listed (its need's job is gone): idle from then on, retired after the idle timeout.
    c.instance(
        "i-lost",
        "aws",
        "team/gone#0",
        "g6.xlarge",
        at("2026-03-10T11:59:00Z"),
    );
    let t = l.turn(&i, Some(&c), noon() + minutes(12));
    assert!(!retired(&t), "idle for no time yet: {:?}", kinds(&t));
    let t = l.turn(&i, Some(&c), noon() + minutes(23));
    assert!(retired(&t), "{:?}", kinds(&t));
}

#[test]
fn an_idle_cloud_node_is_cordoned_then_terminated_after_its_idle_timeout() {
    let mut i = bursting("0s", None);
    i.nodes.push(cloud_node("ip-10-0-0-1", "aws", 1, "i-0abc"));
    let mut c = cloud();
    c.instance(
        "i-0abc",
        "aws",
        "team/old#0",
        "g6.xlarge",
        at("2026-03-10T11:00:00Z"),
    );
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Terminate { .. })),
        "idle for no time yet"
    );
    let t = l.turn(&i, Some(&c), noon() + minutes(11));
    let retire: Vec<String> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Cordon { node } => Some(format!("cordon {node}")),
            Action::Terminate { instance, node, .. } => Some(format!(
                "terminate {instance} {}",
                node.as_deref().unwrap_or("-")
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        retire,
        vec!["cordon ip-10-0-0-1", "terminate i-0abc ip-10-0-0-1"]
    );
    // Asked once while it is under way.
    let t = l.turn(&i, Some(&c), noon() + minutes(12));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Terminate { .. }))
    );
    // The instance is gone and its node not yet: the node is not retired again as an orphan
    // (it was cordoned twice in an end-to-end run before).
    c.view.instances.clear();
    let t = l.turn(&i, Some(&c), noon() + minutes(14));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Cordon { .. } | Action::DeleteNode { .. })),
        "{:?}",
        t.actions
    );
    // Once the node is gone too, nothing is remembered of it.
    i.nodes
        .retain(|n| n.metadata.name.as_deref() != Some("ip-10-0-0-1"));
    l.turn(&i, Some(&c), noon() + minutes(15));
    assert!(l.state.retiring.is_empty(), "{:?}", l.state.retiring);
}

/// A gang's need lost one of its two instances before the job started (interrupted, or
/// terminated by someone): the one left can never hold the job. Before, the core kept the job
/// waiting for it forever; planned again under the same need key, the launch would only adopt
/// the instance left. The job moves to its next attempt and launches under a new need.
#[test]
fn a_gang_whose_need_lost_an_instance_launches_again_under_a_new_need() {
    let mut i = bursting("0s", None);
    i.jobs.push(job("train").replicas(2).build());
    let mut c = cloud();
    c.instance("i-left", "aws", "team/train#0", "g6.xlarge", noon());
    let mut l = Loop::new();
    // Within a minute of the launch a listing may show part of it: nothing yet.
    let t = l.turn(
        &i,
        Some(&c),
        noon() + minutes(1) - spillway_core::Duration::from_secs(1),
    );
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    let l0 = launches(&t);
    assert_eq!(l0.len(), 1, "{:?}", kinds(&t));
    assert_eq!(l0[0].launch.need, "team/train#1");
    assert_eq!(l0[0].launch.count, 2, "the whole gang: {:?}", l0[0].launch);
    assert!(
        events(&t)
            .iter()
            .any(|(_, reason, warning)| reason == "NeedReplanned" && *warning),
        "{:?}",
        events(&t)
    );

    // The launch under way: the job waits for it (attempt 1) and asks for nothing more; the
    // instance left belongs to no need now, and is collected after the grace period.
    c.view
        .launching
        .insert("team/train#1".into(), l0[0].launch.clone());
    let t = l.turn(&i, Some(&c), noon() + minutes(2));
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Provisioning", "{st}");
    assert_eq!(st["restarts"], 1, "the next attempt: {st}");
    let t = l.turn(&i, Some(&c), noon() + minutes(4));
    assert!(t.actions.iter().any(
        |a| matches!(a, Action::Terminate { instance, node: None, .. } if instance == "i-left")
    ));
}

/// A running cloud gang costs the share of each instance its replicas sit on, found by the
/// instance's node (one replica of one GPU per single-GPU instance: both prices, summed).
#[test]
fn a_cloud_gang_costs_the_instances_its_replicas_run_on() {
    let mut i = bursting("0s", None);
    let train = job("train")
        .replicas(2)
        .status(
            json!({"phase": "Running", "pool": "aws", "nodes": ["c1", "c2"],
                       "startedAt": "2026-03-10T11:30:00Z"}),
        )
        .build();
    i.nodes.push(cloud_node("c1", "aws", 1, "i-1"));
    i.nodes.push(cloud_node("c2", "aws", 1, "i-2"));
    i.pods.push(pod(&train, 0, 0, "c1", "Running"));
    i.pods.push(pod(&train, 0, 1, "c2", "Running"));
    i.jobs.push(train);
    let mut c = cloud();
    // An instance of another need, on no node, costs the gang nothing.
    c.instance("i-0", "aws", "team/other#0", "g6e.12xlarge", noon());
    c.instance("i-1", "aws", "team/train#0", "g6.xlarge", noon());
    c.instance("i-2", "aws", "team/train#0", "g6.xlarge", noon());
    let t = Loop::new().turn(&i, Some(&c), noon());
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    let hourly = st["cost"]["hourlyUSD"].as_f64().expect("hourly rate");
    assert!((hourly - 2.0 * 0.8048).abs() < 1e-9, "{st}");
}

#[test]
fn an_instance_no_need_wants_is_collected_after_the_grace_period() {
    let i = bursting("0s", None);
    let mut c = cloud();
    c.instance("i-orphan", "aws", "team/gone#0", "g6.xlarge", noon());
    let mut l = Loop::new();
    assert!(
        !l.turn(&i, Some(&c), noon() + minutes(1))
            .actions
            .iter()
            .any(|a| matches!(a, Action::Terminate { .. })),
        "within the grace period"
    );
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    assert!(t.actions.iter().any(
        |a| matches!(a, Action::Terminate { instance, node: None, .. } if instance == "i-orphan")
    ));
    assert!(
        l.metrics
            .render()
            .contains(r#"spillway_garbage_collected_total{kind="instance"} 1"#)
    );
}

/// Queue `q` whose status says a previous leader billed 1.00 USD through 11:50.
fn queue_billed_through_1150() -> std::sync::Arc<spillway_api::GpuQueue> {
    queue_with_status(
        "q",
        json!({"burst": {"enabled": true, "pools": ["aws"]}}),
        json!({"spend": {"thisMonthUSD": 1.0, "hourlyUSD": 0.8048,
                         "accruedThrough": "2026-03-10T11:50:00Z"}}),
    )
}

/// 1.00 USD plus ten minutes of a g6.xlarge, as status rounds it.
fn billed_to_noon() -> serde_json::Value {
    json!(((1.0 + 0.8048 / 6.0) * 10_000.0_f64).round() / 10_000.0)
}

#[test]
fn spend_continues_from_the_pair_in_status_after_a_restart() {
    let mut i = bursting("0s", None);
    // The previous leader wrote 1.00 USD through 11:50; the instance ran all along.
    i.queues = vec![queue_billed_through_1150()];
    let j = job("train").status(json!({"phase": "Running"})).build();
    i.nodes.push(cloud_node("ip-1", "aws", 1, "i-1"));
    i.pods.push(pod(&j, 0, 0, "ip-1", "Running"));
    i.jobs.push(j);
    let mut c = cloud();
    c.instance(
        "i-1",
        "aws",
        "team/train#0",
        "g6.xlarge",
        at("2026-03-10T11:00:00Z"),
    );
    let t = Loop::new().turn(&i, Some(&c), noon());
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    // Ten minutes at 0.8048 USD/h since 11:50, once.
    assert_eq!(q["spend"]["thisMonthUSD"], billed_to_noon());
    assert_eq!(q["spend"]["accruedThrough"], "2026-03-10T12:00:00.000000Z");
    let p = status_of(&t, StatusKind::ComputePool, "aws").expect("pool status");
    assert_eq!(p["instances"], 1);
    // The pool had no account yet: it starts now.
    assert_eq!(p["thisMonthUSD"], json!(0.0));
    assert_eq!(p["accruedThrough"], "2026-03-10T12:00:00.000000Z");
}

#[test]
fn launch_failures_and_cool_downs_show_on_the_pool() {
    let i = bursting("0s", None);
    let mut c = cloud();
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let p = status_of(&t, StatusKind::ComputePool, "aws").expect("pool");
    assert_eq!(condition(&p, "LaunchHealthy").expect("health").0, "True");
    assert_eq!(condition(&p, "Ready").expect("ready").0, "True");

    c.view.health.insert(
        "aws".into(),
        LaunchHealth {
            errors: vec![LaunchError {
                at: noon(),
                kind: "capacity",
                offering: "g6.xlarge on-demand us-east-1a".into(),
                message: "no capacity: InsufficientInstanceCapacity: none left".into(),
            }],
            last_success: None,
        },
    );
    c.view.cooldowns.insert(
        (
            "aws".into(),
            "g6.xlarge".into(),
            spillway_core::CapacityType::OnDemand,
            "us-east-1a".into(),
        ),
        noon() + minutes(5),
    );
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    let p = status_of(&t, StatusKind::ComputePool, "aws").expect("pool");
    let (status, reason, message) = condition(&p, "LaunchHealthy").expect("health");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "CapacityErrors")
    );
    assert!(
        message.contains("InsufficientInstanceCapacity"),
        "{message}"
    );
    assert!(
        message.contains("g6.xlarge on-demand us-east-1a until 2026-03-10T12:05:00Z"),
        "{message}"
    );
}

#[test]
fn a_failed_launch_is_told_to_the_job_owner() {
    let mut i = bursting("0s", None);
    i.jobs.push(job("train").build());
    let c = cloud();
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let launch = t
        .actions
        .iter()
        .find(|a| matches!(a, Action::Launch(_)))
        .cloned()
        .expect("launch");
    let out = l.state.feedback(&Failure {
        action: launch,
        error: Error::Cloud(spillway_cloud::CloudError::from_code(
            "InsufficientInstanceCapacity",
            "none left",
        )),
    });
    match out.as_slice() {
        [Action::Publish(n)] => {
            assert_eq!(n.reason, "LaunchFailed");
            assert!(n.warning);
            assert!(n.note.contains("g6.xlarge"), "{}", n.note);
        }
        other => panic!("expected one Event, got {other:?}"),
    }
}

#[test]
fn a_deleted_job_releases_its_instance_then_its_finalizer() {
    let mut i = bursting("0s", None);
    let mut j = job("train").status(json!({"phase": "Provisioning"}));
    j.0["metadata"]["finalizers"] = json!(["spillway.io/cloud-resources"]);
    j.0["metadata"]["deletionTimestamp"] = json!("2026-03-10T11:59:30Z");
    i.jobs.push(j.build());
    let mut c = cloud();
    c.instance(
        "i-1",
        "aws",
        "team/train#0",
        "g6.xlarge",
        at("2026-03-10T11:58:00Z"),
    );
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    assert!(
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Terminate { instance, .. } if instance == "i-1"))
    );
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::PatchFinalizer { .. }))
    );
    // Once the instance is gone, the finalizer goes.
    c.view.instances.clear();
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    assert!(
        t.actions.iter().any(
            |a| matches!(a, Action::PatchFinalizer { name, add: false, .. } if name == "train")
        )
    );
}

/// Found by the chaos suite: an operator restarted during a burst launched before its first
/// listing of the instances, counted none of those its predecessor had launched, and ran a
/// queue of 30 USD/h at 39.5 USD/h.
#[test]
fn nothing_launches_before_every_region_was_listed() {
    let mut i = bursting("0s", None);
    i.jobs.push(job("train").build());
    let mut c = cloud();
    c.view.complete = false;
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    c.view.complete = true;
    let t = l.turn(&i, Some(&c), noon());
    assert_eq!(launches(&t).len(), 1, "{:?}", kinds(&t));
}

#[test]
fn nothing_is_accrued_before_every_region_was_listed() {
    let mut i = bursting("0s", None);
    i.queues = vec![queue_billed_through_1150()];
    let mut c = cloud();
    c.view.complete = false;
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    if let Some(q) = status_of(&t, StatusKind::GpuQueue, "q") {
        assert_eq!(
            q["spend"]["accruedThrough"], "2026-03-10T11:50:00.000000Z",
            "{q}"
        );
    }
    // Listed now: the instance that ran all along is billed from 11:50.
    c.view.complete = true;
    c.instance(
        "i-1",
        "aws",
        "team/train#0",
        "g6.xlarge",
        at("2026-03-10T11:00:00Z"),
    );
    let t = l.turn(&i, Some(&c), noon());
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    assert_eq!(q["spend"]["thisMonthUSD"], billed_to_noon());
}

/// Found by the chaos suite's EC2 storm: a listing slowed down by throttling, asked for before a
/// machine's Node joined, does not show its instance; the Node was deleted as "its instance is
/// gone" and the non-restartable job on it failed. A Node is judged only by a listing asked for
/// after it joined.
#[test]
fn a_node_is_judged_gone_only_by_a_listing_asked_for_after_it_joined() {
    let deleted = |t: &crate::turn::Turn| -> Vec<String> {
        t.actions
            .iter()
            .filter_map(|a| match a {
                Action::DeleteNode { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    };
    let mut i = bursting("0s", None);
    // Joined at 11:00; its instance i-0new is in no listing.
    i.nodes.push(cloud_node("ip-10-0-0-1", "aws", 1, "i-0new"));
    let mut c = cloud();
    c.view
        .listed_at
        .insert("us-east-1".into(), at("2026-03-10T10:59:50Z"));
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(deleted(&t).is_empty(), "{:?}", kinds(&t));
    c.view
        .listed_at
        .insert("us-east-1".into(), at("2026-03-10T11:00:30Z"));
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert_eq!(deleted(&t), vec!["ip-10-0-0-1"], "{:?}", kinds(&t));
}
