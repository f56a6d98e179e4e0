//! Labelled workloads (`crate::workloads`): the GpuJob made for each, the workload held while
//! it waits, run with the placement written into it, suspended again when its job moves on,
//! and its end mirrored on its job.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use serde_json::{Value, json};
use spillway_api::GpuJob;

use super::fixtures::*;
use crate::actions::{Action, StatusKind, WorkloadPatch};
use crate::error::api_error;
use crate::executor::Failure;
use crate::world::Inputs;

/// A labelled batch Job of queue `q`: `parallelism` pods of 4 GPUs.
pub(super) fn workload(name: &str, parallelism: u32, suspend: bool) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": format!("w-{name}"),
                     "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
        "spec": {"parallelism": parallelism, "suspend": suspend,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [
                     {"name": "main", "image": "trainer",
                      "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
    })
}

pub(super) fn dynamic(v: &Value) -> Arc<DynamicObject> {
    Arc::new(serde_json::from_value(v.clone()).expect("a workload"))
}

pub(super) fn applied(t: &crate::turn::Turn) -> Vec<GpuJob> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyWorkloadJob(j) => Some((**j).clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn patches(t: &crate::turn::Turn) -> Vec<WorkloadPatch> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::PatchWorkload(p) => Some((**p).clone()),
            _ => None,
        })
        .collect()
}

/// The GpuJob as the API server would store it after the apply.
pub(super) fn stored(mut j: GpuJob) -> Arc<GpuJob> {
    j.metadata.uid = Some("gj-uid".into());
    j.metadata.generation = Some(1);
    j.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-03-10T11:59:00Z".parse().unwrap(),
    ));
    Arc::new(j)
}

pub(super) fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// The GpuJob status turn `t` wrote for `name` (the first job of `i`), now read back in `i`.
pub(super) fn written_status(i: &mut Inputs, t: &crate::turn::Turn, name: &str) -> Value {
    let st = status_of(t, StatusKind::GpuJob, name).expect("a status");
    let mut gj = (*i.jobs[0]).clone();
    gj.status = Some(serde_json::from_value(st.clone()).expect("status"));
    i.jobs[0] = Arc::new(gj);
    st
}

/// The node a run patch pins the workload's pods to.
pub(super) fn pinned_node(patch: &Value) -> String {
    patch["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0]
        ["values"][0]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Asserts that turn `t` suspends the workload, and only that: its pods are its controller's
/// to delete.
pub(super) fn suspended_leaving_its_pods(t: &crate::turn::Turn) -> WorkloadPatch {
    let mut p = patches(t);
    assert_eq!(p.len(), 1, "{:?}", kinds(t));
    assert_eq!(p[0].what, "suspend");
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { .. } | Action::EvictPod { .. })),
        "{:?}",
        kinds(t)
    );
    p.remove(0)
}

