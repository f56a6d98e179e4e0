//! From custom resources to the core's types. Each conversion validates first, so the core only
//! ever sees objects that passed [`crate::validate`].

use spillway_core as core;
use spillway_core::{Duration, GpuModel};

use crate::dataset::LocationEnvironment;
use crate::queue::WaitMode;
use crate::validate::{self, FieldErrors};
use crate::{ComputePool, Dataset, GpuJob, GpuQueue};

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn duration(s: &str) -> Duration {
    // Validated before conversion; a parse failure here cannot happen, zero is a safe fallback.
    Duration::parse(s).unwrap_or(Duration::ZERO)
}

/// A GpuQueue as the core sees it. `spent_this_month_usd` starts at 0; the caller adds what
/// it knows.
pub fn queue(q: &GpuQueue) -> Result<core::Queue, FieldErrors> {
    validate::gpu_queue(&q.spec)?;
    let spec = &q.spec;
    let burst = spec.burst.clone().unwrap_or_default();
    Ok(core::Queue {
        name: name_of(&q.metadata),
        quota_gpus: spec.private_quota.as_ref().map(|p| p.gpus.max(0) as u32),
        borrowing: spec.borrowing,
        weight: spec.weight.max(1) as u32,
        burst: core::BurstSettings {
            enabled: burst.enabled,
            max_wait: duration(&burst.max_wait),
            wait_mode: match burst.wait_mode {
                WaitMode::Fixed => core::WaitMode::Fixed,
                WaitMode::ComputeWait => core::WaitMode::ComputeWait,
                WaitMode::CostAware => core::WaitMode::CostAware,
                WaitMode::Priced => core::WaitMode::Priced,
            },
            compute_wait_factor: burst
                .compute_wait_factor
                .unwrap_or(core::model::DEFAULT_COMPUTE_WAIT_FACTOR),
            wait_cost_per_hour: burst
                .wait_cost_per_hour
                .unwrap_or(core::model::DEFAULT_WAIT_COST_PER_HOUR),
            pools: burst.pools.clone(),
            capacity_types: burst.capacity_types.clone(),
        },
        budget_hourly_usd: spec.budget.as_ref().and_then(|b| b.hourly_usd),
        budget_monthly_usd: spec.budget.as_ref().and_then(|b| b.monthly_usd),
        budget_counts_private: spec.budget.as_ref().is_some_and(|b| b.counts_private),
        spent_this_month_usd: 0.0,
        preempt_non_restartable: spec
            .preemption
            .as_ref()
            .is_some_and(|p| p.allow_non_restartable),
        min_runtime: (spec.preemption.as_ref())
            .and_then(|p| p.min_runtime.as_deref())
            .and_then(|d| core::Duration::parse(d).ok())
            .unwrap_or(core::Duration::ZERO),
    })
}

/// A ComputePool as the core sees it.
pub fn pool(p: &ComputePool) -> Result<core::Pool, FieldErrors> {
    validate::compute_pool(&p.spec)?;
    let spec = &p.spec;
    let kind = match (&spec.private, &spec.aws, &spec.cluster) {
        (Some(private), _, _) => core::PoolKind::Private {
            gpu_cost_per_hour: private.gpu_cost_per_hour,
        },
        (None, Some(aws), _) => core::PoolKind::Cloud {
            region: aws.region.clone(),
            capacity_types: aws.capacity_types.clone(),
        },
        (None, None, Some(cluster)) => core::PoolKind::Cluster {
            gpu_cost_per_hour: cluster.gpu_cost_per_hour,
            location: cluster.location.clone(),
        },
        (None, None, None) => unreachable_pool(),
    };
    let limits = spec.limits.clone().unwrap_or_default();
    Ok(core::Pool {
        name: name_of(&p.metadata),
        kind,
        max_nodes: limits.max_nodes.map(|v| v.max(0) as u32),
        max_gpus: limits.max_gpus.map(|v| v.max(0) as u32),
        max_hourly_usd: limits.max_hourly_usd,
        idle_timeout: duration(&spec.idle_timeout),
        refuses_copies: None,
    })
}

