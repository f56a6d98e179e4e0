//! The CEL variables a rule reads (`job`, `queue`, `waited`, `now`, `offering`), built once
//! per job (and offering) straight into CEL values that borrow the job's strings, and lent to
//! every rule's evaluation through a variable resolver: no copy per rule.
//!
//! Only what the rules read is built ([`Reads`]). A field the rules select by name
//! (`job.labels`) is answered straight by its qualified name, which the interpreter asks for
//! before the variable itself (the most specific name wins), so no map of the variable's
//! fields is built or searched for it. The maps (`job`, `queue`, `offering` as values) are built
//! at their first use in the evaluation, with the fields the rules read: an index
//! (`job['labels']`), a presence test (`has(queue.budgetLeftMonthlyUSD)`), a selection of a
//! field that is absent (the map answers it as the interpreter would), or the variable itself.
//!
//! Their fields and types are the ones `variables::VARIABLES` lists; the tests check both that
//! and that the values equal what serialising the same views with serde gives (the engine's
//! earlier way, kept there as the reference).

use std::collections::HashMap;
use std::sync::OnceLock;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use spillway_core::{Offering, PolicyContext};

use crate::reads::{Fields, Reads, Var};

type V<'a> = Box<dyn Val + 'a>;

/// The fields of `job`, in the order `variables::VARIABLES` lists them.
pub(crate) const JOB_FIELDS: [&str; 18] = [
    "name",
    "namespace",
    "queue",
    "priority",
    "replicas",
    "gpusPerReplica",
    "totalGpus",
    "gpuModels",
    "datasets",
    "restartable",
    "placement",
    "estimatedRuntimeSeconds",
    "maxRuntimeSeconds",
    "maxHourlyCost",
    "requirements",
    "labels",
    "kind",
    "topology",
];

pub(crate) const QUEUE_FIELDS: [&str; 10] = [
    "name",
    "pendingJobs",
    "runningJobs",
    "privateGpusInUse",
    "cloudGpusInUse",
    "remoteGpusInUse",
    "hourlyUSD",
    "spentThisMonthUSD",
    "budgetLeftHourlyUSD",
    "budgetLeftMonthlyUSD",
];

pub(crate) const OFFERING_FIELDS: [&str; 11] = [
    "pool",
    "poolKind",
    "instanceType",
    "gpuModel",
    "gpus",
    "capacityType",
    "region",
    "zone",
    "hourlyPrice",
    "gpuMemoryGiB",
    "recentInterruptions",
];

/// The variables of one evaluation.
pub(crate) struct Vars<'c, 'a> {
    ctx: &'c PolicyContext<'a>,
    offering_of: Option<&'a Offering>,
    reads: &'c Reads,
    /// Fields selected by name, present in this job: (qualified name, value).
    flat: Vec<(&'c str, V<'a>)>,
    job: OnceLock<V<'a>>,
    queue: OnceLock<V<'a>>,
    offering: OnceLock<V<'a>>,
    waited: V<'a>,
    now: V<'a>,
}

impl VariableResolver for Vars<'_, '_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let v = match variable {
            "job" => self.job.get_or_init(|| {
                fields_map(&JOB_FIELDS, &self.reads.job, |f| job_field(self.ctx, f))
            }),
            "queue" => self.queue.get_or_init(|| {
                fields_map(&QUEUE_FIELDS, &self.reads.queue, |f| {
                    queue_field(self.ctx, f)
                })
            }),
            "offering" => {
                let o = self.offering_of?;
                self.offering.get_or_init(|| {
                    fields_map(&OFFERING_FIELDS, &self.reads.offering, |f| {
                        offering_field(o, f)
                    })
                })
            }
            "waited" => &self.waited,
            "now" => &self.now,
            _ => {
                let (_, v) = self.flat.iter().find(|(name, _)| *name == variable)?;
                v
            }
        };
        Some(CowVal::Borrowed(v.as_ref()))
    }
}

/// The variables for `ctx`, and for `offering` in an offering filter, with what `reads` says
/// the rules read.
pub(crate) fn vars<'c, 'a>(
    ctx: &'c PolicyContext<'a>,
    offering: Option<&'a Offering>,
    reads: &'c Reads,
) -> Vars<'c, 'a> {
    let flat = reads
        .selected()
        .filter_map(|(qualified, var, field)| {
            let v = match var {
                Var::Job => job_field(ctx, field),
                Var::Queue => queue_field(ctx, field),
                Var::Offering => offering_field(offering?, field),
            }?;
            Some((qualified, v))
        })
        .collect();
    Vars {
        ctx,
        offering_of: offering,
        reads,
        flat,
        job: OnceLock::new(),
        queue: OnceLock::new(),
        offering: OnceLock::new(),
        waited: d(ctx.waited.as_secs_f64()),
        now: d(ctx.now.as_secs_f64()),
    }
}

fn s(x: &str) -> V<'_> {
    Box::new(CelString::from(x))
}

fn u<'a>(x: u64) -> V<'a> {
    Box::new(CelUInt::from(x))
}

fn d<'a>(x: f64) -> V<'a> {
    Box::new(CelDouble::from(x))
}

/// A map with string keys; `None` values are left out (as serde skips them).
fn map<'a>(fields: impl IntoIterator<Item = (&'a str, Option<V<'a>>)>) -> V<'a> {
    let m: HashMap<CelMapKey<'a>, V<'a>> = fields
        .into_iter()
        .filter_map(|(k, v)| Some((CelMapKey::String(CelString::from(k)), v?)))
        .collect();
    Box::new(CelMap::from(m))
}

