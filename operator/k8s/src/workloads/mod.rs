//! The workloads teams already have, queued and placed by Spillway with one label.
//!
//! A workload of a supported kind labelled `spillway.io/queue: <GpuQueue>` gets a GpuJob in its
//! namespace that stands for it (`spec.workloadRef`, owned by the workload): the GpuJob is what
//! the core decides about and what users read. The workload stays suspended until Spillway
//! places it; it is then run with the placement written into its pod template (the chosen
//! nodes, the pool's tolerations, and labels that tie its pods to the GpuJob), and suspended
//! again when the GpuJob is requeued, preempted or moved.
//!
//! Every kind implements [`WorkloadKind`] (what Kueue's `GenericJob` interface does): the
//! shape of its pods, whether it is suspended or finished, the patch that runs it with a
//! placement and the one that suspends it. The turn (`turn/workloads.rs`) sees only the
//! trait: adding a kind is one file here and its tests.

mod annotations;
mod batch_job;
mod jobset;
pub mod pod_group;
mod ray_job;
mod train_job;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spillway_api::job::{PORTABILITY_ANNOTATION, PORTABLE, WorkloadRef};
use spillway_api::{ComputePool, GpuJob, GpuJobSpec};

use crate::labels;

pub use batch_job::BatchJob;
pub use jobset::{JOBSET_NAME_LABEL, JobSet};
pub use pod_group::PodGroup;
pub use ray_job::RayJob;
pub use train_job::TrainJob;

/// `serde_json::Value::pointer` without its unescaping, which makes a string of every segment:
/// the paths read here are `/`-separated names and indexes with no `~`. Workloads are read with
/// them at every turn.
pub(crate) trait At {
    fn at(&self, path: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, path: &str) -> Option<&Value> {
        if !(path.is_empty() || path.starts_with('/')) {
            return None;
        }
        path.split('/')
            .skip(1)
            .try_fold(self, |v, segment| match v {
                Value::Object(m) => m.get(segment),
                Value::Array(a) => segment.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            })
    }
}

/// On a workload: the GpuQueue it is submitted to (the label that opts it in).
pub const QUEUE_LABEL: &str = "spillway.io/queue";
/// On a workload's GpuJob: how the workload finished, as its kind's controller says
/// ([`Finished`] as JSON), mirrored by the operator so the job's view reads it.
pub const FINISHED_ANNOTATION: &str = "spillway.io/workload-finished";

/// On the pod template of a workload whose controller cannot carry a node affinity over to
/// what it already made (a JobSet's Jobs): the nodes its pods are pinned to, comma-separated.
/// Such a template carries [`PLACEMENT_GATE`] too.
pub const NODES_ANNOTATION: &str = "spillway.io/nodes";
/// The scheduling gate that holds a workload's pod until it is pinned to the nodes of
/// [`NODES_ANNOTATION`] (by the admission webhook as it is made, else by the operator).
pub const PLACEMENT_GATE: &str = "spillway.io/placement";

/// The value of [`NODES_ANNOTATION`] for `nodes`: sorted, each once.
pub fn nodes_annotation(nodes: &[String]) -> String {
    let mut n: Vec<&str> = nodes.iter().map(String::as_str).collect();
    n.sort_unstable();
    n.dedup();
    n.join(",")
}

/// The nodes a pod's [`NODES_ANNOTATION`] names.
pub fn annotated_nodes(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// Pins a workload's pod held by [`PLACEMENT_GATE`] to the nodes its [`NODES_ANNOTATION`]
/// names and lifts the gate; false (and `pod` unchanged) when it is not such a pod. Both the
/// admission webhook (as the pod is made) and the operator (on a pod made without it) do
/// this: the API server lets a gated pod's node affinity be narrowed and its gates removed.
pub fn pin_gated_pod(pod: &mut k8s_openapi::api::core::v1::Pod) -> bool {
    let Some(nodes) = (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get(NODES_ANNOTATION))
        .map(|v| annotated_nodes(v))
        .filter(|n| !n.is_empty())
    else {
        return false;
    };
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let gates = spec.scheduling_gates.get_or_insert_with(Vec::new);
    let before = gates.len();
    gates.retain(|g| g.name != PLACEMENT_GATE);
    if gates.len() == before {
        return false;
    }
    if gates.is_empty() {
        spec.scheduling_gates = None;
    }
    crate::pods::pin_to_nodes(spec, &nodes);
    true
}

/// On a workload: its user created it suspended, so it is theirs until they lift the suspension
/// (the mutating webhook then holds it for Spillway and removes this); the operator leaves a
/// workload carrying it alone.
pub const USER_SUSPENDED_ANNOTATION: &str = "spillway.io/suspended-by-user";

/// What a workload's pods need: `replicas` pods of `gpus_per_replica` GPUs each, started
/// together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub replicas: i32,
    pub gpus_per_replica: i32,
}

