//! The bad (and good) objects the CRDs' CEL rules are tested with: evaluated in
//! `operator/api/tests/cel_rules.rs` as the API server evaluates them, and applied to a real API
//! server by `tests/tests/crd_rules.rs`. Each case names the messages it must be refused with
//! (after the path of the value that breaks the rule; none for the object itself).

use serde_json::{Value, json};

pub fn job(spec: Value) -> Value {
    let mut base = json!({
        "queue": "research",
        "gpusPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "train", "image": "pytorch:2"}]}},
    });
    for (k, v) in spec.as_object().expect("an object") {
        base[k] = v.clone();
    }
    json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob", "spec": base})
}

pub fn with_phase(mut object: Value, phase: &str) -> Value {
    object["status"] = json!({"phase": phase});
    object
}

pub fn aws(extra: Value) -> Value {
    let mut base = json!({"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g5.xlarge"]});
    for (k, v) in extra.as_object().expect("an object") {
        base[k] = v.clone();
    }
    base
}

pub fn spec(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "spillway.io/v1alpha1", "kind": kind, "spec": spec})
}

/// An object, the object before an update (none for a creation) and the refusals expected.
pub struct Case {
    pub kind: &'static str,
    pub what: &'static str,
    pub object: Value,
    pub old: Option<Value>,
    pub refusals: &'static [&'static str],
}

