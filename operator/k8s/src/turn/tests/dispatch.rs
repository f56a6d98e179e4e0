//! Workloads in other clusters (`turn/dispatch.rs`): a labelled batch Job placed on a cluster
//! pool runs as a copy there, its pods are seen as its job's, its end is mirrored on its
//! GpuJob, and copies its job no longer runs are deleted.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use super::fixtures::*;
use super::workloads::{applied, dynamic, patches, stored, workload};
use crate::actions::{Action, StatusKind};
use crate::labels;
use crate::remote::{RemoteCluster, RemoteState};

/// Queue `q` bursting at once, private pool `onprem` with no node, and cluster pool `dc2` with
/// one 8-GPU node `gpu-1` there.
fn with_dc2() -> crate::world::Inputs {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s"}}),
    )];
    i.pools.push(cluster_pool("dc2", 1.5));
    i.remote = vec![RemoteCluster {
        pool: "dc2".into(),
        state: RemoteState::Connected,
        nodes: vec![remote_node("gpu-1", 8)],
        pods: Vec::new(),
        jobs: Vec::new(),
        jobs_problem: None,
        jobs_known: true,
        retiring: false,
    }];
    i
}

fn copies(t: &crate::turn::Turn) -> Vec<(String, Job)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateRemoteCopy { pool, copy, .. } => Some((pool.clone(), (**copy).clone())),
            _ => None,
        })
        .collect()
}

fn copy_deletions(t: &crate::turn::Turn) -> Vec<String> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteRemoteCopy { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The copy as the other cluster shows it, with `conditions`.
fn copy_there(copy: &Job, conditions: serde_json::Value) -> Arc<Job> {
    let mut c = copy.clone();
    c.metadata.uid = Some("copy-uid".into());
    c.metadata.resource_version = Some(conditions.to_string());
    c.status = Some(serde_json::from_value(json!({"conditions": conditions})).expect("status"));
    Arc::new(c)
}

/// Pod `i` that the other cluster's Job controller made from the copy's template, on `gpu-1`.
fn copy_pod(copy: &Job, i: u32, phase: &str) -> Arc<Pod> {
    let t = copy.spec.as_ref().expect("spec").template.clone();
    from(json!({
        "metadata": {"name": format!("{}-{i}", copy.name_any()), "namespace": "spillway-jobs",
                     "uid": format!("copy-pod-{i}"), "resourceVersion": phase,
                     "labels": t.metadata.as_ref().and_then(|m| m.labels.clone()),
                     "creationTimestamp": "2026-03-10T12:00:05Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": copy.name_any(), "uid": "copy-uid",
                                          "controller": true}]},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main",
                  "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        "status": {"phase": phase},
    }))
}