/// A pod the Job controller made from the placed template, on `node`.
pub(super) fn job_pod(w: &Value, i: u32, node: &str, phase: &str) -> Arc<Pod> {
    let labels = w["spec"]["template"]["metadata"]["labels"].clone();
    from(json!({
        "metadata": {"name": format!("{}-{i}", w["metadata"]["name"].as_str().unwrap()),
                     "namespace": NS, "uid": format!("pod-{i}"), "labels": labels,
                     "creationTimestamp": "2026-03-10T12:00:05Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": w["metadata"]["name"], "uid": w["metadata"]["uid"],
                                          "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "main",
                  "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        "status": {"phase": phase},
    }))
}

#[test]
fn a_labelled_job_is_held_then_run_where_its_job_was_placed_and_its_end_is_mirrored() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();

    // Its GpuJob is made; a suspended workload is left as it is.
    let t = l.turn(&i, None, noon());
    let made = applied(&t);
    assert_eq!(made.len(), 1, "{:?}", kinds(&t));
    assert_eq!(made[0].metadata.name.as_deref(), Some("job-train"));
    assert_eq!(
        (made[0].spec.replicas, made[0].spec.gpus_per_replica),
        (2, 4)
    );
    assert!(patches(&t).is_empty());
    // Not asked again while the cache does not show it yet.
    let t = l.turn(&i, None, noon());
    assert!(applied(&t).is_empty());

    // The job fits: the workload is run with the placement, and no pod is made by Spillway.
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(creates(&t).is_empty());
    // Its trace context is derived from its uid, not written on it.
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Annotate { .. })),
        "{:?}",
        kinds(&t)
    );
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(
        (p[0].what, p[0].job.as_deref()),
        ("run", Some("team/job-train"))
    );
    assert_eq!(p[0].patch["spec"]["suspend"], json!(false));
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["phase"], "Running");

    // The Job controller makes its pods from the placed template: it runs, nothing is held.
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    i.pods = vec![
        job_pod(&w, 0, "a", "Running"),
        job_pod(&w, 1, "a", "Running"),
    ];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(patches(&t).is_empty(), "{:?}", patches(&t));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::DeletePod { .. } | Action::EvictPod { .. })),
        "{:?}",
        kinds(&t)
    );

    // It completes: the end is mirrored on its GpuJob, which then reads Succeeded.
    w["status"] = json!({"conditions": [{"type": "Complete", "status": "True",
                                         "lastTransitionTime": "2026-03-10T12:30:00Z"}]});
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    i.pods = vec![
        job_pod(&w, 0, "a", "Succeeded"),
        job_pod(&w, 1, "a", "Succeeded"),
    ];
    let t = l.turn(&i, None, noon() + minutes(31));
    let mirrored = applied(&t);
    assert_eq!(mirrored.len(), 1, "{:?}", kinds(&t));
    let mut gj = (*i.jobs[0]).clone();
    gj.metadata.annotations = mirrored[0].metadata.annotations.clone();
    gj.status = i.jobs[0].status.clone();
    i.jobs = vec![Arc::new(gj)];
    let t = l.turn(&i, None, noon() + minutes(32));
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["phase"], "Succeeded", "{st}");
    assert_eq!(st["finishedAt"], "2026-03-10T12:30:00Z");
    // The Job controller told the end on the Job; the GpuJob's Event would repeat it.
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Publish(n) if n.action == "Succeeded")),
        "{:?}",
        events(&t)
    );
}

#[test]
fn a_workload_that_runs_unplaced_is_suspended_once_and_a_bad_one_is_told_why() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    // Created without the admission webhook: it runs before Spillway decided.
    i.workloads = vec![dynamic(&workload("eager", 1, false))];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert_eq!(applied(&t).len(), 1);
    let p = patches(&t);
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].what, &p[0].patch),
        ("suspend", &json!({"spec": {"suspend": true}}))
    );
    // The same version is not suspended twice.
    let t = l.turn(&i, None, noon());
    assert!(patches(&t).is_empty());

    // A Job asking for no GPU gets no GpuJob, a Warning naming why, and is held.
    let mut bad = workload("cpu", 1, false);
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({});
    i.workloads = vec![dynamic(&bad)];
    let t = l.turn(&i, None, noon());
    assert!(applied(&t).is_empty());
    assert_eq!(patches(&t).len(), 1);
    let warned = t.actions.iter().any(|a| {
        matches!(a, Action::Publish(n)
        if n.warning && n.reason == "WorkloadInvalid" && n.note.contains("nvidia.com/gpu")
            && n.regarding.kind.as_deref() == Some("Job"))
    });
    assert!(warned, "{:?}", kinds(&t));
    // Told once.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Publish(n) if n.reason == "WorkloadInvalid"))
    );
}

