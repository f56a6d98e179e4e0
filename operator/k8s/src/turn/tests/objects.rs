//! Every kind reports its own validity: `Ready`, a Warning Event when it turns invalid, and
//! invalid objects left out of decisions, visibly.

use serde_json::json;

use super::fixtures::*;
use crate::actions::StatusKind;
use crate::world::Unreadable;

fn ready(t: &crate::turn::Turn, kind: StatusKind, name: &str) -> (String, String, String) {
    let st = status_of(t, kind, name).unwrap_or_else(|| panic!("no status for {name}"));
    condition(&st, "Ready").unwrap_or_else(|| panic!("no Ready on {name}: {st}"))
}

#[test]
fn an_invalid_queue_is_not_ready_warns_once_and_its_jobs_wait_saying_why() {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "15 parsecs"}}),
    )];
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let (status, reason, message) = ready(&t, StatusKind::GpuQueue, "q");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
    assert!(message.starts_with("spec.burst.maxWait:"), "{message}");
    assert!(events(&t).contains(&("q".into(), "Invalid".into(), true)));
    assert!(creates(&t).is_empty(), "left out of decisions");
    let job = status_of(&t, StatusKind::GpuJob, "train").expect("job");
    assert_eq!(job["decision"]["reason"], "QueueInvalid");
    assert!(
        job["decision"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("spec.burst.maxWait"),
        "{job}"
    );
    // Nothing is written or published again while nothing changes.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(t.actions.is_empty(), "{:?}", kinds(&t));
    assert!(
        l.metrics
            .render()
            .contains(r#"spillway_invalid_objects{kind="GpuQueue"} 1"#)
    );

    // Fixed: Ready, a Normal Event, and the job starts.
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "15m"}}),
    )];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(ready(&t, StatusKind::GpuQueue, "q").0, "True");
    assert!(events(&t).contains(&("q".into(), "Valid".into(), false)));
    assert_eq!(creates(&t).len(), 1);
}

#[test]
fn an_invalid_pool_is_not_ready_and_its_nodes_take_no_work() {
    let mut i = cluster();
    i.pools = vec![crate::turn::tests::fixtures::private_pool("onprem"), {
        let bad: spillway_api::ComputePool = serde_json::from_value(json!({
            "metadata": {"name": "everything"},
            "spec": {"private": {"nodeSelector": {}}}}))
        .expect("parses");
        std::sync::Arc::new(bad)
    }];
    let t = Loop::new().turn(&i, None, noon());
    let (status, reason, message) = ready(&t, StatusKind::ComputePool, "everything");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
    assert!(message.contains("spec.private.nodeSelector"), "{message}");
    assert!(events(&t).contains(&("everything".into(), "Invalid".into(), true)));
    assert_eq!(ready(&t, StatusKind::ComputePool, "onprem").0, "True");
}

#[test]
fn an_invalid_dataset_is_not_ready_and_its_readers_wait() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    i.datasets = vec![dataset(
        "imagenet",
        json!({"classification": "Public", "locations": [{"environment": "aws"}]}),
    )];
    i.jobs = vec![job("train").datasets(&["imagenet"]).build()];
    let t = Loop::new().turn(&i, None, noon());
    let (status, _, message) = ready(&t, StatusKind::Dataset, "imagenet");
    assert_eq!(status, "False");
    assert!(message.contains("spec.locations[0].region"), "{message}");
    assert!(events(&t).contains(&("imagenet".into(), "Invalid".into(), true)));
    let job = status_of(&t, StatusKind::GpuJob, "train").expect("job");
    assert_eq!(job["decision"]["reason"], "DatasetInvalid");
    assert!(creates(&t).is_empty());
}

