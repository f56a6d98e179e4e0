//! `spillway simulate --sweep`: each strategy over its knob, and the cost-versus-JCT frontier.
//!
//! The knobs: `spillway` the queues' `maxWait` (or their `waitCostPerHour` when every bursting
//! queue is in priced mode, their `computeWaitFactor` when every one is in compute-wait mode),
//! `starburst` its factor, `constant-wait` its
//! seconds; `no-wait` and `never-burst` have none and are one point each. A point is on its
//! strategy's frontier when no other point of that strategy is at most as dear and at most as
//! slow (average JCT) and better in one of the two. Today's configuration (the manifests' value,
//! Starburst's tuned factor, the named constant wait) is marked. Replays run in parallel.

use rayon::prelude::*;
use spillway_core::{Duration, Policy, Snapshot, WaitMode};

use crate::report::Summary;
use crate::strategy::{STARBURST_FACTOR, Strategy};
use crate::trace::TraceJob;
use crate::{Options, replay};

/// Seconds of wait swept for `maxWait` and `constant-wait`.
const WAITS_S: [f64; 9] = [
    0.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
];
/// Compute-wait factors swept for `starburst` and compute-wait queues.
const FACTORS: [f64; 11] = [0.0, 0.02, 0.05, 0.076, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0];
/// USD per hour of waiting in priced mode: from waits 25 times longer than the default's to
/// 500 times shorter (at $1 per GPU-hour, compute-wait factors 5 to 0.0004).
const WAIT_COSTS: [f64; 12] = [
    0.2, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 250.0, 2500.0,
];

/// One replay of the sweep.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    /// The strategy family: `spillway`, `starburst`, `starburst-best-fit`, `constant-wait`,
    /// `no-wait`, `never-burst`.
    pub family: String,
    /// What was varied: `maxWait` (seconds), `waitCostPerHour`, `computeWaitFactor`, `factor`,
    /// `seconds`, or `none`.
    pub knob: String,
    pub value: f64,
    /// Today's configuration.
    pub current: bool,
    /// On its family's cost-versus-JCT frontier.
    pub frontier: bool,
    #[serde(flatten)]
    pub summary: Summary,
}

struct Variant {
    family: String,
    knob: &'static str,
    value: f64,
    current: bool,
    strategy: Strategy,
    snapshot: Snapshot,
}

fn values(list: &[f64], current: f64) -> Vec<f64> {
    let mut v: Vec<f64> = list.to_vec();
    if !v.iter().any(|x| (x - current).abs() < 1e-9) {
        v.push(current);
    }
    v.sort_by(f64::total_cmp);
    v
}

fn variants(base: &Snapshot, strategies: &[Strategy]) -> Vec<Variant> {
    let mut out = Vec::new();
    for s in strategies {
        match s {
            Strategy::Spillway => {
                let bursting: Vec<usize> = (0..base.queues.len())
                    .filter(|&i| base.queues[i].burst.enabled)
                    .collect();
                let all_in = |mode: WaitMode| {
                    !bursting.is_empty()
                        && bursting
                            .iter()
                            .all(|&i| base.queues[i].burst.wait_mode == mode)
                };
                let (compute, priced) = (all_in(WaitMode::ComputeWait), all_in(WaitMode::Priced));
                let first = bursting.first().map(|&i| &base.queues[i].burst);
                let (knob, list, current): (&'static str, &[f64], f64) = if compute {
                    let f = first.map_or(0.0, |b| b.compute_wait_factor);
                    ("computeWaitFactor", &FACTORS, f)
                } else if priced {
                    let v = first.map_or(0.0, |b| b.wait_cost_per_hour);
                    ("waitCostPerHour", &WAIT_COSTS, v)
                } else {
                    let w = first.map_or(0.0, |b| b.max_wait.as_secs_f64());
                    ("maxWait", &WAITS_S, w)
                };
                for value in values(list, current) {
                    let mut snapshot = base.clone();
                    for &i in &bursting {
                        let b = &mut snapshot.queues[i].burst;
                        if compute {
                            b.compute_wait_factor = value;
                        } else if priced {
                            b.wait_cost_per_hour = value;
                        } else {
                            b.max_wait = Duration::from_millis((value * 1000.0) as u64);
                        }
                    }
                    out.push(Variant {
                        family: "spillway".into(),
                        knob,
                        value,
                        current: (value - current).abs() < 1e-9,
                        strategy: Strategy::Spillway,
                        snapshot,
                    });
                }
            }
            Strategy::Starburst { factor, packing } => {
                let family = Strategy::Starburst {
                    factor: STARBURST_FACTOR,
                    packing: *packing,
                }
                .to_string();
                for value in values(&FACTORS, *factor) {
                    out.push(Variant {
                        family: family.clone(),
                        knob: "factor",
                        value,
                        current: (value - factor).abs() < 1e-9,
                        strategy: Strategy::Starburst {
                            factor: value,
                            packing: *packing,
                        },
                        snapshot: base.clone(),
                    });
                }
            }
            Strategy::ConstantWait(d) => {
                let current = d.as_secs_f64();
                for value in values(&WAITS_S, current) {
                    out.push(Variant {
                        family: "constant-wait".into(),
                        knob: "seconds",
                        value,
                        current: (value - current).abs() < 1e-9,
                        strategy: Strategy::ConstantWait(Duration::from_millis(
                            (value * 1000.0) as u64,
                        )),
                        snapshot: base.clone(),
                    });
                }
            }
            Strategy::NoWait | Strategy::NeverBurst => out.push(Variant {
                family: s.to_string(),
                knob: "none",
                value: 0.0,
                current: true,
                strategy: s.clone(),
                snapshot: base.clone(),
            }),
        }
    }
    out
}

