//! The snapshot builder and the pod builder, from literal objects (no cluster).

use spillway_k8s::hashing::{HashMap, HashMapExt};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use serde_json::json;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_core::{JobState, Settings, Time};
use spillway_k8s::pods;
use spillway_k8s::world::{self, Assumed, Inputs, Lifecycle};

fn node(name: &str, gpus: u32, labels: serde_json::Value, ready: bool) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {
                "allocatable": {"nvidia.com/gpu": gpus.to_string()},
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            },
        }))
        .unwrap(),
    )
}

fn pool(name: &str, selector: serde_json::Value) -> Arc<ComputePool> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"private": {"nodeSelector": selector}},
        }))
        .unwrap(),
    )
}

fn queue(name: &str, spec: serde_json::Value) -> Arc<GpuQueue> {
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap())
}

fn job(ns: &str, name: &str, replicas: i32, gpus: i32) -> Arc<GpuJob> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queue": "q", "replicas": replicas, "gpusPerReplica": gpus,
                     "template": {"spec": {"containers": [{"name": "main", "image": "x"},
                                                          {"name": "side", "image": "y"}]}}},
        }))
        .unwrap(),
    )
}

fn pod_of(job: &GpuJob, replica: u32, node: &str, phase: &str) -> Arc<Pod> {
    let mut p = pods::replica_pod(job, 0, replica, node, None);
    p.metadata.uid = Some(format!(
        "pod-{}-{replica}",
        job.metadata.name.clone().unwrap()
    ));
    p.spec.as_mut().unwrap().node_name = Some(node.to_string());
    p.status = Some(serde_json::from_value(json!({"phase": phase})).unwrap());
    Arc::new(p)
}

fn inputs() -> Inputs {
    Inputs {
        queues: vec![queue("q", json!({}))],
        pools: vec![pool("gpu", json!({"team": "ml"}))],
        nodes: vec![
            node(
                "a",
                8,
                json!({"team": "ml", "spillway.io/gpu-model": "A100-80GB"}),
                true,
            ),
            node(
                "b",
                8,
                json!({"team": "ml", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                true,
            ),
            node("c", 8, json!({"team": "other"}), true),
            node("d", 8, json!({"team": "ml"}), false),
        ],
        ..Inputs::default()
    }
}

fn build(i: &Inputs, assumed: &HashMap<String, Assumed>) -> world::Built {
    world::build(
        i,
        assumed,
        &HashMap::new(),
        Settings::default(),
        Time::from_secs_f64(1.8e9),
    )
}

#[test]
fn nodes_belong_to_pools_by_selector_and_report_models_and_readiness() {
    let b = build(&inputs(), &HashMap::new());
    let names: Vec<&str> = b.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "d"], "c matches no pool");
    let by = |n: &str| {
        b.snapshot
            .nodes
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by("a").gpu_model.unwrap().as_str(), "A100-80GB");
    assert_eq!(by("b").gpu_model.unwrap().as_str(), "H100");
    assert!(by("a").schedulable);
    assert!(!by("d").schedulable, "not Ready");
}

#[test]
fn running_pods_and_assumed_starts_take_gpus() {
    let mut i = inputs();
    let running = job("ns", "running", 1, 6);
    i.pods.push(pod_of(&running, 0, "a", "Running"));
    i.jobs.push(running);
    i.jobs.push(job("ns", "assumed", 2, 4));
    let mut assumed = HashMap::new();
    assumed.insert(
        "ns/assumed".to_string(),
        Assumed {
            attempt: 0,
            pool: "gpu".into(),
            environment: spillway_core::Environment::Private,
            nodes: vec!["b".into(), "b".into()],
            at: Time::from_secs_f64(1.8e9),
        },
    );
    let b = build(&i, &assumed);
    let free = |n: &str| {
        b.snapshot
            .nodes
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .free_gpus
    };
    assert_eq!(free("a"), 2);
    assert_eq!(free("b"), 0, "two assumed replicas of 4");
    let states: Vec<(&str, bool)> = b
        .snapshot
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), matches!(j.state, JobState::Running { .. })))
        .collect();
    assert!(states.contains(&("ns/running", true)));
    assert!(states.contains(&("ns/assumed", true)));
}

