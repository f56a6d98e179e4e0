//! Jobs: placement, gangs, lost nodes, completion, and undoing a failed start.

use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::error::api_error;
use crate::executor::Failure;

#[test]
fn a_job_that_fits_starts_on_a_private_node_with_its_status_and_an_event() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").gpus(4).build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert_eq!(
        creates(&t),
        vec![("team/train".into(), "train-0-0".into(), "a".into())]
    );
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["phase"], "Running");
    assert_eq!(st["environment"], "private");
    assert_eq!(st["pool"], "onprem");
    assert_eq!(st["decision"]["reason"], "FitsPrivate");
    assert!(events(&t).contains(&("train".into(), "FitsPrivate".into(), false)));

    // The start is assumed: the next turn, before the pod is visible, does not place the job
    // again, nor put another job on the same GPUs.
    i.jobs.push(job("second").gpus(8).build());
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(creates(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "second").expect("second waits");
    assert_eq!(st["phase"], "Queued");
}

#[test]
fn a_gang_starts_whole_on_two_nodes_or_not_at_all() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8), node("b", "onprem", 8)];
    let busy = job("busy")
        .gpus(8)
        .status(json!({"phase": "Running"}))
        .build();
    i.pods = vec![pod(&busy, 0, 0, "b", "Running")];
    i.jobs = vec![busy, job("gang").replicas(2).gpus(8).build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert!(
        creates(&t).is_empty(),
        "one node is busy: {:?}",
        creates(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("gang status");
    assert_eq!(st["phase"], "Queued");

    // The busy job finishes: both replicas start at once, one per node.
    i.pods = vec![pod(&i.jobs[0], 0, 0, "b", "Succeeded")];
    let t = l.turn(&i, None, noon() + minutes(1));
    let mut nodes: Vec<String> = creates(&t)
        .into_iter()
        .filter(|(j, ..)| j == "team/gang")
        .map(|(_, _, n)| n)
        .collect();
    nodes.sort();
    assert_eq!(nodes, vec!["a", "b"]);
}

#[test]
fn a_replica_lost_with_its_node_requeues_a_restartable_gang() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)]; // node "b" is gone
    let j = job("gang")
        .replicas(2)
        .gpus(8)
        .restartable()
        .status(all_running())
        .build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running"), pod(&j, 0, 1, "b", "Running")];
    i.jobs = vec![j];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let deleted: Vec<String> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, vec!["gang-0-0", "gang-0-1"]);
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("requeued");
    assert_eq!(st["phase"], "Queued");
    assert_eq!(st["restarts"], 1);
    assert!(events(&t).contains(&("gang".into(), "Requeued".into(), false)));

    // The deletions are not asked for twice while they are under way.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { .. })),
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn a_lost_replica_fails_a_gang_that_cannot_restart() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let j = job("once")
        .replicas(2)
        .gpus(8)
        .status(all_running())
        .build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running"), pod(&j, 0, 1, "b", "Running")];
    i.jobs = vec![j];
    let t = Loop::new().turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "once").expect("failed");
    assert_eq!(st["phase"], "Failed");
    assert_eq!(condition(&st, "Failed").expect("Failed").1, "ReplicaLost");
    assert!(events(&t).contains(&("once".into(), "ReplicaLost".into(), true)));
}

/// Found with a node that stopped posting: a one-replica job whose only pod was evicted was
/// taken for a job never started and placed again under the same attempt, whose pod name the
/// evicted pod (stuck terminating on the unreachable node) still held; and that pod, never to
/// be confirmed stopped, held the job back. A started job with no pod left has lost it.
#[test]
fn a_started_job_whose_only_pod_is_gone_or_stuck_on_a_dead_node_has_lost_it() {
    let running = all_running();
    let mut i = cluster();
    let mut unreachable = (*node("a", "onprem", 8)).clone();
    unreachable.status.as_mut().expect("status").conditions = Some(vec![
        serde_json::from_value(json!({"type": "Ready", "status": "Unknown"})).expect("condition"),
    ]);
    i.nodes = vec![std::sync::Arc::new(unreachable), node("b", "onprem", 8)];
    let once = job("once").gpus(8).status(running.clone()).build();
    let again = job("again").gpus(8).restartable().status(running).build();
    // once's pod is gone; again's is being deleted on the unreachable node.
    let mut stuck = (*pod(&again, 0, 0, "a", "Running")).clone();
    stuck.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-03-10T11:58:00Z".parse().expect("time"),
    ));
    i.pods = vec![std::sync::Arc::new(stuck)];
    i.jobs = vec![once, again];
    let t = Loop::new().turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "once").expect("once");
    assert_eq!(st["phase"], "Failed", "{st}");
    assert_eq!(condition(&st, "Failed").expect("Failed").1, "ReplicaLost");
    let st = status_of(&t, StatusKind::GpuJob, "again").expect("again");
    assert_eq!(st["restarts"], 1, "{st}");
}

