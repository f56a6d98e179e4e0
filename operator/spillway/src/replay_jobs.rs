//! `spillway simulate --jobs-out FILE`: a replay's jobs as the GpuJobs the operator would have
//! left behind (a `List`, YAML), so `kubectl spillway report -f FILE` shows a month of a policy
//! before it runs.
//!
//! Each trace job becomes a GpuJob in its `namespace` (its queue's name when the trace has
//! none) with the status of its run: `queuedAt` its arrival, `firstStartedAt`/`startedAt` its
//! start, `finishedAt` its finish, `environment` where it started, `restarts` its interruptions
//! and moves. Its cost: private GPU-hours at the private pools' `gpuCostPerHour` (their
//! GPU-weighted mean), and the replay's cloud (other clusters') spend shared out over the
//! jobs that ran there by GPU-hours, so the jobs' costs add up to the replay's. A trace's
//! `gpu_utilization` becomes the run's `status.utilization`, measured over its whole run (idle
//! below 5%, a queue's default threshold).

use serde_json::{Value, json};
use spillway_core::{PoolKind, Snapshot};
use spillway_sim::engine::{JobRecord, Outcome};
use spillway_sim::trace::TraceJob;

/// The default idle threshold of a queue (`GpuQueue spec.idle.threshold`), percent.
const IDLE_THRESHOLD: f64 = spillway_api::queue::DEFAULT_IDLE_THRESHOLD;

/// A name Kubernetes takes: lower case, digits and `-`, at most 40 characters of the trace's
/// id, then the job's position (ids repeat in some traces).
fn name(id: &str, i: usize) -> String {
    let mut s: String = id
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    s = s.trim_matches('-').to_string();
    if s.is_empty() {
        format!("job-{i}")
    } else {
        format!("{s}-{i}")
    }
}

fn rfc3339(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The private pools' price per GPU-hour, weighted by their GPUs (0 when none is priced).
fn private_price(snap: &Snapshot) -> f64 {
    let (mut sum, mut gpus) = (0.0, 0.0);
    for n in &snap.nodes {
        if let Some(p) = snap.pools.iter().find(|p| p.name == n.pool)
            && let PoolKind::Private { gpu_cost_per_hour } = p.kind
        {
            sum += gpu_cost_per_hour.unwrap_or(0.0) * f64::from(n.gpus);
            gpus += f64::from(n.gpus);
        }
    }
    if gpus > 0.0 { sum / gpus } else { 0.0 }
}

fn ran_s(r: &JobRecord, end_s: f64) -> f64 {
    match r.start_s {
        Some(s) => (r.finish_s.unwrap_or(end_s) - s).max(0.0),
        None => 0.0,
    }
}

/// The List of GpuJobs of `trace` replayed into `out` on `snap`, the trace's second 0 at
/// `start_ms`; `queue` is the queue of a job whose trace names none.
pub fn list(
    trace: &[TraceJob],
    out: &Outcome,
    snap: &Snapshot,
    start_ms: i64,
    queue: &str,
) -> Value {
    let at = |s: f64| rfc3339(start_ms + (s * 1000.0).round() as i64);
    let gpu_s = |cloud: bool, remote: bool| -> f64 {
        out.jobs
            .iter()
            .filter(|r| r.cloud == cloud && r.remote == remote)
            .map(|r| f64::from(r.gpus) * ran_s(r, out.end_s))
            .sum()
    };
    let remote_cost: f64 = out.remote.iter().map(|p| p.cost_usd).sum();
    let per_gpu_s = |cost: f64, gpu_s: f64| if gpu_s > 0.0 { cost / gpu_s } else { 0.0 };
    let cloud_rate = per_gpu_s(out.cloud_cost_usd, gpu_s(true, false));
    let remote_rate = per_gpu_s(remote_cost, gpu_s(false, true));
    let private_rate = private_price(snap) / 3600.0;
    let items: Vec<Value> = trace
        .iter()
        .zip(&out.jobs)
        .enumerate()
        .map(|(i, (t, r))| {
            let q = t.queue.clone().unwrap_or_else(|| queue.to_string());
            let ns = t.namespace.clone().unwrap_or_else(|| q.clone());
            let ran = ran_s(r, out.end_s);
            let gpu_hours = f64::from(r.gpus) * ran / 3600.0;
            let rate = match (r.cloud, r.remote) {
                (true, _) => cloud_rate,
                (_, true) => remote_rate,
                _ => private_rate,
            };
            let mut status = json!({
                // One that could run nowhere waits in its queue, as the operator leaves it.
                "phase": match (r.start_s, r.finish_s) {
                    (Some(_), Some(_)) => "Succeeded",
                    (Some(_), None) => "Running",
                    _ => "Queued",
                },
                "queuedAt": at(r.arrival_s),
                "restarts": r.interruptions + r.moves,
            });
            if let Some(s) = r.start_s {
                status["firstStartedAt"] = json!(at(s));
                status["startedAt"] = json!(at(s));
                status["environment"] = json!(match (r.cloud, r.remote) {
                    (true, _) => "cloud",
                    (_, true) => "remote",
                    _ => "private",
                });
                let cost = f64::from(r.gpus) * ran * rate;
                status["cost"] =
                    json!({"accruedUSD": (cost * 1e4).round() / 1e4, "hourlyUSD": 0.0});
            }
            if let Some(f) = r.finish_s {
                status["finishedAt"] = json!(at(f));
            }
            if let (Some(pct), Some(_)) = (r.gpu_percent, r.start_s) {
                let round = |v: f64| (v * 1e4).round() / 1e4;
                status["utilization"] = json!({
                    "gpuPercent": pct,
                    "source": "DCGM_FI_DEV_GPU_UTIL",
                    "sampledAt": at(r.finish_s.unwrap_or(out.end_s)),
                    "sampledGpuHours": round(gpu_hours),
                    "busyGpuHours": round(gpu_hours * pct / 100.0),
                    "idleGpuHours": if pct < IDLE_THRESHOLD { round(gpu_hours) } else { 0.0 },
                });
            }
            json!({
                "apiVersion": "spillway.io/v1alpha1",
                "kind": "GpuJob",
                "metadata": {"name": name(&t.id, i), "namespace": ns},
                "spec": {
                    "queue": q,
                    "replicas": t.replicas.max(1),
                    "gpusPerReplica": t.gpus,
                    "restartable": t.restartable,
                    "template": {"spec": {"containers": [{"name": "main", "image": "replay"}]}},
                },
                "status": status,
            })
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}