/// Worker threads a sweep runs on (one per core unless `RAYON_NUM_THREADS` says otherwise).
pub fn threads() -> usize {
    rayon::current_num_threads()
}

/// Runs every variant of `strategies`, in parallel; `policy` makes one policy per worker
/// thread. Points come out grouped by family, in knob order, with the frontier marked.
pub fn run(
    base: &Snapshot,
    trace: &[TraceJob],
    strategies: &[Strategy],
    options: &Options,
    policy: &(dyn Fn() -> Box<dyn Policy> + Sync),
) -> Vec<Point> {
    let variants = variants(base, strategies);
    let mut points: Vec<Point> = variants
        .par_iter()
        .map_init(policy, |policy, v| {
            let (mut summary, _) = replay(
                &v.snapshot,
                trace,
                &v.strategy,
                options,
                policy.as_ref(),
                &mut |_, _| {},
            );
            summary.strategy = v.strategy.to_string();
            Point {
                family: v.family.clone(),
                knob: v.knob.to_string(),
                value: v.value,
                current: v.current,
                frontier: false,
                summary,
            }
        })
        .collect();
    mark_frontier(&mut points);
    points
}

/// Marks the points no other point of their family dominates (cost and average JCT, both
/// lower is better; unfinished jobs make a point dominated by any point with fewer).
pub fn mark_frontier(points: &mut [Point]) {
    let key = |p: &Point| {
        (
            p.summary.unfinished_jobs,
            p.summary.cloud_cost_usd,
            p.summary.avg_jct_s,
        )
    };
    let dominated: Vec<bool> = points
        .iter()
        .map(|p| {
            let (u, c, j) = key(p);
            points.iter().any(|q| {
                let (qu, qc, qj) = key(q);
                q.family == p.family
                    && qu <= u
                    && qc <= c
                    && qj <= j
                    && (qu < u || qc < c || qj < j)
            })
        })
        .collect();
    for (p, d) in points.iter_mut().zip(dominated) {
        p.frontier = !d;
    }
}

