//! Interruption notices: a spot warning moves the job off its node before the deadline and
//! retires the instance; the message is deleted once the node carries what remains; a
//! duplicate, a new leader and a foreign instance do nothing twice; rebalance recommendations
//! cordon, and with `Replace` move restartable jobs at their next checkpoint.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use spillway_cloud::notices::{Notice, NoticeKind};

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::cloud::notices::{PendingMessage, QueueRef};
use crate::labels::{INTERRUPTED_TAINT, INTERRUPTION_DEADLINE_ANNOTATION, REBALANCE_AT_ANNOTATION};

const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/spillway";

/// A restartable job `train` (grace period 600 s) running on spot node `ip-1` (instance i-1)
/// of pool `aws` (with `extra` in its spec), and the cloud with that instance.
fn on_spot(extra: serde_json::Value) -> (crate::world::Inputs, Cloudy) {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]}}),
    )];
    let mut aws = json!({"interruptionQueue": QUEUE, "capacityTypes": ["spot"]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        aws[k] = v.clone();
    }
    let pool = aws_pool("aws", json!({}));
    let mut p = (*pool).clone();
    let a = p.spec.aws.as_mut().unwrap();
    let merged: spillway_api::pool::AwsPool = serde_json::from_value({
        let mut base = serde_json::to_value(&*a).unwrap();
        for (k, v) in aws.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    })
    .unwrap();
    *a = merged;
    i.pools.push(Arc::new(p));
    i.nodes = vec![cloud_node("ip-1", "aws", 1, "i-1")];
    let mut j = job("train")
        .restartable()
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}));
    j.0["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(600);
    let train = j.build();
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
    c.view.instances[0].capacity_type = spillway_core::CapacityType::Spot;
    (i, c)
}

/// Message `id` carrying one notice of `kind` about `instance`, sent at `time`.
fn message(id: &str, kind: NoticeKind, instance: &str, time: &str, owned: bool) -> PendingMessage {
    let time = at(time);
    let deadline = (kind == NoticeKind::SpotInterruptionWarning)
        .then(|| time + spillway_cloud::notices::SPOT_WARNING_LEAD);
    PendingMessage {
        queue: QueueRef {
            url: QUEUE.into(),
            region: "us-east-1".into(),
            owned,
        },
        id: id.into(),
        receipt: format!("receipt-of-{id}"),
        notices: Ok(vec![Notice {
            id: format!("event-{id}"),
            kind,
            instance: instance.into(),
            time,
            deadline,
        }]),
        received_at: time,
    }
}

/// `node` as the cache shows it once the turn's MarkNode was written.
fn marked(node: &Node, value: &str, annotations: serde_json::Value) -> Arc<Node> {
    let mut n = node.clone();
    let spec = n.spec.get_or_insert_with(Default::default);
    spec.unschedulable = Some(true);
    spec.taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: INTERRUPTED_TAINT.into(),
        value: Some(value.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    let a = n.metadata.annotations.get_or_insert_with(Default::default);
    for (k, v) in annotations.as_object().unwrap() {
        a.insert(k.clone(), v.as_str().unwrap().into());
    }
    Arc::new(n)
}

fn deleted(t: &crate::turn::Turn) -> Vec<&str> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteNotice { message } => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

fn terminated(t: &crate::turn::Turn) -> Vec<&str> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Terminate { instance, .. } => Some(instance.as_str()),
            _ => None,
        })
        .collect()
}

/// The job as the cache shows it once the turn's status was written.
fn seen(i: &mut crate::world::Inputs, t: &crate::turn::Turn) {
    let st = status_of(t, StatusKind::GpuJob, "train").expect("a status");
    let mut j = (*i.jobs[0]).clone();
    j.status = Some(serde_json::from_value(st).unwrap());
    i.jobs[0] = Arc::new(j);
}