/// How a workload finished, as its controller reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// `Succeeded` or `Failed`.
    pub outcome: String,
    /// When (RFC 3339), when the workload says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Finished {
    pub fn succeeded(&self) -> bool {
        self.outcome == "Succeeded"
    }

    /// The end a final status condition `c` (`status: True`) says: `Succeeded` when
    /// `succeeded`, else `Failed` with its reason and message.
    fn of_condition(c: &Value, succeeded: bool) -> Finished {
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        Finished {
            outcome: if succeeded { "Succeeded" } else { "Failed" }.into(),
            at: Some(text("lastTransitionTime").to_string()).filter(|t| !t.is_empty()),
            message: if succeeded {
                String::new()
            } else {
                format!("{}: {}", text("reason"), text("message"))
            },
        }
    }
}

/// The pods a `batch/v1` Job spec (`spec`, as JSON) runs at once: `parallelism` (default 1)
/// capped by `completions`.
fn pods_at_once(spec: &Value) -> i64 {
    let int = |k: &str| spec.get(k).and_then(Value::as_i64);
    let parallelism = int("parallelism").unwrap_or(1);
    int("completions").map_or(parallelism, |c| parallelism.min(c))
}

/// The gang of a workload's pod groups (each: where it is, how many pods, GPUs per pod): the
/// pods of the groups that ask for GPUs, which must all ask for the same; `what` names the
/// field the groups are in. Why it is no gang Spillway runs, when it is not.
fn gang_of(groups: &[(String, i64, u32)], what: &str) -> Result<Shape, String> {
    let mut total = 0;
    let mut size: Option<(u32, &str)> = None;
    for (at, pods, gpus) in groups.iter().filter(|(_, n, g)| *g > 0 && *n > 0) {
        match size {
            Some((g, first)) if g != *gpus => {
                return Err(format!(
                    "{at}: its pods ask for {gpus} {} and those of {first} for {g}; Spillway runs gangs of pods of one size",
                    labels::GPU_RESOURCE
                ));
            }
            Some(_) => {}
            None => size = Some((*gpus, at)),
        }
        total += pods;
    }
    let Some((gpus, _)) = size else {
        return Err(format!(
            "{what}: no pods ask for {} (set it in resources.limits); Spillway queues GPU workloads only",
            labels::GPU_RESOURCE
        ));
    };
    if !(1..=i64::from(spillway_api::job::MAX_REPLICAS)).contains(&total) {
        return Err(format!(
            "{what}: {total} GPU pods at once; Spillway runs gangs of 1 to {}",
            spillway_api::job::MAX_REPLICAS
        ));
    }
    Ok(Shape {
        replicas: total as i32,
        gpus_per_replica: gpus.min(i32::MAX as u32) as i32,
    })
}

/// The attempt of the GpuJob with uid `uid` a pod template's `labels` (JSON) are placed for.
fn placed_attempt_in(labels: &Value, uid: &str) -> Option<u32> {
    (labels.get(labels::JOB_UID_LABEL)?.as_str()? == uid)
        .then(|| labels.get(labels::ATTEMPT_LABEL)?.as_str()?.parse().ok())
        .flatten()
}

/// Where Spillway runs a workload: the GpuJob that stands for it, its attempt, and the nodes
/// (one per replica) of `pool` the core chose.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'a> {
    pub job: &'a GpuJob,
    pub attempt: u32,
    pub pool: Option<&'a ComputePool>,
    pub nodes: &'a [String],
}

