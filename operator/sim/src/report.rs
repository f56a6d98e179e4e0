//! Figures of a replay: the summary (the JSON keys docs/simulator.md lists, a contract) and the
//! text table.

use serde::Serialize;

use crate::engine::Outcome;

/// The summary of one strategy's replay. Field names are the JSON keys of docs/simulator.md (plus a few
/// more, documented in docs/simulator.md).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub strategy: String,
    pub jobs: u64,
    pub burst_jobs: u64,
    pub cloud_cost_usd: f64,
    pub cloud_gpu_hours: f64,
    /// Jobs that started in other clusters (`cluster` pools), their GPU-hours there and what
    /// those cost at the pools' prices.
    pub remote_jobs: u64,
    pub remote_gpu_hours: f64,
    pub remote_cost_usd: f64,
    /// Spend per cloud and cluster pool that was used, cloud pools first.
    pub spend_by_pool: Vec<PoolSpendSummary>,
    /// The physical limit ([`crate::bound`]): the fewest cloud GPU-hours with which any
    /// schedule could have run this row's finished jobs on the same private GPUs, finishing
    /// each no later than this row did.
    pub cloud_gpu_hours_lower_bound: f64,
    pub private_gpu_utilization: f64,
    pub avg_wait_s: f64,
    pub p50_wait_s: f64,
    pub p95_wait_s: f64,
    pub avg_jct_s: f64,
    pub sim_wall_s: f64,
    pub finished_jobs: u64,
    pub unfinished_jobs: u64,
    pub rejected_jobs: u64,
    pub private_gpus: u64,
    pub instances_launched: u64,
    pub capacity_errors: u64,
    pub spot_interruptions: u64,
    /// Of those, how many were warned of ahead (`--interruption-warning`).
    pub interruption_warnings: u64,
    /// GPU-hours of work spot interruptions lost (since the last checkpoint of a restartable
    /// job reclaimed without warning; all of a job that is not restartable).
    pub interrupted_gpu_hours_lost: f64,
    /// Time from a job's interruption (its warning, or the loss) to its next start: mean and
    /// 95th percentile, seconds (0 without interruptions).
    pub avg_recovery_s: f64,
    pub p95_recovery_s: f64,
    /// How busy the finished jobs' GPUs were, weighted by their GPU-hours, over the jobs whose
    /// trace says (`gpu_utilization`; 0..1, 0 with none), and the GPU-hours of those below
    /// 5 % (the default idle threshold).
    pub gpu_utilization: f64,
    pub idle_gpu_hours: f64,
    /// Jobs preempted to give a queue its private quota back, and the GPU-hours of work they
    /// lost (since their last checkpoint; all of it for jobs that are not restartable).
    pub preemptions: u64,
    pub preempted_gpu_hours_lost: f64,
    /// Cloud jobs moved home to private GPUs, and the GPU-hours of work the moves lost.
    pub repatriations: u64,
    pub repatriated_gpu_hours_lost: f64,
    /// Calls of `decide`; and the instants not decided again because only jobs arrived that
    /// the last plan showed cannot change it (strict order, queues that never burst).
    pub decide_calls: u64,
    pub cycles_skipped: u64,
    pub makespan_s: f64,
    /// Trace jobs still running when the trace was cut that were left out of the replay
    /// (`spillway simulate --keep-censored` keeps them; then 0).
    pub censored_jobs_left_out: u64,
    /// With `--private-topology`: what binding gangs to one rack cost them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologySummary>,
}

/// What one pool's jobs used over a replay.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PoolSpendSummary {
    pub pool: String,
    /// `cloud` or `remote`.
    pub environment: &'static str,
    pub gpu_hours: f64,
    pub cost_usd: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Sorted waits (start minus arrival) of the jobs that started.
