//! The report's time series: the window cut into UTC days (hours for a window of two days or
//! less), each with the figures [`super::super::report::row`] gives over it, so a day's
//! GPU-hours and cost add up to the window's.

use k8s_openapi::jiff::Timestamp;

use super::super::chargeback::{Row, row};
use super::super::history::Run;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// One stretch of the window.
#[derive(Clone, Debug)]
pub struct Point {
    /// Its name on the axis: `Nov 06` for a day, `13:00` for an hour.
    pub label: String,
    /// The figures of the runs over it.
    pub row: Row,
    /// Cost over it by environment: private, cloud, other clusters.
    pub cost: [f64; 3],
}

/// How long each point of the series lasts over `[from, to)`: a day, or an hour for a window
/// of two days or less.
pub fn step(from: i64, to: i64) -> i64 {
    if to - from > 2 * DAY_MS {
        DAY_MS
    } else {
        HOUR_MS
    }
}

/// The series of `all` over `[from, to)`: stretches aligned on UTC days (or hours), the first
/// and last cut by the window.
pub fn series(all: &[Run], from: i64, to: i64) -> Vec<Point> {
    let step = step(from, to);
    let refs: Vec<&Run> = all.iter().collect();
    let by_env: [Vec<&Run>; 3] = [
        refs.iter()
            .copied()
            .filter(|r| !matches!(r.environment, Some("cloud" | "remote")))
            .collect(),
        refs.iter()
            .copied()
            .filter(|r| r.environment == Some("cloud"))
            .collect(),
        refs.iter()
            .copied()
            .filter(|r| r.environment == Some("remote"))
            .collect(),
    ];
    let mut out = Vec::new();
    let mut start = from;
    while start < to {
        let end = ((start.div_euclid(step) + 1) * step).min(to);
        let cost = [0, 1, 2].map(|i| row("", &by_env[i], start, end).cost_usd);
        out.push(Point {
            label: label(start, step),
            row: row("", &refs, start, end),
            cost,
        });
        start = end;
    }
    out
}

fn label(at: i64, step: i64) -> String {
    let Ok(t) = Timestamp::from_millisecond(at) else {
        return String::new();
    };
    let fmt = if step == DAY_MS { "%b %d" } else { "%H:%M" };
    t.strftime(fmt).to_string()
}