#[test]
fn a_running_workload_whose_node_is_lost_is_suspended_and_its_job_requeued() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8), node("b", "onprem", 8)];
    let mut w = workload("train", 1, true);
    w["metadata"]["annotations"] = json!({"spillway.io/restartable": "true"});
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    assert!(i.jobs[0].spec.restartable);
    let t = l.turn(&i, None, noon() + minutes(1));
    let run = patches(&t).remove(0);
    merge(&mut w, &run.patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    let node = pinned_node(&run.patch);
    i.pods = vec![job_pod(&w, 0, &node, "Running")];
    let mut gj = (*i.jobs[0]).clone();
    gj.status =
        status_of(&t, StatusKind::GpuJob, "job-train").map(|s| serde_json::from_value(s).unwrap());
    i.jobs = vec![Arc::new(gj)];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(patches(&t).is_empty());

    // Its node goes: the job is requeued and the workload suspended (its pods would be made
    // again on the lost node).
    i.nodes
        .retain(|n| n.metadata.name.as_deref() != Some(node.as_str()));
    let t = l.turn(&i, None, noon() + minutes(3));
    // Its pods are left to the Job controller (a pod deleted by anyone else counts as failed).
    suspended_leaving_its_pods(&t);
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["phase"], "Queued", "{st}");
    assert_eq!(st["restarts"], 1);
}

#[test]
fn a_workload_is_run_only_once_its_controller_has_finished_suspending_it() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut l = Loop::new();
    // Made running: held (the suspension is in flight), its GpuJob made.
    let mut w = workload("eager", 1, false);
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    // The cache still shows it running: its job is not run yet.
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(
        patches(&t).iter().all(|p| p.what != "run"),
        "{:?}",
        patches(&t)
    );
    // Suspended, but the Job controller has not cleared its start time yet: still not run.
    w["spec"]["suspend"] = json!(true);
    w["status"] = json!({"startTime": "2026-03-10T11:59:30Z"});
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(
        patches(&t).iter().all(|p| p.what != "run"),
        "{:?}",
        patches(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "job-eager");
    assert_ne!(
        st.as_ref().map(|s| s["phase"].clone()),
        Some(json!("Running"))
    );
    // Done suspending: run.
    w["status"] = json!({});
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon() + minutes(3));
    assert_eq!(
        patches(&t).iter().map(|p| p.what).collect::<Vec<_>>(),
        ["run"]
    );
}

fn pins(t: &crate::turn::Turn) -> Vec<(String, Value)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::PinPod { name, patch, .. } => Some((name.clone(), patch.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_jobsets_pod_made_gated_without_the_webhook_is_pinned_once_per_version() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8), node("b", "onprem", 8)];
    let mut w = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS, "uid": "w-train",
                     "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
        "spec": {"suspend": true, "replicatedJobs": [{"name": "workers", "replicas": 2,
                 "template": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]},
    });
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let made = applied(&t);
    assert_eq!(made[0].metadata.name.as_deref(), Some("jobset-train"));
    assert_eq!(
        (made[0].spec.replicas, made[0].spec.gpus_per_replica),
        (2, 8)
    );
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].what, "run");
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];

    // Its Jobs' pods come gated (no webhook was called): each is pinned to the chosen nodes
    // and ungated, once per version of the pod.
    let template = &w["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    let gated = |n: u32| -> Arc<Pod> {
        from(json!({
            "metadata": {"name": format!("train-workers-{n}-x"), "namespace": NS,
                         "uid": format!("pod-{n}"), "resourceVersion": "7",
                         "labels": template["metadata"]["labels"],
                         "annotations": template["metadata"]["annotations"],
                         "creationTimestamp": "2026-03-10T12:01:05Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": format!("train-workers-{n}"), "uid": format!("j-{n}"),
                                              "controller": true}]},
            "spec": {"schedulingGates": template["spec"]["schedulingGates"],
                     "containers": [{"name": "main",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending"},
        }))
    };
    i.pods = vec![gated(0), gated(1)];
    let t = l.turn(&i, None, noon() + minutes(2));
    let pinned = pins(&t);
    assert_eq!(pinned.len(), 2, "{:?}", kinds(&t));
    let patch = &pinned[0].1;
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    assert_eq!(patch["spec"]["schedulingGates"], json!([]));
    let terms = &patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        terms,
        &json!([
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
        ])
    );
    assert!(patches(&t).is_empty(), "the JobSet runs as placed");
    // Not asked again for the same version; asked again after a failure.
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(pins(&t).is_empty());
    let failed = crate::executor::Failure {
        action: Action::PinPod {
            namespace: NS.into(),
            name: pinned[0].0.clone(),
            resource_version: "7".into(),
            patch: patch.clone(),
        },
        error: crate::error::api_error(409, "Conflict", "the object has been modified"),
    };
    assert!(l.state.feedback(&failed).is_empty());
    let t = l.turn(&i, None, noon() + minutes(4));
    assert_eq!(pins(&t).len(), 1);
}

