//! `report --since 30d`: chargeback. Per namespace and per queue, from the GpuJobs running or
//! finished in the window: GPU-hours by environment, cost, time to start, cost per run and
//! burst share; and per queue what the operator recorded (`status.indicators`, kept in its
//! ledger even for jobs since deleted). As a table, CSV, JSON or YAML; `--html DIR` draws the
//! simulator's report charts for the live cluster (`report_html`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use spillway_api::indicators::{CostPerRun, GpuHours, Quantiles, QueueIndicators};
use spillway_api::{ComputePool, GpuQueue};

use super::history::{Run, percentile, runs};
use super::{ClusterArgs, Failure, client, opt, print_value, table, usd};

/// How to print the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    #[default]
    Table,
    Csv,
    Json,
    Yaml,
}

/// Per namespace and queue: GPU-hours, cost and indicators over a window.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub scope: super::JobScopeArgs,
    /// The window: jobs running now or finished within this long, such as `30d` or `24h`.
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub since: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
    /// Also write an HTML report with charts (index.html and one SVG per chart) here.
    #[arg(long, value_name = "DIR")]
    pub html: Option<PathBuf>,
}

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
    /// Their accrued cost (each job's whole cost so far).
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
    for run in runs.iter().filter(|r| r.active_since(from)) {
        r.jobs += 1;
        r.cost_usd += run.cost_usd;
        let h = run.gpu_hours_within(from, to);
        match run.environment {
            Some("cloud") => r.gpu_hours.cloud += h,
            Some("remote") => r.gpu_hours.remote += h,
            Some(_) => r.gpu_hours.private += h,
            None => {}
        }
        if let (Some(first), Some(tts)) = (run.first_started, run.time_to_start_s())
            && first >= from
        {
            starts.push(tts);
            // Where a job that never restarted started is where it runs.
            if run.restarts == 0 && matches!(run.environment, Some("cloud" | "remote")) {
                away += 1;
            }
        }
        if run.is_finished() && run.finished.is_some_and(|f| f >= from) {
            r.finished += 1;
            costs.push(run.cost_usd);
        }
    }
    r.cost_usd = round(r.cost_usd, 2);
    r.gpu_hours.private = round(r.gpu_hours.private, 2);
    r.gpu_hours.cloud = round(r.gpu_hours.cloud, 2);
    r.gpu_hours.remote = round(r.gpu_hours.remote, 2);
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

fn quantile_cells(q: &Option<Quantiles>) -> [String; 2] {
    match q {
        Some(q) => [format!("{:.0}s", q.p50), format!("{:.0}s", q.p95)],
        None => ["-".into(), "-".into()],
    }
}

fn rows_table(first: &str, rows: &[Row]) -> String {
    let headers = [
        first,
        "JOBS",
        "FINISHED",
        "GPU-H-PRIVATE",
        "GPU-H-CLOUD",
        "GPU-H-REMOTE",
        "COST",
        "START-P50",
        "START-P95",
        "COST/RUN",
        "COST/RUN-P95",
        "BURST",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let [p50, p95] = quantile_cells(&r.time_to_start_seconds);
            vec![
                r.name.clone(),
                r.jobs.to_string(),
                r.finished.to_string(),
                format!("{:.2}", r.gpu_hours.private),
                format!("{:.2}", r.gpu_hours.cloud),
                format!("{:.2}", r.gpu_hours.remote),
                usd(r.cost_usd),
                p50,
                p95,
                opt(r.cost_per_run_usd.as_ref().map(|c| usd(c.mean))),
                opt(r.cost_per_run_usd.as_ref().map(|c| usd(c.p95))),
                opt(r.burst_share.map(|b| format!("{:.0}%", b * 100.0))),
            ]
        })
        .collect();
    table(&headers, &cells)
}

