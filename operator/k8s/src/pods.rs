//! The pods of a gang: the job's template plus what Spillway adds.
//!
//! Each replica gets one pod named `JOB-ATTEMPT-REPLICA` with:
//! - an owner reference to the GpuJob (controller), so deleting the job deletes its pods;
//! - labels `spillway.io/job`, `spillway.io/replica`, `spillway.io/attempt`, `spillway.io/pool`
//!   and the annotation `spillway.io/node` (the node the decision chose);
//! - `nvidia.com/gpu` limits of `gpusPerReplica` on its first container (removed from the
//!   others: all of a replica's GPUs go to its main container);
//! - a required node affinity on the chosen node (`metadata.name`), added to every term of the
//!   template's own required affinity, so the real scheduler binds it there or nowhere;
//! - tolerations for the pool's `nodeTaints`;
//! - environment variables `SPILLWAY_JOB`, `SPILLWAY_NAMESPACE`, `SPILLWAY_REPLICA`,
//!   `SPILLWAY_REPLICAS`, `SPILLWAY_ATTEMPT` in every container;
//! - `restartPolicy: Never` unless the template says `OnFailure` (a replica that exits ends;
//!   `Always` would never let a job finish).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, KeyToPath, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodSpec, ResourceRequirements, SecretVolumeSource, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use spillway_api::{ComputePool, GpuJob};

use crate::labels;

/// The name of one replica's pod.
pub fn pod_name(job: &str, attempt: u32, replica: u32) -> String {
    format!("{job}-{attempt}-{replica}")
}

/// Why a job's pods cannot be built, when they cannot.
pub fn check(job: &GpuJob) -> Result<(), String> {
    if job.spec.workload_ref.is_some() {
        // Its workload's controller makes its pods.
        return Ok(());
    }
    let spec = job.spec.pod_spec();
    if spec.is_none_or(|s| s.containers.is_empty()) {
        return Err(
            "spec.template.spec.containers: the pod template needs at least one container".into(),
        );
    }
    let longest = pod_name(&job.name_any(), 999, job.spec.replicas.max(1) as u32);
    if longest.len() > 253 {
        return Err(format!(
            "metadata.name: too long to name its pods ({} characters; at most 240)",
            job.name_any().len()
        ));
    }
    Ok(())
}

/// The pod of replica `replica` of `job`, placed on `node` of `pool`.
pub fn replica_pod(
    job: &GpuJob,
    attempt: u32,
    replica: u32,
    node: &str,
    pool: Option<&ComputePool>,
) -> Pod {
    let name = job.name_any();
    let template = job.spec.template.clone().unwrap_or_default();
    let tmeta = template.metadata.clone().unwrap_or_default();
    let mut pod_labels: BTreeMap<String, String> = tmeta.labels.unwrap_or_default();
    pod_labels.insert(labels::JOB_LABEL.into(), name.clone());
    pod_labels.insert(labels::REPLICA_LABEL.into(), replica.to_string());
    pod_labels.insert(labels::ATTEMPT_LABEL.into(), attempt.to_string());
    if let Some(p) = pool {
        pod_labels.insert(labels::POOL_LABEL.into(), p.name_any());
    }
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(labels::NODE_ANNOTATION.into(), node.to_string());

    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    let env = [
        ("SPILLWAY_JOB", name.clone()),
        ("SPILLWAY_NAMESPACE", job.namespace().unwrap_or_default()),
        ("SPILLWAY_REPLICA", replica.to_string()),
        ("SPILLWAY_REPLICAS", job.spec.replicas.max(1).to_string()),
        ("SPILLWAY_ATTEMPT", attempt.to_string()),
    ];
    let gpus = Quantity(job.spec.gpus_per_replica.max(1).to_string());
    for (i, c) in spec.containers.iter_mut().enumerate() {
        let vars = c.env.get_or_insert_with(Vec::new);
        vars.retain(|v| !env.iter().any(|(k, _)| v.name == *k));
        vars.extend(env.iter().map(|(k, v)| EnvVar {
            name: (*k).into(),
            value: Some(v.clone()),
            value_from: None,
        }));
        let res = c
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        if i == 0 {
            res.limits
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::GPU_RESOURCE.into(), gpus.clone());
            if let Some(r) = res.requests.as_mut() {
                r.insert(labels::GPU_RESOURCE.into(), gpus.clone());
            }
        } else {
            for m in [res.limits.as_mut(), res.requests.as_mut()]
                .into_iter()
                .flatten()
            {
                m.remove(labels::GPU_RESOURCE);
            }
        }
    }
    if spec.restart_policy.as_deref() != Some("OnFailure") {
        spec.restart_policy = Some("Never".into());
    }

    pin_to_nodes(&mut spec, std::slice::from_ref(&node.to_string()));
    if let Some(p) = pool {
        tolerate_pool(&mut spec, p);
    }

    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&name, attempt, replica)),
            namespace: job.namespace(),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![labels::owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The GPUs a pod of `spec` asks for (limits, else requests, summed over its containers; an
/// init container's count when larger, as the scheduler computes it).
pub fn spec_gpus(spec: &PodSpec) -> u32 {
    let of = |c: &Container| -> u32 {
        let r = c.resources.as_ref();
        r.and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(labels::GPU_RESOURCE))
            .or_else(|| {
                r.and_then(|r| r.requests.as_ref())
                    .and_then(|l| l.get(labels::GPU_RESOURCE))
            })
            .and_then(|q| q.0.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let main: u32 = spec.containers.iter().map(of).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(of)
        .max()
        .unwrap_or(0);
    main.max(init)
}

/// Pins the pods of `spec` to `nodes` (a required node affinity on `metadata.name`), so the
/// real scheduler binds them there or nowhere. The API server takes one value for a
/// `metadata.name` field selector, so each node is a term of its own (terms are ORed), crossed
/// with each term of the template's own required affinity (whose requirements still hold);
/// a pin made before is replaced.
pub fn pin_to_nodes(spec: &mut PodSpec, nodes: &[String]) {
    let mut values: Vec<String> = nodes.to_vec();
    values.sort();
    values.dedup();
    if values.is_empty() {
        return;
    }
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    // The template's own terms, without an earlier pin (`metadata.name In [one node]`; terms
    // of one earlier pin that differed only by node are one term again).
    let mut own: Vec<NodeSelectorTerm> = Vec::new();
    for term in &required.node_selector_terms {
        let mut t = term.clone();
        if let Some(f) = t.match_fields.as_mut() {
            f.retain(|f| {
                !(f.key == "metadata.name"
                    && f.operator == "In"
                    && f.values.as_ref().is_some_and(|v| v.len() == 1))
            });
            if f.is_empty() {
                t.match_fields = None;
            }
        }
        if !own.contains(&t) {
            own.push(t);
        }
    }
    if own.is_empty() {
        own.push(NodeSelectorTerm::default());
    }
    let mut terms = Vec::with_capacity(own.len() * values.len());
    for term in &own {
        for node in &values {
            let mut t = term.clone();
            t.match_fields
                .get_or_insert_with(Vec::new)
                .push(NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![node.clone()]),
                });
            terms.push(t);
        }
    }
    required.node_selector_terms = terms;
}

/// Adds tolerations of the pool's `nodeTaints` to `spec` (those it has already are kept once).
pub fn tolerate_pool(spec: &mut PodSpec, pool: &ComputePool) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for t in &pool.spec.node_taints {
        let tol = Toleration {
            key: Some(t.key.clone()),
            operator: Some("Equal".into()),
            value: t.value.clone(),
            effect: Some(t.effect.clone()),
            toleration_seconds: None,
        };
        if !tolerations.contains(&tol) {
            tolerations.push(tol);
        }
    }
}