#[test]
fn a_train_job_is_placed_then_resumed_in_the_next_turn() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut w = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": NS, "uid": "w-tune", "resourceVersion": "1",
                     "labels": {"spillway.io/queue": "q"}},
        "spec": {"suspend": true, "runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}},
    });
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    assert_eq!(i.jobs[0].metadata.name.as_deref(), Some("trainjob-tune"));

    // Its placement is written first, the TrainJob still suspended (the Trainer lets its
    // runtime patches change only then).
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].patch["spec"]["suspend"], json!(true));
    assert!(p[0].patch["spec"]["runtimePatches"].is_array());
    let st = status_of(&t, StatusKind::GpuJob, "trainjob-tune").expect("status");
    assert_eq!(st["phase"], "Running");

    // Once the cache shows it, the suspension is lifted (once).
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon() + minutes(2));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(
        (p[0].what, &p[0].patch),
        ("run", &json!({"spec": {"suspend": false}}))
    );
    assert_eq!(p[0].job.as_deref(), Some("team/trainjob-tune"));
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(patches(&t).is_empty());

    // Resumed: nothing more is written.
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(patches(&t).is_empty(), "{:?}", patches(&t));
}

#[test]
fn a_run_whose_job_controller_is_late_keeps_its_gpus_for_ten_assume_timeouts() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p[0].what, "run", "{:?}", kinds(&t));
    // The run landed (unsuspended, placed), but the Job controller makes no pod for a while:
    // the job keeps its placement and a second Job cannot take its GPUs.
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    let other = workload("other", 2, true);
    i.workloads = vec![dynamic(&w), dynamic(&other)];
    let made = applied(&l.turn(&i, None, noon() + minutes(2)));
    i.jobs.push(stored(made[0].clone()));
    for m in [4, 12, 20] {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(patches(&t).is_empty(), "{m}: {:?}", patches(&t));
        let st = status_of(&t, StatusKind::GpuJob, "job-train");
        assert!(
            st.as_ref().is_none_or(|s| s["phase"] == "Running"),
            "{m}: {st:?}"
        );
    }
    // Ten assume timeouts without a pod: given up, the Job is held again.
    let t = l.turn(&i, None, noon() + minutes(22));
    let p = patches(&t);
    assert!(
        p.iter().any(|p| p.name == "train" && p.what == "suspend"),
        "{p:?}"
    );
}