impl Placement<'_> {
    /// The labels its pods carry: the GpuJob's name and uid, the attempt and the pool, by
    /// which the operator counts them as the job's.
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([
            (
                labels::JOB_LABEL.to_string(),
                self.job.metadata.name.clone().unwrap_or_default(),
            ),
            (
                labels::JOB_UID_LABEL.to_string(),
                self.job.metadata.uid.clone().unwrap_or_default(),
            ),
            (labels::ATTEMPT_LABEL.to_string(), self.attempt.to_string()),
        ]);
        if let Some(p) = self.pool.and_then(|p| p.metadata.name.clone()) {
            l.insert(labels::POOL_LABEL.to_string(), p);
        }
        l
    }
}

/// One write that runs or holds a workload, on the workload itself or (a pod group) one of its
/// pods.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A merge patch of the object `name` (of the workload's kind).
    Patch { name: String, patch: Value },
    /// The deletion of pod `name` (only while it is the one with `uid`), given
    /// `grace_seconds` to stop: a pod that ran cannot be held again.
    Delete {
        name: String,
        uid: String,
        grace_seconds: i64,
    },
}

/// The one write of a workload patched as a whole: `patch` on `w` itself.
fn patch_self(w: &DynamicObject, patch: Value) -> Vec<Write> {
    vec![Write::Patch {
        name: w.metadata.name.clone().unwrap_or_default(),
        patch,
    }]
}

/// One kind of workload Spillway can hold and run.
pub trait WorkloadKind: Send + Sync {
    /// Its API group (`""` for the core group), version, kind and plural resource name.
    fn group(&self) -> &'static str;
    fn version(&self) -> &'static str;
    fn kind(&self) -> &'static str;
    fn plural(&self) -> &'static str;
    /// The name the chart's `integrations` and `--integrations` use (Kueue's names).
    fn integration(&self) -> &'static str;
    /// Its pods' gang size and GPUs per pod, or why it cannot be run as written.
    fn shape(&self, w: &DynamicObject) -> Result<Shape, String>;
    /// What it still lacks before it can be queued (a pod group not all made yet): its GpuJob
    /// is made only once it is complete.
    fn incomplete(&self, _w: &DynamicObject) -> Option<String> {
        None
    }
    /// Whether it is suspended (held).
    fn suspended(&self, w: &DynamicObject) -> bool;
    /// Whether a run may be written now: it is suspended, and its controller has finished
    /// suspending it (a placement written earlier would be refused).
    fn ready_to_run(&self, w: &DynamicObject) -> bool;
    /// How it finished, once it has.
    fn finished(&self, w: &DynamicObject) -> Option<Finished>;
    /// The attempt of the GpuJob with uid `uid` its pod template is placed for, if any.
    fn placed_attempt(&self, w: &DynamicObject, uid: &str) -> Option<u32>;
    /// Whether a run of it landed only in part (some pods of a pod group patched, the others
    /// not): [`WorkloadKind::run`] again writes the rest.
    fn partly_run(&self, _w: &DynamicObject) -> bool {
        false
    }
    /// The writes that run it with `placement`.
    fn run(&self, w: &DynamicObject, placement: &Placement<'_>) -> Result<Vec<Write>, String>;
    /// The writes that suspend it.
    fn suspend(&self, w: &DynamicObject) -> Vec<Write>;
    /// The JSON patch operations that hold `object` as it is admitted (the mutating webhook's).
    fn hold_ops(&self, object: &Value) -> Vec<Value>;
    /// Whether a copy of it may run in another cluster (a cluster pool), or why not. Only the
    /// kinds that implement [`WorkloadKind::copy`] can.
    fn portable(&self, _w: &DynamicObject) -> Result<(), String> {
        Err(format!(
            "it is a {}: Spillway dispatches only batch/v1 Jobs to other clusters",
            self.kind()
        ))
    }
    /// The copy of `w` that runs in another cluster (`apiVersion`, `kind` and `spec`, running;
    /// the caller names and labels it), its pod template made by `template` from the
    /// workload's (the template's metadata and spec as a Pod).
    fn copy(
        &self,
        w: &DynamicObject,
        _template: &mut dyn FnMut(&mut Pod),
    ) -> Result<Value, String> {
        self.portable(w)?;
        Err(format!(
            "a {} cannot be copied to another cluster",
            self.kind()
        ))
    }
    /// The owners of its GpuJob (deleting them deletes it): by default the workload itself.
    fn owners(&self, w: &DynamicObject) -> Vec<OwnerReference> {
        let t = w.types.clone().unwrap_or_default();
        vec![OwnerReference {
            api_version: t.api_version,
            kind: t.kind,
            name: w.metadata.name.clone().unwrap_or_default(),
            uid: w.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }]
    }
    /// The name and uid of the object its Events are about: by default the workload.
    fn regarding(&self, w: &DynamicObject) -> (String, String) {
        (
            w.metadata.name.clone().unwrap_or_default(),
            w.metadata.uid.clone().unwrap_or_default(),
        )
    }
    /// Whether `pod` was made by the controller of the workload named `workload` (of this
    /// kind, in the pod's namespace): by default, the workload controls it.
    fn controls_pod(&self, pod: &k8s_openapi::api::core::v1::Pod, workload: &str) -> bool {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == self.kind() && o.name == workload)
    }
}

