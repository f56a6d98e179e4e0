//! Environments: a joined node checked against its pool's promise and its job's requirements,
//! and a pool's drift from the private side.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::world::Inputs;

/// GPU feature discovery's labels for a driver and CUDA version.
fn gfd(driver: (u32, u32, &str), cuda: (u32, u32)) -> Value {
    json!({
        "nvidia.com/cuda.driver.major": driver.0.to_string(),
        "nvidia.com/cuda.driver.minor": driver.1.to_string(),
        "nvidia.com/cuda.driver.rev": driver.2,
        "nvidia.com/cuda.runtime.major": cuda.0.to_string(),
        "nvidia.com/cuda.runtime.minor": cuda.1.to_string(),
    })
}

/// A Ready one-GPU node of cloud pool `aws` behind `instance`, joined at `created`, with
/// `extra` labels.
fn joined(name: &str, instance: &str, created: &str, extra: Value) -> Arc<Node> {
    let mut labels = json!({"spillway.io/pool": "aws", "spillway.io/instance-id": instance,
                            "spillway.io/gpu-model": "L4"});
    if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    from(json!({
        "metadata": {"name": name, "creationTimestamp": created, "labels": labels},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "1"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// Queue `q` bursting at once to pool `aws`, whose image promises driver 550.54.15 and CUDA
/// 12.4; one private GPU (driver 535, CUDA 12.2), busy; job `train` wanting CUDA 12.4.
fn promised() -> Inputs {
    let busy = job("busy")
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    let mut train = job("train");
    train.0["spec"]["requirements"] = json!({"minCudaVersion": "12.4"});
    let mut private = (*node("a", "onprem", 1)).clone();
    if let Some(labels) = private.metadata.labels.as_mut()
        && let Some(g) = gfd((535, 104, "05"), (12, 2)).as_object()
    {
        for (k, v) in g {
            labels.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    Inputs {
        queues: vec![queue(
            "q",
            json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]}}),
        )],
        pools: vec![
            private_pool("onprem"),
            from(json!({"metadata": {"name": "aws", "generation": 1},
                        "spec": {"aws": {"region": "us-east-1", "amiId": "ami-12345678",
                                         "instanceTypes": ["g6.xlarge", "p4d.24xlarge"],
                                         "capacityTypes": ["on-demand"],
                                         "environment": {"driverVersion": "550.54.15",
                                                         "cudaVersion": "12.4"}}}})),
        ],
        nodes: vec![Arc::new(private)],
        pods: vec![pod(&busy, 0, 0, "a", "Running")],
        jobs: vec![busy, train.build()],
        ..Inputs::default()
    }
}

fn retirements(t: &crate::turn::Turn) -> Vec<String> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Cordon { node } => Some(format!("cordon {node}")),
            Action::Terminate { instance, .. } => Some(format!("terminate {instance}")),
            _ => None,
        })
        .collect()
}