/// What a pod needs to carry its workload identity.
#[derive(Clone, Debug, PartialEq)]
pub struct PodIdentity {
    /// The Secret holding the job's token ([`crate::identity::TOKENS_SECRET`]).
    pub secret: String,
    /// The token's key in it (the job's name).
    pub key: String,
    /// The queue's AWS role, if it names one.
    pub aws_role_arn: Option<String>,
}

/// Mounts the job's token read-only at [`crate::identity::TOKEN_FILE`] in every container (init
/// containers too) and points `SPILLWAY_IDENTITY_TOKEN_FILE` at it; with an AWS role, sets
/// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` too, so every AWS SDK assumes the role.
/// What the user set wins: an env variable of the same name, a volume named
/// `spillway-identity`, a mount at the same path are kept, and listed in the answer.
pub fn inject_identity(pod: &mut Pod, identity: &PodIdentity) -> Vec<String> {
    use crate::identity::{TOKEN_DIR, TOKEN_FILE, TOKEN_KEY, VOLUME};
    let mut kept = Vec::new();
    let Some(spec) = pod.spec.as_mut() else {
        return kept;
    };
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    let own_volume = if volumes.iter().any(|v| v.name == VOLUME) {
        kept.push(format!("volume {VOLUME}"));
        false
    } else {
        volumes.push(Volume {
            name: VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(identity.secret.clone()),
                items: Some(vec![KeyToPath {
                    key: identity.key.clone(),
                    path: TOKEN_KEY.into(),
                    ..KeyToPath::default()
                }]),
                // Readable by the owner and group only (the pod's fsGroup applies).
                default_mode: Some(0o440),
                optional: Some(false),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        true
    };
    let mut env = vec![("SPILLWAY_IDENTITY_TOKEN_FILE", TOKEN_FILE.to_string())];
    if let Some(role) = &identity.aws_role_arn {
        env.push(("AWS_WEB_IDENTITY_TOKEN_FILE", TOKEN_FILE.to_string()));
        env.push(("AWS_ROLE_ARN", role.clone()));
    }
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in containers {
        inject_into(c, own_volume, &env, TOKEN_DIR, &mut kept);
    }
    kept
}

fn inject_into(
    c: &mut Container,
    own_volume: bool,
    env: &[(&str, String)],
    dir: &str,
    kept: &mut Vec<String>,
) {
    use crate::identity::VOLUME;
    if own_volume {
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if mounts.iter().any(|m| m.mount_path == dir) {
            kept.push(format!("container {}: mount at {dir}", c.name));
        } else {
            mounts.push(VolumeMount {
                name: VOLUME.into(),
                mount_path: dir.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
    }
    let vars = c.env.get_or_insert_with(Vec::new);
    for (name, value) in env {
        if vars.iter().any(|v| v.name == *name) {
            kept.push(format!("container {}: env {name}", c.name));
        } else {
            vars.push(EnvVar {
                name: (*name).into(),
                value: Some(value.clone()),
                value_from: None,
            });
        }
    }
}