#[test]
fn lifecycle_follows_the_pods() {
    let mut i = inputs();
    let done = job("ns", "done", 2, 1);
    i.pods.push(pod_of(&done, 0, "a", "Succeeded"));
    i.pods.push(pod_of(&done, 1, "a", "Succeeded"));
    let failed = job("ns", "failed", 2, 1);
    i.pods.push(pod_of(&failed, 0, "a", "Failed"));
    i.pods.push(pod_of(&failed, 1, "a", "Running"));
    let broken = job("ns", "broken", 2, 1);
    i.pods.push(pod_of(&broken, 1, "a", "Running"));
    let pending = job("ns", "pending", 1, 1);
    i.jobs.extend([done, failed, broken, pending]);
    let b = build(&i, &HashMap::new());
    assert!(matches!(
        b.jobs["ns/done"].lifecycle,
        Lifecycle::Succeeded { .. }
    ));
    match &b.jobs["ns/failed"].lifecycle {
        Lifecycle::Failed { reason, .. } => assert_eq!(*reason, "ReplicaFailed"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        b.jobs["ns/failed"].surplus_pods.len(),
        1,
        "the running gang-mate goes"
    );
    match &b.jobs["ns/broken"].lifecycle {
        Lifecycle::Broken { message } => assert!(message.contains("Replica 0"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.jobs["ns/pending"].lifecycle, Lifecycle::Pending);
    let in_core: Vec<&str> = b.snapshot.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        in_core,
        ["ns/pending"],
        "finished and broken jobs are not the core's business"
    );
}

#[test]
fn queues_admit_namespaces_by_list_or_selector() {
    let mut i = inputs();
    i.queues = vec![queue(
        "q",
        json!({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]}}),
    )];
    i.namespaces = vec![
        Arc::new(
            serde_json::from_value::<Namespace>(
                json!({"metadata": {"name": "ml", "labels": {"team": "ml"}}}),
            )
            .unwrap(),
        ),
        Arc::new(
            serde_json::from_value::<Namespace>(json!({"metadata": {"name": "web"}})).unwrap(),
        ),
    ];
    i.jobs = vec![job("ml", "in", 1, 1), job("web", "out", 1, 1)];
    let b = build(&i, &HashMap::new());
    assert_eq!(b.jobs["ml/in"].invalid, None);
    let why = b.jobs["web/out"].invalid.clone().expect("not admitted");
    assert!(why.contains("does not admit namespace \"web\""), "{why}");
    assert_eq!(b.snapshot.jobs.len(), 1);
}

/// A queue's `maxPriority` is a ceiling: a waiting job asking for more is refused with a
/// message naming it; a job already running keeps running, ranked at the ceiling.
#[test]
fn priorities_above_the_queues_ceiling_are_refused_or_capped() {
    let with_priority = |name: &str, priority: i32| {
        let mut j = (*job("ns", name, 1, 1)).clone();
        j.spec.priority = priority;
        Arc::new(j)
    };
    let mut i = inputs();
    i.queues = vec![queue("q", json!({"maxPriority": 5}))];
    let running = with_priority("running", 9);
    i.pods.push(pod_of(&running, 0, "a", "Running"));
    i.jobs = vec![with_priority("at", 5), with_priority("above", 6), running];
    let b = build(&i, &HashMap::new());
    assert_eq!(b.jobs["ns/at"].invalid, None);
    let why = b.jobs["ns/above"].invalid.clone().expect("refused");
    assert!(
        why.contains("spec.priority 6 is above GpuQueue \"q\"'s maxPriority 5"),
        "{why}"
    );
    assert_eq!(b.jobs["ns/running"].invalid, None, "a running job is kept");
    assert_eq!(priority_of(&b, "ns/at"), Some(5));
    assert_eq!(priority_of(&b, "ns/above"), None, "not the core's business");
    assert_eq!(
        priority_of(&b, "ns/running"),
        Some(5),
        "ranked at the ceiling"
    );

    // The default ceiling is 0: priorities are granted by the platform team.
    i.queues = vec![queue("q", json!({}))];
    let b = build(&i, &HashMap::new());
    assert!(b.jobs["ns/at"].invalid.is_some());
    assert_eq!(priority_of(&b, "ns/running"), Some(0));
}

