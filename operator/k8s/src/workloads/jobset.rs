//! `jobset.x-k8s.io/v1alpha2` JobSet. Its gang is the pods of its replicated jobs that ask for
//! GPUs: each such replicated job makes `replicas` Jobs of `parallelism` pods (capped by
//! `completions`), and all of them must ask for the same GPUs per pod. Replicated jobs whose
//! pods ask for none (a launcher, a coordinator) are not part of the gang and are not placed.
//!
//! It is held with `spec.suspend`. The JobSet controller carries only a pod template's labels,
//! annotations, node selector, tolerations and scheduling gates over to the Jobs it already
//! made when a JobSet is resumed (its webhook lets only those change while it is suspended),
//! so the run writes the chosen nodes as the annotation [`super::NODES_ANNOTATION`] with the
//! gate [`super::PLACEMENT_GATE`]: each pod is made gated, and the admission webhook (or, when
//! it was not called, the operator) pins it to those nodes and lifts the gate.

use super::At;
use k8s_openapi::api::core::v1::{PodSpec, Toleration};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};

use super::{Finished, Placement, Shape, WorkloadKind, Write};
use crate::pods;

/// `jobset.x-k8s.io/v1alpha2` JobSet.
pub struct JobSet;

/// The label the JobSet controller puts on every Job and pod of a JobSet.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// The replicated jobs, each with the GPUs per pod its template asks for.
fn replicated_jobs(w: &DynamicObject) -> Result<Vec<(&Value, u32)>, String> {
    let list = w
        .data
        .at("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or("spec.replicatedJobs: the JobSet has none")?;
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let raw = r
                .at("/template/spec/template/spec")
                .cloned()
                .ok_or(format!("spec.replicatedJobs[{i}].template: no pod spec"))?;
            let spec: PodSpec = serde_json::from_value(raw).map_err(|e| {
                format!("spec.replicatedJobs[{i}].template.spec.template.spec: {e}")
            })?;
            Ok((r, pods::spec_gpus(&spec)))
        })
        .collect()
}

/// The condition `kind` of the JobSet's status, when it has it.
pub(super) fn condition<'a>(w: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    w.data
        .at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub(super) fn is_true(c: &Value) -> bool {
    c.get("status").and_then(Value::as_str) == Some("True")
}

impl WorkloadKind for JobSet {
    fn group(&self) -> &'static str {
        "jobset.x-k8s.io"
    }
    fn version(&self) -> &'static str {
        "v1alpha2"
    }
    fn kind(&self) -> &'static str {
        "JobSet"
    }
    fn plural(&self) -> &'static str {
        "jobsets"
    }
    fn integration(&self) -> &'static str {
        "jobset.x-k8s.io/jobset"
    }

    fn shape(&self, w: &DynamicObject) -> Result<Shape, String> {
        let groups: Vec<(String, i64, u32)> = (replicated_jobs(w)?.into_iter().enumerate())
            .map(|(i, (r, gpus))| {
                let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let per_job = r.at("/template/spec").map_or(1, super::pods_at_once);
                let jobs = r.get("replicas").and_then(Value::as_i64).unwrap_or(1);
                let at = format!("spec.replicatedJobs[{i}] ({name})");
                (at, jobs.max(0) * per_job.max(0), gpus)
            })
            .collect();
        super::gang_of(&groups, "spec.replicatedJobs")
    }

    fn suspended(&self, w: &DynamicObject) -> bool {
        w.data.at("/spec/suspend").and_then(Value::as_bool) == Some(true)
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        // Its controller says `Suspended: True` once it has suspended its Jobs (it adds the
        // condition only then); without it, only a JobSet none of whose Jobs has a pod is
        // ready (it never ran, or its controller has not made its Jobs yet).
        self.suspended(w)
            && match condition(w, "Suspended") {
                Some(c) => is_true(c),
                None => w
                    .data
                    .at("/status/replicatedJobsStatus")
                    .and_then(Value::as_array)
                    .is_none_or(|l| {
                        l.iter()
                            .all(|r| r.get("active").and_then(Value::as_i64).unwrap_or(0) == 0)
                    }),
            }
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        ["Completed", "Failed"].into_iter().find_map(|kind| {
            let c = condition(w, kind).filter(|c| is_true(c))?;
            Some(Finished::of_condition(c, kind == "Completed"))
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        let (r, _) = replicated_jobs(w).ok()?.into_iter().find(|(_, g)| *g > 0)?;
        super::placed_attempt_in(r.at("/template/spec/template/metadata/labels")?, uid)
    }

    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String> {
        let mut list = Vec::new();
        for (r, gpus) in replicated_jobs(w)? {
            let mut r = r.clone();
            if gpus > 0 {
                place_template(&mut r, placement)?;
            }
            list.push(r);
        }
        // A merge patch replaces the list whole: it is written only over the version read.
        Ok(super::patch_self(
            w,
            json!({
                "metadata": {"resourceVersion": w.metadata.resource_version},
                "spec": {"suspend": false, "replicatedJobs": list},
            }),
        ))
    }

    fn suspend(&self, w: &DynamicObject) -> Vec<Write> {
        super::patch_self(w, json!({"spec": {"suspend": true}}))
    }

    fn hold_ops(&self, _object: &Value) -> Vec<Value> {
        vec![json!({"op": "add", "path": "/spec/suspend", "value": true})]
    }

    fn controls_pod(&self, pod: &k8s_openapi::api::core::v1::Pod, workload: &str) -> bool {
        // Its pods are controlled by the Jobs the JobSet controller made, labelled with it.
        let labelled = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(JOBSET_NAME_LABEL))
            .is_some_and(|n| n == workload);
        labelled
            && pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == "Job")
    }
}

/// Writes `placement` into replicated job `r`'s pod template: the job's labels, the chosen
/// nodes and the gate that holds each pod until it is pinned to them, and the pool's
/// tolerations.
pub(super) fn place_template(r: &mut Value, placement: &Placement<'_>) -> Result<(), String> {
    let template = r
        .pointer_mut("/template/spec/template")
        .and_then(Value::as_object_mut)
        .ok_or("a replicated job without a pod template")?;
    let metadata = object(template, "metadata");
    let l = object(metadata, "labels");
    for (k, v) in placement.pod_labels() {
        l.insert(k, Value::String(v));
    }
    let a = object(metadata, "annotations");
    a.insert(
        super::NODES_ANNOTATION.into(),
        Value::String(super::nodes_annotation(placement.nodes)),
    );
    let spec = object(template, "spec");
    let gates = spec
        .entry("schedulingGates")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or("schedulingGates is not a list")?;
    if !gates
        .iter()
        .any(|g| g.get("name").and_then(Value::as_str) == Some(super::PLACEMENT_GATE))
    {
        gates.push(json!({"name": super::PLACEMENT_GATE}));
    }
    if let Some(pool) = placement.pool {
        let mut ps = PodSpec {
            tolerations: spec
                .get("tolerations")
                .cloned()
                .map(serde_json::from_value::<Vec<Toleration>>)
                .transpose()
                .map_err(|e| format!("tolerations: {e}"))?,
            ..PodSpec::default()
        };
        pods::tolerate_pool(&mut ps, pool);
        spec.insert(
            "tolerations".into(),
            serde_json::to_value(ps.tolerations).unwrap_or_default(),
        );
    }
    Ok(())
}

/// The object at `key` of `m`, made when missing (or not an object).
fn object<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("an object")
}
