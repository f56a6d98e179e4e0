//! Kubeflow Trainer's `trainer.kubeflow.org/v1alpha1` TrainJob (integration
//! `trainer.kubeflow.org/trainjob`). Its gang is the trainer's nodes: `spec.trainer.numNodes`
//! pods, each asking for the GPUs of `spec.trainer.resourcesPerNode`; both are read from the
//! TrainJob itself (a TrainJob that leaves them to its runtime is not queued, and its
//! `WorkloadInvalid` Event says to set them). The dataset and model initializers ask for no
//! GPU and are not placed.
//!
//! It is held with `spec.suspend`. The Trainer makes a JobSet named as the TrainJob from its
//! runtime and the TrainJob's `spec.runtimePatches`, entries keyed by manager that may change
//! only while the TrainJob is suspended. So a run is two writes: Spillway's entry (manager
//! [`MANAGER`]) gets the placement for the trainer's replicated job `node` (the job's labels,
//! the chosen nodes as annotation [`super::NODES_ANNOTATION`] with the gate
//! [`super::PLACEMENT_GATE`], the pool's tolerations), written over the version read with the
//! TrainJob still suspended; once it is in, the suspension is lifted. The pods are then pinned
//! as a JobSet's are (the admission webhook, else the operator).

use super::At;
use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::jobset::{JobSet, condition, is_true, place_template};
use super::{Finished, Placement, Shape, WorkloadKind, Write};
use crate::labels;

/// `trainer.kubeflow.org/v1alpha1` TrainJob.
pub struct TrainJob;

/// The manager of Spillway's entry in a TrainJob's `spec.runtimePatches`.
pub const MANAGER: &str = "spillway.io/manager";
/// The replicated job of a Trainer runtime that runs the trainer's nodes (every runtime
/// Kubeflow ships names it so).
pub const TRAINER_JOB: &str = "node";

fn patches(w: &DynamicObject) -> Vec<Value> {
    (w.data.at("/spec/runtimePatches").and_then(Value::as_array))
        .cloned()
        .unwrap_or_default()
}

/// Spillway's entry of the TrainJob's runtime patches: the pod template of the trainer's job.
fn our_template(w: &DynamicObject) -> Option<Value> {
    let ours = patches(w)
        .into_iter()
        .find(|p| p.get("manager").and_then(Value::as_str) == Some(MANAGER))?;
    let jobs = ours.at("/trainingRuntimeSpec/template/spec/replicatedJobs")?;
    jobs.as_array()?
        .iter()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(TRAINER_JOB))?
        .at("/template/spec/template")
        .cloned()
}

/// Spillway's entry for `placement`.
fn entry(placement: &Placement<'_>) -> Result<Value, String> {
    let mut r = json!({"name": TRAINER_JOB, "template": {"spec": {"template": {}}}});
    place_template(&mut r, placement)?;
    Ok(json!({
        "manager": MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [r]}}},
    }))
}

/// Whether `have` (the pod template of Spillway's entry) already says what `want` (an entry)
/// does: its labels, annotations, gates and tolerations.
fn written(have: &Value, want: &Value) -> bool {
    let Some(want) =
        want.at("/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template")
    else {
        return false;
    };
    let within = |path: &str| {
        let (h, w) = (have.at(path), want.at(path));
        match (h.and_then(Value::as_object), w.and_then(Value::as_object)) {
            (Some(h), Some(w)) => w.iter().all(|(k, v)| h.get(k) == Some(v)),
            _ => h.is_none_or(Value::is_null) == w.is_none_or(Value::is_null),
        }
    };
    within("/metadata/labels")
        && within("/metadata/annotations")
        && have.at("/spec/schedulingGates") == want.at("/spec/schedulingGates")
        && have.at("/spec/tolerations") == want.at("/spec/tolerations")
}

impl WorkloadKind for TrainJob {
    fn group(&self) -> &'static str {
        "trainer.kubeflow.org"
    }
    fn version(&self) -> &'static str {
        "v1alpha1"
    }
    fn kind(&self) -> &'static str {
        "TrainJob"
    }
    fn plural(&self) -> &'static str {
        "trainjobs"
    }
    fn integration(&self) -> &'static str {
        "trainer.kubeflow.org/trainjob"
    }

    fn shape(&self, w: &DynamicObject) -> Result<Shape, String> {
        let trainer = w.data.at("/spec/trainer");
        let nodes = trainer
            .and_then(|t| t.get("numNodes"))
            .and_then(Value::as_i64);
        let Some(nodes) = nodes else {
            return Err("spec.trainer.numNodes: not set (Spillway reads the gang from the TrainJob, not from its runtime)".into());
        };
        if !(1..=i64::from(spillway_api::job::MAX_REPLICAS)).contains(&nodes) {
            return Err(format!(
                "spec.trainer.numNodes: {nodes}; Spillway runs gangs of 1 to {}",
                spillway_api::job::MAX_REPLICAS
            ));
        }
        let resources = trainer.and_then(|t| t.get("resourcesPerNode"));
        let gpus = ["limits", "requests"]
            .iter()
            .find_map(|k| resources?.get(k)?.get(labels::GPU_RESOURCE))
            .and_then(|q| match q {
                Value::String(s) => s.parse::<i64>().ok(),
                other => other.as_i64(),
            })
            .unwrap_or(0);
        if gpus <= 0 {
            return Err(format!(
                "spec.trainer.resourcesPerNode: asks for no {} (set it in limits; Spillway reads it from the TrainJob, not from its runtime)",
                labels::GPU_RESOURCE
            ));
        }
        Ok(Shape {
            replicas: nodes as i32,
            gpus_per_replica: gpus.min(i64::from(i32::MAX)) as i32,
        })
    }

    fn suspended(&self, w: &DynamicObject) -> bool {
        w.data.at("/spec/suspend").and_then(Value::as_bool) == Some(true)
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        // The Trainer says `Suspended: True` once it has suspended the TrainJob's JobSet; a
        // TrainJob it has not looked at yet has no such condition.
        self.suspended(w) && condition(w, "Suspended").is_none_or(is_true)
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        ["Complete", "Failed"].into_iter().find_map(|kind| {
            let c = condition(w, kind).filter(|c| is_true(c))?;
            Some(Finished::of_condition(c, kind == "Complete"))
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        super::placed_attempt_in(our_template(w)?.at("/metadata/labels")?, uid)
    }

    fn partly_run(&self, w: &DynamicObject) -> bool {
        // Its placement is written but it is still suspended.
        self.suspended(w)
            && our_template(w)
                .and_then(|t| {
                    t.at("/metadata/labels")?
                        .get(labels::JOB_UID_LABEL)
                        .cloned()
                })
                .is_some()
    }

    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String> {
        let want = entry(placement)?;
        if our_template(w).is_some_and(|have| written(&have, &want)) {
            return Ok(super::patch_self(w, json!({"spec": {"suspend": false}})));
        }
        // The list is replaced whole by a merge patch: written over the version read, the
        // other managers' entries kept.
        let mut list: Vec<Value> = (patches(w).into_iter())
            .filter(|p| p.get("manager").and_then(Value::as_str) != Some(MANAGER))
            .collect();
        list.push(want);
        Ok(super::patch_self(
            w,
            json!({
                "metadata": {"resourceVersion": w.metadata.resource_version},
                "spec": {"suspend": true, "runtimePatches": list},
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
        // Its pods are its JobSet's (named as the TrainJob).
        JobSet.controls_pod(pod, workload)
    }
}