/// Found by the soak: a pod placed on a node that left before the scheduler bound it stays
/// Pending for ever, unbound; its job must count it lost, not run on.
#[test]
fn a_pod_placed_on_a_node_that_left_before_binding_is_lost() {
    let mut i = cluster();
    i.nodes = vec![node("b", "onprem", 8)];
    let j = job("late")
        .gpus(8)
        .restartable()
        .status(json!({"phase": "Running"}))
        .build();
    let mut p = (*pod(&j, 0, 0, "a", "Pending")).clone();
    p.spec.as_mut().expect("spec").node_name = None;
    p.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::labels::NODE_ANNOTATION.into(), "a".into());
    i.pods = vec![std::sync::Arc::new(p)];
    i.jobs = vec![j];
    let t = Loop::new().turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "late").expect("late");
    assert_eq!(st["restarts"], 1, "{st}");
}

#[test]
fn a_finished_job_is_marked_succeeded_once_and_decided_no_more() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let j = job("done")
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    i.pods = vec![pod(&j, 0, 0, "a", "Succeeded")];
    i.jobs = vec![j];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "done").expect("succeeded");
    assert_eq!(st["phase"], "Succeeded");
    assert!(events(&t).contains(&("done".into(), "Succeeded".into(), false)));
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(t.actions.is_empty(), "nothing more: {:?}", kinds(&t));
}

#[test]
fn a_failed_pod_create_drops_the_assumption_and_the_job_is_placed_again() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let create = t
        .actions
        .iter()
        .find(|a| matches!(a, Action::CreatePod { .. }))
        .cloned()
        .expect("a create");
    let again = l.state.feedback(&Failure {
        action: create,
        error: api_error(403, "Forbidden", "pods is forbidden"),
    });
    assert!(again.is_empty());
    let t = l.turn(&i, None, noon() + minutes(1));
    assert_eq!(creates(&t).len(), 1, "placed again: {:?}", kinds(&t));
}

#[test]
fn a_failed_status_write_is_written_again_next_turn() {
    let mut i = cluster();
    i.jobs = vec![job("waits").build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let write = t
        .actions
        .iter()
        .find(|a| matches!(a, Action::ApplyStatus(_)))
        .cloned()
        .expect("a status write");
    let first = status_of(&t, StatusKind::GpuJob, "waits").expect("first write");
    // Unchanged, nothing is written again...
    assert!(status_of(&l.turn(&i, None, noon()), StatusKind::GpuJob, "waits").is_none());
    // ...unless the write failed.
    l.state.feedback(&Failure {
        action: write,
        error: api_error(500, "InternalError", "etcd timeout"),
    });
    let t = l.turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "waits").expect("written again");
    // With the decision it carried, though the scheduler saw nothing change.
    assert_eq!(st["decision"]["reason"], first["decision"]["reason"]);
    assert!(st["decision"]["reason"].is_string(), "{st}");
}

#[test]
fn an_unchanged_world_is_not_decided_again() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let busy = job("busy")
        .gpus(8)
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    i.pods = vec![pod(&busy, 0, 0, "a", "Running")];
    i.jobs = vec![busy, job("waits").gpus(8).build()];
    let mut l = Loop::new();
    l.turn(&i, None, noon());
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(t.actions.is_empty(), "{:?}", kinds(&t));
    assert_eq!(l.state.scheduler.stats().skipped, 1);
    let shown = l.metrics.render();
    assert!(
        shown.contains(r#"spillway_decide_cycles_total{result="skipped"} 1"#)
            && shown.contains(r#"spillway_decide_cycles_total{result="decided"} 1"#),
        "{shown}"
    );
    // Nor are the jobs' views derived again: both were kept from the first turn.
    assert!(
        shown.contains(r#"spillway_job_views_total{result="derived"} 2"#)
            && shown.contains(r#"spillway_job_views_total{result="kept"} 2"#),
        "{shown}"
    );
    // A new job is a change: decided, and only it gets a decision.
    i.jobs.push(job("new").gpus(8).build());
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(l.state.scheduler.stats().skipped, 1);
    assert!(
        (l.metrics.render()).contains(r#"spillway_job_views_total{result="derived"} 3"#),
        "only the new job's view is derived"
    );
    let st = status_of(&t, StatusKind::GpuJob, "new").expect("new job's status");
    assert_eq!(st["phase"], "Queued");
    assert!(status_of(&t, StatusKind::GpuJob, "waits").is_none());
}

#[test]
fn a_job_past_its_max_runtime_is_stopped_and_failed() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut j =
        job("long").status(json!({"phase": "Running", "startedAt": "2026-03-10T10:00:00Z"}));
    j.0["spec"]["maxRuntime"] = json!("1h");
    let j = j.build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running")];
    i.jobs = vec![j];
    let t = Loop::new().turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "long").expect("failed");
    assert_eq!(st["phase"], "Failed");
    assert_eq!(
        condition(&st, "Failed").expect("Failed").1,
        "MaxRuntimeExceeded"
    );
    assert!(
        t.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { name, .. } if name == "long-0-0"))
    );
}

