//! Quota reclaim on the real API server: a queue within its private quota gets back the GPUs
//! another queue borrowed; the borrower is preempted with its grace period, told why, and
//! runs again once the GPUs are free.

use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::STOP_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::{World, condition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_within_its_quota_reclaims_borrowed_gpus() {
    let _turn = serial().await;
    let w = World::new("op-reclaim").await;
    w.nodes(1, 8, None).await;
    // The test's own queue borrows (no quota) and caps a preempted pod's grace at 3 s.
    let lender = format!("{}-team", w.ns);
    Api::<spillway_api::GpuQueue>::all(w.client.clone())
        .patch(
            &w.queue,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"preemption": {"maxGracePeriod": "3s"}}})),
        )
        .await
        .expect("patch queue");
    w.create_queue(&lender, json!({"privateQuota": {"gpus": 8}}))
        .await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");

    // The borrower takes all 8 GPUs; its pods take 20 s to stop (its grace allows 60).
    w.submit(
        "borrower",
        json!({"gpusPerReplica": 8, "restartable": true, "template": {
            "metadata": {"annotations": {STOP_SECONDS: "20"}},
            "spec": {"terminationGracePeriodSeconds": 60,
                     "containers": [{"name": "train", "image": "pytorch:2"}]},
        }}),
        None,
    )
    .await;
    w.wait_phase("borrower", JobPhase::Running).await;
    w.wait_pods_running("borrower", 1).await;

    // The team's job arrives: the borrower is preempted for it.
    let asked = Instant::now();
    w.submit_to("mine", &lender, json!({"gpusPerReplica": 8}), None)
        .await;
    let borrower = eventually(WAIT, "the borrower's Preempted condition", || async {
        let j = w.job("borrower").await;
        match condition(&j, "Preempted") {
            Some((s, _, _)) if s == "True" => Ok(j),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_, reason, message) = condition(&borrower, "Preempted").unwrap_or_default();
    assert_eq!(reason, "QuotaReclaimed");
    assert!(message.contains(&lender), "{message}");
    assert!(message.contains("within 3 s"), "{message}");
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    let list = events.list(&ListParams::default()).await.expect("events");
    let preempted = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("Preempted"))
        .expect("a Preempted Event");
    assert_eq!(
        preempted.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("borrower")
    );

    // The team's job starts once the evicted pod is gone: within its 3 s grace, not the 20 s
    // its containers would take.
    let mine = w.wait_phase("mine", JobPhase::Running).await;
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_secs(18),
        "started after {waited:?}: the grace period was not capped"
    );
    let d = mine.status.and_then(|s| s.decision).expect("decision");
    assert_eq!(d.outcome.as_deref(), Some("StartPrivate"), "{d:?}");
    let borrower = w.job("borrower").await;
    let st = borrower.status.clone().unwrap_or_default();
    assert_eq!(st.phase, Some(JobPhase::Queued));
    assert_eq!(st.restarts, Some(1));
    // Never two of the borrower's pods at once, nor the borrower beside the team's job.
    assert!(w.pods_of("borrower").await.is_empty());

    // The team's job ends: the borrower runs again, on its next attempt.
    w.jobs()
        .delete("mine", &Default::default())
        .await
        .expect("delete mine");
    let borrower = w.wait_phase("borrower", JobPhase::Running).await;
    assert_eq!(borrower.status.and_then(|s| s.restarts), Some(1));
    op.stop().await.expect("clean stop");
}
