//! Plain pods (`v1` Pod, integration `pod`). Pods labelled `spillway.io/queue` that no
//! controller owns form a gang by `spillway.io/pod-group: <name>` and
//! `spillway.io/pod-group-size: "<n>"` (a labelled pod without them is a group of one, named
//! after it). The admission webhook makes each such pod with the scheduling gate
//! [`super::PLACEMENT_GATE`]; once the group is complete (its size reached) Spillway runs it by
//! patching every member: the job's labels, the chosen nodes as a required node affinity, the
//! pool's tolerations, the gate lifted (the API server lets a gated pod's node affinity be
//! narrowed, tolerations be added and gates be removed).
//!
//! A pod cannot be held again once it runs: when the group's GpuJob is preempted, requeued or
//! moved, the members Spillway ran are deleted, as Kueue stops a pod group, and the group ends
//! (its GpuJob goes with its last pod). A labelled pod made without the webhook (no gate, no
//! placement) is not managed: it is no member of any group.
//!
//! The turn sees a group as one workload: [`groups`] builds, from the pods cache, one object
//! per group carrying its members (`data.members`, the pods as JSON) and its size.

use super::At;
use std::collections::BTreeMap;

use crate::hashing::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::core::{DynamicObject, TypeMeta};
use serde_json::{Value, json};

use super::{Finished, PLACEMENT_GATE, Placement, QUEUE_LABEL, Shape, WorkloadKind, Write};
use crate::{labels, pods};

/// Plain pods, gathered in groups.
pub struct PodGroup;

/// On a pod: the name of the group it belongs to.
pub const GROUP_LABEL: &str = "spillway.io/pod-group";
/// On a pod: how many pods its group has (the same on every member).
pub const GROUP_SIZE_LABEL: &str = "spillway.io/pod-group-size";

/// Whether `pod` is a plain pod opted in: labelled with a queue, and made by no controller
/// (a Job's or a JobSet's pods are their workload's, however labelled).
pub fn opted_in(pod: &Pod) -> bool {
    pod.labels().contains_key(QUEUE_LABEL)
        && !(pod.owner_references().iter()).any(|o| o.controller == Some(true))
}

fn gated(pod: &Pod) -> bool {
    (pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()))
        .is_some_and(|g| g.iter().any(|g| g.name == PLACEMENT_GATE))
}

/// Whether `pod` is a member Spillway manages: opted in, and held by the webhook (gated) or
/// placed by Spillway since (labelled with a GpuJob's uid).
fn managed(pod: &Pod) -> bool {
    opted_in(pod) && (gated(pod) || pod.labels().contains_key(labels::JOB_UID_LABEL))
}

/// The group `pod` belongs to: its label, else the pod's own name.
fn group_of(pod: &Pod) -> String {
    (pod.labels().get(GROUP_LABEL).cloned()).unwrap_or_else(|| pod.name_any())
}

/// The workloads the managed pods of `pods` form: one per group (by namespace and name),
/// `data.members` its pods (by name), `data.size` what their label says. Its uid stands for
/// the group (`pod-group/<namespace>/<name>`), its version for its members' versions.
pub fn groups(pods: &[Arc<Pod>]) -> Vec<Arc<DynamicObject>> {
    groups_kept(pods, &mut HashMap::default())
}

/// As [`groups`], handing out the object `kept` holds (by uid) for a group whose version did
/// not change, so a turn copies no unchanged group's pods; `kept` then holds this call's.
pub fn groups_kept(
    pods: &[Arc<Pod>],
    kept: &mut HashMap<String, Arc<DynamicObject>>,
) -> Vec<Arc<DynamicObject>> {
    let mut by_group: BTreeMap<(String, String), Vec<&Pod>> = BTreeMap::new();
    for p in pods.iter().filter(|p| managed(p)) {
        let ns = p.namespace().unwrap_or_default();
        by_group.entry((ns, group_of(p))).or_default().push(p);
    }
    let mut out = Vec::with_capacity(by_group.len());
    let mut now: HashMap<String, Arc<DynamicObject>> = HashMap::default();
    for ((ns, name), mut members) in by_group {
        members.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        // FNV-1a over the members' names and versions: stable across turns.
        let version = (members.iter())
            .flat_map(|p| {
                let name = p.metadata.name.as_deref().unwrap_or_default();
                let rv = p.metadata.resource_version.as_deref().unwrap_or_default();
                name.bytes().chain([0]).chain(rv.bytes()).chain([0])
            })
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let (uid, version) = (format!("pod-group/{ns}/{name}"), format!("{version:016x}"));
        let unchanged = (kept.get(&uid))
            .filter(|k| k.metadata.resource_version.as_deref() == Some(version.as_str()));
        let group = match unchanged {
            Some(k) => k.clone(),
            None => Arc::new(group_object(&ns, &name, &uid, version, &members)),
        };
        now.insert(uid, group.clone());
        out.push(group);
    }
    *kept = now;
    out
}