#[test]
fn a_node_short_of_its_pools_promise_fails_the_launch_and_the_job_is_planned_again() {
    let mut i = promised();
    let mut c = cloud();
    let mut l = Loop::new();
    // The job bursts to the only offering whose image has CUDA 12.4: the cheapest, g6.xlarge.
    let t = l.turn(&i, Some(&c), noon());
    let l0 = launches(&t);
    assert_eq!(l0.len(), 1, "{:?}", kinds(&t));
    assert_eq!(l0[0].launch.offering.instance_type, "g6.xlarge");
    assert_eq!(l0[0].launch.need, "team/train#0");

    // Its machine joins with the image's real driver: 535 and CUDA 12.2.
    c.instance("i-1", "aws", "team/train#0", "g6.xlarge", noon());
    i.nodes.push(joined(
        "ip-1",
        "i-1",
        "2026-03-10T12:02:00Z",
        gfd((535, 104, "05"), (12, 2)),
    ));
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    assert!(
        creates(&t).is_empty(),
        "nothing starts there: {:?}",
        kinds(&t)
    );
    assert_eq!(retirements(&t), ["cordon ip-1", "terminate i-1"]);
    let notes: Vec<(String, String)> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish(n) if n.reason == "EnvironmentMismatch" && n.warning => {
                Some((n.regarding.name.clone().unwrap_or_default(), n.note.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        notes.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(),
        ["train", "aws"],
        "{notes:?}"
    );
    // Kept in the pool's status, for a new leader.
    let pool = status_of(&t, StatusKind::ComputePool, "aws").expect("pool status");
    assert_eq!(pool["leftOut"][0]["instanceType"], "g6.xlarge", "{pool}");
    assert_eq!(pool["leftOut"][0]["generation"], 1);
    assert!(
        notes[0].1.contains(
            "driver 535.104.05 where 550.54.15 was promised; CUDA 12.2 where 12.4 was promised"
        ),
        "both values named: {}",
        notes[0].1
    );
    let pool = status_of(&t, StatusKind::ComputePool, "aws").expect("pool status");
    let (status, reason, message) = condition(&pool, "LaunchHealthy").expect("LaunchHealthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "EnvironmentMismatch")
    );
    assert!(message.contains("g6.xlarge until"), "{message}");
    assert!(
        l.metrics
            .render()
            .contains("spillway_environment_mismatches_total{pool=\"aws\"} 1"),
        "{}",
        l.metrics.render()
    );

    // Once the cordon shows, the job is planned again under its next attempt, on another
    // offering: g6.xlarge is left out for an hour.
    let t = l.turn(&i, Some(&c), noon() + minutes(4));
    assert!(retirements(&t).is_empty(), "asked once: {:?}", kinds(&t));
    let l1 = launches(&t);
    assert_eq!(l1.len(), 1, "{:?}", kinds(&t));
    assert_eq!(l1[0].launch.need, "team/train#1");
    assert_ne!(l1[0].launch.offering.instance_type, "g6.xlarge");
    let t = l.turn(&i, Some(&c), noon() + minutes(65));
    assert!(
        launches(&t)
            .iter()
            .all(|o| o.launch.offering.instance_type == "g6.xlarge"),
        "an hour on, g6.xlarge is back: {:?}",
        kinds(&t)
    );
}

#[test]
fn a_node_that_meets_the_promise_runs_the_job_and_one_without_labels_waits_for_them() {
    let mut i = promised();
    let mut c = cloud();
    c.instance("i-1", "aws", "team/train#0", "g6.xlarge", noon());
    // Joined at 12:02 without GPU feature discovery's labels yet: held until 12:04.
    i.nodes
        .push(joined("ip-1", "i-1", "2026-03-10T12:02:00Z", json!({})));
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    assert!(creates(&t).is_empty(), "{:?}", kinds(&t));
    assert!(retirements(&t).is_empty(), "{:?}", kinds(&t));
    assert_eq!(
        t.wake,
        Some(noon() + minutes(4)),
        "the turn comes back when the grace ends"
    );
    // The labels arrive, with a newer driver than promised: the job starts there.
    i.nodes.pop();
    i.nodes.push(joined(
        "ip-1",
        "i-1",
        "2026-03-10T12:02:00Z",
        gfd((560, 35, "03"), (12, 6)),
    ));
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    assert_eq!(
        creates(&t)
            .iter()
            .map(|(job, _, node)| (job.as_str(), node.as_str()))
            .collect::<Vec<_>>(),
        [("team/train", "ip-1")],
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn a_node_that_never_states_its_environment_fails_the_job_not_the_offering_and_only_twice() {
    let mut i = promised();
    let mut c = cloud();
    c.instance("i-1", "aws", "team/train#0", "g6.xlarge", noon());
    i.nodes
        .push(joined("ip-1", "i-1", "2026-03-10T12:02:00Z", json!({})));
    let mut l = Loop::new();
    // Past the grace, unlabelled: it contradicts no promise, but the job needs CUDA 12.4 and
    // the node states none, so the launch fails rather than leave the job waiting for ever.
    let t = l.turn(&i, Some(&c), noon() + minutes(5));
    assert_eq!(retirements(&t), ["cordon ip-1", "terminate i-1"]);
    let notes: Vec<(String, String)> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish(n) if n.reason == "EnvironmentMismatch" => {
                Some((n.regarding.name.clone().unwrap_or_default(), n.note.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        notes.len(),
        1,
        "the job's Event only, not the pool's: {notes:?}"
    );
    let note = &notes[0].1;
    assert!(
        note.contains("no known CUDA version where the job requires minCudaVersion 12.4")
            && note.contains("the offering stays open to other jobs")
            && note.contains("machine 1 of at most 2"),
        "{note}"
    );
    // Counted on the job, and the offering stays open (no leftOut on the pool).
    let counted = t.actions.iter().find_map(|a| match a {
        Action::Annotate { key, value, .. }
            if key == crate::labels::ENVIRONMENT_FAILURES_ANNOTATION =>
        {
            Some(value.clone())
        }
        _ => None,
    });
    assert_eq!(counted.as_deref(), Some("1/1"));
    if let Some(pool) = status_of(&t, StatusKind::ComputePool, "aws") {
        assert!(pool.get("leftOut").is_none(), "{pool}");
    }

    // A second machine failed it too (the count on the job says so): no more launches for
    // it, it waits saying why, until its spec changes.
    let mut i = promised();
    let mut train = job("train");
    train.0["spec"]["requirements"] = json!({"minCudaVersion": "12.4"});
    train.0["metadata"]["annotations"] =
        json!({crate::labels::ENVIRONMENT_FAILURES_ANNOTATION: "1/2"});
    i.jobs[1] = train.build();
    let t = Loop::new().turn(&i, Some(&cloud()), noon() + minutes(10));
    assert!(launches(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["decision"]["reason"], "RequirementsUnmet", "{st}");
    assert!(
        st["decision"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2 machines launched for it joined without meeting")),
        "{st}"
    );
}

#[test]
fn a_new_leader_keeps_out_what_its_predecessor_left_out() {
    let mut i = promised();
    // The pool's status says g6.xlarge is left out for another half hour.
    let mut pool = (*i.pools[1]).clone();
    pool.status = Some(
        serde_json::from_value(json!({"leftOut": [{
        "instanceType": "g6.xlarge", "until": "2026-03-10T12:30:00.000000Z",
        "generation": 1, "what": "CUDA 12.2 where the image promises 12.4"}]}))
        .expect("status"),
    );
    i.pools[1] = Arc::new(pool);
    let t = Loop::new().turn(&i, Some(&cloud()), noon());
    let l = launches(&t);
    assert_eq!(l.len(), 1, "{:?}", kinds(&t));
    assert_eq!(
        l[0].launch.offering.instance_type, "p4d.24xlarge",
        "not the one left out"
    );
}

#[test]
fn a_cloud_pools_drift_from_the_private_nodes_is_a_condition_and_a_metric() {
    let i = promised();
    let c = cloud();
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let pool = status_of(&t, StatusKind::ComputePool, "aws").expect("pool status");
    let (status, reason, message) = condition(&pool, "EnvironmentDrift").expect("drift");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "EnvironmentDiffers")
    );
    assert_eq!(
        message,
        "Driver branch 550 here, 535 on private nodes; CUDA 12.4 here, 12.2 on private nodes (its image). Jobs that state no requirements may behave differently here; `kubectl spillway parity` shows both sides."
    );
    let private = status_of(&t, StatusKind::ComputePool, "onprem").expect("private status");
    assert!(condition(&private, "EnvironmentDrift").is_none());
    // Each side's facts, as `kubectl spillway parity` shows them: the private nodes' labels
    // as written, the cloud pool's promise and its instance types' GPUs.
    assert_eq!(
        private["environment"],
        json!({"source": "nodes", "driverVersions": ["535.104.05"], "cudaVersions": ["12.2"],
               "gpuProducts": [], "gpuMemoryMiB": [], "kernelVersions": [],
               "containerRuntimes": []})
    );
    assert_eq!(pool["environment"]["source"], "image");
    assert_eq!(pool["environment"]["driverVersions"], json!(["550.54.15"]));
    assert_eq!(pool["environment"]["cudaVersions"], json!(["12.4"]));
    assert_eq!(pool["environment"]["gpuProducts"], json!(["A100", "L4"]));
    let text = l.metrics.render();
    assert!(
        text.contains("spillway_environment_drift{pool=\"aws\"} 1"),
        "{text}"
    );

    // A pool promising nothing is not compared.
    let mut i = promised();
    i.pools[1] = aws_pool("aws", json!({}));
    let t = Loop::new().turn(&i, Some(&c), noon());
    let pool = status_of(&t, StatusKind::ComputePool, "aws").expect("pool status");
    let (status, reason, _) = condition(&pool, "EnvironmentDrift").expect("drift");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "NotCompared")
    );
}
