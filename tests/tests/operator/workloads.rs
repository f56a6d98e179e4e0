//! Labelled batch Jobs through the real Job controller: held while they wait, run where their
//! GpuJob was placed, mirrored home when they end, and their GpuJob collected with them.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// A batch Job of `parallelism` pods of 4 GPUs that run `seconds` each; labelled with `queue`
/// when given.
pub(crate) fn batch_job(
    name: &str,
    queue: Option<&str>,
    parallelism: i32,
    seconds: u32,
    gpus: u32,
) -> Job {
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
    // The chart's configuration, calling this test's operator, for this namespace only.
    let (op, name) = w
        .operator_with_mutating_webhooks(&["hold", "inject"], "hold")
        .await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
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
    let pods = w.wait_pods_running(&format!("job-{eager}"), 1).await;
    // Its pod, made by the Job controller, got the job's telemetry settings from the webhook
    // (as a GpuJob's pods get them from Spillway).
    let env: Vec<(String, Option<String>)> = pods[0].spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert!(
        env.contains(&("OTEL_SERVICE_NAME".into(), Some(format!("job-{eager}")))),
        "{env:?}"
    );
    let attributes = env
        .iter()
        .find(|(n, _)| n == "OTEL_RESOURCE_ATTRIBUTES")
        .and_then(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(
        attributes.contains(&format!("spillway.pool={}", w.pool)),
        "{attributes}"
    );

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_reclaim_suspends_a_restartable_job_and_it_resumes_once_the_gpus_are_free() {
    let _turn = serial().await;
    let w = World::new("op-workload-reclaim").await;
    w.nodes(1, 8, Some("A100-80GB")).await;
    let lender = format!("{}-team", w.ns);
    w.create_queue(&lender, json!({"privateQuota": {"gpus": 8}}))
        .await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    let mut borrower = batch_job("borrow", Some(&w.queue), 1, 600, 8);
    borrower
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("spillway.io/restartable".into(), "true".into());
    jobs.create(&PostParams::default(), &borrower)
        .await
        .expect("create");
    w.wait_phase("job-borrow", JobPhase::Running).await;
    w.wait_pods_running("job-borrow", 1).await;

    // The team's job, within its quota, takes the GPUs back: the Job is suspended.
    w.submit_to("mine", &lender, json!({"gpusPerReplica": 8}), Some(5))
        .await;
    eventually(WAIT, "the borrowing Job suspended", || async {
        let j = jobs.get("borrow").await.map_err(|e| e.to_string())?;
        let suspended = j.spec.and_then(|s| s.suspend) == Some(true);
        let preempted = crate::world::condition(&w.job("job-borrow").await, "Preempted")
            .is_some_and(|(s, _, _)| s == "True");
        (suspended && preempted)
            .then_some(())
            .ok_or(format!("suspended {suspended}, preempted {preempted}"))
    })
    .await;
    w.wait_phase("mine", JobPhase::Succeeded).await;

    // Its GPUs free again, the Job resumes, as the GpuJob's next attempt.
    let again = eventually(WAIT, "the Job to run again", || async {
        let gj = w.job("job-borrow").await;
        let st = gj.status.clone().unwrap_or_default();
        (st.phase == Some(JobPhase::Running) && st.restarts.unwrap_or(0) >= 1)
            .then_some(gj)
            .ok_or(format!("{:?} after {:?} restarts", st.phase, st.restarts))
    })
    .await;
    let pods = w.wait_pods_running("job-borrow", 1).await;
    let attempt = again
        .status
        .unwrap_or_default()
        .restarts
        .unwrap_or(0)
        .to_string();
    assert_eq!(
        pods[0].labels().get("spillway.io/attempt"),
        Some(&attempt),
        "the running pod is of the new attempt"
    );
    op.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restarted_while_a_job_is_held_runs_it_once() {
    let _turn = serial().await;
    let w = World::new("op-workload-restart").await;
    w.nodes(1, 8, Some("A100-80GB")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    // A job holds the node for a few seconds; the labelled Job waits, held.
    w.submit("filler", json!({"gpusPerReplica": 8}), Some(8))
        .await;
    w.wait_phase("filler", JobPhase::Running).await;
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    jobs.create(
        &PostParams::default(),
        &batch_job("held", Some(&w.queue), 1, 600, 8),
    )
    .await
    .expect("create");
    w.wait_phase("job-held", JobPhase::Queued).await;
    op.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator again");
    // Still held until the filler ends; then it runs, once.
    w.wait_phase("job-held", JobPhase::Running).await;
    let pods = w.wait_pods_running("job-held", 1).await;
    assert_eq!(pods.len(), 1);
    let job = jobs.get("held").await.expect("held");
    assert_eq!(job.status.and_then(|s| s.active), Some(1));
    op.stop().await.expect("stop");
}
