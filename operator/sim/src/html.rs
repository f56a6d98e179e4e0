//! The self-contained HTML report: one page, SVG charts drawn with `plotters`.

use plotters::prelude::*;

use crate::engine::{Outcome, Sample};
use crate::report::{Summary, waits};

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

const MAX_POINTS: usize = 800;

/// Evenly thinned samples, keeping the last.
fn thin(samples: &[Sample]) -> Vec<Sample> {
    if samples.len() <= MAX_POINTS {
        return samples.to_vec();
    }
    let step = samples.len() as f64 / MAX_POINTS as f64;
    let mut out: Vec<Sample> = (0..MAX_POINTS)
        .map(|i| samples[(i as f64 * step) as usize])
        .collect();
    if let Some(last) = samples.last() {
        out.push(*last);
    }
    out
}

type Series = (String, Vec<(f64, f64)>);

/// Draws the axes, then every series on `chart`, one color per series index, with a legend.
macro_rules! draw_lines {
    ($chart:ident, $series:ident, $x_label:ident, $y_label:ident) => {
        $chart
            .configure_mesh()
            .x_desc($x_label)
            .y_desc($y_label)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, points)) in $series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            $chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        $chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| e.to_string())?;
    };
}

fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        // The data's own span (a short window is not stretched to an hour).
        let x_max = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .fold(0.0f64, f64::max);
        let x_max = if x_max > 0.0 { x_max } else { 1.0 };
        let y_max = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .fold(1.0f64, f64::max)
            * 1.05;
        let x_min = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .fold(x_max, f64::min)
            .min(x_max - 1e-9);
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64);
        if log_x {
            let mut chart = builder
                .build_cartesian_2d((x_min.max(1.0)..x_max.max(2.0)).log_scale(), 0.0..y_max)
                .map_err(|e| e.to_string())?;
            draw_lines!(chart, series, x_label, y_label);
        } else {
            let mut chart = builder
                .build_cartesian_2d(x_min..x_max, 0.0..y_max)
                .map_err(|e| e.to_string())?;
            draw_lines!(chart, series, x_label, y_label);
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The start of a report page: head, styles (readable from phone to laptop width) and title.
fn page_start(title: &str) -> String {
    let mut html = String::new();
    html.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    html.push_str(&format!("<title>{}</title>\n", escape(title)));
    html.push_str("<style>body{font-family:sans-serif;margin:2em auto;padding:0 1em;max-width:960px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}svg{max-width:100%;height:auto}</style>\n");
    html.push_str("</head><body>\n");
    html.push_str(&format!("<h1>{}</h1>\n", escape(title)));
    html
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The report's charts as SVG documents, each with a file name (`jobs-waiting.svg`,
/// `private-gpus-busy.svg`, `cloud-gpus-busy.svg`, `cloud-spend.svg`, `wait-cdf.svg`).
pub fn charts(runs: &[(Summary, Outcome)]) -> Result<Vec<(&'static str, String)>, String> {
    let hours = |s: &Sample, t0: f64| (s.t_s - t0) / 3600.0;
    let t0 = runs
        .iter()
        .filter_map(|(_, o)| o.samples.first().map(|s| s.t_s))
        .fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };

    let queue: Vec<Series> = runs
        .iter()
        .map(|(s, o)| {
            (
                s.strategy.clone(),
                thin(&o.samples)
                    .iter()
                    .map(|x| (hours(x, t0), x.queued as f64))
                    .collect(),
            )
        })
        .collect();
    let busy = |f: fn(&Sample) -> u32| -> Vec<Series> {
        runs.iter()
            .map(|(s, o)| {
                let points = thin(&o.samples)
                    .iter()
                    .map(|x| (hours(x, t0), f(x) as f64))
                    .collect();
                (s.strategy.clone(), points)
            })
            .collect()
    };
    let private = busy(|x| x.private_busy_gpus);
    let cloud = busy(|x| x.cloud_busy_gpus);
    let spend: Vec<Series> = runs
        .iter()
        .map(|(s, o)| {
            (
                s.strategy.clone(),
                thin(&o.samples)
                    .iter()
                    .map(|x| (hours(x, t0), x.cloud_spend_usd))
                    .collect(),
            )
        })
        .collect();
    // Cumulative cloud GPU-hours (the busy cloud GPUs integrated step by step), each with its
    // limit as a flat line: how far a strategy is above the least any schedule could do.
    let mut against_limit: Vec<Series> = Vec::new();
    for (s, o) in runs {
        let mut total = 0.0;
        let mut points = vec![(0.0, 0.0)];
        for pair in o.samples.windows(2) {
            total += f64::from(pair[0].cloud_busy_gpus) * (pair[1].t_s - pair[0].t_s) / 3600.0;
            points.push((hours(&pair[1], t0), total));
        }
        let step = (points.len() / MAX_POINTS).max(1);
        let mut thinned: Vec<(f64, f64)> = points.iter().copied().step_by(step).collect();
        if let Some(last) = points.last()
            && thinned.last() != Some(last)
        {
            thinned.push(*last);
        }
        let end = thinned.last().map_or(0.0, |p| p.0);
        against_limit.push((s.strategy.clone(), thinned));
        against_limit.push((
            format!("{} limit", s.strategy),
            vec![
                (0.0, s.cloud_gpu_hours_lower_bound),
                (end, s.cloud_gpu_hours_lower_bound),
            ],
        ));
    }
    let cdf: Vec<Series> = runs
        .iter()
        .map(|(s, o)| {
            let w = waits(o);
            let n = w.len().max(1) as f64;
            let step = (w.len() / MAX_POINTS).max(1);
            // Seconds plus one on a log axis: zero waits sit at the left edge.
            let mut pts: Vec<(f64, f64)> = w
                .iter()
                .enumerate()
                .step_by(step)
                .map(|(i, v)| (v + 1.0, (i + 1) as f64 / n))
                .collect();
            if let Some(last) = w.last() {
                pts.push((last + 1.0, 1.0));
            }
            (s.strategy.clone(), pts)
        })
        .collect();

    Ok(vec![
        (
            "jobs-waiting.svg",
            line_chart("Jobs waiting", "hours", "jobs", &queue, false)?,
        ),
        (
            "private-gpus-busy.svg",
            line_chart("Private GPUs busy", "hours", "GPUs", &private, false)?,
        ),
        (
            "cloud-gpus-busy.svg",
            line_chart("Cloud GPUs busy", "hours", "GPUs", &cloud, false)?,
        ),
        (
            "cloud-gpu-hours.svg",
            line_chart(
                "Cloud GPU-hours used, and the limit (the least any schedule could use)",
                "hours",
                "GPU-hours",
                &against_limit,
                false,
            )?,
        ),
        (
            "cloud-spend.svg",
            line_chart("Cumulative cloud spend", "hours", "USD", &spend, false)?,
        ),
        (
            "wait-cdf.svg",
            line_chart(
                "Wait time CDF",
                "wait in seconds + 1 (log scale)",
                "fraction of jobs",
                &cdf,
                true,
            )?,
        ),
    ])
}

/// Renders the report page (the charts inline).
pub fn render(title: &str, runs: &[(Summary, Outcome)]) -> Result<String, String> {
    let charts = charts(runs)?;

    let mut rows = String::new();
    for (s, _) in runs {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}%</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td></tr>\n",
            escape(&s.strategy), s.jobs, s.burst_jobs, s.cloud_cost_usd, s.cloud_gpu_hours,
            s.cloud_gpu_hours_lower_bound, s.private_gpu_utilization * 100.0, s.avg_wait_s, s.p50_wait_s, s.p95_wait_s, s.avg_jct_s, s.unfinished_jobs
        ));
    }
    let mut html = page_start(title);
    html.push_str("<table><tr><th>strategy</th><th>jobs</th><th>burst jobs</th><th>cloud USD</th><th>cloud GPU-h</th><th>limit GPU-h</th><th>private util</th><th>avg wait s</th><th>p50 wait s</th><th>p95 wait s</th><th>avg JCT s</th><th>unfinished</th></tr>\n");
    html.push_str(&rows);
    html.push_str("</table>\n");
    if runs.iter().any(|(s, _)| !s.spend_by_pool.is_empty()) {
        html.push_str("<h2>Spend by pool</h2>\n<table><tr><th>strategy</th><th>pool</th><th>where</th><th>GPU-h</th><th>USD</th></tr>\n");
        for (s, _) in runs {
            for p in &s.spend_by_pool {
                html.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td></tr>\n",
                    escape(&s.strategy),
                    escape(&p.pool),
                    p.environment,
                    p.gpu_hours,
                    p.cost_usd
                ));
            }
        }
        html.push_str("</table>\n");
    }
    for (_, c) in charts {
        html.push_str("<figure>");
        html.push_str(&c);
        html.push_str("</figure>\n");
    }
    html.push_str("<p>Generated by <code>spillway simulate</code>. See docs/simulator.md for how to read it.</p>\n</body></html>\n");
    Ok(html)
}

