//! The chargeback figures of `report`: per namespace and queue over a window (or a day of it,
//! for the HTML page's series), from the runs of the GpuJobs; and per queue what the operator
//! recorded (`status.indicators`).

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde::Serialize;
use spillway_api::GpuQueue;
use spillway_api::indicators::{CostPerRun, GpuHours, Quantiles, QueueIndicators};

use super::history::{Run, percentile};

/// One namespace's or queue's figures over the window.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub name: String,
    /// Jobs running, or finished in the window.
    pub jobs: u64,
    /// Of those, finished (succeeded or failed) in the window.
    pub finished: u64,
    /// GPU-hours their last attempts ran within the window, by environment.
    pub gpu_hours: GpuHours,
    /// The part of their accrued cost that falls in the window (each job's cost spread evenly
    /// from its first start to its finish, or now).
    #[serde(rename = "costUSD")]
    pub cost_usd: f64,
    /// Seconds from queued to first start, of the jobs that first started in the window
    /// (nearest-rank percentiles of the jobs themselves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_start_seconds: Option<Quantiles>,
    /// Accrued cost of the runs finished in the window.
    #[serde(rename = "costPerRunUSD", skip_serializing_if = "Option::is_none")]
    pub cost_per_run_usd: Option<CostPerRun>,
    /// Of the jobs that first started in the window, those that started in the cloud or
    /// another cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst_share: Option<f64>,
    /// GPU-hours within the window whose use Prometheus reported (each run's sampled
    /// GPU-hours spread over it).
    #[serde(skip_serializing_if = "is_zero")]
    pub sampled_gpu_hours: f64,
    /// Busy over sampled GPU-hours (0..1), when any were sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
    /// GPU-hours held below the idle threshold, and what they cost.
    #[serde(skip_serializing_if = "is_zero")]
    pub idle_gpu_hours: f64,
    #[serde(rename = "idleCostUSD", skip_serializing_if = "is_zero")]
    pub idle_cost_usd: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// A queue's indicators as the operator recorded them.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Recorded {
    pub queue: String,
    #[serde(flatten)]
    pub indicators: QueueIndicators,
}

/// The report (its JSON and YAML have these keys).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub since: String,
    /// The window's start, RFC 3339.
    pub from: String,
    pub namespaces: Vec<Row>,
    pub queues: Vec<Row>,
    pub recorded: Vec<Recorded>,
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The figures of `runs` over `[from, to)`.
pub fn row(name: &str, runs: &[&Run], from: i64, to: i64) -> Row {
    let mut r = Row {
        name: name.to_string(),
        ..Row::default()
    };
    let mut starts = Vec::new();
    let mut away = 0u64;
    let mut costs = Vec::new();
    let (mut busy, mut sampled) = (0.0, 0.0);
    for run in runs
        .iter()
        .filter(|r| r.active_since(from) && r.queued < to)
    {
        r.jobs += 1;
        r.cost_usd += run.cost_within(from, to);
        let share = run.share_of_attempt_within(from, to);
        sampled += run.sampled_gpu_hours * share;
        busy += run.busy_gpu_hours * share;
        let idle = run.idle_gpu_hours * share;
        r.idle_gpu_hours += idle;
        r.idle_cost_usd += idle * run.cost_per_gpu_hour(to);
        let h = run.gpu_hours_within(from, to);
        match run.environment {
            Some("cloud") => r.gpu_hours.cloud += h,
            Some("remote") => r.gpu_hours.remote += h,
            Some(_) => r.gpu_hours.private += h,
            None => {}
        }
        if let (Some(first), Some(tts)) = (run.first_started, run.time_to_start_s())
            && (from..to).contains(&first)
        {
            starts.push(tts);
            // Where a job that never restarted started is where it runs.
            if run.restarts == 0 && matches!(run.environment, Some("cloud" | "remote")) {
                away += 1;
            }
        }
        if run.is_finished() && run.finished.is_some_and(|f| (from..to).contains(&f)) {
            r.finished += 1;
            costs.push(run.cost_usd);
        }
    }
    r.cost_usd = round(r.cost_usd, 2);
    r.gpu_hours.private = round(r.gpu_hours.private, 2);
    r.gpu_hours.cloud = round(r.gpu_hours.cloud, 2);
    r.gpu_hours.remote = round(r.gpu_hours.remote, 2);
    r.sampled_gpu_hours = round(sampled, 2);
    r.gpu_utilization = (sampled > 0.0).then(|| round(busy / sampled, 3));
    r.idle_gpu_hours = round(r.idle_gpu_hours, 2);
    r.idle_cost_usd = round(r.idle_cost_usd, 2);
    if !starts.is_empty() {
        r.time_to_start_seconds = Some(Quantiles {
            p50: round(percentile(&starts, 50.0), 0),
            p95: round(percentile(&starts, 95.0), 0),
            count: starts.len() as i64,
        });
        r.burst_share = Some(round(away as f64 / starts.len() as f64, 3));
    }
    if !costs.is_empty() {
        r.cost_per_run_usd = Some(CostPerRun {
            mean: round(costs.iter().sum::<f64>() / costs.len() as f64, 2),
            p95: round(percentile(&costs, 95.0), 2),
            count: costs.len() as i64,
        });
    }
    r
}

/// Builds the report of `all` over `[from, to)`.
pub fn report(all: &[Run], queues: &[GpuQueue], since: &str, from: i64, to: i64) -> Report {
    let group = |key: &dyn Fn(&Run) -> String| {
        let mut by: BTreeMap<String, Vec<&Run>> = BTreeMap::new();
        for r in all {
            by.entry(key(r)).or_default().push(r);
        }
        by.into_iter()
            .map(|(name, runs)| row(&name, &runs, from, to))
            .filter(|r| r.jobs > 0)
            .collect::<Vec<Row>>()
    };
    Report {
        since: since.to_string(),
        from: k8s_openapi::jiff::Timestamp::from_millisecond(from)
            .map(|t| t.to_string())
            .unwrap_or_default(),
        namespaces: group(&|r| r.namespace.clone()),
        queues: group(&|r| r.queue.clone()),
        recorded: queues
            .iter()
            .filter_map(|q| {
                Some(Recorded {
                    queue: q.name_any(),
                    indicators: q.status.as_ref()?.indicators.clone()?,
                })
            })
            .collect(),
    }
}