/// Every kind Spillway supports, in the order `--integrations` lists them.
pub fn kinds() -> &'static [&'static dyn WorkloadKind] {
    &[&BatchJob, &PodGroup, &JobSet, &TrainJob, &RayJob]
}

/// The kind named `integration` (`batch/job`, ...).
pub fn by_integration(integration: &str) -> Option<&'static dyn WorkloadKind> {
    kinds()
        .iter()
        .copied()
        .find(|k| k.integration().eq_ignore_ascii_case(integration))
}

/// The kind of `api_version` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static dyn WorkloadKind> {
    // Asked for every workload at every turn: compared without making the string.
    let is_of = |k: &dyn WorkloadKind| match api_version.split_once('/') {
        Some((group, version)) => !group.is_empty() && group == k.group() && version == k.version(),
        None => k.group().is_empty() && api_version == k.version(),
    };
    kinds()
        .iter()
        .copied()
        .find(|k| k.kind() == kind && is_of(*k))
}

/// The kind a cached workload is of.
pub fn kind_of(w: &DynamicObject) -> Option<&'static dyn WorkloadKind> {
    let t = w.types.as_ref()?;
    by_kind(&t.api_version, &t.kind)
}

/// `group/version`, or `version` for the core group.
pub fn api_version_of(k: &dyn WorkloadKind) -> String {
    if k.group().is_empty() {
        k.version().to_string()
    } else {
        format!("{}/{}", k.group(), k.version())
    }
}

/// The API resource of kind `k`, for dynamic calls.
pub fn api_resource(k: &dyn WorkloadKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(k.group(), k.version(), k.kind()),
        k.plural(),
    )
}

/// The name of the GpuJob that stands for workload `name` of kind `kind`: `<kind>-<name>`,
/// shortened with a hash of the name to 63 characters (its pods carry it as a label value).
pub fn gpu_job_name(kind: &str, name: &str) -> String {
    let full = format!("{}-{name}", kind.to_ascii_lowercase());
    if full.len() <= 63 {
        return full;
    }
    // FNV-1a: stable across releases and processes.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let mut head: String = full.chars().take(63 - 9).collect();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    format!("{head}-{hash:08x}")
}

/// The GpuJob that stands for `w` (of kind `k`): its queue from the label, its shape from the
/// pod template, the rest of its spec from the `spillway.io/<field>` annotations
/// (docs/workloads.md), and how the workload finished, once it has. Why it cannot be made,
/// when it cannot.
pub fn gpu_job_for(k: &dyn WorkloadKind, w: &DynamicObject) -> Result<GpuJob, String> {
    let name = w.metadata.name.clone().unwrap_or_default();
    let queue = w
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(QUEUE_LABEL))
        .cloned()
        .unwrap_or_default();
    let shape = k.shape(w)?;
    let mut spec = GpuJobSpec {
        queue,
        priority: 0,
        replicas: shape.replicas,
        gpus_per_replica: shape.gpus_per_replica,
        gpu_models: Vec::new(),
        datasets: Vec::new(),
        restartable: false,
        checkpoint_interval: None,
        estimated_runtime: None,
        max_runtime: None,
        deadline: None,
        max_hourly_cost: None,
        requirements: None,
        placement: Default::default(),
        topology: None,
        template: None,
        workload_ref: Some(WorkloadRef {
            api_version: api_version_of(k),
            kind: k.kind().to_string(),
            name: name.clone(),
        }),
    };
    annotations::apply(w.metadata.annotations.as_ref(), &mut spec)?;
    spillway_api::validate::gpu_job(&spec).map_err(|e| e.to_string())?;
    let mut annotations = BTreeMap::from([(
        PORTABILITY_ANNOTATION.to_string(),
        k.portable(w).err().unwrap_or_else(|| PORTABLE.to_string()),
    )]);
    if let Some(f) = k.finished(w) {
        let f = serde_json::to_string(&f).unwrap_or_default();
        annotations.insert(FINISHED_ANNOTATION.to_string(), f);
    }
    let mut job = GpuJob::new(&gpu_job_name(k.kind(), &name), spec);
    job.metadata = ObjectMeta {
        name: job.metadata.name.take(),
        namespace: w.metadata.namespace.clone(),
        owner_references: Some(k.owners(w)),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    Ok(job)
}