pub fn waits(out: &Outcome) -> Vec<f64> {
    let mut w: Vec<f64> = out
        .jobs
        .iter()
        .filter_map(|j| j.start_s.map(|s| (s - j.arrival_s).max(0.0)))
        .collect();
    w.sort_by(f64::total_cmp);
    w
}

/// Summarises a replay.
pub fn summarize(strategy: &str, out: &Outcome, wall_s: f64) -> Summary {
    let waits = waits(out);
    let mut recoveries = out.recovery_seconds.clone();
    recoveries.sort_by(f64::total_cmp);
    let jcts: Vec<f64> = out
        .jobs
        .iter()
        .filter_map(|j| j.finish_s.map(|f| f - j.arrival_s))
        .collect();
    let first = out
        .jobs
        .iter()
        .map(|j| j.arrival_s)
        .fold(f64::INFINITY, f64::min);
    let makespan = if first.is_finite() {
        (out.end_s - first).max(0.0)
    } else {
        0.0
    };
    let capacity = out.private_gpus as f64 * makespan;
    let finished: Vec<crate::bound::Work> = out
        .jobs
        .iter()
        .filter(|j| !j.rejected)
        .filter_map(|j| {
            Some(crate::bound::Work {
                arrival_s: j.arrival_s,
                finish_s: j.finish_s?,
                gpus: f64::from(j.gpus),
                runtime_s: j.runtime_s,
            })
        })
        .collect();
    let limit = crate::bound::cloud_gpu_seconds_lower_bound(&finished, out.private_gpus);
    Summary {
        strategy: strategy.to_string(),
        jobs: out.jobs.len() as u64,
        burst_jobs: out
            .jobs
            .iter()
            .filter(|j| j.cloud && j.start_s.is_some())
            .count() as u64,
        cloud_cost_usd: round(out.cloud_cost_usd, 2),
        cloud_gpu_hours: round(out.cloud_gpu_seconds / 3600.0, 2),
        remote_jobs: out
            .jobs
            .iter()
            .filter(|j| j.remote && j.start_s.is_some())
            .count() as u64,
        remote_gpu_hours: round(
            out.remote.iter().map(|p| p.gpu_seconds).sum::<f64>() / 3600.0,
            2,
        ),
        remote_cost_usd: round(out.remote.iter().map(|p| p.cost_usd).sum(), 2),
        spend_by_pool: out
            .cloud_by_pool
            .iter()
            .map(|p| ("cloud", p))
            .chain(out.remote.iter().map(|p| ("remote", p)))
            .filter(|(_, p)| p.gpu_seconds > 0.0)
            .map(|(environment, p)| PoolSpendSummary {
                pool: p.pool.clone(),
                environment,
                gpu_hours: round(p.gpu_seconds / 3600.0, 2),
                cost_usd: round(p.cost_usd, 2),
            })
            .collect(),
        cloud_gpu_hours_lower_bound: round(limit / 3600.0, 2),
        private_gpu_utilization: if capacity > 0.0 {
            round(out.private_busy_gpu_seconds / capacity, 4)
        } else {
            0.0
        },
        avg_wait_s: round(mean(&waits), 1),
        p50_wait_s: round(percentile(&waits, 50.0), 1),
        p95_wait_s: round(percentile(&waits, 95.0), 1),
        avg_jct_s: round(mean(&jcts), 1),
        sim_wall_s: round(wall_s, 4),
        finished_jobs: jcts.len() as u64,
        unfinished_jobs: out
            .jobs
            .iter()
            .filter(|j| j.finish_s.is_none() && !j.rejected)
            .count() as u64,
        rejected_jobs: out.jobs.iter().filter(|j| j.rejected).count() as u64,
        private_gpus: out.private_gpus as u64,
        instances_launched: out.instances_launched as u64,
        capacity_errors: out.capacity_errors as u64,
        spot_interruptions: out.spot_interruptions as u64,
        interruption_warnings: out.interruption_warnings as u64,
        interrupted_gpu_hours_lost: round(out.interrupted_gpu_seconds_lost / 3600.0, 2),
        avg_recovery_s: round(mean(&recoveries), 1),
        gpu_utilization: utilization(out).0,
        idle_gpu_hours: utilization(out).1,
        p95_recovery_s: round(percentile(&recoveries, 95.0), 1),
        preemptions: out.preemptions as u64,
        preempted_gpu_hours_lost: round(out.preempted_gpu_seconds_lost / 3600.0, 2),
        repatriations: out.repatriations as u64,
        repatriated_gpu_hours_lost: round(out.repatriated_gpu_seconds_lost / 3600.0, 2),
        decide_calls: out.decide_calls,
        cycles_skipped: out.cycles_skipped,
        makespan_s: round(makespan, 1),
        censored_jobs_left_out: 0,
        topology: None,
    }
}

