//! Labelled JobSets through the real JobSet controller (built from its Go module, with its
//! webhooks): held, run with their gang's pods pinned to the nodes Spillway chose (by the
//! admission webhook as the pods are made, or by the operator when it was not called), and
//! mirrored home when they end.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::jobset::{JobSetController, enable_namespace};
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

fn jobsets(w: &World) -> Api<DynamicObject> {
    let r = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    Api::namespaced_with(w.client.clone(), &w.ns, &r)
}

/// A JobSet labelled with `queue`: a launcher pod asking no GPU, and `workers` Jobs of one pod
/// of 8 GPUs; every pod runs `seconds`.
fn jobset(name: &str, queue: &str, workers: u32, seconds: u32, suspend: bool) -> DynamicObject {
    let pod = |limits: serde_json::Value| {
        json!({"metadata": {"annotations": {RUN_SECONDS: seconds.to_string()}},
               "spec": {"restartPolicy": "Never", "containers": [
                   {"name": "main", "image": "trainer", "resources": {"limits": limits}}]}})
    };
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": {"spillway.io/queue": queue},
                     "annotations": {"spillway.io/estimatedRuntime": "10m"}},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [
                {"name": "launcher", "replicas": 1,
                 "template": {"spec": {"backoffLimit": 0, "template": pod(json!({}))}}},
                {"name": "workers", "replicas": workers,
                 "template": {"spec": {"backoffLimit": 0,
                                       "template": pod(json!({"nvidia.com/gpu": "8"}))}}},
            ],
        },
    }))
    .expect("a JobSet")
}

/// The nodes a pod is pinned to by its required node affinity on `metadata.name`.
fn pinned_to(p: &Pod) -> BTreeSet<String> {
    let spec = p.spec.clone().unwrap_or_default();
    let terms = spec
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .map(|r| r.node_selector_terms)
        .unwrap_or_default();
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .filter(|f| f.key == "metadata.name")
        .flat_map(|f| f.values.clone().unwrap_or_default())
        .collect()
}

