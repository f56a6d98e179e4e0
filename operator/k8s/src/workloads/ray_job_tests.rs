use serde_json::json;

use super::tests::{merge, patch_of};
use super::*;

/// A RayJob of a GPU-less head and one worker group of 2 replicas x 2 hosts of 4 GPUs.
fn ray_job(extra: serde_json::Value) -> DynamicObject {
    let template = |limits: serde_json::Value| {
        json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray",
                                        "resources": {"limits": limits}}]}})
    };
    let mut base = json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "sweep", "namespace": "ml", "uid": "rj-uid",
                     "resourceVersion": "3", "labels": {"spillway.io/queue": "research"}},
        "spec": {"suspend": true, "shutdownAfterJobFinishes": true, "entrypoint": "python sweep.py",
                 "rayClusterSpec": {
                     "headGroupSpec": {"rayStartParams": {}, "template": template(json!({}))},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "numOfHosts": 2,
                                           "minReplicas": 0, "maxReplicas": 4, "rayStartParams": {},
                                           "template": template(json!({"nvidia.com/gpu": "4"}))}]}},
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("a RayJob")
}

#[test]
fn a_ray_jobs_gang_is_its_gpu_pods_and_a_gpu_less_head_is_not_counted() {
    let w = ray_job(json!({}));
    assert_eq!(
        RayJob.shape(&w).unwrap(),
        Shape {
            replicas: 4,
            gpus_per_replica: 4
        }
    );
    let gj = gpu_job_for(&RayJob, &w).unwrap();
    assert_eq!(gj.metadata.name.as_deref(), Some("rayjob-sweep"));
    assert_eq!(
        by_integration("ray.io/rayjob").map(|k| k.kind()),
        Some("RayJob")
    );
    // A head asking for the same GPUs is part of the gang.
    let gpu_head = ray_job(
        json!({"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {
        "containers": [{"name": "ray", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}}}),
    );
    assert_eq!(RayJob.shape(&gpu_head).unwrap().replicas, 5);
    let mixed = ray_job(
        json!({"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {
        "containers": [{"name": "ray", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}}}),
    );
    assert!(RayJob.shape(&mixed).unwrap_err().contains("one size"));
    let autoscaling =
        ray_job(json!({"spec": {"rayClusterSpec": {"enableInTreeAutoscaling": true}}}));
    assert!(
        RayJob
            .shape(&autoscaling)
            .unwrap_err()
            .contains("enableInTreeAutoscaling")
    );
    let kept = ray_job(json!({"spec": {"shutdownAfterJobFinishes": false}}));
    assert!(
        RayJob
            .shape(&kept)
            .unwrap_err()
            .contains("shutdownAfterJobFinishes")
    );
}

#[test]
fn running_a_ray_job_pins_its_gpu_pods_and_leaves_its_head() {
    let w = ray_job(json!({}));
    let mut gj = gpu_job_for(&RayJob, &w).unwrap();
    gj.metadata.uid = Some("gj-uid".into());
    let nodes = ["n1".to_string(), "n2".to_string()];
    let placement = Placement {
        job: &gj,
        attempt: 0,
        pool: None,
        nodes: &nodes,
    };
    assert!(RayJob.ready_to_run(&w));
    let patch = patch_of(&w, RayJob.run(&w, &placement).unwrap());
    assert_eq!(patch["spec"]["suspend"], json!(false));
    assert_eq!(patch["metadata"]["resourceVersion"], "3");
    let cluster = &patch["spec"]["rayClusterSpec"];
    let worker = &cluster["workerGroupSpecs"][0]["template"];
    assert_eq!(
        worker["metadata"]["labels"]["spillway.io/job-uid"],
        "gj-uid"
    );
    let terms = &worker["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(terms.as_array().map(Vec::len), Some(2), "{terms}");
    let head = &cluster["headGroupSpec"]["template"];
    assert!(head["metadata"].get("labels").is_none(), "{head}");
    assert!(head["spec"].get("affinity").is_none(), "{head}");
    // What the template then says.
    let mut placed = json!(w.clone());
    merge(&mut placed, patch);
    let placed: DynamicObject = serde_json::from_value(placed).unwrap();
    assert_eq!(RayJob.placed_attempt(&placed, "gj-uid"), Some(0));
    assert_eq!(RayJob.placed_attempt(&w, "gj-uid"), None);
}

#[test]
fn a_ray_job_is_run_once_kuberay_has_suspended_it_and_ends_as_it_says() {
    let status = |s: serde_json::Value| ray_job(json!({"status": s}));
    assert!(!RayJob.ready_to_run(&status(json!({"jobDeploymentStatus": "Suspending"}))));
    assert!(RayJob.ready_to_run(&status(json!({"jobDeploymentStatus": "Suspended"}))));
    let done = status(
        json!({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                             "endTime": "2026-12-06T10:00:00Z"}),
    );
    let f = RayJob.finished(&done).unwrap();
    assert!(f.succeeded() && f.at.as_deref() == Some("2026-12-06T10:00:00Z"));
    let failed = status(
        json!({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                               "reason": "AppFailed", "message": "exit 1"}),
    );
    let f = RayJob.finished(&failed).unwrap();
    assert!(!f.succeeded() && f.message.contains("AppFailed"), "{f:?}");
    assert!(
        RayJob
            .finished(&status(json!({"jobDeploymentStatus": "Running"})))
            .is_none()
    );
}

#[test]
fn a_ray_jobs_pods_are_its_clusters() {
    let pod = |cluster: &str, owner: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "labels": {"ray.io/cluster": cluster},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": owner, "name": cluster,
                                 "uid": "c", "controller": true}]}}),
        )
        .unwrap()
    };
    assert!(RayJob.controls_pod(&pod("sweep-x7k2p", "RayCluster"), "sweep"));
    assert!(!RayJob.controls_pod(&pod("sweep-x7k2p", "ReplicaSet"), "sweep"));
    // Another RayJob's, whose name starts the same.
    assert!(!RayJob.controls_pod(&pod("sweep-2-x7k2p", "RayCluster"), "sweep"));
    assert!(!RayJob.controls_pod(&pod("sweep", "RayCluster"), "sweep"));
}