/// (GPU-hour weighted utilization 0..1, idle GPU-hours) of the finished jobs with a figure.
fn utilization(out: &Outcome) -> (f64, f64) {
    let (mut sampled, mut busy, mut idle) = (0.0, 0.0, 0.0);
    for j in out.jobs.iter().filter(|j| j.finish_s.is_some()) {
        let Some(p) = j.gpu_percent else { continue };
        let gpu_s = f64::from(j.gpus) * j.runtime_s;
        sampled += gpu_s;
        busy += gpu_s * p / 100.0;
        if p < 5.0 {
            idle += gpu_s;
        }
    }
    let ratio = if sampled > 0.0 { busy / sampled } else { 0.0 };
    (round(ratio, 3), round(idle / 3600.0, 2))
}

pub(crate) fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

pub fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0}s")
    } else if s < 7200.0 {
        format!("{:.1}m", s / 60.0)
    } else {
        format!("{:.1}h", s / 3600.0)
    }
}

/// The comparison table printed on stdout. With other clusters in play (some row used a
/// cluster pool), it has their columns, and spend per pool follows it.
pub fn table(rows: &[Summary]) -> String {
    let remote = rows.iter().any(|r| r.remote_jobs > 0);
    let mut header = vec!["strategy", "jobs", "burst", "cloud $", "cloud GPU-h"];
    if remote {
        header.extend(["remote", "remote $", "remote GPU-h"]);
    }
    header.extend([
        "limit GPU-h",
        "private util",
        "avg wait",
        "p50 wait",
        "p95 wait",
        "avg JCT",
        "unfinished",
    ]);
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let mut row = vec![
            r.strategy.clone(),
            r.jobs.to_string(),
            r.burst_jobs.to_string(),
            format!("{:.2}", r.cloud_cost_usd),
            format!("{:.1}", r.cloud_gpu_hours),
        ];
        if remote {
            row.extend([
                r.remote_jobs.to_string(),
                format!("{:.2}", r.remote_cost_usd),
                format!("{:.1}", r.remote_gpu_hours),
            ]);
        }
        row.extend([
            format!("{:.1}", r.cloud_gpu_hours_lower_bound),
            format!("{:.1}%", r.private_gpu_utilization * 100.0),
            human_secs(r.avg_wait_s),
            human_secs(r.p50_wait_s),
            human_secs(r.p95_wait_s),
            human_secs(r.avg_jct_s),
            r.unfinished_jobs.to_string(),
        ]);
        cells.push(row);
    }
    let mut out = aligned(&cells);
    if remote {
        let mut by_pool = vec![vec![
            "strategy".to_string(),
            "pool".to_string(),
            "where".to_string(),
            "GPU-h".to_string(),
            "$".to_string(),
        ]];
        for r in rows {
            for p in &r.spend_by_pool {
                by_pool.push(vec![
                    r.strategy.clone(),
                    p.pool.clone(),
                    p.environment.to_string(),
                    format!("{:.1}", p.gpu_hours),
                    format!("{:.2}", p.cost_usd),
                ]);
            }
        }
        out.push_str("\nspend by pool\n");
        out.push_str(&aligned(&by_pool));
    }
    out
}