pub fn cases() -> Vec<Case> {
    let private = json!({"private": {"nodeSelector": {"gpu": "yes"}}});
    let cluster = json!({"cluster": {"kubeconfigSecretRef": {"name": "dc2", "namespace": "spillway-system"}, "namespace": "gpu-jobs", "gpuCostPerHour": 0.8, "location": "dc-east"}});
    let workload = json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train"});
    vec![
        Case {
            kind: "GpuJob",
            what: "a job standing for a workload has no template",
            object: {
                let mut j = job(json!({"workloadRef": workload}));
                j["spec"].as_object_mut().unwrap().remove("template");
                j
            },
            old: None,
            refusals: &[],
        },
        Case {
            kind: "GpuJob",
            what: "a template and a workload at once",
            object: job(json!({"workloadRef": workload})),
            old: None,
            refusals: &[
                "spec: set exactly one of template (the pods Spillway makes) or workloadRef (the workload whose pods are run)",
            ],
        },
        Case {
            kind: "GpuJob",
            what: "a topology wish names one level",
            object: job(json!({"topology": {"required": "spillway.io/rack"}})),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "GpuJob",
            what: "a topology wish both required and preferred",
            object: job(json!({"topology": {"required": "spillway.io/rack",
                                            "preferred": "spillway.io/block"}})),
            old: None,
            refusals: &["spec.topology: set exactly one of required and preferred"],
        },
        Case {
            kind: "GpuJob",
            what: "a queued job may move to another queue",
            object: job(json!({"queue": "other"})),
            old: Some(with_phase(job(json!({})), "Queued")),
            refusals: &[],
        },
        Case {
            kind: "GpuJob",
            what: "a job without a status may move",
            object: job(json!({"queue": "other", "replicas": 2})),
            old: Some(job(json!({}))),
            refusals: &[],
        },
        Case {
            kind: "GpuJob",
            what: "a running job keeps its queue",
            object: job(json!({"queue": "other"})),
            old: Some(with_phase(job(json!({})), "Running")),
            refusals: &[
                "spec.queue cannot change once the job has been admitted: delete the job and submit it to the other queue",
            ],
        },
        Case {
            kind: "GpuJob",
            what: "a running job keeps its shape",
            object: job(json!({"replicas": 2})),
            old: Some(with_phase(job(json!({})), "Running")),
            refusals: &[
                "spec.replicas and spec.gpusPerReplica cannot change once the job has been admitted: delete the job and submit it again",
            ],
        },
        Case {
            kind: "GpuJob",
            what: "a provisioning job keeps its GPUs per replica",
            object: job(json!({"gpusPerReplica": 4})),
            old: Some(with_phase(job(json!({})), "Provisioning")),
            refusals: &[
                "spec.replicas and spec.gpusPerReplica cannot change once the job has been admitted: delete the job and submit it again",
            ],
        },
        Case {
            kind: "GpuJob",
            what: "a running job may change its priority",
            object: job(json!({"priority": 5})),
            old: Some(with_phase(job(json!({})), "Running")),
            refusals: &[],
        },
        Case {
            kind: "GpuQueue",
            what: "namespaces and a selector at once",
            object: spec(
                "GpuQueue",
                json!({"namespaces": ["a"], "namespaceSelector": {"matchLabels": {"t": "a"}}}),
            ),
            old: None,
            refusals: &["spec: set either namespaces or namespaceSelector, not both"],
        },
        Case {
            kind: "GpuQueue",
            what: "an empty list beside a selector",
            object: spec(
                "GpuQueue",
                json!({"namespaces": [], "namespaceSelector": {"matchLabels": {"t": "a"}}}),
            ),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "GpuQueue",
            what: "an hourly budget above the monthly one",
            object: spec(
                "GpuQueue",
                json!({"budget": {"monthlyUSD": 100, "hourlyUSD": 150.5}}),
            ),
            old: None,
            refusals: &[
                "spec.budget: hourlyUSD exceeds monthlyUSD: the month's budget would be spent within the hour",
            ],
        },
        Case {
            kind: "GpuQueue",
            what: "equal budgets",
            object: spec(
                "GpuQueue",
                json!({"budget": {"monthlyUSD": 10, "hourlyUSD": 10}}),
            ),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "ComputePool",
            what: "both private and aws",
            object: spec(
                "ComputePool",
                json!({"private": {"nodeSelector": {"gpu": "yes"}}, "aws": aws(json!({}))}),
            ),
            old: None,
            refusals: &["spec: set exactly one of private, aws and cluster"],
        },
        Case {
            kind: "ComputePool",
            what: "neither private nor aws",
            object: spec("ComputePool", json!({"idleTimeout": "5m"})),
            old: None,
            refusals: &["spec: set exactly one of private, aws and cluster"],
        },
        Case {
            kind: "ComputePool",
            what: "a cluster pool",
            object: spec("ComputePool", cluster.clone()),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "ComputePool",
            what: "both private and cluster",
            object: spec(
                "ComputePool",
                json!({"private": {"nodeSelector": {"gpu": "yes"}}, "cluster": cluster["cluster"].clone()}),
            ),
            old: None,
            refusals: &["spec: set exactly one of private, aws and cluster"],
        },
        Case {
            kind: "ComputePool",
            what: "a cluster pool turned into a private one",
            object: spec("ComputePool", private.clone()),
            old: Some(spec("ComputePool", cluster.clone())),
            refusals: &[
                "spec: a pool cannot change between private, aws and cluster: create another pool and delete this one",
            ],
        },
        Case {
            kind: "ComputePool",
            what: "a private pool that selects every node",
            object: spec("ComputePool", json!({"private": {"nodeSelector": {}}})),
            old: None,
            refusals: &[
                "spec.private: nodeSelector must name at least one label, or the pool would claim every node of the cluster",
            ],
        },
        Case {
            kind: "ComputePool",
            what: "a private pool without a selector",
            object: spec("ComputePool", json!({"private": {}})),
            old: None,
            refusals: &[
                "spec.private: nodeSelector must name at least one label, or the pool would claim every node of the cluster",
            ],
        },
        Case {
            kind: "ComputePool",
            what: "a launch template by id and name",
            object: spec(
                "ComputePool",
                json!({"aws": aws(json!({"launchTemplate": {"id": "lt-1", "name": "gpu"}}))}),
            ),
            old: None,
            refusals: &["spec.aws.launchTemplate: set exactly one of id and name"],
        },
        Case {
            kind: "ComputePool",
            what: "a launch template by neither",
            object: spec(
                "ComputePool",
                json!({"aws": aws(json!({"launchTemplate": {"version": "3"}}))}),
            ),
            old: None,
            refusals: &["spec.aws.launchTemplate: set exactly one of id and name"],
        },
        Case {
            kind: "ComputePool",
            what: "a taint of an unknown effect",
            object: spec(
                "ComputePool",
                json!({"aws": aws(json!({})), "nodeTaints": [{"key": "gpu", "effect": "NoRun"}]}),
            ),
            old: None,
            refusals: &[
                "spec.nodeTaints: a taint's effect is NoSchedule, PreferNoSchedule or NoExecute",
            ],
        },
        Case {
            kind: "ComputePool",
            what: "a private pool turned into an aws one",
            object: spec("ComputePool", json!({"aws": aws(json!({}))})),
            old: Some(spec("ComputePool", private.clone())),
            refusals: &[
                "spec: a pool cannot change between private, aws and cluster: create another pool and delete this one",
            ],
        },
        Case {
            kind: "ComputePool",
            what: "a private pool that changes its selector",
            object: spec(
                "ComputePool",
                json!({"private": {"nodeSelector": {"gpu": "h100"}}}),
            ),
            old: Some(spec("ComputePool", private)),
            refusals: &[],
        },
        Case {
            kind: "Dataset",
            what: "an aws copy without a region",
            object: spec(
                "Dataset",
                json!({"classification": "Internal", "locations": [{"environment": "aws", "uri": "s3://b/k"}]}),
            ),
            old: None,
            refusals: &["spec.locations[0]: an aws location needs a region"],
        },
        Case {
            kind: "Dataset",
            what: "a remote copy without a region",
            object: spec(
                "Dataset",
                json!({"classification": "Internal", "locations": [{"environment": "remote", "uri": "nfs://dc2/k"}]}),
            ),
            old: None,
            refusals: &[
                "spec.locations[0]: a remote location needs a region: the location of its cluster pool",
            ],
        },
        Case {
            kind: "Dataset",
            what: "a remote copy beside a cluster pool",
            object: spec(
                "Dataset",
                json!({"classification": "Internal", "locations": [{"environment": "remote", "region": "dc-east"}]}),
            ),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "Dataset",
            what: "an aws copy with an empty region",
            object: spec(
                "Dataset",
                json!({"classification": "Internal", "locations": [{"environment": "aws", "region": ""}]}),
            ),
            old: None,
            refusals: &["spec.locations[0]: an aws location needs a region"],
        },
        Case {
            kind: "Dataset",
            what: "a private copy needs no region",
            object: spec(
                "Dataset",
                json!({"classification": "Internal", "locations": [{"environment": "private"}]}),
            ),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "BurstPolicy",
            what: "a rule that forbids and requires the cloud",
            object: spec(
                "BurstPolicy",
                json!({"rules": [{"name": "r", "forbid": "cloud", "require": "cloud"}]}),
            ),
            old: None,
            refusals: &["spec.rules[0]: a rule cannot forbid and require the same environment"],
        },
        Case {
            kind: "BurstPolicy",
            what: "a rule that forbids the cloud and requires private nodes",
            object: spec(
                "BurstPolicy",
                json!({"rules": [{"name": "r", "forbid": "cloud", "require": "private"}]}),
            ),
            old: None,
            refusals: &[],
        },
        Case {
            kind: "BurstPolicy",
            what: "a rule that lets Restricted data burst",
            object: spec(
                "BurstPolicy",
                json!({"rules": [{"name": "r", "allowClassifications": ["Confidential", "Restricted"]}]}),
            ),
            old: None,
            refusals: &[
                "spec.rules[0]: Restricted data never leaves private nodes and cannot be allowed in the cloud",
            ],
        },
    ]
}
