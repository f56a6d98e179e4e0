//! `export-trace --since 30d`: the cluster's finished jobs as a trace of `spillway simulate`
//! (Spillway's CSV), so a policy change can be replayed on last month's own work before it
//! goes live: `spillway simulate --trace last-month.csv --config policies/`.

use clap::Args;

use super::history::{Run, runs};
use super::{ClusterArgs, Failure, client};

/// Finished jobs as a simulator trace, on stdout.
#[derive(Args, Debug)]
pub struct ExportTraceArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub scope: super::JobScopeArgs,
    /// Only this queue's jobs.
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// Jobs that finished within this long, such as `30d` (default) or `24h`.
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub since: String,
}

/// The trace's columns (docs/simulator.md, "Traces").
pub const HEADER: &str = "job_id,arrival_s,runtime_s,num_gpus,replicas,estimated_runtime_s,gpu_model,queue,priority,restartable,datasets,min_driver_version,min_cuda_version,gpu_products,min_gpu_memory_gib,kind,gpu_utilization,namespace";

/// The trace of the runs that finished at or after `from` (milliseconds), with a comment line
/// saying what it is; arrivals count from the earliest of them. A run's runtime is its last
/// attempt's (finish minus start); a run that never started is left out.
pub fn trace(all: &[Run], from: i64, queue: Option<&str>, what: &str) -> String {
    let mut chosen: Vec<&Run> = all
        .iter()
        .filter(|r| r.is_finished() && r.finished.is_some_and(|f| f >= from))
        .filter(|r| r.started.is_some())
        .filter(|r| queue.is_none_or(|q| r.queue == q))
        .collect();
    chosen.sort_by_key(|r| (r.queued, r.namespace.clone(), r.name.clone()));
    let t0 = chosen.first().map_or(0, |r| r.queued);
    let at = |ms: i64| {
        k8s_openapi::jiff::Timestamp::from_millisecond(ms)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let mut out = format!(
        "# {what}: {} finished job(s); arrival_s counts from {}\n{HEADER}\n",
        chosen.len(),
        at(t0)
    );
    for r in chosen {
        let spec = &r.job.spec;
        let (Some(started), Some(finished)) = (r.started, r.finished) else {
            continue;
        };
        let estimate = spec
            .estimated_runtime
            .as_deref()
            .and_then(|e| spillway_core::Duration::parse(e).ok())
            .map(|d| format!("{}", d.as_secs_f64()))
            .unwrap_or_default();
        let req = spec.requirements.clone().unwrap_or_default();
        let cells = [
            format!("{}/{}", r.namespace, r.name),
            secs(r.queued - t0),
            secs((finished - started).max(1000)),
            r.gpus_per_replica.to_string(),
            r.replicas.to_string(),
            estimate,
            spec.gpu_models.join("|"),
            r.queue.clone(),
            spec.priority.to_string(),
            spec.restartable.to_string(),
            spec.datasets.join("|"),
            req.min_driver_version.unwrap_or_default(),
            req.min_cuda_version.unwrap_or_default(),
            req.gpu_products.join("|"),
            req.min_gpu_memory_gib
                .map(|g| g.to_string())
                .unwrap_or_default(),
            (spec.workload_ref.as_ref())
                .map_or("GpuJob", |w| w.kind.as_str())
                .to_string(),
            // The run's mean where its GPU-hours were measured, else its last figure.
            (r.job.status.as_ref())
                .and_then(|s| s.utilization.as_ref())
                .map(|u| match u.sampled_gpu_hours > 0.0 {
                    true => ((u.busy_gpu_hours / u.sampled_gpu_hours * 1000.0).round() / 10.0)
                        .to_string(),
                    false => u.gpu_percent.to_string(),
                })
                .unwrap_or_default(),
            r.namespace.clone(),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// Milliseconds as seconds, without a trailing `.0`.
fn secs(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s.fract() == 0.0 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
    }
}

pub async fn run(args: ExportTraceArgs) -> Result<(), Failure> {
    let d = spillway_core::Duration::parse(&args.since)
        .map_err(|e| Failure::Usage(format!("--since {:?}: {e}", args.since)))?;
    let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let client = client(&args.cluster).await?;
    let jobs = args.scope.jobs(client).await?;
    let what = format!("kubectl spillway export-trace --since {}", args.since);
    let text = trace(
        &runs(&jobs),
        now - (d.as_secs_f64() * 1000.0) as i64,
        args.queue.as_deref(),
        &what,
    );
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use spillway_api::GpuJob;

    fn job(name: &str, spec: serde_json::Value, status: serde_json::Value) -> GpuJob {
        let mut s = json!({"queue": "research", "gpusPerReplica": 2,
                           "template": {"spec": {"containers": []}}});
        if let (Some(base), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name, "namespace": "team"},
            "spec": s, "status": status,
        }))
        .expect("a job")
    }

    #[test]
    fn finished_jobs_become_a_trace_the_simulator_reads() {
        let jobs = [
            job(
                "train",
                json!({"replicas": 2, "estimatedRuntime": "1h", "restartable": true,
                       "requirements": {"minCudaVersion": "12.4", "gpuProducts": ["*H100*"]},
                       "workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "train"}}),
                json!({"phase": "Succeeded", "queuedAt": "2026-12-01T10:00:00Z",
                       "startedAt": "2026-12-01T10:05:00Z", "finishedAt": "2026-12-01T11:05:30Z",
                       "utilization": {"gpuPercent": 62.5, "source": "DCGM_FI_DEV_GPU_UTIL",
                                       "sampledAt": "2026-12-01T11:05:00Z",
                                       "sampledGpuHours": 3.9, "busyGpuHours": 2.2}}),
            ),
            job(
                "eval",
                json!({"gpuModels": ["A100", "H100"]}),
                json!({"phase": "Failed", "queuedAt": "2026-12-01T09:00:00Z",
                       "startedAt": "2026-12-01T09:00:10Z", "finishedAt": "2026-12-01T09:10:10Z"}),
            ),
            // Running, or finished before the window, or never started: not in the trace.
            job(
                "running",
                json!({}),
                json!({"phase": "Running", "queuedAt": "2026-12-01T09:00:00Z",
                                            "startedAt": "2026-12-01T09:00:00Z"}),
            ),
            job(
                "old",
                json!({}),
                json!({"phase": "Succeeded", "queuedAt": "2026-10-01T09:00:00Z",
                                        "startedAt": "2026-10-01T09:00:00Z", "finishedAt": "2026-10-01T10:00:00Z"}),
            ),
        ];
        let from = "2026-11-01T00:00:00Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_millisecond();
        let text = trace(&runs(&jobs), from, None, "test");
        assert_eq!(
            text,
            format!(
                "# test: 2 finished job(s); arrival_s counts from 2026-12-01T09:00:00Z\n{HEADER}\n\
                 team/eval,0,600,2,1,,A100|H100,research,0,false,,,,,,GpuJob,,team\n\
                 team/train,3600,3630,2,2,3600,,research,0,true,,,12.4,*H100*,,Job,56.4,team\n"
            )
        );
        let parsed = spillway_sim::trace::parse(&text, spillway_sim::trace::TraceFormat::Spillway)
            .expect("the simulator reads it");
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].replicas, 2);
        assert_eq!(parsed[1].kind.as_deref(), Some("Job"));
        assert_eq!(parsed[1].namespace.as_deref(), Some("team"));
        assert_eq!(
            (parsed[0].gpu_percent, parsed[1].gpu_percent),
            (None, Some(56.4))
        );
        assert_eq!(
            parsed[1].requirements.min_cuda.map(|v| v.to_string()),
            Some("12.4".into())
        );
        assert!(trace(&runs(&jobs), from, Some("other"), "test").contains("0 finished job(s)"));
    }
}
