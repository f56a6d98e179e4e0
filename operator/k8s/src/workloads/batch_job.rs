//! `batch/v1` Job. Its gang is `parallelism` pods (capped by `completions`), each asking for
//! the GPUs of its pod template; it is held with `spec.suspend` and run by lifting it with the
//! placement written into the template (Kubernetes lets a suspended Job that has not started
//! since its last suspension change its template's node affinity, tolerations and labels; the
//! Job controller clears `status.startTime` when it suspends one).

use k8s_openapi::api::core::v1::PodSpec;
use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::{Finished, Placement, Shape, WorkloadKind, Write};
use crate::{labels, pods};

/// `batch/v1` Job.
pub struct BatchJob;

fn pod_spec(w: &DynamicObject) -> Result<PodSpec, String> {
    let raw = w
        .data
        .pointer("/spec/template/spec")
        .cloned()
        .ok_or("spec.template.spec: the Job has no pod spec")?;
    serde_json::from_value(raw).map_err(|e| format!("spec.template.spec: {e}"))
}

impl WorkloadKind for BatchJob {
    fn group(&self) -> &'static str {
        "batch"
    }
    fn version(&self) -> &'static str {
        "v1"
    }
    fn kind(&self) -> &'static str {
        "Job"
    }
    fn plural(&self) -> &'static str {
        "jobs"
    }
    fn integration(&self) -> &'static str {
        "batch/job"
    }

    fn shape(&self, w: &DynamicObject) -> Result<Shape, String> {
        let spec = pod_spec(w)?;
        let gpus = pods::spec_gpus(&spec);
        if gpus == 0 {
            return Err(format!(
                "spec.template: its containers ask for no {} (set it in resources.limits); Spillway queues GPU workloads only",
                labels::GPU_RESOURCE
            ));
        }
        let replicas = w.data.get("spec").map_or(1, super::pods_at_once);
        if !(1..=i64::from(spillway_api::job::MAX_REPLICAS)).contains(&replicas) {
            return Err(format!(
                "spec.parallelism: {replicas} pods at once; Spillway runs gangs of 1 to {}",
                spillway_api::job::MAX_REPLICAS
            ));
        }
        Ok(Shape {
            replicas: replicas as i32,
            gpus_per_replica: gpus.min(i32::MAX as u32) as i32,
        })
    }

    fn suspended(&self, w: &DynamicObject) -> bool {
        w.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        // The Job controller clears `startTime` once it has suspended the Job; until then the
        // API server refuses a change of the template's scheduling directives.
        self.suspended(w)
            && w.data
                .pointer("/status/startTime")
                .is_none_or(Value::is_null)
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        let conditions = w.data.pointer("/status/conditions")?.as_array()?;
        conditions.iter().find_map(|c| {
            let kind = c.get("type")?.as_str()?;
            if c.get("status")?.as_str()? != "True" || !matches!(kind, "Complete" | "Failed") {
                return None;
            }
            Some(Finished::of_condition(c, kind == "Complete"))
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        super::placed_attempt_in(w.data.pointer("/spec/template/metadata/labels")?, uid)
    }

    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String> {
        let mut spec = pod_spec(w)?;
        pods::pin_to_nodes(&mut spec, placement.nodes);
        if let Some(pool) = placement.pool {
            pods::tolerate_pool(&mut spec, pool);
        }
        Ok(super::patch_self(
            w,
            json!({
                "spec": {
                    "suspend": false,
                    "template": {
                        "metadata": {"labels": placement.pod_labels()},
                        "spec": {"affinity": spec.affinity, "tolerations": spec.tolerations},
                    },
                },
            }),
        ))
    }

    fn suspend(&self, w: &DynamicObject) -> Vec<Write> {
        super::patch_self(w, json!({"spec": {"suspend": true}}))
    }

    fn hold_ops(&self, _object: &Value) -> Vec<Value> {
        vec![json!({"op": "add", "path": "/spec/suspend", "value": true})]
    }
}
