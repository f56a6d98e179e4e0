//! `report --html DIR`: the simulator's report for the live cluster. The window's jobs become a
//! replay's outcome (each job's arrival, start, finish, place and GPUs; the time series of
//! jobs waiting, private and cloud GPUs busy and cumulative cloud spend, each job's accrued
//! cost spread over its run), so the page has the same charts and figures as
//! `spillway simulate --report`, the physical limit included, followed by the chargeback
//! tables.

use std::path::Path;

use spillway_api::ComputePool;
use spillway_sim::engine::{JobRecord, Outcome, Sample};

use super::Failure;
use super::history::Run;

/// The outcome the runs active in `[from, to)` make; times in seconds from `from`.
pub fn outcome(all: &[Run], private_gpus: u32, from: i64, to: i64) -> Outcome {
    let secs = |ms: i64| (ms - from) as f64 / 1000.0;
    let end = secs(to);
    let mut out = Outcome {
        private_gpus,
        end_s: end,
        ..Outcome::default()
    };
    // (time, change of queued, of private busy GPUs, of cloud busy GPUs, of the cloud spend rate)
    let mut changes: Vec<(f64, i64, i64, i64, f64)> = Vec::new();
    for r in all.iter().filter(|r| r.active_since(from)) {
        let arrival = secs(r.queued).max(0.0);
        let start = r.started.map(|s| secs(s).max(arrival));
        let finish = r.finished.map(secs).filter(|f| *f <= end);
        let cloud = r.environment == Some("cloud");
        let gpus = i64::from(r.gpus());
        out.jobs.push(JobRecord {
            arrival_s: arrival,
            start_s: start,
            finish_s: finish,
            cloud,
            remote: r.environment == Some("remote"),
            gpus: r.gpus(),
            runtime_s: match (start, finish) {
                (Some(s), Some(f)) => f - s,
                (Some(s), None) => end - s,
                _ => 0.0,
            },
            ..JobRecord::default()
        });
        changes.push((arrival, 1, 0, 0, 0.0));
        let Some(start) = start else { continue };
        let stop = finish.unwrap_or(end);
        changes.push((start, -1, 0, 0, 0.0));
        let (p, c) = if cloud { (0, gpus) } else { (gpus, 0) };
        changes.push((start, 0, p, c, 0.0));
        changes.push((stop, 0, -p, -c, 0.0));
        let run = stop - start;
        if cloud && run > 0.0 {
            out.cloud_cost_usd += r.cost_usd;
            out.cloud_gpu_seconds += gpus as f64 * run;
            changes.push((start, 0, 0, 0, r.cost_usd / run));
            changes.push((stop, 0, 0, 0, -r.cost_usd / run));
        } else if !cloud {
            out.private_busy_gpu_seconds += gpus as f64 * run;
        }
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut queued, mut private, mut cloud, mut rate, mut spend, mut last) =
        (0i64, 0i64, 0i64, 0.0f64, 0.0f64, 0.0f64);
    out.samples.push(Sample::default());
    for (t, q, p, c, dr) in changes {
        spend += rate * (t - last);
        last = t;
        // A step, not a slope: the values up to this moment, then the new ones.
        out.samples.push(Sample {
            t_s: t,
            queued: queued.max(0) as u32,
            private_busy_gpus: private.max(0) as u32,
            cloud_busy_gpus: cloud.max(0) as u32,
            cloud_spend_usd: spend,
            ..Sample::default()
        });
        queued += q;
        private += p;
        cloud += c;
        rate += dr;
        out.samples.push(Sample {
            t_s: t,
            queued: queued.max(0) as u32,
            private_busy_gpus: private.max(0) as u32,
            cloud_busy_gpus: cloud.max(0) as u32,
            cloud_spend_usd: spend,
            ..Sample::default()
        });
    }
    spend += rate * (end - last);
    out.samples.push(Sample {
        t_s: end,
        queued: queued.max(0) as u32,
        private_busy_gpus: private.max(0) as u32,
        cloud_busy_gpus: cloud.max(0) as u32,
        cloud_spend_usd: spend,
        ..Sample::default()
    });
    out
}

/// Writes `index.html` (the charts, then `tables`, the report as text) and the charts' SVG
/// files into `dir`; `since` names the window.
pub fn write(
    dir: &Path,
    all: &[Run],
    pools: &[ComputePool],
    since: &str,
    tables: &str,
    from: i64,
    to: i64,
) -> Result<(), Failure> {
    let private_gpus: i64 = pools
        .iter()
        .filter(|p| p.spec.private.is_some())
        .filter_map(|p| p.status.as_ref()?.gpus.as_ref().map(|g| g.capacity))
        .sum();
    let out = outcome(all, private_gpus.max(0) as u32, from, to);
    let summary = spillway_sim::report::summarize("live cluster", &out, 0.0);
    let title = format!("Spillway: the cluster over the last {since}");
    let runs = [(summary, out)];
    let fail = |e: String| Failure::Cluster(anyhow::anyhow!("rendering the report: {e}"));
    let mut page = spillway_sim::html::render(&title, &runs).map_err(fail)?;
    let tables = format!(
        "<h2>Chargeback</h2>\n<pre>{}</pre>\n</body>",
        tables
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    );
    page = page
        .replacen(
            "Generated by <code>spillway simulate</code>. See docs/simulator.md for how to read it.",
            "Generated by <code>kubectl spillway report</code> from the cluster's GpuJobs: each job's arrival, start, finish and accrued cost (spread over its run). See docs/indicators.md for how to read it.",
            1,
        )
        .replacen("</body>", &tables, 1);
    let charts = spillway_sim::html::charts(&runs).map_err(fail)?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    for (name, text) in std::iter::once(("index.html", page)).chain(charts) {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    Ok(())
}
