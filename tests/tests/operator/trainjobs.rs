//! Labelled Kubeflow TrainJobs through the real Trainer controller and the JobSet controller it
//! drives (both built from their Go modules, with their webhooks): held, placed through
//! Spillway's runtime patch, resumed, their trainer nodes pinned to the nodes Spillway chose,
//! and mirrored home when they end.

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::jobset::enable_namespace;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::trainer::{RUNTIME, TrainerController, train_jobs};
use spillway_tests::workload::WAIT;

use crate::jobsets::gang_runs_where_placed;
use crate::world::World;

/// A TrainJob labelled with `queue`, held: `nodes` trainer nodes of 8 GPUs, each running
/// `seconds` (set by a runtime patch of another manager, which Spillway's must leave alone).
fn train_job(name: &str, queue: &str, nodes: u32, seconds: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"spillway.io/queue": queue},
                     "annotations": {"spillway.io/estimatedRuntime": "30m"}},
        "spec": {
            "suspend": true,
            "runtimeRef": {"name": RUNTIME},
            "trainer": {"numNodes": nodes,
                        "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
            "runtimePatches": [{"manager": "example.com/tests", "trainingRuntimeSpec": {
                "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                    "template": {"metadata": {"annotations": {RUN_SECONDS: seconds.to_string()}}}}}}]}}}}],
        },
    }))
    .expect("a TrainJob")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_train_job_runs_its_trainer_nodes_where_spillway_placed_them() {
    let _turn = serial().await;
    TrainerController::shared().await;
    let w = World::new("op-trainjob").await;
    enable_namespace(&w.client, &w.ns).await.expect("label");
    w.nodes(2, 8, Some("H100")).await;
    // No Spillway webhook: the TrainJob is made held, and its pods are made gated with no one
    // to pin them as they are made but the operator.
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let api: Api<DynamicObject> = Api::namespaced_with(w.client.clone(), &w.ns, &train_jobs());
    api.create(&PostParams::default(), &train_job("tune", &w.queue, 2, 5))
        .await
        .expect("create the TrainJob");

    // Its GpuJob stands for it, of its trainer's shape; its two nodes run where placed.
    let gj = w.wait_phase("trainjob-tune", JobPhase::Running).await;
    let r = gj.spec.workload_ref.clone().expect("workloadRef");
    assert_eq!((r.kind.as_str(), r.name.as_str()), ("TrainJob", "tune"));
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 8));
    // Resumed once Spillway's runtime patch is in (said on failure: where the run stands).
    eventually(
        WAIT,
        "the TrainJob resumed with Spillway's runtime patch",
        || async {
            let tj = api.get("tune").await.map_err(|e| e.to_string())?;
            let spec = &tj.data["spec"];
            let ours = spec["runtimePatches"]
                .to_string()
                .contains("spillway.io/manager");
            (ours && spec["suspend"] != json!(true))
                .then_some(())
                .ok_or(format!(
                    "suspend {}, patches {}, status {}",
                    spec["suspend"], spec["runtimePatches"], tj.data["status"]
                ))
        },
    )
    .await;
    gang_runs_where_placed(&w, "trainjob-tune", 2).await;

    // Both runtime patches are there: the test's and Spillway's.
    let tj = api.get("tune").await.expect("the TrainJob");
    let managers: Vec<String> = (tj.data["spec"]["runtimePatches"].as_array().into_iter())
        .flatten()
        .filter_map(|p| p["manager"].as_str().map(str::to_string))
        .collect();
    assert_eq!(managers, ["example.com/tests", "spillway.io/manager"]);
    assert_eq!(tj.data["spec"]["suspend"], json!(false));

    // It completes as the Trainer says; the GpuJob follows.
    w.wait_phase("trainjob-tune", JobPhase::Succeeded).await;
    eventually(WAIT, "the TrainJob to complete", || async {
        let tj = api.get("tune").await.map_err(|e| e.to_string())?;
        let c = tj.data["status"]["conditions"].to_string();
        c.contains("\"Complete\"").then_some(()).ok_or(c)
    })
    .await;
    op.stop().await.expect("stop");
}