/// Waits for the JobSet's gang to run, pinned to its GpuJob's nodes and ungated; returns them.
pub(crate) async fn gang_runs_where_placed(w: &World, job: &str, pods: usize) -> Vec<Pod> {
    let gj = w.wait_phase(job, JobPhase::Running).await;
    let running = w.wait_pods_running(job, pods).await;
    let gj = w.jobs().get(job).await.unwrap_or(gj);
    // The gang's pods share one template, so each is pinned to the set of nodes Spillway chose
    // for the gang; the scheduler may put two of them on one node of it where they fit, and the
    // status names the nodes they run on.
    let running_on: BTreeSet<String> = gj.status.unwrap_or_default().nodes.into_iter().collect();
    let chosen = running.first().map(pinned_to).unwrap_or_default();
    assert!(!chosen.is_empty(), "the gang's pods are pinned");
    assert!(
        !running_on.is_empty() && running_on.is_subset(&chosen),
        "runs on {running_on:?}, placed on {chosen:?}"
    );
    for p in &running {
        let spec = p.spec.clone().unwrap_or_default();
        assert!(
            spec.scheduling_gates.unwrap_or_default().is_empty(),
            "{:?} still gated",
            p.metadata.name
        );
        assert_eq!(pinned_to(p), chosen, "{:?}", p.metadata.name);
        assert!(chosen.contains(spec.node_name.as_deref().unwrap_or_default()));
        assert_eq!(p.owner_references()[0].kind, "Job");
    }
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_jobset_runs_its_gang_on_the_nodes_spillway_chose_and_ends_as_it_says() {
    let _turn = serial().await;
    JobSetController::shared().await;
    let w = World::new("op-jobset").await;
    enable_namespace(&w.client, &w.ns).await.expect("label");
    w.nodes(2, 8, Some("H100")).await;
    // The chart's pod webhook, calling this test's operator, for this namespace only.
    let (op, _) = w
        .operator_with_mutating_webhooks(&["inject"], "jobset")
        .await;
    // The API server calls the webhook once it trusts the CA the operator wrote into the
    // configuration: probe with dry-run pods until a review of one reaches the operator.
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "the API server to call the pod webhook", || async {
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": "probe-", "labels": {"spillway.io/job-uid": "probe"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }))
        .map_err(|e| e.to_string())?;
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        pods.create(&dry, &probe).await.map_err(|e| e.to_string())?;
        let (_, metrics) = op.get("/metrics").await.map_err(|e| e.to_string())?;
        metrics
            .lines()
            .any(|l| l.starts_with("spillway_webhook_reviews_total{") && l.contains("other"))
            .then_some(())
            .ok_or("no review yet".to_string())
    })
    .await;
    let api = jobsets(&w);
    api.create(
        &PostParams::default(),
        &jobset("train", &w.queue, 2, 8, true),
    )
    .await
    .expect("create the JobSet");

    // Its GpuJob is the gang of GPU pods (the launcher is not counted), owned by it.
    let gj = w.wait_phase("jobset-train", JobPhase::Running).await;
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 8));
    let r = gj.spec.workload_ref.clone().expect("workloadRef");
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str(), r.name.as_str()),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "train")
    );
    assert_eq!(gj.owner_references()[0].kind, "JobSet");
    // The JobSet controller's Jobs made the gang's pods, pinned to the chosen nodes.
    let pods = gang_runs_where_placed(&w, "jobset-train", 2).await;
    let env: Vec<String> = pods[0].spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect();
    assert!(
        env.iter().any(|e| e == "OTEL_SERVICE_NAME"),
        "the webhook gave the pod its job's telemetry: {env:?}"
    );

    // It ends as the JobSet controller says.
    w.wait_phase("jobset-train", JobPhase::Succeeded).await;
    let js = api.get("train").await.expect("the JobSet");
    let conditions = js.data["status"]["conditions"].to_string();
    assert!(conditions.contains("\"Completed\""), "{conditions}");
    op.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_made_running_is_held_then_run_once_suspended_its_pods_pinned_by_the_operator() {
    let _turn = serial().await;
    JobSetController::shared().await;
    let w = World::new("op-jobset-held").await;
    enable_namespace(&w.client, &w.ns).await.expect("label");
    // No Spillway webhook: the JobSet is made running, and its pods are made gated with no one
    // to pin them as they are made. It is made before there is a node to run on, so its first
    // pods cannot run to their end unplaced before the operator holds it (on a busy machine
    // they could, and what ran would be done).
    let api = jobsets(&w);
    api.create(
        &PostParams::default(),
        &jobset("eager", &w.queue, 1, 4, false),
    )
    .await
    .expect("create the JobSet");
    let pod_api = Api::<Pod>::namespaced(w.client.clone(), &w.ns);
    let workers = ListParams::default().labels("jobset.sigs.k8s.io/replicatedjob-name=workers");
    let worker_pods = || async {
        let l = pod_api.list(&workers).await.map_err(|e| e.to_string())?;
        Ok::<usize, String>(l.items.len())
    };
    eventually(WAIT, "the JobSet's first worker pod", || async {
        (worker_pods().await? > 0)
            .then_some(())
            .ok_or("none".to_string())
    })
    .await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    // Held: suspended, and its unplaced pods gone with its Jobs' suspension.
    eventually(WAIT, "the operator to hold the JobSet", || async {
        let js = api.get("eager").await.map_err(|e| e.to_string())?;
        let suspend = js.data["spec"]["suspend"].clone();
        let left = worker_pods().await?;
        (suspend == json!(true) && left == 0)
            .then_some(())
            .ok_or(format!("suspend {suspend}, {left} worker pods"))
    })
    .await;
    let nodes = w.nodes(1, 8, Some("H100")).await;
    let pods = gang_runs_where_placed(&w, "jobset-eager", 1).await;
    assert_eq!(
        pods[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some(nodes[0].as_str())
    );
    w.wait_phase("jobset-eager", JobPhase::Succeeded).await;
    // Every GPU pod that ran to its end carried the placement (any made before the hold was
    // deleted as its Job was suspended).
    eventually(WAIT, "the JobSet to complete", || async {
        let js = api.get("eager").await.map_err(|e| e.to_string())?;
        let c = js.data["status"]["conditions"].to_string();
        c.contains("\"Completed\"").then_some(()).ok_or(c)
    })
    .await;
    let all: Vec<Pod> = pod_api.list(&Default::default()).await.expect("pods").items;
    let succeeded =
        |p: &&Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
    let workers: Vec<&Pod> = (all.iter().filter(succeeded))
        .filter(|p| {
            p.labels()
                .get("jobset.sigs.k8s.io/replicatedjob-name")
                .map(String::as_str)
                == Some("workers")
        })
        .collect();
    assert!(!workers.is_empty());
    for p in workers {
        assert!(
            p.labels().contains_key("spillway.io/job-uid"),
            "a worker pod ran unplaced: {:?}",
            p.metadata.name
        );
    }
    op.stop().await.expect("stop");
}
