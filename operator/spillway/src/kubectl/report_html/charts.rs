//! The report's charts, SVG drawn with `plotters`: stacked bars per day (GPU-hours and cost by
//! environment) and lines per day (GPU utilization; time to start, p50 and p95).

use plotters::prelude::*;

use super::series::Point;

const PRIVATE: RGBColor = RGBColor(31, 119, 180);
const CLOUD: RGBColor = RGBColor(255, 127, 14);
const REMOTE: RGBColor = RGBColor(44, 160, 44);
const P95: RGBColor = RGBColor(214, 39, 40);

const SIZE: (u32, u32) = (1150, 320);

type Fail = String;

fn e<E: std::fmt::Display>(err: E) -> Fail {
    err.to_string()
}

type Layers<'a> = [(&'a str, RGBColor, &'a dyn Fn(&Point) -> f64)];

/// The charts as SVG documents, each with its file name.
pub type Charts = Vec<(&'static str, String)>;

/// An SVG chart of one bar or dot per point: `$draw` gets the chart (x: the points, y: `$y`,
/// the mesh drawn with the day labels and `$mesh`'s y-axis settings) and draws on it.
macro_rules! svg_chart {
    ($title:expr, $points:expr, $y:expr, |$m:ident| $mesh:expr, |$chart:ident| $draw:block) => {{
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(e)?;
            let n = $points.len().max(1);
            let mut $chart = ChartBuilder::on(&root)
                .caption($title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(32)
                .y_label_area_size(72)
                .build_cartesian_2d(-0.5..n as f64 - 0.5, $y)
                .map_err(e)?;
            {
                let x_label = |x: &f64| axis_label($points, *x);
                let mut $m = $chart.configure_mesh();
                $m.disable_x_mesh()
                    .x_labels(n.min(12))
                    .x_label_formatter(&x_label);
                $mesh.draw().map_err(e)?;
            }
            $draw
            legend(&mut $chart)?;
            root.present().map_err(e)?;
        }
        Ok(svg)
    }};
}

/// Stacked bars, one per point: each layer `(name, color, value of point i)`.
fn stacked(
    title: &str,
    unit: &str,
    fmt: &dyn Fn(f64) -> String,
    points: &[Point],
    layers: &Layers<'_>,
) -> Result<String, Fail> {
    let top = points
        .iter()
        .map(|p| layers.iter().map(|(_, _, f)| f(p)).sum::<f64>())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    svg_chart!(
        title,
        points,
        0.0..top,
        |mesh| mesh.y_label_formatter(&|v| fmt(*v)).y_desc(unit),
        |chart| {
            let mut base = vec![0.0; points.len()];
            // A layer with nothing in it (no other clusters) stays out of the legend too.
            let present = layers
                .iter()
                .filter(|(_, _, f)| points.iter().any(|p| f(p) > 0.0));
            for (name, color, value) in present {
                let bars: Vec<Rectangle<(f64, f64)>> = points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let (x, low) = (i as f64, base[i]);
                        base[i] += value(p);
                        Rectangle::new([(x - 0.38, low), (x + 0.38, base[i])], color.filled())
                    })
                    .collect();
                let color = *color;
                chart
                    .draw_series(bars)
                    .map_err(e)?
                    .label(*name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
        }
    )
}

/// Draws each series of a lines chart: the line, broken where a point has no value, and a dot
/// per value (at least `$floor`).
macro_rules! draw_lines {
    ($chart:ident, $points:ident, $series:ident, $floor:expr) => {
        for (name, color, value) in $series {
            let style = color.stroke_width(2);
            let values: Vec<Option<(f64, f64)>> = ($points.iter().enumerate())
                .map(|(i, p)| value(p).map(|v| (i as f64, v.max($floor))))
                .collect();
            for run in values.split(Option::is_none) {
                let run: Vec<(f64, f64)> = run.iter().flatten().copied().collect();
                if !run.is_empty() {
                    $chart.draw_series(LineSeries::new(run, style)).map_err(e)?;
                }
            }
            let dots = values
                .iter()
                .flatten()
                .map(|p| Circle::new(*p, 3, color.filled()));
            let color = *color;
            $chart
                .draw_series(dots)
                .map_err(e)?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
    };
}

type Series<'a> = [(&'a str, RGBColor, &'a dyn Fn(&Point) -> Option<f64>)];

/// Lines over the points that have a value, on a linear axis from 0 to `top`.
fn lines(
    title: &str,
    unit: &str,
    points: &[Point],
    series: &Series<'_>,
    top: f64,
) -> Result<String, Fail> {
    svg_chart!(title, points, 0.0..top, |mesh| mesh.y_desc(unit), |chart| {
        draw_lines!(chart, points, series, f64::MIN);
    })
}

/// Durations in seconds on a log axis from 1 s, labelled in human units (a time to start
/// spans seconds to days; under a second reads as one).
fn durations(title: &str, points: &[Point], series: &Series<'_>) -> Result<String, Fail> {
    let top = points
        .iter()
        .flat_map(|p| series.iter().filter_map(|(_, _, f)| f(p)))
        .fold(60.0, f64::max)
        * 2.0;
    let keys = [
        1.0,
        10.0,
        60.0,
        600.0,
        3600.0,
        6.0 * 3600.0,
        86400.0,
        7.0 * 86400.0,
    ];
    svg_chart!(
        title,
        points,
        (1.0..top)
            .log_scale()
            .with_key_points(keys.into_iter().filter(|k| *k <= top).collect()),
        |mesh| mesh
            .y_label_formatter(&|v| super::duration(*v))
            .y_desc("log scale"),
        |chart| {
            draw_lines!(chart, points, series, 1.0);
        }
    )
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), Fail>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)
}

