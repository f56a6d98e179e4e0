//! What the admission webhook says of one object: the refusals (the request is denied with all
//! of them) and the warnings (`kubectl` prints them; the object is stored).
//!
//! A pure function of the request and what the watch caches hold, so every rule is unit-tested
//! without a server. The checks are the operator's own, with the same messages as the `Invalid`
//! condition, the jobs' decisions and `spillway policy lint`: a broken object is refused at
//! `kubectl apply` instead of being reported later.
//!
//! An update that leaves the spec as it was is let through unexamined: the operator's own
//! annotation writes, a finalizer's removal and a label change must go through even when the
//! object has become invalid since (a queue's ceiling lowered, say).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spillway_api::validate::{self, FieldErrors};
use spillway_api::{
    BurstPolicy, Classification, ComputePool, Dataset, GpuJob, GpuQueue, job::JobPhase,
};

use crate::hashing::{HashMap, HashMapExt};

/// What the webhook needs of the cluster beside the object.
pub trait Lookup {
    fn queue(&self, name: &str) -> Option<Arc<GpuQueue>>;
    fn namespace(&self, name: &str) -> Option<Arc<Namespace>>;
    /// The GpuJobs that read `dataset` and run (or are being placed) in the cloud, as
    /// `namespace/name`.
    fn cloud_readers(&self, dataset: &str) -> Vec<String>;
}

/// The webhook's answer.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
}

impl Verdict {
    fn refuse(&mut self, why: impl Into<String>) {
        self.refusals.push(why.into());
    }

    fn warn(&mut self, why: impl Into<String>) {
        self.warnings.push(why.into());
    }

    fn fields(&mut self, result: Result<(), FieldErrors>) {
        if let Err(errors) = result {
            self.refusals
                .extend(errors.0.into_iter().map(|e| e.to_string()));
        }
    }

    /// The message of a denial: every refusal, one after another.
    pub fn message(&self) -> String {
        self.refusals.join("; ")
    }
}

/// Reviews `object` of `kind` (created, or updated from `old`).
pub fn review(kind: &str, object: &Value, old: Option<&Value>, world: &dyn Lookup) -> Verdict {
    let mut v = Verdict::default();
    if old.is_some_and(|o| o.get("spec") == object.get("spec")) {
        return v;
    }
    match kind {
        "GpuJob" => match parse::<GpuJob>(object, &mut v) {
            Some(job) => gpu_job(&job, object, old, world, &mut v),
            None => return v,
        },
        "GpuQueue" => {
            if let Some(q) = parse::<GpuQueue>(object, &mut v) {
                v.fields(validate::gpu_queue(&q.spec));
                queue_warnings(&q, &mut v);
            }
        }
        "ComputePool" => {
            if let Some(p) = parse::<ComputePool>(object, &mut v) {
                v.fields(validate::compute_pool(&p.spec));
                if let Some(before) = old.and_then(quiet_parse::<ComputePool>)
                    && (before.spec.aws.is_some() != p.spec.aws.is_some()
                        || before.spec.cluster.is_some() != p.spec.cluster.is_some())
                {
                    v.refuse("spec: a pool cannot change between private, aws and cluster: create another pool and delete this one");
                }
            }
        }
        "Dataset" => {
            if let Some(d) = parse::<Dataset>(object, &mut v) {
                v.fields(validate::dataset(&d.spec));
                dataset(&d, old, world, &mut v);
            }
        }
        "BurstPolicy" => {
            if let Some(p) = parse::<BurstPolicy>(object, &mut v)
                && let crate::turn::policies::Verdict::Invalid(why) =
                    crate::turn::policies::verdict(&p)
            {
                v.refuse(why);
            }
        }
        _ => {}
    }
    v
}

fn parse<T: DeserializeOwned>(object: &Value, v: &mut Verdict) -> Option<T> {
    match serde_json::from_value(object.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            v.refuse(format!("spec: {e}"));
            None
        }
    }
}

fn quiet_parse<T: DeserializeOwned>(object: &Value) -> Option<T> {
    serde_json::from_value(object.clone()).ok()
}

