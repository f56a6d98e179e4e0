//! The indicators a queue's status carries (`GpuQueue status.indicators`): what a platform team
//! reports on, over the last 24 hours and the last 30 days. docs/indicators.md defines each.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A queue's indicators over two rolling windows. Every field is always written (a window with
/// nothing observed has counts of 0), so a status update never leaves part of a structure
/// behind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueIndicators {
    /// The current UTC hour and the 23 before it.
    #[serde(rename = "last24h", default)]
    pub last_24h: Indicators,
    /// Today (UTC) and the 29 days before it.
    #[serde(rename = "last30d", default)]
    pub last_30d: Indicators,
}

/// The indicators of one window. Quantiles are estimated from histogram buckets as
/// Prometheus' `histogram_quantile` does (linear within a bucket); with a count of 0 nothing
/// was observed and they read 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Indicators {
    /// Seconds from entering the queue to the first start (pods created), of the jobs that
    /// first started in the window; overall and by where they started.
    #[serde(default)]
    pub time_to_start_seconds: TimeToStart,
    /// GPU-hours the queue's jobs ran in the window, by environment.
    #[serde(default)]
    pub gpu_hours: GpuHours,
    /// The queue's share of the private GPU capacity over the window: its jobs' private
    /// GPU-seconds divided by the private pools' GPU-seconds (0..1; 0 with no private GPUs).
    #[serde(default)]
    pub private_gpu_allocation: f64,
    /// Seconds from a failure (a lost node, a spot reclaim, a lost instance) to the job running
    /// again, of the recoveries completed in the window.
    #[serde(default)]
    pub recovery_seconds: Quantiles,
    /// USD per finished run (succeeded or failed in the window): its accrued cost (cloud
    /// instances, egress, GPUs at their pool's price).
    #[serde(rename = "costPerRunUSD", default)]
    pub cost_per_run_usd: CostPerRun,
    /// Of the jobs that first started in the window, the share that started in the cloud or in
    /// another cluster (0..1; 0 with none).
    #[serde(default)]
    pub burst_share: f64,
    /// How busy the queue's GPUs were: the GPU activity of its running jobs, weighted by
    /// GPU-hours, over the time Prometheus reported on them (0..1; 0 with none; with
    /// `--prometheus-url`).
    #[serde(default)]
    pub gpu_utilization: f64,
    /// GPU-hours the queue's jobs held while their activity stayed below the queue's idle
    /// threshold.
    #[serde(default)]
    pub idle_gpu_hours: f64,
    /// What those idle GPU-hours cost: the jobs' cost per hour while idle, USD.
    #[serde(rename = "idleCostUSD", default)]
    pub idle_cost_usd: f64,
}

/// p50 and p95 of a set of observations, and how many there were.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Quantiles {
    /// The median.
    #[serde(default)]
    pub p50: f64,
    /// The 95th percentile.
    #[serde(default)]
    pub p95: f64,
    /// How many observations.
    #[serde(default)]
    pub count: i64,
}

/// Time to start, overall and by environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeToStart {
    /// The median, seconds.
    #[serde(default)]
    pub p50: f64,
    /// The 95th percentile, seconds.
    #[serde(default)]
    pub p95: f64,
    /// How many first starts.
    #[serde(default)]
    pub count: i64,
    /// The same per environment the jobs first started in.
    #[serde(default)]
    pub by_environment: ByEnvironment,
}

/// Quantiles per environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ByEnvironment {
    /// Private nodes.
    #[serde(default)]
    pub private: Quantiles,
    /// Cloud instances.
    #[serde(default)]
    pub cloud: Quantiles,
    /// Other clusters.
    #[serde(default)]
    pub remote: Quantiles,
}

/// GPU-hours by environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuHours {
    /// On private nodes.
    #[serde(default)]
    pub private: f64,
    /// On cloud instances.
    #[serde(default)]
    pub cloud: f64,
    /// In other clusters (`cluster` pools).
    #[serde(default)]
    pub remote: f64,
}

/// Cost per finished run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostPerRun {
    /// The mean, USD.
    #[serde(default)]
    pub mean: f64,
    /// The 95th percentile, USD.
    #[serde(default)]
    pub p95: f64,
    /// How many finished runs.
    #[serde(default)]
    pub count: i64,
}
