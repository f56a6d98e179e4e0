//! A labelled batch Job placed on a cluster pool runs as a copy in the other cluster: that
//! cluster's Job controller makes the pods and its fake kubelet runs them, the Job at home
//! stays suspended, the copy's end comes home on the GpuJob, and deleting the Job at home
//! deletes the copy there. The operator reaches the other cluster only with the worker chart's
//! ServiceAccount (`Worker::install`), so this also proves the worker Role is enough.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use spillway_api::Environment;
use spillway_api::job::JobPhase;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::remote::{Worker, burst_queue, wait_pool_ready};
use crate::workloads::batch_job;
use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_placed_in_another_cluster_runs_there_as_a_copy_and_its_end_comes_home() {
    let _turn = serial().await;
    // No private node: the Job can only go to the other cluster.
    let w = World::new("op-copy").await;
    let worker = Worker::install(&w, "copies", 1.0, 1, 8).await;
    let queue = burst_queue(&w, &[&worker.pool]).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    wait_pool_ready(&w, &worker.pool, ("True", "Valid")).await;

    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    jobs.create(
        &PostParams::default(),
        &batch_job("train", Some(&queue), 2, 8, 4),
    )
    .await
    .expect("create the labelled Job");
    let gj = w.wait_phase("job-train", JobPhase::Running).await;
    let st = gj.status.clone().unwrap_or_default();
    assert_eq!(st.environment, Some(Environment::Remote));
    assert_eq!(st.pool.as_deref(), Some(worker.pool.as_str()));

    // The copy there, run by that cluster's Job controller on this pool's node.
    let uid = gj.metadata.uid.clone().unwrap_or_default();
    let copies: Api<Job> = Api::namespaced(worker.admin.clone(), &worker.ns);
    let by_uid = ListParams::default().labels(&format!("spillway.io/job-uid={uid}"));
    let copy = eventually(WAIT, "the copy there", || async {
        let l = copies.list(&by_uid).await.map_err(|e| e.to_string())?;
        l.items.into_iter().next().ok_or("no copy yet".to_string())
    })
    .await;
    assert_eq!(copy.spec.as_ref().and_then(|s| s.suspend), Some(false));
    let pods = worker.wait_running(&gj, 2).await;
    for p in &pods {
        let owner = &p.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Job", copy.name_any().as_str())
        );
    }
    let home = jobs.get("train").await.expect("the Job at home");
    assert_eq!(
        home.spec.as_ref().and_then(|s| s.suspend),
        Some(true),
        "the Job at home stays suspended"
    );

    // It completes there; the GpuJob says so.
    let done = w.wait_phase("job-train", JobPhase::Succeeded).await;
    assert!(done.status.unwrap_or_default().finished_at.is_some());
    assert!(
        copies
            .get_opt(&copy.name_any())
            .await
            .expect("get")
            .is_some(),
        "a finished copy is kept for its logs while its Job is"
    );

    // Deleting the Job at home deletes its GpuJob, then the copy there.
    jobs.delete(
        "train",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete");
    eventually(WAIT, "the copy to be deleted there", || async {
        match copies.get_opt(&copy.name_any()).await {
            Ok(None) => Ok(()),
            Ok(Some(c)) if c.metadata.deletion_timestamp.is_some() => Ok(()),
            other => Err(format!("{:?}", other.map(|c| c.map(|c| c.name_any())))),
        }
    })
    .await;
    worker.remove(&w).await;
    op.stop().await.expect("stop");
}
