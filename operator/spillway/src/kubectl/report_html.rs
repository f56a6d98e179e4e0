//! `report --html DIR`: the page a platform team sends round. Over the report's window: the
//! headline figures (GPU-hours by where they ran, cost, jobs, time to start, GPU utilization,
//! idle cost, burst share), a series per day (per hour for a window of two days or less) of
//! GPU-hours, cost, utilization and time to start, then per queue and per namespace the same
//! figures, and the operator's own record of each queue.
//!
//! Every figure comes from the same place (`report::row` over the window or one of its days),
//! so the days add up to the window and the rows to the total. Units are the ones a person
//! reads: GPU-hours, dollars, seconds to days.

mod charts;
mod series;

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use super::Failure;
use super::chargeback::{Recorded, Report, Row, row};
use super::history::Run;

pub use series::series;

/// `1,234` (no decimals from 100 on, one below 100, two below 1).
pub fn number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() < 1.0 {
        return format!("{v:.2}");
    }
    if v.abs() < 100.0 {
        return format!("{v:.1}");
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

/// `$1,234` from $100 on, `$12.34` below.
pub fn dollars(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("${}", number(v))
    } else {
        format!("${v:.2}")
    }
}

/// `45 s`, `1.5 min`, `12 min`, `3.5 h`, `24 h`, `2.1 days`.
pub fn duration(s: f64) -> String {
    // One decimal where it says something: `6 h`, not `6.0 h`.
    let short = |v: f64, unit: &str| {
        let text = format!("{v:.1}");
        format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    if s < 60.0 {
        format!("{s:.0} s")
    } else if s < 600.0 {
        short(s / 60.0, "min")
    } else if s < 90.0 * 60.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 36.0 * 3600.0 {
        short(s / 3600.0, "h")
    } else {
        short(s / 86400.0, "days")
    }
}

/// A window as words: `30 days`, `24 hours`, `90 minutes`.
fn window(since: &str) -> String {
    let Ok(d) = spillway_core::Duration::parse(since) else {
        return since.to_string();
    };
    let s = d.as_secs_f64();
    let (n, unit) = if s >= 2.0 * 86400.0 && s % 86400.0 == 0.0 {
        (s / 86400.0, "days")
    } else if s >= 2.0 * 3600.0 && s % 3600.0 == 0.0 {
        (s / 3600.0, "hours")
    } else {
        (s / 60.0, "minutes")
    };
    format!("{n:.0} {unit}")
}

fn percent(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn day(ms: i64) -> String {
    Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%-d %b %Y %H:%M").to_string())
        .unwrap_or_default()
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;padding:0 1em;max-width:1180px;color:#222}\
h1{margin-bottom:.2em}.sub{color:#555;margin-top:0}\
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:10px;margin:1.5em 0}\
.tile{border:1px solid #ddd;border-radius:6px;padding:10px 12px}.tile b{display:block;font-size:1.6em;margin:.15em 0}\
.tile span{color:#555;font-size:.85em}\
table{border-collapse:collapse;font-size:.88em;margin:.5em 0 1.5em}td,th{border-bottom:1px solid #ddd;padding:4px 7px;text-align:right}\
td:first-child,th:first-child{text-align:left}tr.total td{font-weight:bold;border-top:2px solid #999}\
th{background:#f4f4f4}figure{margin:1em 0}svg{max-width:100%;height:auto}dt{font-weight:bold}dd{margin:0 0 .5em 1em;color:#444}";

fn tile(name: &str, value: &str, detail: &str) -> String {
    format!(
        "<div class=\"tile\">{}<b>{}</b><span>{}</span></div>\n",
        escape(name),
        escape(value),
        escape(detail)
    )
}

fn tiles(total: &Row) -> String {
    let g = &total.gpu_hours;
    let all = g.private + g.cloud + g.remote;
    let mut out = String::from("<div class=\"tiles\">\n");
    let mut split = format!("private {} · cloud {}", number(g.private), number(g.cloud));
    if g.remote > 0.0 {
        split.push_str(&format!(" · other clusters {}", number(g.remote)));
    }
    out.push_str(&tile("GPU-hours", &number(all), &split));
    out.push_str(&tile(
        "Cost",
        &dollars(total.cost_usd),
        &match &total.cost_per_run_usd {
            Some(c) => format!("{} per finished run", dollars(c.mean)),
            None => "no run finished".into(),
        },
    ));
    out.push_str(&tile(
        "Jobs",
        &number(total.jobs as f64),
        &format!("{} finished", number(total.finished as f64)),
    ));
    out.push_str(&match &total.time_to_start_seconds {
        Some(q) => tile(
            "Time to start",
            &duration(q.p50),
            &format!(
                "median; p95 {} over {} first starts",
                duration(q.p95),
                number(q.count as f64)
            ),
        ),
        None => tile("Time to start", "-", "no job started"),
    });
    out.push_str(&match total.gpu_utilization {
        Some(u) => tile(
            "GPU utilization",
            &percent(u),
            &format!("of {} GPU-hours measured", number(total.sampled_gpu_hours)),
        ),
        None => tile("GPU utilization", "-", "not measured (docs/indicators.md)"),
    });
    if total.gpu_utilization.is_some() {
        out.push_str(&tile(
            "Idle GPUs cost",
            &dollars(total.idle_cost_usd),
            &format!(
                "{} GPU-hours below the idle threshold",
                number(total.idle_gpu_hours)
            ),
        ));
    }
    if let Some(b) = total.burst_share {
        out.push_str(&tile(
            "Burst share",
            &percent(b),
            "of first starts away from home",
        ));
    }
    out.push_str("</div>\n");
    out
}

/// Per queue or namespace, with the total of `total` as its last line.
fn rows_table(first: &str, rows: &[Row], total: &Row) -> String {
    let used = total.gpu_utilization.is_some();
    let remote = total.gpu_hours.remote > 0.0;
    let mut out = format!(
        "<table><tr><th>{first}</th><th>jobs</th><th>finished</th><th>GPU-h private</th><th>GPU-h cloud</th>{}<th>cost</th><th>cost per run</th><th>start median</th><th>start p95</th><th>burst</th>",
        if remote {
            "<th>GPU-h other clusters</th>"
        } else {
            ""
        }
    );
    if used {
        out.push_str("<th>GPU util</th><th>idle GPU-h</th><th>idle cost</th>");
    }
    out.push_str("</tr>\n");
    for (r, class) in rows
        .iter()
        .map(|r| (r, ""))
        .chain([(total, " class=\"total\"")])
    {
        let dash = || "-".to_string();
        let tts = r.time_to_start_seconds.as_ref();
        let mut cells = vec![
            escape(&r.name),
            number(r.jobs as f64),
            number(r.finished as f64),
            number(r.gpu_hours.private),
            number(r.gpu_hours.cloud),
        ];
        if remote {
            cells.push(number(r.gpu_hours.remote));
        }
        cells.extend([
            dollars(r.cost_usd),
            r.cost_per_run_usd
                .as_ref()
                .map_or_else(dash, |c| dollars(c.mean)),
            tts.map_or_else(dash, |q| duration(q.p50)),
            tts.map_or_else(dash, |q| duration(q.p95)),
            r.burst_share.map_or_else(dash, percent),
        ]);
        if used {
            cells.push(r.gpu_utilization.map_or_else(dash, percent));
            cells.push(number(r.idle_gpu_hours));
            cells.push(dollars(r.idle_cost_usd));
        }
        out.push_str(&format!(
            "<tr{class}><td>{}</td></tr>\n",
            cells.join("</td><td>")
        ));
    }
    out.push_str("</table>\n");
    out
}

/// The operator's record of each queue (its ledger: deleted jobs too, the last 30 days).
fn recorded_table(recorded: &[Recorded]) -> String {
    let mut out = String::from(
        "<table><tr><th>queue</th><th>start median</th><th>start p95</th><th>GPU-h private</th><th>GPU-h cloud</th><th>GPU-h other clusters</th><th>private GPUs allocated</th><th>recovery median</th><th>cost per run</th><th>GPU util</th><th>idle cost</th></tr>\n",
    );
    for q in recorded {
        let i = &q.indicators.last_30d;
        let t = &i.time_to_start_seconds;
        let started = t.count > 0;
        let dash = || "-".to_string();
        let cells = [
            escape(&q.queue),
            if started { duration(t.p50) } else { dash() },
            if started { duration(t.p95) } else { dash() },
            number(i.gpu_hours.private),
            number(i.gpu_hours.cloud),
            number(i.gpu_hours.remote),
            percent(i.private_gpu_allocation),
            if i.recovery_seconds.count > 0 {
                duration(i.recovery_seconds.p50)
            } else {
                dash()
            },
            if i.cost_per_run_usd.count > 0 {
                dollars(i.cost_per_run_usd.mean)
            } else {
                dash()
            },
            if i.gpu_utilization > 0.0 {
                percent(i.gpu_utilization)
            } else {
                dash()
            },
            dollars(i.idle_cost_usd),
        ];
        out.push_str(&format!("<tr><td>{}</td></tr>\n", cells.join("</td><td>")));
    }
    out.push_str("</table>\n");
    out
}

const DEFINITIONS: &str = "<h2>How to read it</h2>\n<dl>\n\
<dt>GPU-hours</dt><dd>GPUs times hours of each job's last attempt that fall in the window, by where it ran: private nodes, cloud instances, other clusters.</dd>\n\
<dt>Cost</dt><dd>Each job's accrued cost (cloud instances, private GPUs at their pool's <code>gpuCostPerHour</code>) spread evenly from its first start to its finish, or now; the part in the window (or the day) counts.</dd>\n\
<dt>Time to start</dt><dd>From entering the queue to the first start, of the jobs that first started in the window (the day): median and 95th percentile.</dd>\n\
<dt>GPU utilization</dt><dd>Busy over allocated: the GPU-hours the jobs' GPUs were active (dcgm-exporter's activity, read through Prometheus) over the GPU-hours measured; time not measured counts in neither. Idle GPU-hours are those held below the queue's idle threshold, at the job's cost per GPU-hour.</dd>\n\
<dt>Burst share</dt><dd>Of the jobs that first started in the window, those that started in the cloud or another cluster.</dd>\n\
</dl>\n";

/// The page: `r` (its rows over `[from, to)`), the day-by-day series of `all`, and the charts'
/// SVG files by name.
pub fn render(
    r: &Report,
    all: &[Run],
    from: i64,
    to: i64,
) -> Result<(String, charts::Charts), String> {
    let refs: Vec<&Run> = all.iter().collect();
    let total = row("total", &refs, from, to);
    let points = series(all, from, to);
    let per = if series::step(from, to) >= 86_400_000 {
        "day"
    } else {
        "hour"
    };
    let charts = charts::charts(&points, per)?;
    let mut page = String::from(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    );
    let title = format!("GPU use and cost: the last {}", window(&r.since));
    page.push_str(&format!(
        "<title>{}</title>\n<style>{STYLE}</style>\n</head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    ));
    page.push_str(&format!(
        "<p class=\"sub\">{} to {} UTC · {} jobs queued, running or finished in that time · generated by <code>kubectl spillway report</code></p>\n",
        day(from),
        day(to),
        number(total.jobs as f64)
    ));
    page.push_str(&tiles(&total));
    for (_, svg) in &charts {
        page.push_str(&format!("<figure>{svg}</figure>\n"));
    }
    page.push_str("<h2>By queue</h2>\n");
    page.push_str(&rows_table("queue", &r.queues, &total));
    page.push_str("<h2>By namespace</h2>\n");
    page.push_str(&rows_table("namespace", &r.namespaces, &total));
    if !r.recorded.is_empty() {
        page.push_str("<h2>Recorded by the operator</h2>\n<p>Each queue's <code>status.indicators</code> over the last 30 days, from the operator's ledger: deleted jobs count too, and the private allocation is of the private pools' capacity.</p>\n");
        page.push_str(&recorded_table(&r.recorded));
    }
    page.push_str(DEFINITIONS);
    page.push_str("<p>See docs/indicators.md for each figure's definition.</p>\n</body></html>\n");
    Ok((page, charts))
}

/// Writes `index.html` and the charts' SVG files into `dir`.
pub fn write(dir: &Path, r: &Report, all: &[Run], from: i64, to: i64) -> Result<(), Failure> {
    let (page, charts) = render(r, all, from, to)
        .map_err(|e| Failure::Cluster(anyhow::anyhow!("rendering the report: {e}")))?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    for (name, text) in std::iter::once(("index.html", page)).chain(charts) {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    Ok(())
}