/// The report as tables.
pub fn render(r: &Report) -> String {
    let mut out = format!(
        "NAMESPACES (jobs running or finished since {}, the last {})\n",
        r.from, r.since
    );
    out.push_str(&rows_table("NAMESPACE", &r.namespaces));
    out.push_str("\nQUEUES\n");
    out.push_str(&rows_table("QUEUE", &r.queues));
    out.push_str("\nRECORDED BY THE OPERATOR (GpuQueue status.indicators, the last 30 days)\n");
    let cells: Vec<Vec<String>> = r
        .recorded
        .iter()
        .map(|q| (q, &q.indicators.last_30d))
        .map(|(q, i)| {
            let t = &i.time_to_start_seconds;
            let tts = (t.count > 0).then_some(Quantiles {
                p50: t.p50,
                p95: t.p95,
                count: t.count,
            });
            let [p50, p95] = quantile_cells(&tts);
            let rec = Some(i.recovery_seconds.clone()).filter(|r| r.count > 0);
            let [r50, r95] = quantile_cells(&rec);
            let cost = &i.cost_per_run_usd;
            vec![
                q.queue.clone(),
                p50,
                p95,
                format!(
                    "{:.2}/{:.2}/{:.2}",
                    i.gpu_hours.private, i.gpu_hours.cloud, i.gpu_hours.remote
                ),
                format!("{:.1}%", i.private_gpu_allocation * 100.0),
                r50,
                r95,
                opt((cost.count > 0).then(|| usd(cost.mean))),
                opt((t.count > 0).then(|| format!("{:.0}%", i.burst_share * 100.0))),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "QUEUE",
            "START-P50",
            "START-P95",
            "GPU-H(P/C/R)",
            "PRIVATE-ALLOC",
            "RECOVERY-P50",
            "RECOVERY-P95",
            "COST/RUN",
            "BURST",
        ],
        &cells,
    ));
    let used: Vec<Vec<String>> = (r.recorded.iter())
        .map(|q| (q, &q.indicators.last_30d))
        .filter(|(_, i)| i.gpu_utilization > 0.0 || i.idle_gpu_hours > 0.0)
        .map(|(q, i)| {
            vec![
                q.queue.clone(),
                format!("{:.0}%", i.gpu_utilization * 100.0),
                format!("{:.2}", i.idle_gpu_hours),
                usd(i.idle_cost_usd),
            ]
        })
        .collect();
    if !used.is_empty() {
        out.push_str("\nGPU USE (dcgm-exporter through Prometheus, the last 30 days)\n");
        out.push_str(&table(
            &["QUEUE", "GPU-UTIL", "IDLE-GPU-H", "IDLE-COST"],
            &used,
        ));
    }
    out
}

/// The report as CSV: one line per namespace and queue, `scope` telling which.
pub fn csv(r: &Report) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "scope",
        "name",
        "jobs",
        "finished",
        "gpu_hours_private",
        "gpu_hours_cloud",
        "gpu_hours_remote",
        "cost_usd",
        "time_to_start_p50_s",
        "time_to_start_p95_s",
        "cost_per_run_mean_usd",
        "cost_per_run_p95_usd",
        "burst_share",
    ])?;
    let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for (scope, rows) in [("namespace", &r.namespaces), ("queue", &r.queues)] {
        for row in rows {
            let tts = row.time_to_start_seconds.as_ref();
            let cost = row.cost_per_run_usd.as_ref();
            w.write_record([
                scope.to_string(),
                row.name.clone(),
                row.jobs.to_string(),
                row.finished.to_string(),
                row.gpu_hours.private.to_string(),
                row.gpu_hours.cloud.to_string(),
                row.gpu_hours.remote.to_string(),
                row.cost_usd.to_string(),
                num(tts.map(|t| t.p50)),
                num(tts.map(|t| t.p95)),
                num(cost.map(|c| c.mean)),
                num(cost.map(|c| c.p95)),
                num(row.burst_share),
            ])?;
        }
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub async fn run(args: ReportArgs) -> Result<(), Failure> {
    let d = spillway_core::Duration::parse(&args.since)
        .map_err(|e| Failure::Usage(format!("--since {:?}: {e}", args.since)))?;
    let to = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let from = to - (d.as_secs_f64() * 1000.0) as i64;
    let client = client(&args.cluster).await?;
    let jobs = args.scope.jobs(client.clone()).await?;
    let queues = Api::<GpuQueue>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let all = runs(&jobs);
    let r = report(&all, &queues, &args.since, from, to);
    if let Some(dir) = &args.html {
        let pools = Api::<ComputePool>::all(client)
            .list(&ListParams::default())
            .await?
            .items;
        super::report_html::write(dir, &all, &pools, &r.since, &render(&r), from, to)?;
        eprintln!("wrote {}", dir.join("index.html").display());
    }
    match args.output {
        ReportFormat::Json => print_value(&r, super::Format::Json),
        ReportFormat::Yaml => print_value(&r, super::Format::Yaml),
        ReportFormat::Csv => {
            print!("{}", csv(&r).map_err(|e| Failure::Cluster(e.into()))?);
            Ok(())
        }
        ReportFormat::Table => {
            print!("{}", render(&r));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
