//! A job's life: invalid specs, changes, failures, restarts of the operator.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::{World, condition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_job_gets_a_condition_and_an_event_and_no_hot_loop() {
    let _turn = serial().await;
    let w = World::new("op-invalid").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let missing = format!("{}-missing", w.ns);
    w.submit_to("lost", &missing, json!({}), None).await;
    let job = eventually(WAIT, "Invalid condition", || async {
        let j = w.job("lost").await;
        match condition(&j, "Invalid") {
            Some((s, _, _)) if s == "True" => Ok(j),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_, reason, message) = condition(&job, "Invalid").unwrap_or_default();
    assert_eq!(reason, "QueueNotFound");
    assert!(message.contains(&missing), "{message}");
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "a Warning Event", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("QueueNotFound")
                    && e.type_.as_deref() == Some("Warning")
            })
            .map(|_| ())
            .ok_or_else(|| {
                format!(
                    "{:?}",
                    list.items
                        .iter()
                        .map(|e| e.reason.clone())
                        .collect::<Vec<_>>()
                )
            })
    })
    .await;

    // No hot loop: with nothing changing, several cycles (resync is 5 s) write nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = op.metrics.api_writes_total();
    tokio::time::sleep(Duration::from_secs(11)).await;
    let after = op.metrics.api_writes_total();
    assert_eq!(before, after, "API writes while nothing changed");

    // Fixing it (the queue appears) clears the condition and the job runs.
    w.create_queue(&missing, json!({})).await;
    let job = w.wait_phase("lost", JobPhase::Running).await;
    assert_eq!(condition(&job, "Invalid"), None);
    assert_eq!(
        condition(&job, "Admitted").map(|c| c.0),
        Some("True".to_string())
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_change_and_failure_are_reflected() {
    let _turn = serial().await;
    let w = World::new("op-fail").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    // A replica that exits non-zero fails the job, and its gang-mates are removed.
    let mut annotations = serde_json::Map::new();
    annotations.insert(RUN_SECONDS.into(), json!("1"));
    annotations.insert(spillway_tests::kubelet::EXIT_CODE.into(), json!("3"));
    w.submit(
        "crash",
        json!({"replicas": 2, "gpusPerReplica": 2, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "train", "image": "pytorch:2"}]},
        }}),
        None,
    )
    .await;
    let job = w.wait_phase("crash", JobPhase::Failed).await;
    let (_, reason, _) = condition(&job, "Failed").expect("Failed condition");
    assert_eq!(reason, "ReplicaFailed");
    // maxRuntime is enforced.
    w.submit("slow", json!({"maxRuntime": "3s"}), None).await;
    w.wait_phase("slow", JobPhase::Running).await;
    let job = w.wait_phase("slow", JobPhase::Failed).await;
    assert_eq!(
        condition(&job, "Failed").map(|c| c.1),
        Some("MaxRuntimeExceeded".to_string())
    );
    eventually(WAIT, "slow's pod to be deleted", || async {
        let pods = w.pods_of("slow").await;
        if pods.is_empty() {
            Ok(())
        } else {
            Err(format!("{} pods", pods.len()))
        }
    })
    .await;
    // A job patched by its owner gets a new observedGeneration.
    w.submit("patched", json!({"gpusPerReplica": 1}), None)
        .await;
    w.wait_phase("patched", JobPhase::Running).await;
    w.jobs()
        .patch(
            "patched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"estimatedRuntime": "2h"}})),
        )
        .await
        .expect("patch");
    eventually(WAIT, "observedGeneration 2", || async {
        let j = w.job("patched").await;
        let og = j.status.and_then(|s| s.observed_generation);
        if og == Some(2) {
            Ok(())
        } else {
            Err(format!("{og:?}"))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_in_the_middle_of_a_workload_loses_nothing() {
    let _turn = serial().await;
    let w = World::new("op-restart").await;
    w.nodes(2, 8, None).await;
    for i in 0..50 {
        w.submit(&format!("job-{i:02}"), json!({}), Some(2 + (i % 3)))
            .await;
    }
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let count = |phase: JobPhase| {
        let jobs = w.jobs();
        async move {
            let list = jobs
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            Ok::<usize, String>(
                list.items
                    .iter()
                    .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(phase))
                    .count(),
            )
        }
    };
    eventually(WAIT, "a third of the jobs to finish", || async {
        let done = count(JobPhase::Succeeded).await?;
        if done >= 16 {
            Ok(())
        } else {
            Err(format!("{done} succeeded"))
        }
    })
    .await;
    // Crash: no clean shutdown, writes in flight are cut off.
    op.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator again");
    eventually(
        Duration::from_secs(120),
        "all 50 jobs to succeed",
        || async {
            let done = count(JobPhase::Succeeded).await?;
            if done == 50 {
                Ok(())
            } else {
                Err(format!("{done} succeeded"))
            }
        },
    )
    .await;
    // No job ever had two sets of pods: one pod each, of one attempt.
    let pods = Api::<Pod>::namespaced(w.client.clone(), &w.ns)
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pods {
        *per_job
            .entry(
                p.labels()
                    .get("spillway.io/job")
                    .cloned()
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(per_job.len(), 50, "{per_job:?}");
    assert!(per_job.values().all(|n| *n == 1), "{per_job:?}");
    op.stop().await.expect("clean stop");
}

/// A private node whose kubelet stops posting (Ready=Unknown, tainted unreachable, as the node
/// lifecycle controller marks it): it takes no new work; once its pods are evicted (as the
/// taint manager does after their tolerationSeconds), the restartable job is requeued and
/// runs elsewhere, the other is Failed (`ReplicaLost`), as docs/operator.md says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_posting_takes_no_work_and_its_jobs_requeue_or_fail() {
    let _turn = serial().await;
    let w = World::new("op-notready").await;
    let a = w.nodes(1, 2, None).await.remove(0);
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("keeps", json!({"restartable": true}), None).await;
    w.submit("fragile", json!({}), None).await;
    w.wait_phase("keeps", JobPhase::Running).await;
    w.wait_phase("fragile", JobPhase::Running).await;
    let b = w.nodes(1, 2, None).await.remove(0);
    w.kubelet
        .lose_contact(&a)
        .await
        .expect("node a unreachable");
    // New work goes to b only.
    w.submit("fresh", json!({}), None).await;
    let fresh = w.wait_phase("fresh", JobPhase::Running).await;
    assert_eq!(fresh.status.unwrap_or_default().nodes, vec![b.clone()]);
    let evicted = w.kubelet.evict_pods_of(&a).await.expect("evict");
    assert_eq!(evicted, 2, "both jobs ran on the unreachable node");
    let failed = w.wait_phase("fragile", JobPhase::Failed).await;
    let (status, reason, _) =
        condition(&failed, "Failed").unwrap_or_else(|| panic!("no Failed condition: {failed:?}"));
    assert_eq!((status.as_str(), reason.as_str()), ("True", "ReplicaLost"));
    eventually(WAIT, "keeps to run again on b", || async {
        let st = w.job("keeps").await.status.unwrap_or_default();
        if st.restarts == Some(1)
            && st.phase == Some(JobPhase::Running)
            && st.nodes == vec![b.clone()]
        {
            Ok(())
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}
