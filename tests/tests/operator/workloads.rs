//! Labelled batch Jobs through the real Job controller: held while they wait, run where their
//! GpuJob was placed, mirrored home when they end, and their GpuJob collected with them.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_k8s::webhook::WebhookConfig;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// A batch Job of `parallelism` pods of 4 GPUs that run `seconds` each; labelled with `queue`
/// when given.
fn batch_job(name: &str, queue: Option<&str>, parallelism: i32, seconds: u32, gpus: u32) -> Job {
    let labels = queue
        .map(|q| json!({"spillway.io/queue": q}))
        .unwrap_or(json!({}));
    let limits = if gpus > 0 {
        json!({"nvidia.com/gpu": gpus.to_string()})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"spillway.io/estimatedRuntime": "10m"}},
        "spec": {
            "parallelism": parallelism, "completions": parallelism,
            "suspend": queue.is_some(),
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {RUN_SECONDS: seconds.to_string()}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "trainer", "resources": {"limits": limits}}]},
            },
        },
    }))
    .expect("a Job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_runs_where_spillway_places_it_and_an_unlabelled_one_is_left_alone() {
    let _turn = serial().await;
    let w = World::new("op-workload").await;
    let nodes = w.nodes(1, 8, Some("A100-80GB")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    jobs.create(
        &PostParams::default(),
        &batch_job("train", Some(&w.queue), 2, 8, 4),
    )
    .await
    .expect("create the labelled Job");
    jobs.create(&PostParams::default(), &batch_job("plain", None, 1, 1, 0))
        .await
        .expect("create an unlabelled Job");

    // Its GpuJob stands for it, owned by it, of the shape of its pods.
    let gj = w.wait_phase("job-train", JobPhase::Running).await;
    let r = gj.spec.workload_ref.clone().expect("workloadRef");
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str(), r.name.as_str()),
        ("batch/v1", "Job", "train")
    );
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 4));
    assert_eq!(gj.spec.estimated_runtime.as_deref(), Some("10m"));
    let owner = &gj.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Job", "train"));
    let st = gj.status.clone().unwrap_or_default();
    assert_eq!(st.pool.as_deref(), Some(w.pool.as_str()));

    // The Job controller made its pods from the placed template, on the chosen node.
    let pods = w.wait_pods_running("job-train", 2).await;
    for p in &pods {
        let spec = p.spec.clone().unwrap_or_default();
        assert_eq!(spec.node_name.as_deref(), Some(nodes[0].as_str()));
        assert_eq!(p.owner_references()[0].kind, "Job");
    }
    let job = jobs.get("train").await.expect("the Job");
    assert_eq!(job.spec.as_ref().and_then(|s| s.suspend), Some(false));

    // It ends as the Job controller says; the GpuJob follows.
    let done = w.wait_phase("job-train", JobPhase::Succeeded).await;
    assert!(done.status.unwrap_or_default().finished_at.is_some());

    // The unlabelled Job was never touched: no GpuJob, never suspended, completed.
    assert!(w.jobs().get_opt("job-plain").await.expect("get").is_none());
    eventually(WAIT, "the unlabelled Job to complete", || async {
        let j = jobs.get("plain").await.map_err(|e| e.to_string())?;
        let s = j.status.unwrap_or_default();
        (s.succeeded == Some(1))
            .then_some(())
            .ok_or(format!("{s:?}"))
    })
    .await;
    let plain = jobs.get("plain").await.expect("plain");
    assert_eq!(plain.spec.and_then(|s| s.suspend), Some(false));

    // Deleting the Job deletes its GpuJob.
    jobs.delete(
        "train",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete");
    eventually(WAIT, "the GpuJob to go with its Job", || async {
        match w.jobs().get_opt("job-train").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|j| j.map(|j| j.name_any())))),
        }
    })
    .await;
    op.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_does_not_fit_stays_suspended_and_one_started_unlabelled_is_held() {
    let _turn = serial().await;
    let w = World::new("op-workload-hold").await;
    w.nodes(1, 8, Some("A100-80GB")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    // Two pods of 8 GPUs on one node of 8: it waits, suspended, and no pod is made.
    jobs.create(
        &PostParams::default(),
        &batch_job("big", Some(&w.queue), 2, 600, 8),
    )
    .await
    .expect("create");
    let gj = w.wait_phase("job-big", JobPhase::Queued).await;
    assert_eq!(gj.spec.replicas, 2);
    // Created running (no admission webhook set `suspend`): Spillway suspends it, then runs it.
    let mut eager = batch_job("eager", Some(&w.queue), 1, 600, 4);
    eager.spec.as_mut().unwrap().suspend = Some(false);
    jobs.create(&PostParams::default(), &eager)
        .await
        .expect("create");
    w.wait_phase("job-eager", JobPhase::Running).await;
    w.wait_pods_running("job-eager", 1).await;
    let big = jobs.get("big").await.expect("big");
    assert_eq!(big.spec.and_then(|s| s.suspend), Some(true));
    let pods = w.pods_of("job-big").await;
    assert!(pods.is_empty(), "{} pods of a held Job", pods.len());
    op.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_holds_labelled_jobs_as_they_are_made_and_leaves_a_users_suspension_theirs() {
    let _turn = serial().await;
    let w = World::new("op-workload-hook").await;
    w.nodes(1, 8, Some("A100-80GB")).await;
    let client = w.client.clone();
    let port = spillway_tests::free_port().expect("port");
    let name = format!("spillway-{}", w.ns);
    // The chart's configuration, calling this test's operator, for this namespace only.
    let configuration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.spillway.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate")},
            "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}],
            "objectSelector": {"matchExpressions": [{"key": "spillway.io/queue", "operator": "Exists"}]},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": w.ns}},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .expect("configuration");
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &configuration)
        .await
        .expect("create the configuration");
    let webhook = WebhookConfig {
        addr: ([127, 0, 0, 1], port).into(),
        namespace: w.ns.clone(),
        secret: "spillway-webhook-tls".into(),
        hosts: vec!["127.0.0.1".into()],
        self_signed: true,
        lifetime: Duration::from_secs(90 * 86_400),
        configuration: Some(name.clone()),
    };
    let op =
        RunningOperator::start_full(client.clone(), None, test_settings("hold"), Some(webhook))
            .await
            .expect("operator");
    // The operator keeps the mutating configuration's caBundle too.
    eventually(WAIT, "the caBundle", || async {
        let c = configs.get(&name).await.map_err(|e| e.to_string())?;
        let hooks = c.webhooks.unwrap_or_default();
        hooks[0]
            .client_config
            .ca_bundle
            .clone()
            .map(|_| ())
            .ok_or("none yet".to_string())
    })
    .await;

    // A labelled Job made running is stored suspended (until the webhook is trusted, the API
    // server ignores it, and such a Job is deleted and made again under another name).
    let jobs: Api<Job> = Api::namespaced(client.clone(), &w.ns);
    let mut attempt = 0;
    let eager = eventually(WAIT, "a labelled Job stored suspended", || {
        attempt += 1;
        let name = format!("eager-{attempt}");
        let jobs = jobs.clone();
        let queue = w.queue.clone();
        async move {
            let mut job = batch_job(&name, Some(&queue), 1, 600, 4);
            job.spec.as_mut().unwrap().suspend = None;
            let made = jobs
                .create(&PostParams::default(), &job)
                .await
                .map_err(|e| e.to_string())?;
            if made.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
                return Ok(name);
            }
            let _ = jobs.delete(&name, &DeleteParams::foreground()).await;
            Err(format!("{name} was stored running"))
        }
    })
    .await;
    w.wait_phase(&format!("job-{eager}"), JobPhase::Running)
        .await;
    w.wait_pods_running(&format!("job-{eager}"), 1).await;

    // One its user made suspended is marked theirs: no GpuJob, still suspended.
    jobs.create(
        &PostParams::default(),
        &batch_job("mine", Some(&w.queue), 1, 600, 4),
    )
    .await
    .expect("create");
    let mine = jobs.get("mine").await.expect("mine");
    assert_eq!(
        mine.annotations()
            .get("spillway.io/suspended-by-user")
            .map(String::as_str),
        Some("true")
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(w.jobs().get_opt("job-mine").await.expect("get").is_none());
    let mine = jobs.get("mine").await.expect("mine");
    assert_eq!(mine.spec.as_ref().and_then(|s| s.suspend), Some(true));

    // The user lifts the suspension: the webhook holds it for Spillway, which queues and runs it.
    let lifted = jobs
        .patch(
            "mine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("lift");
    assert_eq!(lifted.spec.as_ref().and_then(|s| s.suspend), Some(true));
    assert!(
        !lifted
            .annotations()
            .contains_key("spillway.io/suspended-by-user")
    );
    w.wait_phase("job-mine", JobPhase::Running).await;
    w.wait_pods_running("job-mine", 1).await;

    configs
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the configuration");
    op.stop().await.expect("stop");
}
