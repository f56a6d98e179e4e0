//! KubeRay's `ray.io/v1` RayJob (integration `ray.io/rayjob`). Its gang is the pods of its
//! RayCluster that ask for GPUs: the head (when its template asks for some) and, for each
//! worker group, `replicas` x `numOfHosts` pods; those asking for GPUs must ask for the same. A
//! head asking for none is not part of the gang and is not placed; nor is the submitter Job.
//! Autoscaling RayJobs (`enableInTreeAutoscaling`) are not queued (a gang of fixed size is), nor
//! those that keep their cluster after the job (KubeRay suspends only RayJobs with
//! `shutdownAfterJobFinishes: true`).
//!
//! It is held with `spec.suspend`: KubeRay deletes a suspended RayJob's RayCluster and makes a
//! new one from `spec.rayClusterSpec` when the suspension is lifted, so the run writes the
//! placement straight into the GPU pod templates (the job's labels, the chosen nodes as a
//! required node affinity, the pool's tolerations) with the suspension lifted, over the version
//! read (the worker groups are a list a merge patch replaces whole).

use super::At;
use k8s_openapi::api::core::v1::PodSpec;
use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::{Finished, Placement, Shape, WorkloadKind, Write};
use crate::pods;

/// `ray.io/v1` RayJob.
pub struct RayJob;

/// On the pods of a RayCluster: its name, which for a RayJob's cluster is the RayJob's name, a
/// dash and a random suffix of five characters.
pub const CLUSTER_LABEL: &str = "ray.io/cluster";

/// The GPUs a pod template (JSON) asks for, or why it cannot be read.
fn template_gpus(t: &Value, at: &str) -> Result<u32, String> {
    let raw = t.get("spec").cloned().ok_or(format!("{at}: no pod spec"))?;
    let spec: PodSpec = serde_json::from_value(raw).map_err(|e| format!("{at}.spec: {e}"))?;
    Ok(pods::spec_gpus(&spec))
}

/// The cluster's pod groups: (JSON pointer of the template, pods, GPUs per pod, name).
fn groups(w: &DynamicObject) -> Result<Vec<(String, i64, u32, String)>, String> {
    let cluster = w
        .data
        .at("/spec/rayClusterSpec")
        .ok_or("spec.rayClusterSpec: not set (a RayJob on an existing cluster is not queued)")?;
    let head = cluster
        .at("/headGroupSpec/template")
        .ok_or("spec.rayClusterSpec.headGroupSpec.template: not set")?;
    let mut out = vec![(
        "/spec/rayClusterSpec/headGroupSpec/template".to_string(),
        1,
        template_gpus(head, "spec.rayClusterSpec.headGroupSpec.template")?,
        "head".to_string(),
    )];
    let workers = cluster.get("workerGroupSpecs").and_then(Value::as_array);
    for (i, g) in workers.into_iter().flatten().enumerate() {
        let at = format!("spec.rayClusterSpec.workerGroupSpecs[{i}]");
        let template = g.get("template").ok_or(format!("{at}.template: not set"))?;
        let int = |k: &str| g.get(k).and_then(Value::as_i64);
        let replicas = int("replicas").or(int("minReplicas")).unwrap_or(1).max(0);
        let hosts = int("numOfHosts").unwrap_or(1).max(1);
        let name = g
            .get("groupName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        out.push((
            format!("/spec/rayClusterSpec/workerGroupSpecs/{i}/template"),
            replicas * hosts,
            template_gpus(template, &format!("{at}.template"))?,
            name.to_string(),
        ));
    }
    Ok(out)
}

