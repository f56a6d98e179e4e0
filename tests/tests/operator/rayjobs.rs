//! Labelled RayJobs through the real KubeRay operator (built from its Go module): held, run
//! with their GPU workers pinned to the nodes Spillway chose, and their GpuJob collected with
//! them. No Ray runs here: the cluster's pods run on the fake kubelet, and its job is never
//! submitted, so the test stops at a running gang.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kuberay::{KubeRayOperator, ray_jobs};
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// A RayJob labelled with `queue`, held: a head asking no GPU and `workers` workers of 8 GPUs.
fn ray_job(name: &str, queue: &str, workers: u32) -> DynamicObject {
    let template = |limits: serde_json::Value| {
        json!({"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0",
                                        "resources": {"limits": limits}}]}})
    };
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "labels": {"spillway.io/queue": queue},
                     "annotations": {"spillway.io/estimatedRuntime": "20m"}},
        "spec": {
            "suspend": true,
            "shutdownAfterJobFinishes": true,
            "entrypoint": "python sweep.py",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": template(json!({}))},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers,
                                      "minReplicas": workers, "maxReplicas": workers,
                                      "rayStartParams": {},
                                      "template": template(json!({"nvidia.com/gpu": "8"}))}],
            },
        },
    }))
    .expect("a RayJob")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_ray_job_runs_its_gpu_workers_where_spillway_placed_them() {
    let _turn = serial().await;
    KubeRayOperator::shared().await;
    let w = World::new("op-rayjob").await;
    w.nodes(2, 8, Some("H100")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let api: Api<DynamicObject> = Api::namespaced_with(w.client.clone(), &w.ns, &ray_jobs());
    api.create(&PostParams::default(), &ray_job("sweep", &w.queue, 2))
        .await
        .expect("create the RayJob");

    // Its GpuJob stands for it: the two GPU workers (the head asks for none).
    let gj = w.wait_phase("rayjob-sweep", JobPhase::Running).await;
    let r = gj.spec.workload_ref.clone().expect("workloadRef");
    assert_eq!((r.kind.as_str(), r.name.as_str()), ("RayJob", "sweep"));
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 8));

    // KubeRay made its cluster from the placed templates: the workers run on the chosen nodes,
    // one each, and count as the job's pods.
    let running = w.wait_pods_running("rayjob-sweep", 2).await;
    let gj = w.jobs().get("rayjob-sweep").await.expect("the GpuJob");
    let chosen: BTreeSet<String> = gj.status.unwrap_or_default().nodes.into_iter().collect();
    let on: BTreeSet<String> = (running.iter())
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(on, chosen);
    for p in &running {
        assert_eq!(p.owner_references()[0].kind, "RayCluster");
        let cluster = p
            .labels()
            .get("ray.io/cluster")
            .cloned()
            .unwrap_or_default();
        assert!(cluster.starts_with("sweep-"), "{cluster}");
    }
    // Resumed (KubeRay writes the RayJob back without a false `suspend`).
    let rj = api.get("sweep").await.expect("the RayJob");
    assert_ne!(rj.data["spec"]["suspend"], json!(true));

    // Deleting the RayJob deletes its GpuJob, and its cluster's pods go.
    api.delete("sweep", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually(WAIT, "the GpuJob to go with its RayJob", || async {
        match w.jobs().get_opt("rayjob-sweep").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|j| j.map(|j| j.name_any())))),
        }
    })
    .await;
    eventually(WAIT, "the cluster's pods to go", || async {
        let left = Api::<Pod>::namespaced(w.client.clone(), &w.ns)
            .list(&ListParams::default().labels("ray.io/node-type"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        (left == 0).then_some(()).ok_or(format!("{left} left"))
    })
    .await;
    op.stop().await.expect("stop");
}