/// Validation rejects a pool with none of `private`, `aws` and `cluster`; this keeps the match total
/// without a panic path.
fn unreachable_pool() -> core::PoolKind {
    core::PoolKind::Private {
        gpu_cost_per_hour: None,
    }
}

/// A Dataset as the core sees it.
pub fn dataset(d: &Dataset) -> Result<core::Dataset, FieldErrors> {
    validate::dataset(&d.spec)?;
    // The regions of the copies in one kind of place.
    let regions = |env: LocationEnvironment| -> Vec<String> {
        d.spec
            .locations
            .iter()
            .filter(|l| l.environment == env)
            .filter_map(|l| l.region.clone())
            .collect()
    };
    Ok(core::Dataset {
        name: name_of(&d.metadata),
        classification: d.spec.classification,
        cloud_regions: regions(LocationEnvironment::Aws),
        remote_locations: regions(LocationEnvironment::Remote),
        size_gib: d.spec.size_gib.unwrap_or(0.0),
        egress_usd_per_gib: d.spec.egress_usd_per_gib.unwrap_or(0.0),
    })
}

/// A pending GpuJob as the core sees it, queued at `queued_at` (Unix milliseconds).
pub fn job(j: &GpuJob, queued_at: core::Time) -> Result<core::Job, FieldErrors> {
    validate::gpu_job(&j.spec)?;
    let spec = &j.spec;
    let namespace = j.metadata.namespace.clone().unwrap_or_default();
    let name = name_of(&j.metadata);
    Ok(core::Job {
        id: format!("{namespace}/{name}"),
        namespace,
        queue: spec.queue.clone(),
        priority: spec.priority,
        replicas: spec.replicas.max(1) as u32,
        gpus_per_replica: spec.gpus_per_replica.max(1) as u32,
        gpu_models: spec
            .gpu_models
            .iter()
            .map(|m| GpuModel::normalize(m))
            .collect(),
        datasets: spec.datasets.clone(),
        restartable: spec.restartable,
        checkpointed_at: checkpoint_time(j),
        checkpoint_interval: spec.checkpoint_interval.as_deref().map(duration),
        estimated_runtime: spec.estimated_runtime.as_deref().map(duration),
        max_runtime: spec.max_runtime.as_deref().map(duration),
        deadline: spec
            .deadline
            .as_ref()
            .map(|t| core::Time::from_millis(t.0.as_millisecond())),
        max_hourly_cost: spec.max_hourly_cost,
        placement: spec.placement,
        topology: spec.topology.as_ref().and_then(|t| t.to_core()),
        requirements: spec
            .requirements
            .as_ref()
            .map(|r| r.to_core())
            .unwrap_or_default(),
        labels: j.metadata.labels.clone().unwrap_or_default(),
        not_portable: match &spec.workload_ref {
            Some(w) => match (j.metadata.annotations.as_ref())
                .and_then(|a| a.get(crate::job::PORTABILITY_ANNOTATION))
            {
                Some(v) if v == crate::job::PORTABLE => None,
                Some(why) => Some(why.clone()),
                None => Some(format!(
                    "whether its {} ({}) can run elsewhere is not checked yet",
                    w.kind, w.api_version
                )),
            },
            None => crate::portable::problem(spec.pod_spec()),
        },
        kind: spec
            .workload_ref
            .as_ref()
            .map_or_else(|| "GpuJob".to_string(), |w| w.kind.clone()),
        cloud_closed: None,
        queued_at,
        attempt: 0,
        state: core::JobState::Pending,
    })
}

/// When the job last announced a checkpoint (its `spillway.io/checkpoint-time` annotation). An
/// annotation that is not an RFC 3339 time counts as none.
pub fn checkpoint_time(j: &GpuJob) -> Option<core::Time> {
    let value = j
        .metadata
        .annotations
        .as_ref()?
        .get(crate::job::CHECKPOINT_ANNOTATION)?;
    let t: k8s_openapi::jiff::Timestamp = value.trim().parse().ok()?;
    Some(core::Time::from_millis(t.as_millisecond()))
}