#[test]
fn a_policy_whose_cel_does_not_compile_names_the_rule_and_column_and_the_rest_apply() {
    let mut i = cluster();
    i.policies = vec![
        policy(
            "broken",
            json!([{"name": "big-jobs", "when": "job.totalGpus >", "forbid": "cloud"}]),
        ),
        policy("fine", json!([{"name": "all", "forbid": "cloud"}])),
    ];
    let t = Loop::new().turn(&i, None, noon());
    let (status, reason, message) = ready(&t, StatusKind::BurstPolicy, "broken");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
    assert!(
        message.starts_with("spec.rules[0].when (rule \"big-jobs\", column "),
        "{message}"
    );
    assert!(events(&t).contains(&("broken".into(), "Invalid".into(), true)));
    let fine = status_of(&t, StatusKind::BurstPolicy, "fine").expect("fine");
    assert_eq!(condition(&fine, "Ready").expect("Ready").0, "True");
    assert_eq!(fine["rules"], 1);
}

#[test]
fn an_object_that_cannot_be_read_is_reported_once_per_kind() {
    let mut i = cluster();
    for kind in [
        "GpuQueue",
        "ComputePool",
        "Dataset",
        "BurstPolicy",
        "GpuJob",
    ] {
        i.unreadable.push(Unreadable {
            kind,
            namespace: (kind == "GpuJob").then(|| NS.to_string()),
            name: format!("bad-{}", kind.to_lowercase()),
            uid: None,
            generation: Some(1),
            error: "spec.weight: invalid type: string \"heavy\", expected i32".into(),
        });
    }
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    for (kind, name) in [
        (StatusKind::GpuQueue, "bad-gpuqueue"),
        (StatusKind::ComputePool, "bad-computepool"),
        (StatusKind::Dataset, "bad-dataset"),
        (StatusKind::BurstPolicy, "bad-burstpolicy"),
    ] {
        let (status, reason, message) = ready(&t, kind, name);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
        assert!(message.contains("cannot be read"), "{message}");
        assert!(events(&t).contains(&(name.into(), "Invalid".into(), true)));
    }
    let job = status_of(&t, StatusKind::GpuJob, "bad-gpujob").expect("job");
    assert_eq!(condition(&job, "Invalid").expect("Invalid").0, "True");
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(t.actions.is_empty(), "reported once: {:?}", kinds(&t));
}

#[test]
fn jobs_of_an_unreadable_queue_say_it_is_invalid_not_missing() {
    let mut i = cluster();
    i.queues.clear();
    i.unreadable.push(Unreadable {
        kind: "GpuQueue",
        namespace: None,
        name: "q".into(),
        uid: None,
        generation: Some(1),
        error: "bad".into(),
    });
    i.jobs = vec![job("train").build()];
    let t = Loop::new().turn(&i, None, noon());
    let job = status_of(&t, StatusKind::GpuJob, "train").expect("job");
    assert_eq!(job["decision"]["reason"], "QueueInvalid");
}

/// The queue's counts and the jobs' gauges: every job counted by queue and phase (a queue that
/// does not exist as `-`), and the GPUs of running jobs by queue and environment.
#[test]
fn jobs_and_their_gpus_are_counted_by_queue_phase_and_environment() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut lost = job("lost");
    lost.0["spec"]["queue"] = json!("nope");
    i.jobs = vec![
        job("one").gpus(2).build(),
        job("two").gpus(3).build(),
        job("huge").gpus(16).build(),
        lost.build(),
    ];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("the queue's status");
    assert_eq!(
        (&q["pending"], &q["running"]),
        (&json!(1), &json!(2)),
        "{q}"
    );
    assert_eq!(q["gpusInUse"], json!({"private": 5, "cloud": 0}), "{q}");
    let shown = l.metrics.render();
    for line in [
        r#"spillway_jobs{queue="q",phase="Running"} 2"#,
        r#"spillway_jobs{queue="q",phase="Queued"} 1"#,
        r#"spillway_jobs{queue="-",phase="Queued"} 1"#,
        r#"spillway_queue_gpus_in_use{queue="q",environment="private"} 5"#,
    ] {
        assert!(shown.contains(line), "{line} not in\n{shown}");
    }
    assert!(!shown.contains(r#"environment="cloud""#), "{shown}");
}
