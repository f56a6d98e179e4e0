//! `report --since 30d`: chargeback. Per namespace and per queue, from the GpuJobs queued,
//! running or finished in the window (the cluster's, or a file's with `-f`): GPU-hours by
//! environment, cost, time to start, cost per run, burst share and measured GPU use
//! (`chargeback`); and per queue what the operator recorded (`status.indicators`, kept in its
//! ledger even for jobs since deleted). As a table, CSV, JSON or YAML; `--html DIR` writes the
//! page a platform team reads (`report_html`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kube::api::{Api, ListParams};
use spillway_api::indicators::Quantiles;
use spillway_api::{GpuJob, GpuQueue};

use super::chargeback::{Report, Row, report};
use super::history::runs;
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
    /// Also write the HTML report (index.html, with one SVG file per chart) into this
    /// directory.
    #[arg(long, value_name = "DIR")]
    pub html: Option<PathBuf>,
    /// Read the GpuJobs from this file instead of the cluster: a List or documents of them,
    /// YAML or JSON, as `kubectl get gpujobs -A -o yaml` or `spillway simulate --jobs-out`
    /// write them (`-` for stdin). No queue's record is read then.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub filename: Option<PathBuf>,
    /// The window's end, RFC 3339 (default: now), for a report of a past month.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
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
    // Utilization columns where any of the rows was measured.
    let used = rows.iter().any(|r| r.gpu_utilization.is_some());
    let headers = if used {
        [&headers[..], &["GPU-UTIL", "IDLE-COST"]].concat()
    } else {
        headers.to_vec()
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let [p50, p95] = quantile_cells(&r.time_to_start_seconds);
            let util = [
                opt(r.gpu_utilization.map(|u| format!("{:.0}%", u * 100.0))),
                usd(r.idle_cost_usd),
            ];
            let row = vec![
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
            ];
            if used {
                [row, util.to_vec()].concat()
            } else {
                row
            }
        })
        .collect();
    table(&headers, &cells)
}

/// The report as tables.
pub fn render(r: &Report) -> String {
    let mut out = format!(
        "NAMESPACES (jobs queued, running or finished since {}, the last {})\n",
        r.from, r.since
    );
    out.push_str(&rows_table("NAMESPACE", &r.namespaces));
    out.push_str("\nQUEUES\n");
    out.push_str(&rows_table("QUEUE", &r.queues));
    // From a file (`-f`) there is no record.
    if r.recorded.is_empty() {
        return out;
    }
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
        "gpu_utilization",
        "idle_gpu_hours",
        "idle_cost_usd",
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
                num(row.gpu_utilization),
                row.idle_gpu_hours.to_string(),
                row.idle_cost_usd.to_string(),
            ])?;
        }
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub async fn run(args: ReportArgs) -> Result<(), Failure> {
    let d = spillway_core::Duration::parse(&args.since)
        .map_err(|e| Failure::Usage(format!("--since {:?}: {e}", args.since)))?;
    let to = match &args.until {
        None => k8s_openapi::jiff::Timestamp::now(),
        Some(t) => t.parse::<k8s_openapi::jiff::Timestamp>().map_err(|e| {
            Failure::Usage(format!(
                "--until {t:?}: {e} (an RFC 3339 time such as 2026-12-01T00:00:00Z)"
            ))
        })?,
    }
    .as_millisecond();
    let from = to - (d.as_secs_f64() * 1000.0) as i64;
    let (jobs, queues) = match &args.filename {
        Some(path) => {
            let mut jobs = read_jobs(path)?;
            if let Some(ns) = &args.scope.namespace {
                jobs.retain(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()));
            }
            (jobs, Vec::new())
        }
        None => {
            let client = client(&args.cluster).await?;
            let jobs = args.scope.jobs(client.clone()).await?;
            let queues = Api::<GpuQueue>::all(client)
                .list(&ListParams::default())
                .await?
                .items;
            (jobs, queues)
        }
    };
    let all = runs(&jobs);
    let r = report(&all, &queues, &args.since, from, to);
    if let Some(dir) = &args.html {
        super::report_html::write(dir, &r, &all, from, to)?;
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

/// The GpuJobs of a file (or stdin): a `List` of them, one of them, or YAML documents of
/// either, YAML or JSON.
pub fn read_jobs(path: &std::path::Path) -> Result<Vec<GpuJob>, Failure> {
    let text = if path == std::path::Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
    let fail = |e: String| Failure::Usage(format!("{}: {e}", path.display()));
    let docs: Vec<serde_json::Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?]
    } else {
        // A cluster's history is large: a month of 10,000 jobs as `kubectl get -o yaml` prints
        // them is millions of nodes, past the parser's defaults for configuration files.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_nodes: 50_000_000,
                max_events: 100_000_000,
                max_documents: 1_000_000,
                max_reader_input_bytes: None,
                max_total_scalar_bytes: 1 << 31,
            },
        };
        serde_saphyr::from_multiple_with_options(&text, options).map_err(|e| fail(e.to_string()))?
    };
    let mut jobs = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let items = match doc.get("items") {
            Some(serde_json::Value::Array(items)) => items.clone(),
            _ => vec![doc],
        };
        for item in items {
            let kind = item.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            if kind != "GpuJob" {
                return Err(fail(format!("expected GpuJobs, found a {kind:?} object")));
            }
            let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
            jobs.push(
                serde_json::from_value(item).map_err(|e| fail(format!("GpuJob {name:?}: {e}")))?,
            );
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests;
