//! Pod groups (`crate::workloads::pod_group`): labelled plain pods queued as one gang once the
//! group is complete, run by patching each pod, and ended when their job moves on.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use spillway_api::GpuJob;

use super::fixtures::*;
use crate::actions::{Action, StatusKind, WorkloadPatch};
use crate::workloads::pod_group;

/// Pod `name` of group `g` (size 2), held at the gate, asking for 4 GPUs.
fn member(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "creationTimestamp": "2026-03-10T12:00:05Z",
                     "labels": {"spillway.io/queue": "q", "spillway.io/pod-group": "g",
                                "spillway.io/pod-group-size": "2"}},
        "spec": {"schedulingGates": [{"name": "spillway.io/placement"}],
                 "containers": [{"name": "main", "image": "trainer",
                                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        "status": {"phase": "Pending"},
    })
}

/// `pods` as the cache holds them, with the groups they form as the turn's workloads.
fn seen(i: &mut crate::world::Inputs, pods: &[&Value]) {
    i.pods = pods.iter().map(|p| from::<Pod>((*p).clone())).collect();
    i.workloads = pod_group::groups(&i.pods);
}

fn applied(t: &crate::turn::Turn) -> Vec<GpuJob> {
    (t.actions.iter())
        .filter_map(|a| match a {
            Action::ApplyWorkloadJob(j) => Some((**j).clone()),
            _ => None,
        })
        .collect()
}

fn patches(t: &crate::turn::Turn) -> Vec<WorkloadPatch> {
    (t.actions.iter())
        .filter_map(|a| match a {
            Action::PatchWorkload(p) => Some((**p).clone()),
            _ => None,
        })
        .collect()
}

/// What the API server stores after a pod's run patch (a merge patch; the scheduler then
/// binds it to `node`).
fn landed(pod: &Value, patch: &Value, node: &str) -> Value {
    let mut p = pod.clone();
    let labels = p["metadata"]["labels"].as_object_mut().unwrap();
    for (k, v) in patch["metadata"]["labels"].as_object().unwrap() {
        labels.insert(k.clone(), v.clone());
    }
    p["metadata"]["resourceVersion"] = json!("2");
    p["spec"]["schedulingGates"] = patch["spec"]["schedulingGates"].clone();
    p["spec"]["affinity"] = patch["spec"]["affinity"].clone();
    p["spec"]["nodeName"] = json!(node);
    p["status"]["phase"] = json!("Running");
    p
}

fn stored(mut j: GpuJob) -> Arc<GpuJob> {
    j.metadata.uid = Some("gj-uid".into());
    j.metadata.generation = Some(1);
    Arc::new(j)
}