fn gpu_job(job: &GpuJob, object: &Value, old: Option<&Value>, world: &dyn Lookup, v: &mut Verdict) {
    v.fields(validate::gpu_job(&job.spec));
    if let Some(raw) = object.pointer("/spec/template") {
        let typed = serde_json::to_value(&job.spec.template).unwrap_or(Value::Null);
        for path in unknown_fields(raw, &typed, "spec.template") {
            v.refuse(format!(
                "{path}: unknown field (misspelt, or not a field of a Kubernetes 1.37 PodTemplateSpec): it would be dropped from the job's pods"
            ));
        }
    }
    if let Some(before) = old.and_then(quiet_parse::<GpuJob>) {
        let admitted = before
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p != JobPhase::Queued);
        if admitted && before.spec.queue != job.spec.queue {
            v.refuse("spec.queue cannot change once the job has been admitted: delete the job and submit it to the other queue");
        }
        if admitted
            && (before.spec.replicas != job.spec.replicas
                || before.spec.gpus_per_replica != job.spec.gpus_per_replica)
        {
            v.refuse("spec.replicas and spec.gpusPerReplica cannot change once the job has been admitted: delete the job and submit it again");
        }
    }
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    match world.queue(&job.spec.queue) {
        None => v.warn(format!(
            "GpuQueue {:?} does not exist: the job waits (reason QueueNotFound) until it is created",
            job.spec.queue
        )),
        Some(queue) => {
            if let Some(why) = crate::world::priority_problem(&queue, job) {
                v.refuse(why);
            }
            let ns = world.namespace(namespace);
            let mut namespaces = HashMap::new();
            if let Some(ns) = &ns {
                namespaces.insert(namespace, ns);
            }
            if let Some(why) = crate::world::admission_problem(&queue, namespace, &namespaces) {
                v.refuse(why);
            }
        }
    }
    let spec = &job.spec;
    if spec.max_hourly_cost.is_some() && spec.placement == spillway_api::Placement::PrivateOnly {
        v.warn("spec.maxHourlyCost is ignored: placement PrivateOnly never runs in the cloud");
    }
    if spec.checkpoint_interval.is_some() && !spec.restartable {
        v.warn("spec.checkpointInterval is ignored: the job is not restartable");
    }
}

fn queue_warnings(q: &GpuQueue, v: &mut Verdict) {
    let bursts = q.spec.burst.as_ref().is_some_and(|b| b.enabled);
    if let Some(b) = &q.spec.burst
        && !b.enabled
        && (!b.pools.is_empty() || !b.capacity_types.is_empty() || b.compute_wait_factor.is_some())
    {
        v.warn("spec.burst.enabled is false: the queue's other burst settings are ignored");
    }
    if q.spec.budget.is_some() && !bursts {
        v.warn("spec.budget is ignored while the queue does not burst (spec.burst.enabled): budgets count cloud spend");
    }
}

/// A dataset made `Restricted` must not be read by a job in the cloud.
fn dataset(d: &Dataset, old: Option<&Value>, world: &dyn Lookup, v: &mut Verdict) {
    let was = old
        .and_then(quiet_parse::<Dataset>)
        .map(|o| o.spec.classification);
    if d.spec.classification != Classification::Restricted
        || was == Some(Classification::Restricted)
    {
        return;
    }
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let readers = world.cloud_readers(name);
    if !readers.is_empty() {
        v.refuse(format!(
            "spec.classification: Restricted data never leaves private nodes, and {} GpuJob{} reading {name:?} run{} in the cloud ({}): stop {} or wait until {} finish, then classify it Restricted",
            readers.len(),
            if readers.len() == 1 { "" } else { "s" },
            if readers.len() == 1 { "s" } else { "" },
            readers.join(", "),
            if readers.len() == 1 { "it" } else { "them" },
            if readers.len() == 1 { "it has" } else { "they" },
        ));
    }
}

/// The paths of `raw`'s fields that `typed` (the same value read into its type and written
/// back) lost: fields the type does not know. Empty values (`null`, `[]`, `{}`) do not count,
/// since a type may leave them out when it writes.
pub fn unknown_fields(raw: &Value, typed: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    match (raw, typed) {
        (Value::Object(r), Value::Object(t)) => {
            let keys: BTreeMap<&String, &Value> = r.iter().collect();
            for (k, rv) in keys {
                let at = format!("{path}.{k}");
                match t.get(k) {
                    Some(tv) => out.extend(unknown_fields(rv, tv, &at)),
                    None if is_empty(rv) => {}
                    None => out.push(at),
                }
            }
        }
        (Value::Array(r), Value::Array(t)) => {
            for (i, (rv, tv)) in r.iter().zip(t).enumerate() {
                out.extend(unknown_fields(rv, tv, &format!("{path}[{i}]")));
            }
        }
        _ => {}
    }
    out
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}