#[test]
fn a_spot_warning_moves_the_job_off_before_the_deadline_then_the_message_and_instance_go() {
    let (mut i, mut c) = on_spot(json!({}));
    // Sent 30 s ago: 90 s are left, so the pod's 600 s grace period is cut to 80 s.
    c.view.notices = vec![message(
        "m1",
        NoticeKind::SpotInterruptionWarning,
        "i-1",
        "2026-03-10T11:59:30Z",
        false,
    )];
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let marks: Vec<_> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::MarkNode {
                node,
                value,
                annotations,
            } => Some((node.clone(), value.clone(), annotations.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(marks.len(), 1, "{:?}", kinds(&t));
    assert_eq!(marks[0].0, "ip-1");
    assert_eq!(marks[0].1, "spot-interruption-warning");
    assert_eq!(
        marks[0]
            .2
            .get(INTERRUPTION_DEADLINE_ANNOTATION)
            .map(String::as_str),
        Some("2026-03-10T12:01:30Z")
    );
    assert_eq!(evictions(&t), [("train-0-0".to_string(), 80)]);
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    assert_eq!(st["phase"], "Queued");
    assert_eq!(st["restarts"], 1);
    assert_eq!(st["interruptedAt"], "2026-03-10T11:59:30Z");
    let (status, reason, message) = condition(&st, "Interrupted").expect("Interrupted");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SpotInterruptionWarning")
    );
    assert!(
        message.contains("i-1") && message.contains("within 80 s"),
        "{message}"
    );
    assert!(events(&t).contains(&("train".into(), "Interrupted".into(), true)));
    // Not yet: the node does not show its marks, the pod is still there.
    assert!(
        deleted(&t).is_empty() && terminated(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    assert!(
        l.metrics.render().contains(
            r#"spillway_interruption_notices_total{pool="aws",kind="spot-interruption-warning"} 1"#
        ),
        "{}",
        l.metrics.render()
    );

    // The cache catches up: marks on the node, the job requeued, its pod gone.
    seen(&mut i, &t);
    i.nodes = vec![marked(
        &i.nodes[0],
        "spot-interruption-warning",
        json!({INTERRUPTION_DEADLINE_ANNOTATION: "2026-03-10T12:01:30Z"}),
    )];
    i.pods.clear();
    let t = l.turn(&i, Some(&c), noon() + minutes(0));
    assert_eq!(deleted(&t), ["m1"], "{:?}", kinds(&t));
    assert_eq!(terminated(&t), ["i-1"]);
    assert!(evictions(&t).is_empty());
    // Nothing twice while the deletion is under way.
    let t = l.turn(&i, Some(&c), noon() + minutes(0));
    assert!(
        deleted(&t).is_empty() && terminated(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn a_warning_delivered_again_to_a_new_leader_only_deletes_the_message() {
    let (mut i, mut c) = on_spot(json!({}));
    c.view.notices = vec![message(
        "m1",
        NoticeKind::SpotInterruptionWarning,
        "i-1",
        "2026-03-10T11:59:30Z",
        false,
    )];
    let t = Loop::new().turn(&i, Some(&c), noon());
    // The first leader acted and died before deleting: the cache shows what it did.
    seen(&mut i, &t);
    i.nodes = vec![marked(
        &i.nodes[0],
        "spot-interruption-warning",
        json!({INTERRUPTION_DEADLINE_ANNOTATION: "2026-03-10T12:01:30Z"}),
    )];
    // Its pod is still stopping (its grace period runs).
    let mut stopping = (*i.pods[0]).clone();
    stopping.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-03-10T12:00:00Z".parse().unwrap(),
        ));
    i.pods = vec![Arc::new(stopping)];
    c.view.notices[0].receipt = "a-new-receipt".into();
    let t = Loop::new().turn(&i, Some(&c), noon() + minutes(0));
    assert_eq!(deleted(&t), ["m1"], "{:?}", kinds(&t));
    assert!(evictions(&t).is_empty(), "{:?}", kinds(&t));
    assert!(
        !events(&t).iter().any(|e| e.1 == "Interrupted"),
        "{:?}",
        events(&t)
    );
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::MarkNode { .. }))
    );
    // The pod still runs on the node: the instance waits for it, or for the deadline.
    assert!(terminated(&t).is_empty());
    let t = Loop::new().turn(&i, Some(&c), at("2026-03-10T12:01:30Z"));
    assert_eq!(
        terminated(&t),
        ["i-1"],
        "terminated at the deadline: {:?}",
        kinds(&t)
    );
}

#[test]
fn a_notice_about_another_clusters_instance_is_left_unless_the_queue_is_owned() {
    let (i, mut c) = on_spot(json!({}));
    c.view.notices = vec![message(
        "m1",
        NoticeKind::SpotInterruptionWarning,
        "i-foreign",
        "2026-03-10T11:59:30Z",
        false,
    )];
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert!(deleted(&t).is_empty(), "{:?}", kinds(&t));
    assert!(evictions(&t).is_empty() && terminated(&t).is_empty());
    // One the provider says is this cluster's, gone since: done, and deleted.
    c.view.gone.insert("i-foreign".into());
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert_eq!(deleted(&t), ["m1"]);
    assert!(evictions(&t).is_empty() && terminated(&t).is_empty());
    c.view.gone.clear();
    c.view.notices[0].queue.owned = true;
    let t = Loop::new().turn(&i, Some(&c), noon());
    assert_eq!(deleted(&t), ["m1"]);
    // Garbage in an owned queue goes too; in another, it stays.
    c.view.notices[0].notices = Err("not an EventBridge event".into());
    assert_eq!(deleted(&Loop::new().turn(&i, Some(&c), noon())), ["m1"]);
    c.view.notices[0].queue.owned = false;
    assert!(deleted(&Loop::new().turn(&i, Some(&c), noon())).is_empty());
    // Before every region is listed, nothing is decided.
    c.view.complete = false;
    c.view.notices[0].queue.owned = true;
    assert!(deleted(&Loop::new().turn(&i, Some(&c), noon())).is_empty());
}

#[test]
fn a_warned_instance_that_has_not_joined_is_terminated_at_once() {
    let (mut i, mut c) = on_spot(json!({}));
    i.nodes.clear();
    i.pods.clear();
    i.jobs = vec![job("train").restartable().build()];
    c.view.notices = vec![message(
        "m1",
        NoticeKind::SpotInterruptionWarning,
        "i-1",
        "2026-03-10T11:59:30Z",
        false,
    )];
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    assert_eq!(terminated(&t), ["i-1"], "{:?}", kinds(&t));
    assert!(deleted(&t).is_empty());
    c.view.terminating.insert("i-1".into());
    assert_eq!(deleted(&l.turn(&i, Some(&c), noon())), ["m1"]);
}

#[test]
fn a_rebalance_recommendation_cordons_or_is_ignored_as_the_pool_says() {
    for (mode, marks) in [("Cordon", true), ("Ignore", false)] {
        let (i, mut c) = on_spot(json!({"rebalance": mode}));
        c.view.notices = vec![message(
            "m1",
            NoticeKind::RebalanceRecommendation,
            "i-1",
            "2026-03-10T11:59:30Z",
            false,
        )];
        let t = Loop::new().turn(&i, Some(&c), noon());
        let marked: Vec<_> = t
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::MarkNode {
                    value, annotations, ..
                } => Some((value.clone(), annotations.len())),
                _ => None,
            })
            .collect();
        assert_eq!(!marked.is_empty(), marks, "{mode}: {:?}", kinds(&t));
        if marks {
            assert_eq!(marked, [("rebalance-recommendation".to_string(), 0)]);
        }
        assert!(evictions(&t).is_empty(), "{mode}: its job runs on");
        assert_eq!(deleted(&t).is_empty(), marks, "{mode}");
    }
}

