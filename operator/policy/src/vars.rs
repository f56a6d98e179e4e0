//! The CEL variables a rule reads (`job`, `queue`, `waited`, `now`, `offering`), built once
//! per job (and offering) straight into CEL values that borrow the job's strings, and lent to
//! every rule's evaluation through a variable resolver: no copy per rule.
//!
//! Their fields and types are the ones `variables::VARIABLES` lists; the tests check both that
//! and that the values equal what serialising the same views with serde gives (the engine's
//! earlier way, kept there as the reference).

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use spillway_core::{Offering, PolicyContext};

type V<'a> = Box<dyn Val + 'a>;

/// The variables of one evaluation.
pub(crate) struct Vars<'a> {
    job: V<'a>,
    queue: V<'a>,
    waited: V<'a>,
    now: V<'a>,
    offering: Option<V<'a>>,
}

impl VariableResolver for Vars<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let v = match variable {
            "job" => &self.job,
            "queue" => &self.queue,
            "waited" => &self.waited,
            "now" => &self.now,
            "offering" => self.offering.as_ref()?,
            _ => return None,
        };
        Some(CowVal::Borrowed(v.as_ref()))
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
    let fields = fields.into_iter();
    let mut m: HashMap<CelMapKey<'a>, V<'a>> = HashMap::with_capacity(fields.size_hint().0);
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(CelMapKey::String(CelString::from(k)), v);
        }
    }
    Box::new(CelMap::from(m))
}

/// The variables for `ctx`, and for `offering` in an offering filter.
pub(crate) fn vars<'a>(ctx: &PolicyContext<'a>, offering: Option<&'a Offering>) -> Vars<'a> {
    let job = ctx.job;
    let name = job.id.split_once('/').map_or(job.id.as_str(), |(_, n)| n);
    let datasets: Vec<V<'a>> = ctx
        .datasets
        .iter()
        .map(|ds| {
            map([
                ("name", Some(s(&ds.name))),
                ("classification", Some(s(ds.classification.as_str()))),
                ("sizeGiB", Some(d(ds.size_gib))),
            ])
        })
        .collect();
    let job_v = map([
        ("name", Some(s(name))),
        ("namespace", Some(s(&job.namespace))),
        ("queue", Some(s(&job.queue))),
        (
            "priority",
            Some(Box::new(CelInt::from(i64::from(job.priority))) as V<'a>),
        ),
        ("replicas", Some(u(u64::from(job.replicas)))),
        ("gpusPerReplica", Some(u(u64::from(job.gpus_per_replica)))),
        ("totalGpus", Some(u(u64::from(job.total_gpus())))),
        (
            "gpuModels",
            Some(Box::new(CelList::from(
                job.gpu_models
                    .iter()
                    .map(|m| s(m.as_str()))
                    .collect::<Vec<_>>(),
            ))),
        ),
        ("datasets", Some(Box::new(CelList::from(datasets)))),
        (
            "restartable",
            Some(Box::new(CelBool::from(job.restartable))),
        ),
        ("placement", Some(s(job.placement.as_str()))),
        (
            "estimatedRuntimeSeconds",
            job.estimated_runtime.map(|x| d(x.as_secs_f64())),
        ),
        (
            "maxRuntimeSeconds",
            job.max_runtime.map(|x| d(x.as_secs_f64())),
        ),
        ("maxHourlyCost", job.max_hourly_cost.map(d)),
        (
            "labels",
            Some(map(job
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), Some(s(v)))))),
        ),
    ]);
    let q = ctx.queue_state;
    let queue = map([
        ("name", Some(s(&ctx.queue.name))),
        ("pendingJobs", Some(u(u64::from(q.pending_jobs)))),
        ("runningJobs", Some(u(u64::from(q.running_jobs)))),
        (
            "privateGpusInUse",
            Some(u(u64::from(q.private_gpus_in_use))),
        ),
        ("cloudGpusInUse", Some(u(u64::from(q.cloud_gpus_in_use)))),
        ("hourlyUSD", Some(d(q.hourly_usd))),
        ("spentThisMonthUSD", Some(d(q.spent_this_month_usd))),
        (
            "budgetLeftHourlyUSD",
            ctx.queue
                .budget_hourly_usd
                .map(|b| d((b - q.hourly_usd).max(0.0))),
        ),
        (
            "budgetLeftMonthlyUSD",
            ctx.queue
                .budget_monthly_usd
                .map(|b| d((b - q.spent_this_month_usd).max(0.0))),
        ),
    ]);
    let offering = offering.map(|o| {
        map([
            ("instanceType", Some(s(&o.instance_type))),
            ("gpuModel", Some(s(o.gpu_model.as_str()))),
            ("gpus", Some(u(u64::from(o.gpus)))),
            ("capacityType", Some(s(o.capacity_type.as_str()))),
            ("region", Some(s(&o.region))),
            ("zone", Some(s(&o.zone))),
            ("hourlyPrice", Some(d(o.hourly_price))),
            ("gpuMemoryGiB", Some(d(o.gpu_memory_gib))),
            (
                "recentInterruptions",
                Some(u(u64::from(o.recent_interruptions))),
            ),
        ])
    });
    Vars {
        job: job_v,
        queue,
        waited: d(ctx.waited.as_secs_f64()),
        now: d(ctx.now.as_secs_f64()),
        offering,
    }
}

#[cfg(test)]
#[path = "vars_tests.rs"]
mod tests;