/// Rows of cells as columns: the first left-aligned, the others right-aligned, a rule under
/// the header.
fn aligned(cells: &[Vec<String>]) -> String {
    let columns = cells.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| cells.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}

/// What binding gangs to one rack cost them, against placement that ignores racks.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TopologySummary {
    /// `RACKSxNODES`.
    pub racks: String,
    /// Gangs of more than one replica: bound to one rack.
    pub gangs: u64,
    /// Of those, gangs that waited at some instant although the private nodes' free GPUs held
    /// all of their replicas across racks: held back by the rack alone.
    pub gangs_waited_for_rack: u64,
    /// The gangs' mean and 95th-percentile wait, seconds, bound to one rack...
    pub gang_avg_wait_s: f64,
    pub gang_p95_wait_s: f64,
    /// ...and in the replay that ignores racks.
    pub ignoring_gang_avg_wait_s: f64,
    pub ignoring_gang_p95_wait_s: f64,
    /// Gangs whose private placement spanned more than one rack in the replay that ignores
    /// racks (in the bound replay, none can).
    pub ignoring_split_gangs: u64,
    /// The whole trace's mean wait, bound and ignoring racks.
    pub avg_wait_s: f64,
    pub ignoring_avg_wait_s: f64,
}

/// The gangs' waits (sorted) and the whole trace's mean wait.
fn gang_waits(out: &Outcome) -> (Vec<f64>, f64) {
    let mut gangs: Vec<f64> = out
        .jobs
        .iter()
        .filter(|j| j.replicas > 1)
        .filter_map(|j| j.start_s.map(|s| (s - j.arrival_s).max(0.0)))
        .collect();
    gangs.sort_by(f64::total_cmp);
    let all = waits(out);
    (gangs, mean(&all))
}

/// The figures of a bound replay and the replay of the same trace ignoring racks.
pub fn summarize_topology(
    racks: crate::topology::Racks,
    bound: &Outcome,
    ignoring: &Outcome,
) -> TopologySummary {
    let (b, b_all) = gang_waits(bound);
    let (i, i_all) = gang_waits(ignoring);
    let r = |x: f64| round(x, 1);
    TopologySummary {
        racks: racks.to_string(),
        gangs: bound.jobs.iter().filter(|j| j.replicas > 1).count() as u64,
        gangs_waited_for_rack: bound.jobs.iter().filter(|j| j.waited_for_domain).count() as u64,
        gang_avg_wait_s: r(mean(&b)),
        gang_p95_wait_s: r(percentile(&b, 95.0)),
        ignoring_gang_avg_wait_s: r(mean(&i)),
        ignoring_gang_p95_wait_s: r(percentile(&i, 95.0)),
        ignoring_split_gangs: ignoring
            .jobs
            .iter()
            .filter(|j| j.replicas > 1 && j.racks > 1)
            .count() as u64,
        avg_wait_s: r(b_all),
        ignoring_avg_wait_s: r(i_all),
    }
}

/// One line per row with `--private-topology` figures: what binding gangs to a rack cost.
pub fn topology_lines(rows: &[Summary]) -> String {
    let mut out = String::new();
    for r in rows {
        let Some(t) = &r.topology else { continue };
        out.push_str(&format!(
            "racks {} ({}): {} gangs bound to one rack, {} waited for one (gang wait mean {:.0} s, p95 {:.0} s); ignoring racks: mean {:.0} s, p95 {:.0} s, {} gangs split across racks\n",
            t.racks,
            r.strategy,
            t.gangs,
            t.gangs_waited_for_rack,
            t.gang_avg_wait_s,
            t.gang_p95_wait_s,
            t.ignoring_gang_avg_wait_s,
            t.ignoring_gang_p95_wait_s,
            t.ignoring_split_gangs,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 95.0), 10.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
