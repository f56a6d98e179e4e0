use serde_json::json;

use super::*;

fn job(extra: serde_json::Value) -> DynamicObject {
    let mut base = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "w-uid",
                     "labels": {"spillway.io/queue": "research"}},
        "spec": {
            "parallelism": 2,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "pytorch",
                                "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            }},
        },
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("a Job")
}

/// The one patch `writes` make, of workload `w` itself.
pub(super) fn patch_of(w: &DynamicObject, writes: Vec<Write>) -> serde_json::Value {
    match &writes[..] {
        [Write::Patch { name, patch }] if Some(name) == w.metadata.name.as_ref() => patch.clone(),
        other => panic!("one patch of the workload itself, not {other:?}"),
    }
}

pub(super) fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn a_labelled_job_stands_as_a_gpu_job_of_its_shape_and_annotations() {
    let w = job(json!({"metadata": {"annotations": {
        "spillway.io/estimatedRuntime": "2h",
        "spillway.io/restartable": "true",
        "spillway.io/priority": "5",
        "spillway.io/datasets": "imagenet, contracts",
        "spillway.io/placement": "PrivateOnly",
        "spillway.io/deadline": "2026-12-24T18:00:00Z",
        "spillway.io/requirements": "{\"minCudaVersion\": \"12.4\"}",
    }}}));
    let gj = gpu_job_for(&BatchJob, &w).expect("a GpuJob");
    assert_eq!(gj.metadata.name.as_deref(), Some("job-train"));
    assert_eq!(gj.metadata.namespace.as_deref(), Some("ml"));
    let owner = &gj.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Job", "w-uid", Some(true))
    );
    let s = &gj.spec;
    assert_eq!(
        (s.queue.as_str(), s.replicas, s.gpus_per_replica),
        ("research", 2, 4)
    );
    assert_eq!(s.estimated_runtime.as_deref(), Some("2h"));
    assert!(s.restartable);
    assert_eq!(s.priority, 5);
    assert_eq!(s.datasets, ["imagenet", "contracts"]);
    assert_eq!(s.placement, spillway_core::Placement::PrivateOnly);
    assert!(s.deadline.is_some());
    assert_eq!(
        s.requirements.as_ref().unwrap().min_cuda_version.as_deref(),
        Some("12.4")
    );
    assert!(s.template.is_none());
    let r = s.workload_ref.as_ref().unwrap();
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str(), r.name.as_str()),
        ("batch/v1", "Job", "train")
    );
    assert!(stands_for(&BatchJob, &gj, &w));
}

#[test]
fn completions_cap_the_gang_and_a_job_without_gpus_is_refused_by_name() {
    let w = job(json!({"spec": {"parallelism": 8, "completions": 3}}));
    assert_eq!(BatchJob.shape(&w).unwrap().replicas, 3);
    let w = job(
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}),
    );
    let e = gpu_job_for(&BatchJob, &w).unwrap_err();
    assert!(e.contains("nvidia.com/gpu"), "{e}");
    let w = job(json!({"metadata": {"annotations": {"spillway.io/estimatedRuntime": "soon"}}}));
    let e = gpu_job_for(&BatchJob, &w).unwrap_err();
    assert!(
        e.starts_with("annotation spillway.io/estimatedRuntime:"),
        "{e}"
    );
    let w = job(json!({"metadata": {"annotations": {"spillway.io/placement": "Anywhere"}}}));
    let e = gpu_job_for(&BatchJob, &w).unwrap_err();
    assert!(e.contains("Auto, PrivateOnly or CloudOnly"), "{e}");
}

#[test]
fn long_names_are_shortened_with_a_hash_and_stay_distinct() {
    let a = gpu_job_name("Job", &"a".repeat(80));
    let b = gpu_job_name("Job", &format!("{}b", "a".repeat(79)));
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert_eq!(gpu_job_name("Job", "x"), "job-x");
}

