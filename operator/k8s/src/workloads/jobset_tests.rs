use serde_json::json;

use super::tests::{merge, patch_of};
use super::*;

/// A JobSet with a launcher (no GPUs) and `workers` replicated jobs of 2 pods of 8 GPUs.
fn jobset(workers: i64, extra: serde_json::Value) -> DynamicObject {
    let pod = |gpus: Option<&str>| {
        let limits = gpus.map_or(json!({}), |g| json!({"nvidia.com/gpu": g}));
        json!({"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": limits}}]}})
    };
    let mut base = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml", "uid": "js-uid",
                     "resourceVersion": "42", "labels": {"spillway.io/queue": "research"}},
        "spec": {"suspend": true, "replicatedJobs": [
            {"name": "launcher", "replicas": 1,
             "template": {"spec": {"template": pod(None)}}},
            {"name": "workers", "replicas": workers,
             "template": {"spec": {"parallelism": 2, "completions": 2, "template": pod(Some("8"))}}},
        ]},
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("a JobSet")
}

#[test]
fn a_jobsets_gang_is_its_gpu_pods_and_its_launcher_is_not_counted() {
    let w = jobset(3, json!({}));
    let gj = gpu_job_for(&JobSet, &w).expect("a GpuJob");
    assert_eq!(gj.metadata.name.as_deref(), Some("jobset-train"));
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (6, 8));
    let r = gj.spec.workload_ref.as_ref().unwrap();
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str()),
        ("jobset.x-k8s.io/v1alpha2", "JobSet")
    );
    assert!(stands_for(&JobSet, &gj, &w));
    assert_eq!(
        kind_of(&w).map(|k| k.integration()),
        Some("jobset.x-k8s.io/jobset")
    );

    // Replicated jobs of different GPUs per pod are refused by name.
    let mut mixed = json!(w.clone());
    mixed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "1"}});
    let mixed: DynamicObject = serde_json::from_value(mixed).unwrap();
    let e = JobSet.shape(&mixed).unwrap_err();
    assert!(
        e.contains("spec.replicatedJobs[1] (workers)") && e.contains("launcher"),
        "{e}"
    );
    // No GPU anywhere, or no replicated job: refused.
    let mut none = json!(w.clone());
    none["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({});
    let none: DynamicObject = serde_json::from_value(none).unwrap();
    assert!(JobSet.shape(&none).unwrap_err().contains("nvidia.com/gpu"));
    let empty = jobset(1, json!({"spec": {"replicatedJobs": []}}));
    assert!(JobSet.shape(&empty).unwrap_err().contains("has none"));
}

#[test]
fn running_a_jobset_gates_its_gpu_pods_with_their_nodes_and_leaves_the_launcher() {
    let w = jobset(1, json!({}));
    let mut gj = gpu_job_for(&JobSet, &w).unwrap();
    gj.metadata.uid = Some("gj-uid".into());
    let pool: ComputePool = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
        "metadata": {"name": "burst"},
        "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["p4d.24xlarge"]},
                 "nodeTaints": [{"key": "spillway.io/burst", "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let nodes = ["n2".to_string(), "n1".to_string(), "n2".to_string()];
    let placement = Placement {
        job: &gj,
        attempt: 2,
        pool: Some(&pool),
        nodes: &nodes,
    };
    let patch = patch_of(&w, JobSet.run(&w, &placement).unwrap());
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    assert_eq!(patch["spec"]["suspend"], json!(false));
    let list = patch["spec"]["replicatedJobs"].as_array().unwrap();
    assert_eq!(list.len(), 2, "the whole list is written");
    assert_eq!(
        list[0], w.data["spec"]["replicatedJobs"][0],
        "the launcher is as it was"
    );
    let t = &list[1]["template"]["spec"]["template"];
    assert_eq!(t["metadata"]["labels"]["spillway.io/job-uid"], "gj-uid");
    assert_eq!(t["metadata"]["labels"]["spillway.io/attempt"], "2");
    assert_eq!(t["metadata"]["annotations"][NODES_ANNOTATION], "n1,n2");
    assert_eq!(
        t["spec"]["schedulingGates"],
        json!([{"name": PLACEMENT_GATE}])
    );
    assert_eq!(t["spec"]["tolerations"][0]["key"], "spillway.io/burst");
    assert!(
        t["spec"].get("affinity").is_none(),
        "no affinity: the JobSet controller would not carry it over"
    );

    let mut placed = json!(w.clone());
    merge(&mut placed, patch.clone());
    let placed: DynamicObject = serde_json::from_value(placed).unwrap();
    assert_eq!(JobSet.placed_attempt(&placed, "gj-uid"), Some(2));
    assert_eq!(JobSet.placed_attempt(&w, "gj-uid"), None);
    // Placed again (another attempt), the gate is not doubled.
    let again = JobSet.run(
        &placed,
        &Placement {
            attempt: 3,
            ..placement
        },
    );
    let again = patch_of(&placed, again.unwrap());
    let t = &again["spec"]["replicatedJobs"][1]["template"]["spec"]["template"];
    assert_eq!(t["spec"]["schedulingGates"].as_array().unwrap().len(), 1);
    assert_eq!(t["metadata"]["labels"]["spillway.io/attempt"], "3");
}

#[test]
fn a_jobset_runs_once_its_controller_has_suspended_it_and_ends_as_it_says() {
    let fresh = jobset(1, json!({}));
    assert!(JobSet.ready_to_run(&fresh), "never ran: no condition yet");
    // Made running, then held: until its controller has suspended its Jobs (it adds the
    // condition only as True), a Job with a pod means it is not ready.
    let running = jobset(
        1,
        json!({"status": {"replicatedJobsStatus": [
        {"name": "launcher", "active": 0}, {"name": "workers", "active": 1}]}}),
    );
    assert!(!JobSet.ready_to_run(&running));
    let idle = jobset(
        1,
        json!({"status": {"replicatedJobsStatus": [
        {"name": "launcher", "active": 0}, {"name": "workers", "active": 0, "suspended": 1}]}}),
    );
    assert!(JobSet.ready_to_run(&idle));
    let suspending = jobset(
        1,
        json!({"status": {"conditions": [
        {"type": "Suspended", "status": "False", "reason": "ResumeJobs"}]}}),
    );
    assert!(JobSet.suspended(&suspending) && !JobSet.ready_to_run(&suspending));
    let suspended = jobset(
        1,
        json!({"status": {"conditions": [
        {"type": "Suspended", "status": "True", "reason": "SuspendedJobs"}]}}),
    );
    assert!(JobSet.ready_to_run(&suspended));
    assert_eq!(JobSet.finished(&suspended), None);

    let done = jobset(
        1,
        json!({"status": {"conditions": [
        {"type": "Completed", "status": "True", "lastTransitionTime": "2026-12-06T04:00:00Z"}]}}),
    );
    let f = JobSet.finished(&done).unwrap();
    assert!(f.succeeded());
    assert_eq!(f.at.as_deref(), Some("2026-12-06T04:00:00Z"));
    let failed = jobset(
        1,
        json!({"status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed due to reaching max number of restarts"}]}}),
    );
    let f = JobSet.finished(&failed).unwrap();
    assert!(
        !f.succeeded() && f.message.starts_with("FailedJobs:"),
        "{f:?}"
    );
    assert_eq!(
        patch_of(&failed, JobSet.suspend(&failed)),
        json!({"spec": {"suspend": true}})
    );
}