/// Group `name` of namespace `ns` (uid `uid`, version `version`) of `members` (by name).
fn group_object(
    ns: &str,
    name: &str,
    uid: &str,
    version: String,
    members: &[&Pod],
) -> DynamicObject {
    let first = members[0];
    let size = first.labels().get(GROUP_SIZE_LABEL).cloned();
    let members: Vec<Value> = (members.iter())
        .map(|p| serde_json::to_value(p).unwrap_or_default())
        .collect();
    DynamicObject {
        types: Some(TypeMeta {
            api_version: "v1".into(),
            kind: "Pod".into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid: Some(uid.to_string()),
            resource_version: Some(version),
            labels: first.metadata.labels.clone(),
            annotations: first.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        data: json!({"size": size, "members": members}),
    }
}

/// A group's members, as pods.
fn members(w: &DynamicObject) -> Vec<Pod> {
    (w.data.get("members").and_then(Value::as_array).into_iter())
        .flatten()
        .filter_map(|m| serde_json::from_value(m.clone()).ok())
        .collect()
}

/// The size a group's label says, or why it cannot be read.
fn size(w: &DynamicObject) -> Result<i64, String> {
    match w.data.get("size").and_then(Value::as_str) {
        None => Ok(1),
        Some(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=i64::from(spillway_api::job::MAX_REPLICAS)).contains(n))
            .ok_or(format!(
                "label {GROUP_SIZE_LABEL}: {s:?} is not a number of pods from 1 to {}",
                spillway_api::job::MAX_REPLICAS
            )),
    }
}

/// The attempt of the GpuJob with uid `uid` member `pod` was run for.
fn run_for(pod: &Pod, uid: &str) -> Option<u32> {
    let l = pod.labels();
    (l.get(labels::JOB_UID_LABEL).map(String::as_str) == Some(uid))
        .then(|| l.get(labels::ATTEMPT_LABEL)?.parse().ok())
        .flatten()
}

fn phase(pod: &Pod) -> &str {
    (pod.status.as_ref().and_then(|s| s.phase.as_deref())).unwrap_or_default()
}

impl PodGroup {
    /// The patch that runs member `pod` with `placement`.
    fn run_member(pod: &Pod, placement: &Placement<'_>) -> Value {
        let mut spec: PodSpec = pod.spec.clone().unwrap_or_default();
        let gates: Vec<PodSchedulingGate> = (spec.scheduling_gates.take().into_iter())
            .flatten()
            .filter(|g| g.name != PLACEMENT_GATE)
            .collect();
        pods::pin_to_nodes(&mut spec, placement.nodes);
        if let Some(pool) = placement.pool {
            pods::tolerate_pool(&mut spec, pool);
        }
        json!({
            "metadata": {
                "resourceVersion": pod.metadata.resource_version,
                "labels": placement.pod_labels(),
            },
            "spec": {
                "schedulingGates": (!gates.is_empty()).then_some(gates),
                "affinity": spec.affinity,
                "tolerations": spec.tolerations,
            },
        })
    }
}

impl WorkloadKind for PodGroup {
    fn group(&self) -> &'static str {
        ""
    }
    fn version(&self) -> &'static str {
        "v1"
    }
    fn kind(&self) -> &'static str {
        "Pod"
    }
    fn plural(&self) -> &'static str {
        "pods"
    }
    fn integration(&self) -> &'static str {
        "pod"
    }

    fn shape(&self, w: &DynamicObject) -> Result<Shape, String> {
        let size = size(w)?;
        if w.annotations()
            .get("spillway.io/restartable")
            .map(|v| v.trim())
            == Some("true")
        {
            return Err("annotation spillway.io/restartable: a pod group cannot be restarted (a pod that ran cannot be held again); make its pods from a Job or a JobSet to restart it".into());
        }
        let members = members(w);
        if members.len() as i64 > size {
            return Err(format!(
                "{} pods carry {GROUP_LABEL}={} but its size ({GROUP_SIZE_LABEL}) is {size}",
                members.len(),
                w.name_any()
            ));
        }
        let mut gpus = None;
        for p in &members {
            let n = p.spec.as_ref().map_or(0, pods::spec_gpus);
            if n == 0 {
                return Err(format!(
                    "pod {}: its containers ask for no {} (set it in resources.limits); Spillway queues GPU workloads only",
                    p.name_any(),
                    labels::GPU_RESOURCE
                ));
            }
            match gpus {
                Some(g) if g != n => {
                    return Err(format!(
                        "pod {} asks for {n} GPUs and another member for {g}: a group's pods must ask for the same",
                        p.name_any()
                    ));
                }
                _ => gpus = Some(n),
            }
        }
        Ok(Shape {
            replicas: size as i32,
            gpus_per_replica: gpus.unwrap_or(0).min(i32::MAX as u32) as i32,
        })
    }

    fn incomplete(&self, w: &DynamicObject) -> Option<String> {
        let (have, want) = (members(w).len() as i64, size(w).ok()?);
        (have < want).then(|| format!("{have} of its {want} pods made"))
    }

    fn suspended(&self, w: &DynamicObject) -> bool {
        members(w)
            .iter()
            .all(|p| gated(p) && !p.labels().contains_key(labels::JOB_UID_LABEL))
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        self.suspended(w) && self.incomplete(w).is_none()
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        let members = members(w);
        if let Some(p) = members.iter().find(|p| phase(p) == "Failed") {
            let status = p.status.as_ref();
            let why = |f: fn(&k8s_openapi::api::core::v1::PodStatus) -> Option<&String>| {
                status.and_then(f).cloned().unwrap_or_default()
            };
            return Some(Finished {
                outcome: "Failed".into(),
                at: None,
                message: format!(
                    "pod {} failed: {} {}",
                    p.name_any(),
                    why(|s| s.reason.as_ref()),
                    why(|s| s.message.as_ref())
                )
                .trim_end()
                .to_string(),
            });
        }
        let size = size(w).ok()?;
        let done = members.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        (done >= size).then(|| Finished {
            outcome: "Succeeded".into(),
            at: None,
            message: String::new(),
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        // The attempt every member run so far was run for; the others still wait at the gate.
        let mut attempt = None;
        for p in members(w) {
            match (run_for(&p, uid), attempt) {
                (Some(a), None) => attempt = Some(a),
                (Some(a), Some(b)) if a != b => return None,
                (None, _) if !gated(&p) => return None,
                _ => {}
            }
        }
        attempt
    }

    fn partly_run(&self, w: &DynamicObject) -> bool {
        let members = members(w);
        let run = |p: &Pod| p.labels().contains_key(labels::JOB_UID_LABEL);
        members.iter().any(run) && members.iter().any(|p| !run(p) && gated(p))
    }

    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String> {
        let uid = placement.job.metadata.uid.as_deref().unwrap_or_default();
        Ok(members(w)
            .iter()
            .filter(|p| run_for(p, uid) != Some(placement.attempt) && gated(p))
            .map(|p| Write::Patch {
                name: p.name_any(),
                patch: Self::run_member(p, placement),
            })
            .collect())
    }

    fn suspend(&self, w: &DynamicObject) -> Vec<Write> {
        // A running pod cannot be gated again, and a group short of the members Spillway ran
        // can never run: the group ends.
        members(w)
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| Write::Delete {
                name: p.name_any(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                grace_seconds: (p.spec.as_ref())
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30),
            })
            .collect()
    }

    fn hold_ops(&self, object: &Value) -> Vec<Value> {
        let mut gates = (object.at("/spec/schedulingGates").and_then(Value::as_array))
            .cloned()
            .unwrap_or_default();
        if gates
            .iter()
            .any(|g| g.get("name").and_then(Value::as_str) == Some(PLACEMENT_GATE))
        {
            return Vec::new();
        }
        gates.push(json!({"name": PLACEMENT_GATE}));
        vec![json!({"op": "add", "path": "/spec/schedulingGates", "value": gates})]
    }

    fn owners(&self, w: &DynamicObject) -> Vec<OwnerReference> {
        members(w)
            .iter()
            .map(|p| OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: p.name_any(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                controller: None,
                block_owner_deletion: None,
            })
            .collect()
    }

    fn regarding(&self, w: &DynamicObject) -> (String, String) {
        let first = members(w).into_iter().next();
        first.map_or_else(
            || (w.name_any(), String::new()),
            |p| (p.name_any(), p.metadata.uid.clone().unwrap_or_default()),
        )
    }

    fn controls_pod(&self, pod: &Pod, workload: &str) -> bool {
        opted_in(pod) && group_of(pod) == workload
    }
}