#[test]
fn a_labelled_job_runs_as_a_copy_in_the_other_cluster_and_its_end_comes_home() {
    let mut i = with_dc2();
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let made = applied(&t);
    assert_eq!(made.len(), 1, "{:?}", kinds(&t));
    assert_eq!(
        made[0].annotations()[spillway_api::job::PORTABILITY_ANNOTATION],
        spillway_api::job::PORTABLE
    );

    // Placed in dc2: the copy is created there, running, pinned, labelled as the job's pods
    // are; the Job at home is not run.
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(patches(&t).is_empty(), "{:?}", kinds(&t));
    assert!(creates(&t).is_empty() && remote_creates(&t).is_empty());
    let c = copies(&t);
    assert_eq!(c.len(), 1, "{:?}", kinds(&t));
    let (pool, copy) = &c[0];
    assert_eq!(pool, "dc2");
    assert_eq!(copy.name_any(), "job-train-gj-uid-0");
    assert_eq!(copy.namespace().as_deref(), Some("spillway-jobs"));
    assert_eq!(copy.labels()[labels::HOME_CLUSTER_LABEL], HOME);
    assert_eq!(copy.labels()[labels::JOB_UID_LABEL], "gj-uid");
    assert_eq!(copy.labels()[labels::ATTEMPT_LABEL], "0");
    assert_eq!(
        copy.annotations()[labels::WORKLOAD_ANNOTATION],
        "team/Job/train"
    );
    let spec = copy.spec.as_ref().expect("spec");
    assert_eq!(spec.suspend, Some(false));
    assert_eq!((spec.parallelism, spec.selector.as_ref()), (Some(2), None));
    let tl = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    let tl = tl.expect("template labels");
    for k in [
        labels::JOB_LABEL,
        labels::JOB_UID_LABEL,
        labels::JOB_NAMESPACE_LABEL,
        labels::HOME_CLUSTER_LABEL,
        labels::POOL_LABEL,
        labels::ATTEMPT_LABEL,
    ] {
        assert!(tl.contains_key(k), "{k}: {tl:?}");
    }
    let ps = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(ps.automount_service_account_token, Some(false));
    let pinned = serde_json::to_string(&ps.affinity).expect("affinity");
    assert!(
        pinned.contains("gpu-1") && !pinned.contains("dc2/"),
        "{pinned}"
    );
    let env = serde_json::to_string(&ps.containers[0].env).expect("env");
    assert!(env.contains("spillway.environment=remote"), "{env}");
    assert!(
        events(&t).contains(&("train".into(), "Dispatched".into(), false)),
        "{:?}",
        events(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(
        (st["phase"].as_str(), st["environment"].as_str()),
        (Some("Running"), Some("remote"))
    );

    // The copy and its pods appear there: the job runs on them, nothing is made again.
    i.remote[0].jobs = vec![copy_there(copy, json!([]))];
    i.remote[0].pods = vec![copy_pod(copy, 0, "Running"), copy_pod(copy, 1, "Running")];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(
        copies(&t).is_empty() && copy_deletions(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    assert!(patches(&t).is_empty(), "the Job at home stays suspended");

    // It completes there: its end is mirrored on the GpuJob; the copy stays for its logs.
    i.remote[0].jobs = vec![copy_there(
        copy,
        json!([{"type": "Complete", "status": "True",
                "lastTransitionTime": "2026-03-10T12:30:00Z"}]),
    )];
    i.remote[0].pods = vec![
        copy_pod(copy, 0, "Succeeded"),
        copy_pod(copy, 1, "Succeeded"),
    ];
    let t = l.turn(&i, None, noon() + minutes(31));
    let ended = applied(&t);
    assert_eq!(ended.len(), 1, "{:?}", kinds(&t));
    assert!(
        ended[0].annotations()[crate::workloads::FINISHED_ANNOTATION].contains("Succeeded"),
        "{:?}",
        ended[0].annotations()
    );
    assert!(copy_deletions(&t).is_empty());
    i.jobs = vec![stored(ended[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(32));
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["phase"], "Succeeded");
    assert!(copy_deletions(&t).is_empty());
    // No Job controller here saw it end: the GpuJob's Event tells it.
    assert!(
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Publish(n) if n.action == "Succeeded")),
        "{:?}",
        events(&t)
    );

    // The Job is deleted (its GpuJob with it): the copy goes, and its pods with it.
    i.jobs.clear();
    i.workloads.clear();
    let t = l.turn(&i, None, noon() + minutes(40));
    assert_eq!(copy_deletions(&t), ["job-train-gj-uid-0"]);
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::DeleteRemotePod { .. })),
        "the copy's pods go with it: {:?}",
        kinds(&t)
    );
}