#[test]
fn the_end_of_a_job_is_read_from_its_final_conditions() {
    let running = job(json!({"status": {"conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"}]}}));
    assert_eq!(BatchJob.finished(&running), None);
    let done = job(json!({"status": {"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-06T04:00:00Z"}]}}));
    let f = BatchJob.finished(&done).unwrap();
    assert!(f.succeeded());
    assert_eq!(f.at.as_deref(), Some("2026-12-06T04:00:00Z"));
    let failed = job(json!({"status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}));
    let f = BatchJob.finished(&failed).unwrap();
    assert!(!f.succeeded());
    assert!(
        f.message.starts_with("BackoffLimitExceeded:"),
        "{}",
        f.message
    );
    // Mirrored on the GpuJob, it is read back.
    let gj = gpu_job_for(&BatchJob, &failed).unwrap();
    assert_eq!(finished_of(&gj), Some(f));
}

#[test]
fn running_lifts_the_suspension_and_writes_the_placement_into_the_template() {
    let w = job(json!({"spec": {"suspend": true, "template": {"spec": {
        "tolerations": [{"key": "team", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    }}}}));
    assert!(BatchJob.suspended(&w));
    let mut gj = gpu_job_for(&BatchJob, &w).unwrap();
    gj.metadata.uid = Some("gj-uid".into());
    let pool: ComputePool = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
        "metadata": {"name": "burst"},
        "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["p4d.24xlarge"]},
                 "nodeTaints": [{"key": "spillway.io/burst", "value": "true", "effect": "NoSchedule"}]},
    }))
    .expect("a pool");
    let nodes = ["n2".to_string(), "n1".to_string()];
    let placement = Placement {
        job: &gj,
        attempt: 3,
        pool: Some(&pool),
        nodes: &nodes,
    };
    let patch = patch_of(&w, BatchJob.run(&w, &placement).unwrap());
    assert_eq!(patch["spec"]["suspend"], json!(false));
    let labels = &patch["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["spillway.io/job"], "job-train");
    assert_eq!(labels["spillway.io/job-uid"], "gj-uid");
    assert_eq!(labels["spillway.io/attempt"], "3");
    assert_eq!(labels["spillway.io/pool"], "burst");
    let terms = &patch["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    // The template's own term is kept, and narrowed to each chosen node (one value per
    // `metadata.name` selector, as the API server requires; terms are ORed).
    assert_eq!(terms.as_array().unwrap().len(), 2, "{terms}");
    for (term, node) in terms.as_array().unwrap().iter().zip(["n1", "n2"]) {
        assert_eq!(term["matchExpressions"][0]["key"], "zone");
        assert_eq!(
            term["matchFields"],
            json!([{"key": "metadata.name", "operator": "In", "values": [node]}])
        );
    }
    let tolerations = patch["spec"]["template"]["spec"]["tolerations"]
        .as_array()
        .unwrap();
    assert_eq!(tolerations.len(), 2, "{tolerations:?}");
    assert_eq!(tolerations[1]["key"], "spillway.io/burst");
    assert_eq!(
        patch_of(&w, BatchJob.suspend(&w)),
        json!({"spec": {"suspend": true}})
    );

    // Once the patch is in, the template says which attempt of which job it is placed for.
    let mut placed = json!(w.clone());
    merge(&mut placed, patch);
    let placed: DynamicObject = serde_json::from_value(placed).unwrap();
    assert_eq!(BatchJob.placed_attempt(&placed, "gj-uid"), Some(3));
    assert_eq!(BatchJob.placed_attempt(&placed, "other"), None);
    assert_eq!(BatchJob.placed_attempt(&w, "gj-uid"), None);
}

#[test]
fn kinds_are_found_by_their_integration_name_and_their_type() {
    assert_eq!(by_integration("batch/job").map(|k| k.kind()), Some("Job"));
    assert!(by_integration("batch/cronjob").is_none());
    assert_eq!(kind_of(&job(json!({}))).map(|k| k.plural()), Some("jobs"));
    let r = api_resource(&BatchJob);
    assert_eq!(
        (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
        ("batch", "v1", "jobs")
    );
}

#[test]
fn a_path_reads_what_a_json_pointer_reads() {
    use super::At;
    let v = serde_json::json!({"spec": {"template": {"metadata": {"labels": {"a": "1"}}},
                               "list": [{"x": 1}, {"y": 2}]}});
    for path in [
        "",
        "/spec",
        "/spec/template/metadata/labels",
        "/spec/template/metadata/labels/a",
        "/spec/list/1/y",
        "/spec/list/2",
        "/spec/list/x",
        "/spec/missing/deeper",
        "spec",
    ] {
        assert_eq!(v.at(path), v.pointer(path), "{path}");
    }
}
