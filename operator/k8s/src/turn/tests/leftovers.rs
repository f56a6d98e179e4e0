//! A job's next attempt starts only once no pod of an earlier one can still run: pods the
//! caches show are being deleted, and pods an earlier start asked for have shown up, failed to
//! be created, or been waited for past the assume timeout.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as K8sTime;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::error::api_error;
use crate::executor::Failure;
use crate::world::Inputs;

/// `pod`, as the caches show it once its deletion was accepted.
fn being_deleted(pod: &Pod) -> Arc<Pod> {
    let mut p = pod.clone();
    p.metadata.deletion_timestamp = Some(K8sTime("2026-03-10T12:00:00Z".parse().expect("time")));
    Arc::new(p)
}

fn deletes(t: &crate::turn::Turn) -> Vec<String> {
    (t.actions.iter())
        .filter_map(|a| match a {
            Action::DeletePod { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The names of the pods `t` creates.
fn created(t: &crate::turn::Turn) -> Vec<String> {
    let mut names: Vec<String> = creates(t).into_iter().map(|(_, p, _)| p).collect();
    names.sort();
    names
}

/// `i`'s job `name` with the status `t` wrote for it, as the caches show it next.
fn shows_status(i: &mut Inputs, t: &crate::turn::Turn, name: &str) -> Value {
    let st = status_of(t, StatusKind::GpuJob, name).expect("a status written");
    let j = i
        .jobs
        .iter_mut()
        .find(|j| j.metadata.name.as_deref() == Some(name));
    let j = j.expect("the job");
    let mut v = serde_json::to_value(&**j).expect("json");
    v["status"] = st.clone();
    *j = from(v);
    st
}

/// A restartable gang of two 4-GPU replicas on three free nodes, running at attempt 0 with
/// only replica 0's pod left: the first turn requeues it and deletes that pod.
fn requeued_gang() -> (Inputs, Loop, Arc<Pod>) {
    let mut i = cluster();
    i.nodes = vec![
        node("a", "onprem", 8),
        node("b", "onprem", 8),
        node("c", "onprem", 8),
    ];
    let j = job("gang")
        .replicas(2)
        .gpus(4)
        .restartable()
        .status(json!({"phase": "Running", "pool": "onprem", "nodes": ["a", "b"]}))
        .build();
    let left = pod(&j, 0, 0, "a", "Running");
    i.pods = vec![left.clone()];
    i.jobs = vec![j];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert_eq!(deletes(&t), vec!["gang-0-0"]);
    let st = shows_status(&mut i, &t, "gang");
    assert_eq!(
        (st["phase"].as_str(), st["restarts"].as_i64()),
        (Some("Queued"), Some(1))
    );
    (i, l, left)
}

#[test]
fn a_requeued_gang_starts_again_only_once_its_earlier_pod_is_being_deleted() {
    let (mut i, mut l, left) = requeued_gang();
    // The caches show the requeue, not yet the deletion: two nodes are free for attempt 1, but
    // attempt 0's pod still runs on the third.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(created(&t).is_empty(), "{:?}", created(&t));
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("a decision");
    assert_eq!(st["decision"]["outcome"], "Wait", "{st}");
    assert_eq!(st["decision"]["reason"], "PreviousAttemptStopping", "{st}");
    let message = st["decision"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("gang-0-0"), "{message}");

    // Its deletion shows: attempt 1 starts.
    i.pods = vec![being_deleted(&left)];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(created(&t), vec!["gang-1-0", "gang-1-1"]);
}

#[test]
fn a_pod_delete_that_failed_is_asked_again() {
    let (i, mut l, _) = requeued_gang();
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(deletes(&t).is_empty(), "asked once while under way");
    let delete = Action::DeletePod {
        namespace: NS.into(),
        name: "gang-0-0".into(),
        uid: "pod-uid-gang-0-0".into(),
    };
    l.state.feedback(&Failure {
        action: delete,
        error: api_error(500, "InternalError", "etcd timeout"),
    });
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(deletes(&t), vec!["gang-0-0"]);
    assert!(created(&t).is_empty(), "{:?}", created(&t));
}

/// A gang of two 8-GPU replicas started on two of three nodes whose second create failed for
/// good; the caches show the start's status and no pod, so the next turn finds the gang broken
/// and requeues it. Returns the failed start's first pod and its node.
fn half_created_gang() -> (Inputs, Loop, Pod, String) {
    let mut i = cluster();
    i.nodes = vec![
        node("a", "onprem", 8),
        node("b", "onprem", 8),
        node("c", "onprem", 8),
    ];
    i.jobs = vec![job("gang").replicas(2).gpus(8).restartable().build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert_eq!(created(&t), vec!["gang-0-0", "gang-0-1"]);
    let (_, _, on) = (creates(&t).into_iter())
        .find(|(_, p, _)| p == "gang-0-0")
        .expect("replica 0");
    let pods: Vec<Pod> = (t.actions.iter())
        .filter_map(|a| match a {
            Action::CreatePod { pod, .. } => Some((**pod).clone()),
            _ => None,
        })
        .collect();
    shows_status(&mut i, &t, "gang");
    l.state.feedback(&Failure {
        action: Action::CreatePod {
            job: format!("{NS}/gang"),
            pod: Box::new(pods[1].clone()),
        },
        error: api_error(500, "InternalError", "etcd timeout"),
    });
    let t = l.turn(&i, None, noon() + minutes(1));
    let st = shows_status(&mut i, &t, "gang");
    assert_eq!(
        (st["phase"].as_str(), st["restarts"].as_i64()),
        (Some("Queued"), Some(1))
    );
    (i, l, pods[0].clone(), on)
}

#[test]
fn a_pod_an_earlier_start_asked_for_holds_the_next_attempt_until_it_shows_and_is_deleted() {
    let (mut i, mut l, first, on) = half_created_gang();
    // gang-0-0's create may still land: attempt 1 waits, though the nodes look free.
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(created(&t).is_empty(), "{:?}", created(&t));
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("a decision");
    assert_eq!(st["decision"]["reason"], "PreviousAttemptStopping", "{st}");
    assert!(
        (st["decision"]["message"].as_str().unwrap_or_default()).contains("gang-0-0"),
        "{st}"
    );

    // It lands: deleted as surplus, and still in the way until its deletion shows.
    let landed = pod(&i.jobs[0], 0, 0, &on, "Running");
    assert_eq!(landed.metadata.name, first.metadata.name);
    i.pods = vec![landed.clone()];
    let t = l.turn(&i, None, noon() + minutes(3));
    assert_eq!(deletes(&t), vec!["gang-0-0"]);
    assert!(created(&t).is_empty(), "{:?}", created(&t));

    // Its deletion shows: attempt 1 starts, on the two nodes the stopping pod leaves free.
    i.pods = vec![being_deleted(&landed)];
    let t = l.turn(&i, None, noon() + minutes(4));
    assert_eq!(created(&t), vec!["gang-1-0", "gang-1-1"]);
    assert!(
        creates(&t).iter().all(|(_, _, n)| *n != on),
        "{:?}",
        creates(&t)
    );
}

#[test]
fn a_pod_an_earlier_start_asked_for_is_not_waited_for_once_its_create_failed() {
    let (i, mut l, first, _) = half_created_gang();
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(created(&t).is_empty(), "{:?}", created(&t));
    l.state.feedback(&Failure {
        action: Action::CreatePod {
            job: format!("{NS}/gang"),
            pod: Box::new(first),
        },
        error: api_error(500, "InternalError", "etcd timeout"),
    });
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(created(&t), vec!["gang-1-0", "gang-1-1"]);
}

#[test]
fn a_pod_an_earlier_start_asked_for_is_waited_for_up_to_the_assume_timeout() {
    let (i, mut l, ..) = half_created_gang();
    let timeout = crate::turn::TurnSettings::default().assume_timeout;
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(created(&t).is_empty(), "{:?}", created(&t));
    // The wait's end is a wake of the turn.
    assert_eq!(t.wake, Some(noon() + timeout));
    let t = l.turn(&i, None, noon() + timeout + minutes(1));
    assert_eq!(created(&t), vec!["gang-1-0", "gang-1-1"]);
}

#[test]
fn a_late_create_failure_of_an_earlier_attempt_leaves_the_current_start_alone() {
    let (mut i, mut l, first, on) = half_created_gang();
    // gang-0-0 lands and is deleted; attempt 1 starts.
    let landed = pod(&i.jobs[0], 0, 0, &on, "Running");
    i.pods = vec![being_deleted(&landed)];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(created(&t), vec!["gang-1-0", "gang-1-1"]);
    let nodes: Vec<String> = creates(&t).into_iter().map(|(_, _, n)| n).collect();
    // A retry of gang-0-0's create, long queued, fails now: attempt 1's start still holds its
    // nodes, so the next turn places nothing else there and asks for nothing again.
    l.state.feedback(&Failure {
        action: Action::CreatePod {
            job: format!("{NS}/gang"),
            pod: Box::new(first),
        },
        error: api_error(500, "InternalError", "etcd timeout"),
    });
    i.jobs.push(job("other").gpus(8).build());
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(
        creates(&t).iter().all(|(_, _, n)| !nodes.contains(n)),
        "{:?} on {nodes:?}",
        creates(&t)
    );
    assert!(
        !created(&t).iter().any(|p| p.starts_with("gang-")),
        "{:?}",
        created(&t)
    );
}

#[test]
fn a_delete_refused_for_good_is_not_asked_at_every_turn() {
    let (i, mut l, _) = requeued_gang();
    l.state.feedback(&Failure {
        action: Action::DeletePod {
            namespace: NS.into(),
            name: "gang-0-0".into(),
            uid: "pod-uid-gang-0-0".into(),
        },
        error: api_error(403, "Forbidden", "pods is forbidden"),
    });
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(deletes(&t).is_empty(), "{:?}", deletes(&t));
    // The job waits for it all the same.
    assert!(created(&t).is_empty(), "{:?}", created(&t));
}
