use serde_json::json;

use super::tests::{merge, patch_of};
use super::train_job::MANAGER;
use super::*;

/// A TrainJob of `nodes` trainer nodes of 8 GPUs, with a user's runtime patch.
fn train_job(extra: serde_json::Value) -> DynamicObject {
    let mut base = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": "ml", "uid": "tj-uid",
                     "resourceVersion": "7", "labels": {"spillway.io/queue": "research"}},
        "spec": {"suspend": true, "runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
                 "runtimePatches": [{"manager": "example.com/user", "trainingRuntimeSpec": {
                     "template": {"metadata": {"labels": {"team": "nlp"}}}}}]},
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("a TrainJob")
}

#[test]
fn a_train_jobs_gang_is_its_trainer_nodes_read_from_the_train_job() {
    let w = train_job(json!({}));
    assert_eq!(
        TrainJob.shape(&w).unwrap(),
        Shape {
            replicas: 2,
            gpus_per_replica: 8
        }
    );
    let gj = gpu_job_for(&TrainJob, &w).unwrap();
    assert_eq!(gj.metadata.name.as_deref(), Some("trainjob-tune"));
    assert!(stands_for(&TrainJob, &gj, &w));
    assert_eq!(
        by_integration("trainer.kubeflow.org/trainjob").map(|k| k.kind()),
        Some("TrainJob")
    );
    let left_to_runtime = train_job(json!({"spec": {"trainer": {"numNodes": null}}}));
    assert!(
        TrainJob
            .shape(&left_to_runtime)
            .unwrap_err()
            .contains("numNodes")
    );
    let cpu = train_job(json!({"spec": {"trainer": {"resourcesPerNode": null}}}));
    assert!(TrainJob.shape(&cpu).unwrap_err().contains("nvidia.com/gpu"));
}

#[test]
fn a_train_job_is_run_in_two_writes_its_placement_then_its_resumption() {
    let w = train_job(json!({}));
    let mut gj = gpu_job_for(&TrainJob, &w).unwrap();
    gj.metadata.uid = Some("gj-uid".into());
    let nodes = ["n1".to_string(), "n2".to_string()];
    let placement = Placement {
        job: &gj,
        attempt: 1,
        pool: None,
        nodes: &nodes,
    };
    assert!(TrainJob.ready_to_run(&w));
    // First: Spillway's entry, beside the user's, with the TrainJob still suspended, written
    // over the version read.
    let first = patch_of(&w, TrainJob.run(&w, &placement).unwrap());
    assert_eq!(first["spec"]["suspend"], json!(true));
    assert_eq!(first["metadata"]["resourceVersion"], "7");
    let list = first["spec"]["runtimePatches"].as_array().unwrap();
    let managers: Vec<_> = list
        .iter()
        .map(|p| p["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["example.com/user", MANAGER]);
    let node = &list[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(node["name"], "node");
    let template = &node["template"]["spec"]["template"];
    assert_eq!(
        template["metadata"]["annotations"][NODES_ANNOTATION],
        "n1,n2"
    );
    assert_eq!(
        template["metadata"]["labels"]["spillway.io/job-uid"],
        "gj-uid"
    );
    assert_eq!(
        template["spec"]["schedulingGates"],
        json!([{"name": PLACEMENT_GATE}])
    );

    // Once it is in: the run is partly done, and the second write lifts the suspension.
    let mut placed = json!(w.clone());
    merge(&mut placed, first);
    placed["metadata"]["resourceVersion"] = json!("8");
    let placed: DynamicObject = serde_json::from_value(placed).unwrap();
    assert_eq!(TrainJob.placed_attempt(&placed, "gj-uid"), Some(1));
    assert!(TrainJob.partly_run(&placed) && !TrainJob.partly_run(&w));
    assert_eq!(
        patch_of(&placed, TrainJob.run(&placed, &placement).unwrap()),
        json!({"spec": {"suspend": false}})
    );
    // Placed elsewhere (another decision): the entry is written again first.
    let other = ["n3".to_string(), "n4".to_string()];
    let moved = Placement {
        nodes: &other,
        ..placement
    };
    let again = patch_of(&placed, TrainJob.run(&placed, &moved).unwrap());
    assert_eq!(again["spec"]["suspend"], json!(true));
}

#[test]
fn a_train_job_is_run_once_the_trainer_has_suspended_it_and_ends_as_it_says() {
    let suspending = train_job(json!({"status": {"conditions": [
        {"type": "Suspended", "status": "False", "reason": "Resumed"}]}}));
    assert!(!TrainJob.ready_to_run(&suspending));
    let suspended = train_job(json!({"status": {"conditions": [
        {"type": "Suspended", "status": "True", "reason": "Suspended"}]}}));
    assert!(TrainJob.ready_to_run(&suspended));
    let done = train_job(json!({"status": {"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-06T10:00:00Z"}]}}));
    assert!(TrainJob.finished(&done).unwrap().succeeded());
    let failed = train_job(json!({"status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "late"}]}}));
    assert!(!TrainJob.finished(&failed).unwrap().succeeded());
    assert_eq!(
        patch_of(&failed, TrainJob.suspend(&failed)),
        json!({"spec": {"suspend": true}})
    );
}