/// The map of a variable's fields that `reads` names (absent ones left out).
fn fields_map<'a>(
    names: &[&'static str],
    reads: &Fields,
    field: impl Fn(&str) -> Option<V<'a>>,
) -> V<'a> {
    map(names
        .iter()
        .filter(|n| reads.wants(n))
        .map(|&n| (n, field(n))))
}

/// One field of `job` (`None`: absent, or no such field).
fn job_field<'a>(ctx: &PolicyContext<'a>, field: &str) -> Option<V<'a>> {
    let job = ctx.job;
    Some(match field {
        "name" => s(job.id.split_once('/').map_or(job.id.as_str(), |(_, n)| n)),
        "namespace" => s(&job.namespace),
        "queue" => s(&job.queue),
        "priority" => Box::new(CelInt::from(i64::from(job.priority))),
        "replicas" => u(u64::from(job.replicas)),
        "gpusPerReplica" => u(u64::from(job.gpus_per_replica)),
        "totalGpus" => u(u64::from(job.total_gpus())),
        "gpuModels" => Box::new(CelList::from(
            job.gpu_models
                .iter()
                .map(|m| s(m.as_str()))
                .collect::<Vec<_>>(),
        )),
        "datasets" => Box::new(CelList::from(
            ctx.datasets
                .iter()
                .map(|ds| {
                    map([
                        ("name", Some(s(&ds.name))),
                        ("classification", Some(s(ds.classification.as_str()))),
                        ("sizeGiB", Some(d(ds.size_gib))),
                    ])
                })
                .collect::<Vec<_>>(),
        )),
        "restartable" => Box::new(CelBool::from(job.restartable)),
        "placement" => s(job.placement.as_str()),
        "estimatedRuntimeSeconds" => d(job.estimated_runtime?.as_secs_f64()),
        "maxRuntimeSeconds" => d(job.max_runtime?.as_secs_f64()),
        "maxHourlyCost" => d(job.max_hourly_cost?),
        "requirements" => {
            let r = &job.requirements;
            let version = |v: Option<spillway_core::Version>| -> Option<V<'a>> {
                v.map(|v| Box::new(CelString::from(v.to_string())) as V<'a>)
            };
            map([
                ("minDriverVersion", version(r.min_driver)),
                ("minCudaVersion", version(r.min_cuda)),
                (
                    "gpuProducts",
                    (!r.gpu_products.is_empty()).then(|| {
                        Box::new(CelList::from(
                            r.gpu_products.iter().map(|p| s(p)).collect::<Vec<_>>(),
                        )) as V<'a>
                    }),
                ),
                (
                    "minGpuMemoryGiB",
                    r.min_gpu_memory_gib.map(|m| u(u64::from(m))),
                ),
            ])
        }
        "labels" => map(job.labels.iter().map(|(k, v)| (k.as_str(), Some(s(v))))),
        "kind" => s(&job.kind),
        "topology" => {
            let (required, preferred) = match &job.topology {
                Some(t) if t.required => (Some(s(&t.level)), None),
                Some(t) => (None, Some(s(&t.level))),
                None => (None, None),
            };
            map([("required", required), ("preferred", preferred)])
        }
        _ => return None,
    })
}

/// One field of `queue`.
fn queue_field<'a>(ctx: &PolicyContext<'a>, field: &str) -> Option<V<'a>> {
    let q = ctx.queue_state;
    Some(match field {
        "name" => s(&ctx.queue.name),
        "pendingJobs" => u(u64::from(q.pending_jobs)),
        "runningJobs" => u(u64::from(q.running_jobs)),
        "privateGpusInUse" => u(u64::from(q.private_gpus_in_use)),
        "cloudGpusInUse" => u(u64::from(q.cloud_gpus_in_use)),
        "remoteGpusInUse" => u(u64::from(q.remote_gpus_in_use)),
        "hourlyUSD" => d(q.hourly_usd),
        "spentThisMonthUSD" => d(q.spent_this_month_usd),
        "budgetLeftHourlyUSD" => d((ctx.queue.budget_hourly_usd? - q.hourly_usd).max(0.0)),
        "budgetLeftMonthlyUSD" => {
            d((ctx.queue.budget_monthly_usd? - q.spent_this_month_usd).max(0.0))
        }
        _ => return None,
    })
}

/// One field of `offering`.
fn offering_field<'a>(o: &'a Offering, field: &str) -> Option<V<'a>> {
    Some(match field {
        "pool" => s(&o.pool),
        "poolKind" => s(match o.environment {
            spillway_core::Environment::Remote => "cluster",
            _ => "aws",
        }),
        "instanceType" => s(&o.instance_type),
        "gpuModel" => s(o.gpu_model.as_str()),
        "gpus" => u(u64::from(o.gpus)),
        "capacityType" => s(o.capacity_type.as_str()),
        "region" => s(&o.region),
        "zone" => s(&o.zone),
        "hourlyPrice" => d(o.hourly_price),
        "gpuMemoryGiB" => d(o.gpu_memory_gib),
        "recentInterruptions" => u(u64::from(o.recent_interruptions)),
        _ => return None,
    })
}

#[cfg(test)]
#[path = "vars_tests.rs"]
mod tests;
