use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::pod_group::{PodGroup, groups};
use super::tests::merge;
use super::*;

fn pod(name: &str, extra: Value) -> Arc<Pod> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}"),
                     "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
        "spec": {"schedulingGates": [{"name": PLACEMENT_GATE}],
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    });
    merge(&mut p, extra);
    Arc::new(serde_json::from_value(p).expect("a pod"))
}

fn in_group(name: &str, size: &str) -> Arc<Pod> {
    pod(
        name,
        json!({"metadata": {"labels": {"spillway.io/pod-group": "g", "spillway.io/pod-group-size": size}}}),
    )
}

#[test]
fn only_held_or_placed_plain_pods_form_groups_and_a_lone_pod_is_a_group_of_one() {
    let owned = pod(
        "of-a-job",
        json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
            "name": "j", "uid": "j", "controller": true}]}}),
    );
    let ungated = pod(
        "made-without-webhook",
        json!({"spec": {"schedulingGates": null}}),
    );
    let unlabelled = pod("plain", json!({"metadata": {"labels": null}}));
    let lone = pod("lone", json!({}));
    let all = [
        owned,
        ungated,
        unlabelled,
        lone,
        in_group("g-1", "2"),
        in_group("g-0", "2"),
    ];
    let found = groups(&all);
    let names: Vec<_> = found.iter().map(|g| g.name_any()).collect();
    assert_eq!(names, ["g", "lone"]);
    let g = &found[0];
    assert_eq!(
        PodGroup.shape(g).unwrap(),
        Shape {
            replicas: 2,
            gpus_per_replica: 8
        }
    );
    assert!(PodGroup.incomplete(g).is_none() && PodGroup.ready_to_run(g));
    let owners: Vec<_> = PodGroup.owners(g).into_iter().map(|o| o.name).collect();
    assert_eq!(owners, ["g-0", "g-1"]);
    assert_eq!(PodGroup.shape(&found[1]).unwrap().replicas, 1);
    let gj = gpu_job_for(&PodGroup, g).unwrap();
    assert_eq!(gj.metadata.name.as_deref(), Some("pod-g"));
    assert!(stands_for(&PodGroup, &gj, g));

    // A member more or less changes the group's version (its GpuJob is made again).
    let fewer = groups(&all[..5]);
    assert_ne!(
        fewer[0].metadata.resource_version,
        g.metadata.resource_version
    );
    assert_eq!(
        PodGroup.incomplete(&fewer[0]).as_deref(),
        Some("1 of its 2 pods made")
    );
}

#[test]
fn a_group_that_cannot_run_as_labelled_says_why() {
    let too_many = groups(&[in_group("a", "1"), in_group("b", "1")]);
    assert!(
        PodGroup
            .shape(&too_many[0])
            .unwrap_err()
            .contains("its size")
    );
    let bad_size = groups(&[in_group("a", "two")]);
    assert!(
        PodGroup
            .shape(&bad_size[0])
            .unwrap_err()
            .contains("spillway.io/pod-group-size")
    );
    let restartable = groups(&[pod(
        "r",
        json!({"metadata": {"annotations": {"spillway.io/restartable": "true"}}}),
    )]);
    assert!(
        PodGroup
            .shape(&restartable[0])
            .unwrap_err()
            .contains("cannot be restarted")
    );
    let cpu = groups(&[pod("cpu", json!({"spec": {"containers": [{"name": "c"}]}}))]);
    assert!(
        PodGroup
            .shape(&cpu[0])
            .unwrap_err()
            .contains("nvidia.com/gpu")
    );
}

#[test]
fn a_pod_is_held_by_adding_the_gate_once_beside_its_own() {
    let fresh = json!({"spec": {"containers": []}});
    assert_eq!(
        PodGroup.hold_ops(&fresh),
        [
            json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": PLACEMENT_GATE}]})
        ]
    );
    let own = json!({"spec": {"schedulingGates": [{"name": "example.com/mine"}]}});
    assert_eq!(
        PodGroup.hold_ops(&own)[0]["value"],
        json!([{"name": "example.com/mine"}, {"name": PLACEMENT_GATE}])
    );
    let held = json!({"spec": {"schedulingGates": [{"name": PLACEMENT_GATE}]}});
    assert!(PodGroup.hold_ops(&held).is_empty());
}

#[test]
fn a_failed_member_fails_the_group_and_all_succeeded_completes_it() {
    let done = |name: &str, phase: &str| {
        pod(
            name,
            json!({"metadata": {"labels": {"spillway.io/pod-group": "g",
            "spillway.io/pod-group-size": "2", "spillway.io/job-uid": "gj"}},
            "spec": {"schedulingGates": null}, "status": {"phase": phase, "reason": "OOMKilled"}}),
        )
    };
    let g = groups(&[done("a", "Succeeded"), done("b", "Running")]);
    assert!(PodGroup.finished(&g[0]).is_none());
    let g = groups(&[done("a", "Succeeded"), done("b", "Succeeded")]);
    assert!(PodGroup.finished(&g[0]).unwrap().succeeded());
    let g = groups(&[done("a", "Failed"), done("b", "Running")]);
    let f = PodGroup.finished(&g[0]).unwrap();
    assert!(
        !f.succeeded() && f.message.contains("pod a failed: OOMKilled"),
        "{f:?}"
    );
    // Suspending it deletes its pods: a pod that ran cannot be held again.
    let writes = PodGroup.suspend(&g[0]);
    assert!(
        writes.iter().all(|w| matches!(
            w,
            Write::Delete {
                grace_seconds: 30,
                ..
            }
        )) && writes.len() == 2,
        "{writes:?}"
    );
}

#[test]
fn an_unchanged_group_is_handed_out_as_the_same_copy() {
    let mut kept = crate::hashing::HashMap::default();
    let (a, b) = (in_group("g-0", "2"), in_group("g-1", "2"));
    let first = super::pod_group::groups_kept(&[a.clone(), b.clone()], &mut kept);
    let again = super::pod_group::groups_kept(&[a.clone(), b.clone()], &mut kept);
    assert!(Arc::ptr_eq(&first[0], &again[0]));
    // A member's new version makes a new copy, and a group gone is forgotten.
    let mut b2 = (*b).clone();
    b2.metadata.resource_version = Some("2".into());
    let changed = super::pod_group::groups_kept(&[a.clone(), Arc::new(b2)], &mut kept);
    assert!(!Arc::ptr_eq(&first[0], &changed[0]));
    super::pod_group::groups_kept(&[], &mut kept);
    assert!(kept.is_empty());
}