#[test]
fn a_run_not_seen_in_the_cache_yet_is_not_decided_again_for_ten_assume_timeouts() {
    // At a thousand nodes the run's patch reached the cache minutes late: deciding the job
    // again meanwhile wrote a second placement, which the API server refused (a started Job's
    // template is immutable), and the first run's GPUs were handed to another job.
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let run = (t.actions.iter())
        .find(|a| matches!(a, Action::PatchWorkload(p) if p.what == "run"))
        .cloned()
        .expect("a run");
    // The cache still shows the Job suspended, unplaced; a second Job wants the GPUs.
    let other = workload("other", 2, true);
    i.workloads = vec![dynamic(&w), dynamic(&other)];
    let made = applied(&l.turn(&i, None, noon() + minutes(2)));
    i.jobs.push(stored(made[0].clone()));
    for m in [4, 12, 20] {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(patches(&t).is_empty(), "{m}: {:?}", patches(&t));
    }
    // A refused write gives the start up at once: the GPUs go to the job decided next.
    let again = l.state.feedback(&Failure {
        action: run,
        error: api_error(422, "Invalid", "spec.template: field is immutable"),
    });
    assert!(again.is_empty());
    let t = l.turn(&i, None, noon() + minutes(21));
    assert_eq!(patches(&t).len(), 1, "{:?}", kinds(&t));
    assert_eq!(patches(&t)[0].what, "run");
}

#[test]
fn pods_made_but_not_yet_scheduled_keep_their_replicas_nodes() {
    // At a thousand nodes the Job controller made a gang's pods minutes after the run, and
    // the scheduler bound some of them at once: the unbound ones took no GPUs (their nodes
    // were counted free, or chosen twice), other jobs were placed there, and the pods stayed
    // Pending for good.
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8), node("b", "onprem", 8)];
    let mut w = workload("wide", 4, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p[0].what, "run", "{:?}", kinds(&t));
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    // Its status as written: two replicas on each node.
    let st = written_status(&mut i, &t, "job-wide");
    assert_eq!(st["nodes"], json!(["a", "a", "b", "b"]));
    // All four pods made: two bound to a, two not scheduled yet.
    let unbound = |i: u32| {
        let mut pod = (*job_pod(&w, i, "", "Pending")).clone();
        pod.spec.as_mut().expect("spec").node_name = None;
        Arc::new(pod)
    };
    i.pods = vec![
        job_pod(&w, 0, "a", "Running"),
        job_pod(&w, 1, "a", "Running"),
        unbound(2),
        unbound(3),
    ];
    let other = workload("other", 2, true);
    i.workloads = vec![dynamic(&w), dynamic(&other)];
    let t = l.turn(&i, None, noon() + minutes(2));
    let made = applied(&t);
    assert_eq!(made.len(), 1, "{:?}", kinds(&t));
    i.jobs.push(stored(made[0].clone()));
    for m in [3, 4] {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(patches(&t).is_empty(), "{m}: {:?}", patches(&t));
        let st = status_of(&t, StatusKind::GpuJob, "job-wide");
        assert!(
            st.as_ref()
                .is_none_or(|s| s["nodes"] == json!(["a", "a", "b", "b"])),
            "{m}: {st:?}"
        );
    }
}

#[test]
fn a_replica_whose_pod_finished_keeps_its_node_for_the_pod_made_next() {
    // A Job of more completions than parallelism makes a new pod, pinned to the gang's nodes,
    // where one succeeded: that node is not free for another job meanwhile.
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 4), node("b", "onprem", 4)];
    let mut w = workload("queue", 2, true);
    w["spec"]["completions"] = json!(4);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p[0].what, "run", "{:?}", kinds(&t));
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    let st = written_status(&mut i, &t, "job-queue");
    assert_eq!(st["nodes"], json!(["a", "b"]));
    // The pod on a succeeded, the one on b runs, the next one is not scheduled yet.
    let mut next = (*job_pod(&w, 2, "", "Pending")).clone();
    next.spec.as_mut().expect("spec").node_name = None;
    i.pods = vec![
        job_pod(&w, 0, "a", "Succeeded"),
        job_pod(&w, 1, "b", "Running"),
        Arc::new(next),
    ];
    let other = workload("other", 1, true);
    i.workloads = vec![dynamic(&w), dynamic(&other)];
    let made = applied(&l.turn(&i, None, noon() + minutes(2)));
    assert_eq!(made.len(), 1);
    i.jobs.push(stored(made[0].clone()));
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(patches(&t).is_empty(), "{:?}", patches(&t));
}