/// The status of a job whose replicas all run since an hour before noon.
fn all_running() -> serde_json::Value {
    json!({"phase": "Running", "conditions": [
        {"type": "Running", "status": "True", "reason": "AllReplicasRunning", "message": "",
         "lastTransitionTime": "2026-03-10T11:00:00Z"}]})
}

/// Found by a CI run of the AWS lifecycle test (an instance terminated behind the operator's
/// back): right after a requeue, before the watch brings the requeued status back, the cache
/// still says Running with no pod left; the next turn took that for a second loss and requeued
/// the job again (restarts 2 for one loss). A status of an earlier attempt says nothing about
/// the current one.
#[test]
fn a_requeued_job_is_not_requeued_again_on_its_stale_status() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let busy = job("busy").gpus(8).status(all_running()).build();
    // sturdy ran on a node that is gone, and so are its pods.
    let sturdy = job("sturdy")
        .gpus(8)
        .restartable()
        .status(all_running())
        .build();
    i.pods = vec![pod(&busy, 0, 0, "a", "Running")];
    i.jobs = vec![busy, sturdy];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "sturdy").expect("requeued");
    assert_eq!(
        (st["phase"].as_str(), st["restarts"].as_i64()),
        (Some("Queued"), Some(1))
    );

    // The cache has not caught up: the same objects again.
    for k in 1..3 {
        let t = l.turn(&i, None, noon() + minutes(k));
        assert!(
            !events(&t)
                .iter()
                .any(|(j, r, _)| j == "sturdy" && r == "Requeued"),
            "requeued again: {:?}",
            events(&t)
        );
        if let Some(st) = status_of(&t, StatusKind::GpuJob, "sturdy") {
            assert_eq!(st["restarts"], 1, "{st}");
            assert_eq!(st["phase"], "Queued", "{st}");
        }
    }
}

/// A status that needs no write is not worked out again while nothing of it changes; a
/// running job whose private GPUs cost something does change with the clock: its accrued cost
/// is written again as it grows (every five minutes' spend), though nothing else changed.
#[test]
fn a_priced_private_job_has_its_cost_written_as_it_accrues() {
    let mut i = cluster();
    i.pools = vec![std::sync::Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "onprem", "generation": 1},
            "spec": {"private": {"nodeSelector": {"pool": "onprem"}, "gpuCostPerHour": 2.0}}}))
        .expect("pool"),
    )];
    i.nodes = vec![node("a", "onprem", 8)];
    let j = job("priced")
        .status(json!({"phase": "Running", "pool": "onprem", "nodes": ["a"],
                       "startedAt": "2026-03-10T12:00:00Z"}))
        .build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running")];
    i.jobs = vec![j];
    let mut l = Loop::new();
    let st = status_of(&l.turn(&i, None, noon()), StatusKind::GpuJob, "priced").expect("status");
    assert_eq!(st["cost"]["hourlyUSD"], 2.0, "{st}");
    // A minute's spend is within five minutes' of the truth: nothing to write.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(status_of(&t, StatusKind::GpuJob, "priced").is_none());
    let t = l.turn(&i, None, noon() + minutes(30));
    let st = status_of(&t, StatusKind::GpuJob, "priced").expect("the cost again");
    assert_eq!(st["cost"]["accruedUSD"], 1.0, "{st}");
}

#[test]
fn a_job_outside_the_namespaces_the_operator_runs_is_invalid_and_never_placed() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").gpus(4).build()];
    i.job_namespaces = Some(std::sync::Arc::new(["research".to_string()].into()));
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert!(creates(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    let invalid = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Invalid" && c["status"] == "True")
        .unwrap_or_else(|| panic!("an Invalid condition: {st}"));
    let message = invalid["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"team\"") && message.contains("research"),
        "{message}"
    );
    // An operator that runs this namespace too (the setting is fixed for a process) places it.
    i.job_namespaces = Some(std::sync::Arc::new(
        ["research".into(), "team".into()].into(),
    ));
    let t = Loop::new().turn(&i, None, noon() + minutes(1));
    assert_eq!(creates(&t).len(), 1, "{:?}", kinds(&t));
}