/// How the workload a GpuJob stands for finished, as mirrored on it (none for a job with a
/// template, or a workload still running).
pub fn finished_of(job: &GpuJob) -> Option<Finished> {
    job.spec.workload_ref.as_ref()?;
    let raw = job
        .metadata
        .annotations
        .as_ref()?
        .get(FINISHED_ANNOTATION)?;
    serde_json::from_str(raw).ok()
}

/// Whether `job` stands for workload `w` (of kind `k`): it names it and one of the
/// workload's owners of it (by uid) owns it.
pub fn stands_for(k: &dyn WorkloadKind, job: &GpuJob, w: &DynamicObject) -> bool {
    let owners = k.owners(w);
    let named = job.spec.workload_ref.as_ref().is_some_and(|r| {
        Some(&r.name) == w.metadata.name.as_ref()
            && w.types
                .as_ref()
                .is_some_and(|t| t.kind == r.kind && t.api_version == r.api_version)
    });
    named
        && job
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| owners.iter().any(|w| w.uid == o.uid))
}

/// The kinds named by `integrations` whose API the cluster serves. An unknown name is an error
/// (a misspelt setting); a kind the cluster does not serve (its controller and CRDs are not
/// installed) is skipped with a log line, and its workloads are left alone.
pub async fn served(
    client: &kube::Client,
    integrations: &[String],
) -> Result<Vec<&'static dyn WorkloadKind>, crate::error::Error> {
    let mut out = Vec::new();
    for name in integrations {
        let Some(kind) = by_integration(name) else {
            return Err(crate::error::Error::Settings(format!(
                "--integrations: unknown kind {name:?} (known: {})",
                kinds()
                    .iter()
                    .map(|k| k.integration())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let listed = match kind.group() {
            "" => client.list_core_api_resources(kind.version()).await,
            _ => client.list_api_group_resources(&api_version_of(kind)).await,
        };
        match listed {
            Ok(list) if list.resources.iter().any(|r| r.name == kind.plural()) => out.push(kind),
            Ok(_) | Err(kube::Error::Api(_)) => tracing::warn!(
                integration = kind.integration(),
                "the cluster does not serve {}/{} (is its controller installed?): its workloads are not managed",
                api_version_of(kind),
                kind.plural()
            ),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Writes `job` (a workload's GpuJob) by server-side apply.
pub async fn apply_gpu_job(client: &kube::Client, job: &GpuJob) -> Result<(), kube::Error> {
    let api: kube::Api<GpuJob> = kube::Api::namespaced(
        client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let params = kube::api::PatchParams::apply(labels::FIELD_MANAGER).force();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    api.patch(name, &params, &kube::api::Patch::Apply(job))
        .await
        .map(|_| ())
}

/// Carries out one workload patch.
pub async fn patch(
    client: &kube::Client,
    p: &crate::actions::WorkloadPatch,
) -> Result<(), kube::Error> {
    let Some(kind) = by_kind(&p.api_version, &p.kind) else {
        return Ok(());
    };
    let api: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &p.namespace, &api_resource(kind));
    let params = kube::api::PatchParams {
        field_manager: Some(labels::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&p.object, &params, &kube::api::Patch::Merge(&p.patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod jobset_tests;
#[cfg(test)]
mod pod_group_tests;
#[cfg(test)]
mod ray_job_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod train_job_tests;