#[test]
fn a_copy_of_an_earlier_attempt_is_deleted_before_the_job_runs_anywhere_else() {
    let mut i = with_dc2();
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    let (_, copy) = copies(&t).remove(0);
    // The job was requeued since (its status counts a restart): the copy of attempt 0 goes.
    let mut j = made[0].clone();
    j.status = Some(serde_json::from_value(json!({"phase": "Queued", "restarts": 1})).unwrap());
    i.jobs = vec![stored(j)];
    i.remote[0].jobs = vec![copy_there(&copy, json!([]))];
    // A home node has room now: the job is not run at home while the copy is there (a new
    // operator, so that no start of the first is still assumed).
    i.nodes = vec![node("a", "onprem", 8)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(
        copy_deletions(&t),
        ["job-train-gj-uid-0"],
        "{:?}",
        kinds(&t)
    );
    assert!(patches(&t).is_empty(), "{:?}", kinds(&t));
    // Being deleted (its pods first): still not.
    let mut going = (*i.remote[0].jobs[0]).clone();
    going.metadata.deletion_timestamp = Some(crate::clock::k8s_time(noon() + minutes(2)));
    i.remote[0].jobs = vec![Arc::new(going)];
    let t = l.turn(&i, None, noon() + minutes(3));
    assert!(
        patches(&t).is_empty() && copy_deletions(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    // Gone: it runs at home, at its new attempt.
    i.remote[0].jobs.clear();
    let t = l.turn(&i, None, noon() + minutes(4));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].what, "run");
}

#[test]
fn a_pool_whose_copies_are_not_listed_yet_holds_a_workload_that_may_go_there() {
    let mut i = with_dc2();
    i.remote[0].jobs_known = false;
    i.nodes = vec![node("a", "onprem", 8)];
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(
        patches(&t).is_empty() && copies(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["decision"]["reason"], "ClusterUnseen", "{st}");
    // Listed: it runs (at home, where there is room).
    i.remote[0].jobs_known = true;
    let t = l.turn(&i, None, noon() + minutes(2));
    assert_eq!(patches(&t).len(), 1, "{:?}", kinds(&t));
}

#[test]
fn a_job_that_cannot_run_elsewhere_and_a_pool_that_takes_no_copy_are_said_so() {
    // A Job whose pods mount a Secret of its namespace is not portable.
    let mut i = with_dc2();
    let mut w = workload("train", 2, true);
    w["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "creds", "secret": {"secretName": "s3"}}]);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    let why = made[0].annotations()[spillway_api::job::PORTABILITY_ANNOTATION].clone();
    assert!(why.contains("volumes[0] (creds): a Secret volume"), "{why}");
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(copies(&t).is_empty());
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["decision"]["reason"], "NotPortable", "{st}");

    // A portable Job, but dc2's Jobs cannot be watched: dc2 takes no copy.
    let mut i = with_dc2();
    i.remote[0].jobs_problem = Some("its Jobs cannot be watched there: 403 Forbidden".into());
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(copies(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["decision"]["reason"], "NotPortable", "{st}");
    let message = st["decision"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("pool dc2 takes no copy of a Job: its Jobs cannot be watched there"),
        "{message}"
    );
}

#[test]
fn an_operator_restarted_before_the_copys_pods_appear_takes_the_copy_for_the_start() {
    let mut i = with_dc2();
    let w = workload("train", 2, true);
    i.workloads = vec![dynamic(&w)];
    let made = applied(&Loop::new().turn(&i, None, noon()));
    i.jobs = vec![stored(made[0].clone())];
    let (_, copy) = copies(&Loop::new().turn(&i, None, noon() + minutes(1))).remove(0);
    let mut there = (*copy_there(&copy, json!([]))).clone();
    there.metadata.creation_timestamp = Some(crate::clock::k8s_time(noon() + minutes(1)));
    i.remote[0].jobs = vec![Arc::new(there)];

    // A new operator: the copy is there, its pods not yet. The job is not placed again.
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(
        copies(&t).is_empty() && copy_deletions(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    assert!(
        patches(&t).is_empty(),
        "the Job at home is not run: {:?}",
        kinds(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(
        (st["phase"].as_str(), st["pool"].as_str()),
        (Some("Running"), Some("dc2"))
    );

    // Its pods never come: past ten assume timeouts (a Job controller may be minutes behind)
    // from when it was first seen without one, the copy goes; the job is placed nowhere
    // until it is gone.
    for m in [3, 5, 21] {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(copy_deletions(&t).is_empty(), "{m}: {:?}", kinds(&t));
    }
    let t = l.turn(&i, None, noon() + minutes(23));
    assert_eq!(
        copy_deletions(&t),
        ["job-train-gj-uid-0"],
        "{:?}",
        kinds(&t)
    );
    assert!(
        copies(&t).is_empty() && patches(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    let t = l.turn(&i, None, noon() + minutes(24));
    assert!(
        copies(&t).is_empty() && copy_deletions(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn a_workload_of_a_kind_that_is_not_copied_stays_home_and_its_decision_says_why() {
    // A JobSet of one 8-GPU replica: the only free GPUs are dc2's, where Spillway makes no
    // copy of a JobSet.
    let mut i = with_dc2();
    let w = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS, "uid": "w-train",
                     "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
        "spec": {"suspend": true, "replicatedJobs": [{"name": "workers", "replicas": 1,
                 "template": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]},
    });
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    assert_eq!(made.len(), 1);
    let why = made[0].annotations()[spillway_api::job::PORTABILITY_ANNOTATION].clone();
    assert_eq!(
        why,
        "it is a JobSet: Spillway dispatches only batch/v1 Jobs to other clusters"
    );
    i.jobs = vec![stored(made[0].clone())];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(
        copies(&t).is_empty() && patches(&t).is_empty() && remote_creates(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "jobset-train").expect("status");
    assert_eq!(st["decision"]["reason"], "NotPortable", "{st}");
    let message = st["decision"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&why), "{message}");
}