#[test]
fn with_replace_a_restartable_job_moves_at_its_next_checkpoint_or_the_deadline() {
    let (mut i, mut c) = on_spot(json!({"rebalance": "Replace", "rebalanceDeadline": "20m"}));
    c.view.notices = vec![message(
        "m1",
        NoticeKind::RebalanceRecommendation,
        "i-1",
        "2026-03-10T11:59:30Z",
        false,
    )];
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    let annotated = t.actions.iter().any(|a| {
        matches!(a, Action::MarkNode { annotations, .. }
            if annotations.get(REBALANCE_AT_ANNOTATION).map(String::as_str) == Some("2026-03-10T11:59:30Z"))
    });
    assert!(annotated, "{:?}", kinds(&t));
    i.nodes = vec![marked(
        &i.nodes[0],
        "rebalance-recommendation",
        json!({REBALANCE_AT_ANNOTATION: "2026-03-10T11:59:30Z"}),
    )];
    // Marked, no checkpoint since: it runs on, and the message is done.
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    assert!(evictions(&t).is_empty(), "{:?}", kinds(&t));
    assert_eq!(deleted(&t), ["m1"]);
    c.view.notices.clear();
    // A checkpoint announced after the recommendation: it moves, with its own grace period.
    let mut j = (*i.jobs[0]).clone();
    j.metadata.annotations = Some(
        [(
            spillway_api::job::CHECKPOINT_ANNOTATION.to_string(),
            "2026-03-10T12:02:00Z".to_string(),
        )]
        .into(),
    );
    let checkpointed = Arc::new(j);
    let before = i.jobs[0].clone();
    i.jobs = vec![checkpointed];
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    assert_eq!(evictions(&t), [("train-0-0".to_string(), 600)]);
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("status");
    let (_, reason, message) = condition(&st, "Interrupted").expect("Interrupted");
    assert_eq!(reason, "RebalanceRecommendation");
    assert!(message.contains("announced a checkpoint"), "{message}");
    // Without one, it moves once the deadline passes.
    let mut l = Loop::new();
    i.jobs = vec![before];
    assert!(evictions(&l.turn(&i, Some(&c), noon() + minutes(19))).is_empty());
    let t = l.turn(&i, Some(&c), noon() + minutes(20));
    assert_eq!(evictions(&t).len(), 1, "{:?}", kinds(&t));
}