/// The sweep as a text table.
pub fn table(points: &[Point]) -> String {
    let mut out = format!(
        "{:<20} {:>18} {:>10} {:>11} {:>10} {:>10} {:>10}  {}\n",
        "strategy", "knob", "value", "cloud $", "cloud GPU-h", "avg wait", "avg JCT", "marks"
    );
    out.push_str(&"-".repeat(104));
    out.push('\n');
    for p in points {
        let s = &p.summary;
        let mut marks = Vec::new();
        if p.frontier {
            marks.push("frontier");
        }
        if p.current {
            marks.push("today");
        }
        out.push_str(&format!(
            "{:<20} {:>18} {:>10} {:>11.2} {:>10.1} {:>10} {:>10}  {}\n",
            p.family,
            p.knob,
            if p.knob == "none" {
                "-".to_string()
            } else {
                format!("{}", p.value)
            },
            s.cloud_cost_usd,
            s.cloud_gpu_hours,
            crate::report::human_secs(s.avg_wait_s),
            crate::report::human_secs(s.avg_jct_s),
            marks.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(family: &str, cost: f64, jct: f64) -> Point {
        let mut summary = crate::report::summarize(family, &crate::Outcome::default(), 0.0);
        summary.cloud_cost_usd = cost;
        summary.avg_jct_s = jct;
        Point {
            family: family.into(),
            knob: "factor".into(),
            value: 0.0,
            current: false,
            frontier: false,
            summary,
        }
    }

    #[test]
    fn the_frontier_keeps_what_nothing_beats_within_a_family() {
        let mut pts = vec![
            point("a", 10.0, 100.0),
            point("a", 5.0, 200.0),
            point("a", 12.0, 150.0), // dearer and slower than the first
            point("a", 5.0, 200.0),  // a tie is not dominated
            point("b", 50.0, 500.0), // another family is not compared
        ];
        mark_frontier(&mut pts);
        let f: Vec<bool> = pts.iter().map(|p| p.frontier).collect();
        assert_eq!(f, [true, true, false, true, true]);
    }

    #[test]
    fn knobs_follow_the_queue_mode_and_include_today() {
        let mut base = Snapshot::default();
        let mut q = spillway_core::Queue::new("q");
        q.burst.enabled = true;
        q.burst.wait_mode = WaitMode::Fixed;
        q.burst.max_wait = Duration::from_secs(1234);
        base.queues = vec![q];
        let v = variants(
            &base,
            &[
                Strategy::Spillway,
                Strategy::starburst(),
                Strategy::NoWait,
                Strategy::ConstantWait(Duration::from_secs(900)),
            ],
        );
        let spill: Vec<&Variant> = v.iter().filter(|x| x.family == "spillway").collect();
        assert!(spill.iter().all(|x| x.knob == "maxWait"));
        assert_eq!(spill.len(), WAITS_S.len() + 1);
        let today: Vec<f64> = spill
            .iter()
            .filter(|x| x.current)
            .map(|x| x.value)
            .collect();
        assert_eq!(today, [1234.0]);
        assert_eq!(
            spill
                .iter()
                .find(|x| x.value == 60.0)
                .map(|x| x.snapshot.queues[0].burst.max_wait),
            Some(Duration::from_secs(60))
        );
        let sb: Vec<&Variant> = v.iter().filter(|x| x.family == "starburst").collect();
        assert_eq!(sb.len(), FACTORS.len());
        assert_eq!(sb.iter().filter(|x| x.current).count(), 1);
        assert_eq!(v.iter().filter(|x| x.family == "no-wait").count(), 1);
        assert_eq!(
            v.iter().filter(|x| x.family == "constant-wait").count(),
            WAITS_S.len()
        );
        base.queues[0].burst.wait_mode = WaitMode::ComputeWait;
        base.queues[0].burst.compute_wait_factor = 0.2;
        let v = variants(&base, &[Strategy::Spillway]);
        assert!(v.iter().all(|x| x.knob == "computeWaitFactor"));
        assert!(
            v.iter().any(|x| x.current
                && (x.snapshot.queues[0].burst.compute_wait_factor - 0.2).abs() < 1e-12)
        );
        // Priced (the default mode): the value of an hour of waiting, today's 5 among them.
        base.queues[0].burst.wait_mode = WaitMode::Priced;
        let v = variants(&base, &[Strategy::Spillway]);
        assert!(v.iter().all(|x| x.knob == "waitCostPerHour"));
        assert_eq!(v.len(), WAIT_COSTS.len());
        assert!(
            v.iter().any(|x| x.current
                && (x.snapshot.queues[0].burst.wait_cost_per_hour - 5.0).abs() < 1e-12)
        );
        assert_eq!(
            v.iter()
                .find(|x| x.value == 50.0)
                .map(|x| x.snapshot.queues[0].burst.wait_cost_per_hour),
            Some(50.0)
        );
    }
}