fn priority_of(b: &world::Built, id: &str) -> Option<i32> {
    b.snapshot
        .jobs
        .iter()
        .find(|j| j.id == id)
        .map(|j| j.priority)
}

#[test]
fn invalid_specs_are_reported_with_their_field() {
    let mut i = inputs();
    let mut bad = (*job("ns", "bad", 1, 1)).clone();
    bad.spec.gpus_per_replica = 40;
    i.jobs = vec![Arc::new(bad)];
    let b = build(&i, &HashMap::new());
    let why = b.jobs["ns/bad"].invalid.clone().expect("invalid");
    assert!(why.contains("gpusPerReplica"), "{why}");
}

#[test]
fn replica_pods_carry_limits_affinity_and_identity() {
    let mut j = (*job("ns", "train", 2, 4)).clone();
    j.spec.template.as_mut().unwrap().spec.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]}]}}}))
        .unwrap(),
    );
    let taint_pool: ComputePool = serde_json::from_value(json!({
        "metadata": {"name": "gpu"},
        "spec": {"private": {"nodeSelector": {"a": "b"}},
                 "nodeTaints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let p = pods::replica_pod(&j, 3, 1, "node-7", Some(&taint_pool));
    assert_eq!(p.metadata.name.as_deref(), Some("train-3-1"));
    let spec = p.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let limits = spec.containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "4");
    let side = spec.containers[1].resources.clone().unwrap_or_default();
    assert!(
        !side
            .limits
            .unwrap_or_default()
            .contains_key("nvidia.com/gpu")
    );
    let term = &spec
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms[0];
    assert_eq!(
        term.match_expressions.as_ref().unwrap()[0].key,
        "zone",
        "template's own term kept"
    );
    assert_eq!(
        term.match_fields.as_ref().unwrap()[0].values,
        Some(vec!["node-7".to_string()])
    );
    assert_eq!(spec.tolerations.unwrap()[0].key.as_deref(), Some("gpu"));
    let env: Vec<(String, String)> = spec.containers[1]
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    assert!(env.contains(&("SPILLWAY_REPLICA".into(), "1".into())));
    assert!(env.contains(&("SPILLWAY_REPLICAS".into(), "2".into())));
    assert_eq!(p.metadata.owner_references.unwrap()[0].uid, "uid-train");
}

/// A cluster pool's nodes are the other cluster's, seen as `POOL/NODE`: a home node that
/// carries the pool's label is not one of them.
#[test]
fn a_cluster_pool_holds_the_nodes_seen_as_its_own_and_no_home_node() {
    let mut i = inputs();
    i.pools.push(Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "dc2"},
            "spec": {"cluster": {
                "kubeconfigSecretRef": {"name": "dc2", "namespace": "spillway-system"},
                "namespace": "gpu-jobs",
                "gpuCostPerHour": 0.8,
            }},
        }))
        .unwrap(),
    ));
    let node = |name: &str| -> Arc<k8s_openapi::api::core::v1::Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"spillway.io/pool": "dc2"}},
                "status": {"allocatable": {"nvidia.com/gpu": "4"},
                    "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    };
    i.nodes.push(node("dc2/gpu-1"));
    i.nodes.push(node("impostor"));
    let b = build(&i, &HashMap::new());
    assert!(b.snapshot.pools.iter().any(|p| p.name == "dc2"));
    assert!(!b.invalid_objects.contains_key("ComputePool/dc2"));
    let in_dc2: Vec<&str> = (b.snapshot.nodes.iter())
        .filter(|n| n.pool == "dc2")
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(in_dc2, ["dc2/gpu-1"]);
}
