//! The fields behind quota reclaim and repatriation, as the core sees them.

use serde_json::json;
use spillway_api::{GpuJob, GpuQueue, convert, validate};
use spillway_core::{Duration, Time};

fn job(annotations: serde_json::Value, spec: serde_json::Value) -> GpuJob {
    let mut s = json!({"queue": "research", "gpusPerReplica": 1, "restartable": true,
                       "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}}});
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        s[k] = v;
    }
    serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": "ml", "annotations": annotations},
        "spec": s,
    }))
    .expect("job JSON")
}

#[test]
fn an_announced_checkpoint_and_the_interval_reach_the_core() {
    let j = job(
        json!({"spillway.io/checkpoint-time": "2026-03-10T11:30:00Z"}),
        json!({"checkpointInterval": "20m"}),
    );
    let c = convert::job(&j, Time::from_millis(0)).expect("valid");
    assert_eq!(
        c.checkpointed_at,
        Some(Time::from_millis(
            "2026-03-10T11:30:00Z"
                .parse::<k8s_openapi::jiff::Timestamp>()
                .unwrap()
                .as_millisecond()
        ))
    );
    assert_eq!(c.checkpoint_interval, Some(Duration::from_secs(1200)));
    // An annotation that is not a time counts as no announcement.
    let j = job(
        json!({"spillway.io/checkpoint-time": "yesterday"}),
        json!({}),
    );
    assert_eq!(convert::checkpoint_time(&j), None);
}

#[test]
fn a_bad_checkpoint_interval_or_grace_period_names_its_field() {
    let j = job(json!({}), json!({"checkpointInterval": "often"}));
    let err = validate::gpu_job(&j.spec).expect_err("invalid").to_string();
    assert!(err.contains("spec.checkpointInterval"), "{err}");
    let q: GpuQueue = serde_json::from_value(json!({
        "metadata": {"name": "q"},
        "spec": {"preemption": {"allowNonRestartable": true, "maxGracePeriod": "soon"}},
    }))
    .expect("queue JSON");
    let err = validate::gpu_queue(&q.spec)
        .expect_err("invalid")
        .to_string();
    assert!(err.contains("spec.preemption.maxGracePeriod"), "{err}");
    let q: GpuQueue = serde_json::from_value(json!({
        "metadata": {"name": "q"},
        "spec": {"preemption": {"allowNonRestartable": true, "maxGracePeriod": "2m"}},
    }))
    .expect("queue JSON");
    assert!(convert::queue(&q).expect("valid").preempt_non_restartable);
}

#[test]
fn a_queues_minimum_runtime_is_read_and_a_bad_one_names_its_field() {
    let queue = |p: serde_json::Value| -> GpuQueue {
        serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"preemption": p}}))
            .expect("queue JSON")
    };
    let q = queue(json!({"minRuntime": "10m"}));
    assert_eq!(
        convert::queue(&q).expect("valid").min_runtime,
        spillway_core::Duration::from_secs(600)
    );
    let q = queue(json!({}));
    assert_eq!(
        convert::queue(&q).expect("valid").min_runtime,
        spillway_core::Duration::ZERO
    );
    let err = validate::gpu_queue(&queue(json!({"minRuntime": "a while"})).spec)
        .expect_err("invalid")
        .to_string();
    assert!(err.contains("spec.preemption.minRuntime"), "{err}");
}
