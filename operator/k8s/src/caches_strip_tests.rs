//! The Pod cache keeps of foreign pods only what the turn reads ([`super::strip_pod`]).
use super::*;
use crate::world::{pod_active, pod_gpus, pod_node};

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_foreign_pod_keeps_what_the_turn_reads_and_nothing_else() {
    let full = pod(serde_json::json!({
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "annotations": {"note": "x"},
                     "managedFields": [{"manager": "kubectl"}],
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "web", "uid": "rs"}]},
        "spec": {"nodeName": "gpu-1",
                 "initContainers": [{"name": "warm", "image": "i",
                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                 "containers": [
                     {"name": "app", "image": "web:1", "env": [{"name": "A", "value": "b"}],
                      "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"},
                                    "requests": {"memory": "1Gi"}}},
                     {"name": "sidecar", "image": "log:1",
                      "resources": {"limits": {"cpu": "100m"}}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "",
                                          "ready": true, "restartCount": 0}]},
    }));
    let mut lean = full.clone();
    strip_pod(&mut lean);
    assert_eq!(pod_gpus(&lean), pod_gpus(&full));
    assert_eq!(pod_gpus(&lean), 2);
    assert_eq!(pod_node(&lean), Some("gpu-1".into()));
    assert!(pod_active(&lean));
    assert_eq!(
        {
            let mut v = serde_json::to_value(&lean).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("apiVersion");
            o.remove("kind");
            v
        },
        serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                         "resourceVersion": "7"},
            "spec": {"nodeName": "gpu-1",
                     "initContainers": [{"name": "warm",
                         "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                     "containers": [{"name": "app",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"},
        })
    );
}

#[test]
fn spillways_own_pods_are_kept_whole_but_for_managed_fields() {
    let mut ours = pod(serde_json::json!({
        "metadata": {"name": "train-0-0", "namespace": "team",
                     "labels": {"spillway.io/job": "train"},
                     "managedFields": [{"manager": "spillway"}]},
        "spec": {"containers": [{"name": "c", "image": "x", "env": [{"name": "A", "value": "b"}]}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "image": "x",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 3}}}]},
    }));
    let mut want = ours.clone();
    want.metadata.managed_fields = None;
    strip_pod(&mut ours);
    assert_eq!(ours, want);
}