fn status(w: &DynamicObject, key: &str) -> String {
    (w.data.at(&format!("/status/{key}")).and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

impl WorkloadKind for RayJob {
    fn group(&self) -> &'static str {
        "ray.io"
    }
    fn version(&self) -> &'static str {
        "v1"
    }
    fn kind(&self) -> &'static str {
        "RayJob"
    }
    fn plural(&self) -> &'static str {
        "rayjobs"
    }
    fn integration(&self) -> &'static str {
        "ray.io/rayjob"
    }

    fn shape(&self, w: &DynamicObject) -> Result<Shape, String> {
        let spec = w.data.get("spec");
        let flag = |k: &str| spec.and_then(|s| s.at(k)).and_then(Value::as_bool);
        if flag("/shutdownAfterJobFinishes") != Some(true) {
            return Err("spec.shutdownAfterJobFinishes: not true (KubeRay holds only RayJobs whose cluster goes with their job)".into());
        }
        if flag("/rayClusterSpec/enableInTreeAutoscaling") == Some(true) {
            return Err("spec.rayClusterSpec.enableInTreeAutoscaling: an autoscaling cluster is no gang of fixed size; Spillway queues RayJobs without it".into());
        }
        let groups: Vec<(String, i64, u32)> = (groups(w)?.into_iter())
            .map(|(_, pods, gpus, name)| (format!("the {name} group"), pods, gpus))
            .collect();
        super::gang_of(&groups, "spec.rayClusterSpec")
    }

    fn suspended(&self, w: &DynamicObject) -> bool {
        w.data.at("/spec/suspend").and_then(Value::as_bool) == Some(true)
    }

    fn ready_to_run(&self, w: &DynamicObject) -> bool {
        // KubeRay says `Suspended` once it has deleted the cluster; a RayJob it has not
        // started yet is `` (new).
        self.suspended(w) && matches!(status(w, "jobDeploymentStatus").as_str(), "" | "Suspended")
    }

    fn finished(&self, w: &DynamicObject) -> Option<Finished> {
        let deployment = status(w, "jobDeploymentStatus");
        if !matches!(
            deployment.as_str(),
            "Complete" | "Failed" | "ValidationFailed"
        ) {
            return None;
        }
        let at = (w.data.at("/status/endTime").and_then(Value::as_str)).map(str::to_string);
        let succeeded = deployment == "Complete" && status(w, "jobStatus") == "SUCCEEDED";
        Some(Finished {
            outcome: if succeeded { "Succeeded" } else { "Failed" }.into(),
            at,
            message: if succeeded {
                String::new()
            } else {
                format!(
                    "{deployment} ({}): {} {}",
                    status(w, "jobStatus"),
                    status(w, "reason"),
                    status(w, "message")
                )
                .trim_end()
                .to_string()
            },
        })
    }

    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32> {
        let (at, ..) = groups(w)
            .ok()?
            .into_iter()
            .find(|(_, n, g, _)| *g > 0 && *n > 0)?;
        super::placed_attempt_in(w.data.at(&format!("{at}/metadata/labels"))?, uid)
    }

    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String> {
        let mut cluster = w
            .data
            .at("/spec/rayClusterSpec")
            .cloned()
            .ok_or("spec.rayClusterSpec: not set")?;
        for (at, count, gpus, _) in groups(w)? {
            if gpus == 0 || count == 0 {
                continue;
            }
            let local = at.trim_start_matches("/spec/rayClusterSpec");
            let template = cluster.pointer_mut(local).ok_or(format!("{at}: not set"))?;
            let mut spec: PodSpec = serde_json::from_value(template["spec"].clone())
                .map_err(|e| format!("{at}.spec: {e}"))?;
            pods::pin_to_nodes(&mut spec, placement.nodes);
            if let Some(pool) = placement.pool {
                pods::tolerate_pool(&mut spec, pool);
            }
            template["spec"]["affinity"] = serde_json::to_value(&spec.affinity).unwrap_or_default();
            template["spec"]["tolerations"] =
                serde_json::to_value(&spec.tolerations).unwrap_or_default();
            let meta = template
                .as_object_mut()
                .ok_or(format!("{at}: not an object"))?
                .entry("metadata")
                .or_insert_with(|| json!({}));
            if !meta.get("labels").is_some_and(Value::is_object) {
                meta["labels"] = json!({});
            }
            for (k, v) in placement.pod_labels() {
                meta["labels"][k] = Value::String(v);
            }
        }
        Ok(super::patch_self(
            w,
            json!({
                "metadata": {"resourceVersion": w.metadata.resource_version},
                "spec": {"suspend": false, "rayClusterSpec": cluster},
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
        // Its pods are its RayCluster's, named after it (`<name>-<suffix>`, no dash in the
        // suffix, so another RayJob's whose name starts the same is not taken for it).
        let cluster = (pod.metadata.labels.as_ref()).and_then(|l| l.get(CLUSTER_LABEL));
        let ours = cluster
            .and_then(|c| c.strip_prefix(workload)?.strip_prefix('-'))
            .is_some_and(|suffix| {
                !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_alphanumeric())
            });
        ours && (pod.metadata.owner_references.iter().flatten())
            .any(|o| o.controller == Some(true) && o.kind == "RayCluster")
    }
}
