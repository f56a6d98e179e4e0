//! Repatriation: a restartable cloud job moves home when a private node frees up: suspended
//! with the private node held for it, its cloud pod evicted, then started on that node.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};

/// A restartable 4-hour job running on cloud node `ip-1` (instance i-1, g6.xlarge) since
/// 11:00, and a free private node `a`.
fn moving() -> (crate::world::Inputs, Cloudy) {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]}}),
    )];
    i.pools.push(aws_pool("aws", json!({"idleTimeout": "2m"})));
    i.nodes = vec![node("a", "onprem", 1), cloud_node("ip-1", "aws", 1, "i-1")];
    let train = job("train")
        .restartable()
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    let mut t = (*train).clone();
    t.spec.estimated_runtime = Some("4h".into());
    let train = Arc::new(t);
    i.pods = vec![pod(&train, 0, 0, "ip-1", "Running")];
    i.jobs = vec![train];
    let mut c = cloud();
    c.instance(
        "i-1",
        "aws",
        "team/train#0",
        "g6.xlarge",
        at("2026-03-10T10:57:00Z"),
    );
    (i, c)
}

#[test]
fn a_cloud_job_is_suspended_then_started_on_the_private_node_held_for_it() {
    let (mut i, c) = moving();
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let evicted: Vec<&str> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::EvictPod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, ["train-0-0"]);
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Suspended");
    assert_eq!(st["restarts"], 1);
    assert_eq!(st["pool"], "onprem");
    assert_eq!(st["nodes"], json!(["a"]));
    assert_eq!(st["decision"]["reason"], "Repatriating");
    let (status, reason, message) = condition(&st, "Suspended").expect("Suspended condition");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Repatriating"));
    assert!(message.contains("saves about $"), "{message}");
    assert!(events(&t).contains(&("train".into(), "Repatriating".into(), false)));
    // A job arriving meanwhile does not get the held node.
    i.jobs.push(job("other").build());

    // The cloud pod is stopping (the cache does not show the Suspended status yet): nothing
    // starts, nothing is evicted again.
    let mut stopping = (*i.pods[0]).clone();
    stopping.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-03-10T12:00:01Z".parse().unwrap(),
        ));
    i.pods = vec![Arc::new(stopping)];
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    assert!(creates(&t).is_empty(), "{:?}", creates(&t));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::EvictPod { .. })),
        "{:?}",
        kinds(&t)
    );

    // The pod is gone and the cache shows the status: it starts on the held node.
    i.pods.clear();
    let mut j = (*i.jobs[0]).clone();
    j.status = Some(
        serde_json::from_value(
            json!({"phase": "Suspended", "restarts": 1, "pool": "onprem",
                                       "nodes": ["a"]}),
        )
        .unwrap(),
    );
    i.jobs[0] = Arc::new(j);
    let t = l.turn(&i, Some(&c), noon() + minutes(2));
    // The job that arrived meanwhile takes the cloud node the move left idle.
    assert_eq!(
        creates(&t),
        vec![
            ("team/train".into(), "train-1-0".into(), "a".into()),
            ("team/other".into(), "other-0-0".into(), "ip-1".into())
        ]
    );
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["decision"]["reason"], "Repatriated");
}

#[test]
fn a_rule_keeps_a_job_in_the_cloud() {
    let (mut i, c) = moving();
    i.policies = vec![policy(
        "stay",
        json!([{"name": "cloud-stays", "repatriate": "never"}]),
    )];
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::EvictPod { .. })),
        "{:?}",
        kinds(&t)
    );
}