/// The sweep's chart: cloud cost against average JCT, one curve per strategy through its
/// frontier, every point as a dot, today's configuration as a larger ring.
pub fn sweep_chart(points: &[crate::sweep::Point]) -> Result<String, String> {
    let mut families: Vec<&str> = Vec::new();
    for p in points {
        if !families.contains(&p.family.as_str()) {
            families.push(&p.family);
        }
    }
    let finished: Vec<&crate::sweep::Point> = points
        .iter()
        .filter(|p| p.summary.unfinished_jobs == 0)
        .collect();
    let hours = |p: &crate::sweep::Point| p.summary.avg_jct_s / 3600.0;
    let x_max = finished.iter().map(|p| hours(p)).fold(0.0f64, f64::max) * 1.02;
    let x_min = finished.iter().map(|p| hours(p)).fold(x_max, f64::min) * 0.98;
    let y_max = finished
        .iter()
        .map(|p| p.summary.cloud_cost_usd)
        .fold(1.0f64, f64::max)
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Cloud cost against average job completion time",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .build_cartesian_2d(x_min..x_max.max(x_min + 1e-6), 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("average JCT, hours")
            .y_desc("cloud USD")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, family) in families.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mine: Vec<&&crate::sweep::Point> =
                finished.iter().filter(|p| p.family == *family).collect();
            let mut frontier: Vec<(f64, f64)> = mine
                .iter()
                .filter(|p| p.frontier)
                .map(|p| (hours(p), p.summary.cloud_cost_usd))
                .collect();
            frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(frontier, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(family.to_string())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    mine.iter().map(|p| {
                        Circle::new((hours(p), p.summary.cloud_cost_usd), 3, color.filled())
                    }),
                )
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(mine.iter().filter(|p| p.current).map(|p| {
                    Circle::new(
                        (hours(p), p.summary.cloud_cost_usd),
                        8,
                        color.stroke_width(2),
                    )
                }))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The sweep's report page: the frontier chart and every point in a table.
