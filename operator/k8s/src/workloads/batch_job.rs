//! `batch/v1` Job. Its gang is `parallelism` pods (capped by `completions`), each asking for
//! the GPUs of its pod template; it is held with `spec.suspend` and run by lifting it with the
//! placement written into the template (Kubernetes lets a suspended Job that has not started
//! since its last suspension change its template's node affinity, tolerations and labels; the
//! Job controller clears `status.startTime` when it suspends one). It is the one kind copied to
//! another cluster ([`WorkloadKind::copy`]): the copy runs there, the Job at home stays
//! suspended.

use super::At;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::{Finished, Placement, Shape, WorkloadKind, Write};
use crate::{labels, pods};

/// `batch/v1` Job.
pub struct BatchJob;

fn pod_spec(w: &DynamicObject) -> Result<PodSpec, String> {
    let raw = w
        .data
        .at("/spec/template/spec")
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
        w.data.at("/spec/suspend").and_then(Value::as_bool) == Some(true)
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        // The Job controller clears `startTime` once it has suspended the Job; until then the
        // API server refuses a change of the template's scheduling directives.
        self.suspended(w) && w.data.at("/status/startTime").is_none_or(Value::is_null)
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        let conditions = w.data.at("/status/conditions")?.as_array()?;
        conditions.iter().find_map(|c| {
            let kind = c.get("type")?.as_str()?;
            if c.get("status")?.as_str()? != "True" || !matches!(kind, "Complete" | "Failed") {
                return None;
            }
            Some(Finished::of_condition(c, kind == "Complete"))
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        super::placed_attempt_in(w.data.at("/spec/template/metadata/labels")?, uid)
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

    fn portable(&self, w: &DynamicObject) -> Result<(), String> {
        match spillway_api::portable::problem(Some(&pod_spec(w)?)) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn copy(&self, w: &DynamicObject, template: &mut dyn FnMut(&mut Pod)) -> Result<Value, String> {
        self.portable(w)?;
        let mut spec = w.data.get("spec").cloned().ok_or("the Job has no spec")?;
        let t = spec.get("template").cloned().unwrap_or_default();
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": t.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "spec": t.get("spec").cloned().unwrap_or_else(|| json!({})),
        }))
        .map_err(|e| format!("spec.template: {e}"))?;
        // The labels the Job controller put on the template name the home Job.
        if let Some(l) = pod.metadata.labels.as_mut() {
            l.retain(|k, _| !HOME_JOB_LABELS.contains(&k.as_str()));
        }
        template(&mut pod);
        let obj = spec.as_object_mut().ok_or("spec: not an object")?;
        // The other API server picks the copy's own selector; the copy is run by that
        // cluster's Job controller, now; and it stays until Spillway deletes it (its end is
        // read from it first).
        for field in [
            "selector",
            "manualSelector",
            "managedBy",
            "ttlSecondsAfterFinished",
        ] {
            obj.remove(field);
        }
        obj.insert("suspend".into(), Value::Bool(false));
        obj.insert(
            "template".into(),
            json!({"metadata": pod.metadata, "spec": pod.spec}),
        );
        Ok(json!({"apiVersion": "batch/v1", "kind": "Job", "spec": spec}))
    }
}

/// The labels the Job controller puts on a Job's pod template, naming that Job.
const HOME_JOB_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];