#[test]
fn a_pod_group_is_queued_once_complete_and_run_by_patching_each_pod() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let (p0, p1) = (member("g-0"), member("g-1"));
    let mut l = Loop::new();

    // One of its two pods made: nothing is queued yet.
    seen(&mut i, &[&p0]);
    let t = l.turn(&i, None, noon());
    assert!(applied(&t).is_empty(), "{:?}", kinds(&t));

    // Complete: its GpuJob is made, owned by both pods.
    seen(&mut i, &[&p0, &p1]);
    let t = l.turn(&i, None, noon());
    let made = applied(&t);
    assert_eq!(made.len(), 1, "{:?}", kinds(&t));
    assert_eq!(made[0].metadata.name.as_deref(), Some("pod-g"));
    assert_eq!(
        (made[0].spec.replicas, made[0].spec.gpus_per_replica),
        (2, 4)
    );
    let owners: Vec<&str> = (made[0].metadata.owner_references.iter().flatten())
        .map(|o| o.uid.as_str())
        .collect();
    assert_eq!(owners, ["uid-g-0", "uid-g-1"]);
    let r = made[0].spec.workload_ref.as_ref().unwrap();
    assert_eq!((r.kind.as_str(), r.name.as_str()), ("Pod", "g"));

    // It fits: each pod is patched (labels, pin, gate lifted); none is made by Spillway.
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(creates(&t).is_empty());
    let p = patches(&t);
    let objects: Vec<&str> = p.iter().map(|p| p.object.as_str()).collect();
    assert_eq!(objects, ["g-0", "g-1"], "{:?}", kinds(&t));
    for w in &p {
        assert_eq!((w.what, w.name.as_str()), ("run", "g"));
        assert_eq!(w.job.as_deref(), Some("team/pod-g"));
        assert!(w.patch["spec"]["schedulingGates"].is_null(), "{}", w.patch);
        assert_eq!(
            w.patch["metadata"]["labels"]["spillway.io/job-uid"],
            "gj-uid"
        );
        assert_eq!(w.patch["metadata"]["resourceVersion"], "1");
        let term = &w.patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0];
        assert_eq!(term["matchFields"][0]["values"], json!(["a"]));
    }
    let st = status_of(&t, StatusKind::GpuJob, "pod-g").expect("status");
    assert_eq!(st["phase"], "Running");
    let mut gj = (*i.jobs[0]).clone();
    gj.status = Some(serde_json::from_value(st).unwrap());
    i.jobs = vec![Arc::new(gj)];

    // Only the first patch landed (the second was refused, its start dropped): the run is
    // completed for the pod still at the gate, on the job's node.
    let run0 = landed(&p0, &p[0].patch, "a");
    seen(&mut i, &[&run0, &p1]);
    let t = l.turn(&i, None, noon() + minutes(2));
    let again = patches(&t);
    assert_eq!(again.len(), 1, "{:?}", kinds(&t));
    assert_eq!((again[0].object.as_str(), again[0].what), ("g-1", "run"));
    let node = &again[0].patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchFields"][0]["values"];
    assert_eq!(node, &json!(["a"]));
    // Not asked twice for the same versions.
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(patches(&t).is_empty());

    // Both run, then succeed: the end is mirrored on the job.
    let run1 = landed(&p1, &again[0].patch, "a");
    seen(&mut i, &[&run0, &run1]);
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(patches(&t).is_empty(), "{:?}", patches(&t));
    assert!(
        !(t.actions.iter()).any(|a| matches!(a, Action::EvictPod { .. })),
        "{:?}",
        kinds(&t)
    );
    let (mut d0, mut d1) = (run0.clone(), run1.clone());
    for d in [&mut d0, &mut d1] {
        d["status"]["phase"] = json!("Succeeded");
        d["metadata"]["resourceVersion"] = json!("3");
    }
    seen(&mut i, &[&d0, &d1]);
    let t = l.turn(&i, None, noon() + minutes(30));
    let mirrored = applied(&t);
    assert_eq!(mirrored.len(), 1, "{:?}", kinds(&t));
    let end = crate::workloads::finished_of(&mirrored[0]).expect("its end");
    assert!(end.succeeded());
}

#[test]
fn a_running_pod_group_whose_job_moves_on_is_ended_and_a_bad_one_is_told_why() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8), node("b", "onprem", 8)];
    let (p0, p1) = (member("g-0"), member("g-1"));
    seen(&mut i, &[&p0, &p1]);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p.len(), 2);
    let st = status_of(&t, StatusKind::GpuJob, "pod-g").expect("status");
    let mut gj = (*i.jobs[0]).clone();
    gj.status = Some(serde_json::from_value(st).unwrap());
    i.jobs = vec![Arc::new(gj)];
    let node = p[0].patch["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"]
        [0]["values"][0]
        .as_str()
        .unwrap()
        .to_string();
    let (r0, r1) = (
        landed(&p0, &p[0].patch, &node),
        landed(&p1, &p[1].patch, &node),
    );
    seen(&mut i, &[&r0, &r1]);
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(patches(&t).is_empty());

    // Its node goes: the job is requeued, and its pods (which cannot be held again) deleted.
    i.nodes
        .retain(|n| n.metadata.name.as_deref() != Some(&node));
    let t = l.turn(&i, None, noon() + minutes(3));
    let evicted: Vec<&str> = (t.actions.iter())
        .filter_map(|a| match a {
            Action::EvictPod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, ["g-0", "g-1"], "{:?}", kinds(&t));

    // A group whose pods ask for different GPUs gets no GpuJob and a Warning on a pod.
    let mut odd = member("h-1");
    odd["metadata"]["labels"]["spillway.io/pod-group"] = json!("h");
    odd["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
    let mut even = member("h-0");
    even["metadata"]["labels"]["spillway.io/pod-group"] = json!("h");
    seen(&mut i, &[&even, &odd]);
    i.jobs.clear();
    let t = l.turn(&i, None, noon() + minutes(4));
    assert!(applied(&t).is_empty());
    let warned = t.actions.iter().any(|a| {
        matches!(a, Action::Publish(n)
        if n.warning && n.reason == "WorkloadInvalid" && n.note.contains("the same")
            && n.regarding.name.as_deref() == Some("h-0"))
    });
    assert!(warned, "{:?}", kinds(&t));
}
