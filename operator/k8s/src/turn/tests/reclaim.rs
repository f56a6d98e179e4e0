//! Quota reclaim: a preempted borrower is requeued with a `Preempted` condition and Event, its
//! pods evicted with their grace period (capped by its queue), and the GPUs held for the
//! reclaiming job until they are free.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::*;
use crate::actions::StatusKind;

/// Queue "q" borrows (no quota); queue "team" has a quota of 8 GPUs and caps grace at 45 s.
fn reclaim_cluster() -> crate::world::Inputs {
    let mut i = cluster();
    i.queues = vec![
        queue("q", json!({"preemption": {"maxGracePeriod": "45s"}})),
        queue("team", json!({"privateQuota": {"gpus": 8}})),
    ];
    i.nodes = vec![node("a", "onprem", 8)];
    let mut borrower = job("borrower")
        .gpus(8)
        .restartable()
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:30:00Z"}))
        .build();
    Arc::make_mut(&mut borrower)
        .spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(120);
    let mut mine = job("mine").gpus(8).build();
    Arc::make_mut(&mut mine).spec.queue = "team".into();
    i.pods = vec![pod(&borrower, 0, 0, "a", "Running")];
    i.jobs = vec![borrower, mine];
    i
}

#[test]
fn a_borrower_is_preempted_for_a_queue_within_its_quota() {
    let mut i = reclaim_cluster();
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    // The borrower's pod is evicted with its grace period capped by its queue (120 s -> 45 s).
    assert_eq!(evictions(&t), vec![("borrower-0-0".to_string(), 45)]);
    let st = status_of(&t, StatusKind::GpuJob, "borrower").expect("borrower status");
    assert_eq!(st["phase"], "Queued");
    assert_eq!(st["restarts"], 1);
    let (status, reason, message) = condition(&st, "Preempted").expect("Preempted condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "QuotaReclaimed")
    );
    assert!(message.contains("\"team\""), "{message}");
    assert!(events(&t).contains(&("borrower".into(), "Preempted".into(), false)));
    let mine = status_of(&t, StatusKind::GpuJob, "mine").expect("mine status");
    assert_eq!(mine["decision"]["reason"], "Reclaiming");
    assert!(creates(&t).is_empty());

    // Next turn: the pod is terminating. Nothing is preempted again, and the borrower, back
    // in its queue, does not get the GPUs.
    let mut terminating = (*i.pods[0]).clone();
    terminating.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-03-10T12:00:05Z".parse().unwrap(),
        ));
    i.pods = vec![Arc::new(terminating)];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(evictions(&t).is_empty(), "{:?}", kinds(&t));
    assert!(creates(&t).is_empty(), "{:?}", creates(&t));

    // The pod is gone: the team's job starts there; the borrower waits.
    i.pods.clear();
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(
        creates(&t),
        vec![("team/mine".into(), "mine-0-0".into(), "a".into())]
    );
}

#[test]
fn a_borrower_that_cannot_restart_keeps_its_gpus_by_default() {
    let mut i = reclaim_cluster();
    let mut b = (*i.jobs[0]).clone();
    b.spec.restartable = false;
    i.jobs[0] = Arc::new(b);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert!(evictions(&t).is_empty());
    let mine = status_of(&t, StatusKind::GpuJob, "mine").expect("mine status");
    assert_ne!(mine["decision"]["reason"], "Reclaiming");

    // Its queue allows it: preempted, with a Warning (its work is lost), and the template's
    // grace period when the queue sets no cap.
    i.queues[0] = queue("q", json!({"preemption": {"allowNonRestartable": true}}));
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert_eq!(evictions(&t), vec![("borrower-0-0".to_string(), 120)]);
    assert!(events(&t).contains(&("borrower".into(), "Preempted".into(), true)));
}