/// The label of the point nearest `x`, none between points.
fn axis_label(points: &[Point], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 0.01 || i < 0.0 {
        return String::new();
    }
    points
        .get(i as usize)
        .map_or(String::new(), |p| p.label.clone())
}

/// The charts, each with its file name: `gpu-hours.svg`, `cost.svg`, `utilization.svg` (when
/// any use was measured) and `time-to-start.svg`; `per` names a point (`day`, `hour`).
pub fn charts(points: &[Point], per: &str) -> Result<Charts, Fail> {
    let mut out = vec![
        (
            "gpu-hours.svg",
            stacked(
                &format!("GPU-hours per {per}, by where they ran"),
                "GPU-hours",
                &super::number,
                points,
                &[
                    ("private", PRIVATE, &|p: &Point| p.row.gpu_hours.private),
                    ("cloud", CLOUD, &|p: &Point| p.row.gpu_hours.cloud),
                    ("other clusters", REMOTE, &|p: &Point| {
                        p.row.gpu_hours.remote
                    }),
                ],
            )?,
        ),
        (
            "cost.svg",
            stacked(
                &format!("Cost per {per}, by where it was spent"),
                "USD",
                &super::dollars,
                points,
                &[
                    ("private", PRIVATE, &|p: &Point| p.cost[0]),
                    ("cloud", CLOUD, &|p: &Point| p.cost[1]),
                    ("other clusters", REMOTE, &|p: &Point| p.cost[2]),
                ],
            )?,
        ),
    ];
    if points.iter().any(|p| p.row.gpu_utilization.is_some()) {
        out.push((
            "utilization.svg",
            lines(
                &format!("GPU utilization per {per} (busy share of the GPU-hours measured)"),
                "percent",
                points,
                &[("utilization", PRIVATE, &|p: &Point| {
                    p.row.gpu_utilization.map(|u| u * 100.0)
                })],
                100.0,
            )?,
        ));
    }
    out.push((
        "time-to-start.svg",
        durations(
            &format!("Time to start of the jobs that first started each {per}"),
            points,
            &[
                ("median", PRIVATE, &|p: &Point| {
                    p.row.time_to_start_seconds.as_ref().map(|q| q.p50)
                }),
                ("p95", P95, &|p: &Point| {
                    p.row.time_to_start_seconds.as_ref().map(|q| q.p95)
                }),
            ],
        )?,
    ));
    Ok(out)
}