pub fn render_sweep(title: &str, points: &[crate::sweep::Point]) -> Result<String, String> {
    let chart = sweep_chart(points)?;
    let mut rows = String::new();
    for p in points {
        let s = &p.summary;
        let marks = match (p.frontier, p.current) {
            (true, true) => "frontier, today",
            (true, false) => "frontier",
            (false, true) => "today",
            (false, false) => "",
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&p.family), escape(&p.knob), if p.knob == "none" { "-".to_string() } else { p.value.to_string() },
            s.cloud_cost_usd, s.cloud_gpu_hours, s.avg_wait_s, s.avg_jct_s, s.unfinished_jobs, marks
        ));
    }
    let mut html = page_start(title);
    html.push_str("<p>Each strategy replayed over its knob. Lines join each strategy's frontier (no other setting of it is both cheaper and faster); rings mark today's configuration.</p>\n");
    html.push_str("<figure>");
    html.push_str(&chart);
    html.push_str("</figure>\n");
    html.push_str("<table><tr><th>strategy</th><th>knob</th><th>value</th><th>cloud USD</th><th>cloud GPU-h</th><th>avg wait s</th><th>avg JCT s</th><th>unfinished</th><th>marks</th></tr>\n");
    html.push_str(&rows);
    html.push_str("</table>\n<p>Generated by <code>spillway simulate --sweep</code>. See docs/simulator.md for how to read it.</p>\n</body></html>\n");
    Ok(html)
}
