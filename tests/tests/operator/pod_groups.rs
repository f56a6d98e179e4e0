//! Labelled plain pods in a group: made held by the webhook, queued once the group is
//! complete, started together where their GpuJob was placed, and their GpuJob collected with
//! the last of them.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// Pod `i` of group `group` (of 2), labelled with `queue`, asking for 8 GPUs for `seconds`.
fn member(group: &str, i: u32, queue: &str, seconds: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{group}-{i}"),
                     "labels": {"spillway.io/queue": queue, "spillway.io/pod-group": group,
                                "spillway.io/pod-group-size": "2"},
                     "annotations": {RUN_SECONDS: seconds.to_string(),
                                     "spillway.io/estimatedRuntime": "5m"}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer",
             "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    }))
    .expect("a Pod")
}

fn gated(p: &Pod) -> bool {
    (p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()))
        .is_some_and(|g| g.iter().any(|g| g.name == "spillway.io/placement"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_group_starts_together_once_complete_and_its_gpu_job_goes_with_its_pods() {
    let _turn = serial().await;
    let w = World::new("op-pod-group").await;
    let nodes = w.nodes(2, 8, Some("A100-80GB")).await;
    let client = w.client.clone();
    let (op, name) = w
        .operator_with_mutating_webhooks(&["hold-pod", "inject"], "pods")
        .await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &w.ns);

    // The first pod of a group is stored gated (until the webhook is trusted, the API server
    // ignores it: such a pod is deleted and its group made again under another name).
    let mut attempt = 0;
    let group = eventually(WAIT, "a labelled pod stored gated", || {
        attempt += 1;
        let group = format!("g{attempt}");
        let (pods, queue) = (pods.clone(), w.queue.clone());
        async move {
            let made = pods
                .create(&PostParams::default(), &member(&group, 0, &queue, 6))
                .await
                .map_err(|e| e.to_string())?;
            if gated(&made) {
                return Ok(group);
            }
            let _ = pods
                .delete(&made.name_any(), &DeleteParams::default())
                .await;
            Err(format!("{} was stored without the gate", made.name_any()))
        }
    })
    .await;
    let job = format!("pod-{group}");

    // Half a group: no GpuJob, and its pod waits at the gate, unbound.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(w.jobs().get_opt(&job).await.expect("get").is_none());
    let first = pods.get(&format!("{group}-0")).await.expect("the pod");
    assert!(gated(&first), "{:?}", first.spec);
    assert!(
        first
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none()
    );

    // Complete: both start together, one per node (8 GPUs each), where the GpuJob says.
    pods.create(&PostParams::default(), &member(&group, 1, &w.queue, 6))
        .await
        .expect("the second pod");
    let gj = w.wait_phase(&job, JobPhase::Running).await;
    let r = gj.spec.workload_ref.clone().expect("workloadRef");
    assert_eq!((r.kind.as_str(), r.name.as_str()), ("Pod", group.as_str()));
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 8));
    assert_eq!(gj.spec.estimated_runtime.as_deref(), Some("5m"));
    let running = w.wait_pods_running(&job, 2).await;
    let mut on: Vec<String> = (running.iter())
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    on.sort();
    let mut want = nodes.clone();
    want.sort();
    assert_eq!(on, want);
    assert!(running.iter().all(|p| !gated(p)));

    // They end; the GpuJob says so, and goes once its pods are deleted.
    let done = w.wait_phase(&job, JobPhase::Succeeded).await;
    assert!(done.status.unwrap_or_default().finished_at.is_some());
    let selector = format!("spillway.io/pod-group={group}");
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&selector),
    )
    .await
    .expect("delete the pods");
    eventually(WAIT, "the GpuJob to go with its pods", || async {
        match w.jobs().get_opt(&job).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|j| j.map(|j| j.name_any())))),
        }
    })
    .await;

    configs
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the configuration");
    op.stop().await.expect("stop");
}
