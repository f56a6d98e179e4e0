//! Labelled batch Jobs, private first, then bursting: the first takes the private GPU, the
//! second's GpuJob waits past its queue's maxWait, an instance is launched for it (moto), and
//! the Job controller's pods land on the node that joined; once that Job is deleted its GpuJob
//! goes with it, and the instance launched for it is terminated (docs/aws.md: a deleted job's
//! cloud resources are released at once, not kept for the pool's idle timeout).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::RUN_SECONDS;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_bursts_and_its_pods_land_on_the_instance_that_joined() {
    let _turn = serial().await;
    let w = World::new("aws-workload", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    let job = |name: &str| -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"spillway.io/queue": w.queue}},
            "spec": {"suspend": true, "backoffLimit": 0, "template": {
                "metadata": {"annotations": {RUN_SECONDS: "600"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        }))
        .expect("a Job")
    };
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), &w.ns);
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let running_on = |gpu_job: &'static str| {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels(&format!("spillway.io/job={gpu_job}")))
                .await
                .map_err(|e| e.to_string())?;
            Ok::<Vec<String>, String>(
                (list.items.iter())
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect(),
            )
        }
    };

    // The first takes the private GPU.
    jobs.create(&PostParams::default(), &job("first"))
        .await
        .expect("create");
    let gj = w.wait_phase("job-first", JobPhase::Running).await;
    let st = gj.status.unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Private),
        "{st:?}"
    );
    let private = format!("{}-private-0", w.ns);
    eventually(WAIT, "the first Job's pod on the private node", || async {
        let on = running_on("job-first").await?;
        (on == [private.clone()])
            .then_some(())
            .ok_or(format!("{on:?}"))
    })
    .await;
    assert!(w.instances().await.is_empty(), "nothing launched for it");

    // The second waits past maxWait and bursts.
    jobs.create(&PostParams::default(), &job("burst"))
        .await
        .expect("create");

    let gj = w.wait_phase("job-burst", JobPhase::Running).await;
    let st = gj.status.unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Cloud),
        "{st:?}"
    );
    assert_eq!(st.pool.as_deref(), Some(w.aws_pool.as_str()));
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "{instances:?}");
    let (id, _, _, need) = instances[0].clone();
    assert_eq!(need, format!("{}/job-burst#0", w.ns));
    // The Job controller's pod runs on the node of the instance launched for it.
    eventually(WAIT, "the Job's pod on the burst node", || async {
        let on = running_on("job-burst").await?;
        (on == [id.clone()]).then_some(()).ok_or(format!("{on:?}"))
    })
    .await;

    // Deleted, the Job takes its GpuJob with it (its finalizer held until the instance
    // launched for it is released), and that instance is terminated.
    jobs.delete("burst", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually(WAIT, "the deleted Job's GpuJob to go", || async {
        match w.jobs().get_opt("job-burst").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    w.wait_terminated(&id).await;
    // The first Job runs on, untouched.
    assert_eq!(running_on("job-first").await.expect("pods"), [private]);
    op.stop().await.expect("clean stop");
}

/// A labelled JobSet of two 1-GPU workers bursts: its gang's pods, made gated by the JobSet
/// controller's Jobs and pinned by the operator (no pod webhook here), run on the nodes of the
/// instances launched for it, with the pool's tolerations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_jobset_bursts_and_its_gang_runs_on_the_instances_launched_for_it() {
    let _turn = serial().await;
    spillway_tests::jobset::JobSetController::shared().await;
    let w = World::new("aws-jobset", json!({})).await;
    spillway_tests::jobset::enable_namespace(&w.client, &w.ns)
        .await
        .expect("label");
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    let js: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "burst", "labels": {"spillway.io/queue": w.queue}},
        "spec": {"suspend": true, "replicatedJobs": [{"name": "workers", "replicas": 2,
            "template": {"spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": {RUN_SECONDS: "600"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}}]},
    }))
    .expect("a JobSet");
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let jobsets: Api<kube::core::DynamicObject> =
        Api::namespaced_with(w.client.clone(), &w.ns, &resource);
    jobsets
        .create(&PostParams::default(), &js)
        .await
        .expect("create");

    let gj = w.wait_phase("jobset-burst", JobPhase::Running).await;
    assert_eq!((gj.spec.replicas, gj.spec.gpus_per_replica), (2, 1));
    let st = gj.status.unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Cloud),
        "{st:?}"
    );
    let launched: Vec<String> = (w.instances().await.into_iter())
        .filter(|(_, _, _, need)| *need == format!("{}/jobset-burst#0", w.ns))
        .map(|(id, ..)| id)
        .collect();
    assert!(!launched.is_empty());
    // Both workers run, ungated, on nodes of those instances.
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "the JobSet's workers on the burst nodes", || async {
        let list = pods
            .list(&ListParams::default().labels("spillway.io/job=jobset-burst"))
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<(String, bool)> = (list.items.iter())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| {
                let spec = p.spec.as_ref()?;
                Some((
                    spec.node_name.clone()?,
                    spec.scheduling_gates.as_ref().is_none_or(Vec::is_empty),
                ))
            })
            .collect();
        let ok = running.len() == 2
            && running
                .iter()
                .all(|(n, ungated)| *ungated && launched.contains(n));
        ok.then_some(())
            .ok_or(format!("{running:?} on {launched:?}"))
    })
    .await;

    jobsets
        .delete("burst", &DeleteParams::foreground())
        .await
        .expect("delete");
    for id in &launched {
        w.wait_terminated(id).await;
    }
    op.stop().await.expect("clean stop");
}
