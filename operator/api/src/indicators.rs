//! The indicators a queue's status carries (`GpuQueue status.indicators`): what a platform team
//! reports on, over the last 24 hours and the last 30 days. docs/indicators.md defines each.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A queue's indicators over two rolling windows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueIndicators {
    /// The current UTC hour and the 23 before it.
    #[serde(rename = "last24h", default, skip_serializing_if = "Option::is_none")]
    pub last_24h: Option<Indicators>,
    /// Today (UTC) and the 29 days before it.
    #[serde(rename = "last30d", default, skip_serializing_if = "Option::is_none")]
    pub last_30d: Option<Indicators>,
}

/// The indicators of one window. Quantiles are estimated from histogram buckets as
/// Prometheus' `histogram_quantile` does (linear within a bucket); absent when nothing was
/// observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Indicators {
    /// Seconds from entering the queue to the first start (pods created), of the jobs that
    /// first started in the window; overall and by where they started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_start_seconds: Option<TimeToStart>,
    /// GPU-hours the queue's jobs ran in the window, by environment.
    #[serde(default)]
    pub gpu_hours: GpuHours,
    /// The queue's share of the private GPU capacity over the window: its jobs' private
    /// GPU-seconds divided by the private pools' GPU-seconds (0..1; 0 with no private GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_gpu_allocation: Option<f64>,
    /// Seconds from a failure (a lost node, a spot reclaim, a lost instance) to the job running
    /// again, of the recoveries completed in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_seconds: Option<Quantiles>,
    /// USD per finished run (succeeded or failed in the window): its accrued cost (cloud
    /// instances, egress, GPUs at their pool's price).
    #[serde(
        rename = "costPerRunUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_per_run_usd: Option<CostPerRun>,
    /// Of the jobs that first started in the window, the share that started in the cloud or in
    /// another cluster (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_share: Option<f64>,
}

/// p50 and p95 of a set of observations, and how many there were.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Quantiles {
    /// The median.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// How many observations.
    pub count: i64,
}

/// Time to start, overall and by environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeToStart {
    /// The median, seconds.
    pub p50: f64,
    /// The 95th percentile, seconds.
    pub p95: f64,
    /// How many first starts.
    pub count: i64,
    /// The same per environment the jobs started in (`private`, `cloud`, `remote`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_environment: std::collections::BTreeMap<String, Quantiles>,
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
    pub mean: f64,
    /// The 95th percentile, USD.
    pub p95: f64,
    /// How many finished runs.
    pub count: i64,
}
