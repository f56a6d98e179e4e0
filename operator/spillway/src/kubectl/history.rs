//! The cluster's jobs as runs: what `report` and `export-trace` read of each GpuJob's spec and
//! status (when it was queued, first started, started its last attempt, finished; where it
//! ran; what it cost).

use kube::ResourceExt;
use spillway_api::GpuJob;
use spillway_api::job::JobPhase;

/// One GpuJob, as its status tells it. Times are milliseconds since the epoch.
#[derive(Clone, Debug)]
pub struct Run {
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub replicas: u32,
    pub gpus_per_replica: u32,
    pub queued: i64,
    /// The first start (the time to start counts to it).
    pub first_started: Option<i64>,
    /// The last attempt's start.
    pub started: Option<i64>,
    pub finished: Option<i64>,
    /// `private`, `cloud` or `remote`, where it (last) ran.
    pub environment: Option<&'static str>,
    pub phase: Option<JobPhase>,
    pub cost_usd: f64,
    pub restarts: u32,
    /// The last attempt's GPU-hours Prometheus reported on, their busy part and those held
    /// below the idle threshold (`status.utilization`; zero where it was not read).
    pub sampled_gpu_hours: f64,
    pub busy_gpu_hours: f64,
    pub idle_gpu_hours: f64,
    pub job: GpuJob,
}

impl Run {
    pub fn gpus(&self) -> u32 {
        self.replicas * self.gpus_per_replica
    }

    /// Seconds from entering the queue to the first start.
    pub fn time_to_start_s(&self) -> Option<f64> {
        Some((self.first_started? - self.queued) as f64 / 1000.0)
    }

    /// GPU-hours of its last attempt that fall in `[from, to)`.
    pub fn gpu_hours_within(&self, from: i64, to: i64) -> f64 {
        let Some(start) = self.started else {
            return 0.0;
        };
        let end = self.finished.unwrap_or(to).min(to);
        let secs = (end - start.max(from)).max(0) as f64 / 1000.0;
        f64::from(self.gpus()) * secs / 3600.0
    }

    /// The share of the last attempt that falls in `[from, to)` (its run up to `to` when it
    /// runs on), 0 before it started.
    pub fn share_of_attempt_within(&self, from: i64, to: i64) -> f64 {
        self.started
            .map_or(0.0, |s| share(s, self.finished.unwrap_or(to), from, to))
    }

    /// The part of its accrued cost that falls in `[from, to)`: the cost spread evenly from
    /// its first start (its last, for a job that never said) to its finish, or `to` while it
    /// runs.
    pub fn cost_within(&self, from: i64, to: i64) -> f64 {
        let Some(first) = self.first_started.or(self.started) else {
            return 0.0;
        };
        self.cost_usd * share(first, self.finished.unwrap_or(to), from, to)
    }

    /// Its cost per GPU-hour over its runs (0 before it ran).
    pub fn cost_per_gpu_hour(&self, to: i64) -> f64 {
        let Some(first) = self.first_started.or(self.started) else {
            return 0.0;
        };
        let hours = (self.finished.unwrap_or(to) - first).max(0) as f64 / 3_600_000.0
            * f64::from(self.gpus());
        if hours > 0.0 {
            self.cost_usd / hours
        } else {
            0.0
        }
    }

    /// Running at `at`, or finished at or after `from`.
    pub fn active_since(&self, from: i64) -> bool {
        match self.finished {
            Some(f) => f >= from,
            None => self.started.is_some() || self.queued >= from,
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Some(JobPhase::Succeeded | JobPhase::Failed))
    }
}

/// The share of `[start, end)` within `[from, to)`; an instant counts whole when inside.
fn share(start: i64, end: i64, from: i64, to: i64) -> f64 {
    if end <= start {
        return if (from..to).contains(&start) {
            1.0
        } else {
            0.0
        };
    }
    let overlap = (end.min(to) - start.max(from)).max(0) as f64;
    overlap / (end - start) as f64
}

fn millis(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.as_ref().map(|t| t.0.as_millisecond())
}

/// The runs of these jobs (a job with no `queuedAt` yet, never seen by the operator, is left
/// out).
pub fn runs(jobs: &[GpuJob]) -> Vec<Run> {
    jobs.iter()
        .filter_map(|j| {
            let st = j.status.as_ref()?;
            let queued = millis(&st.queued_at)?;
            let started = millis(&st.started_at);
            Some(Run {
                namespace: j.namespace().unwrap_or_default(),
                name: j.name_any(),
                queue: j.spec.queue.clone(),
                replicas: j.spec.replicas.max(1) as u32,
                gpus_per_replica: j.spec.gpus_per_replica.max(1) as u32,
                queued,
                // Statuses written before firstStartedAt existed: the last start is the best
                // there is for a job that never restarted.
                first_started: millis(&st.first_started_at)
                    .or(started.filter(|_| st.restarts.unwrap_or(0) == 0)),
                started,
                finished: millis(&st.finished_at),
                environment: st.environment.map(|e| e.as_str()),
                phase: st.phase,
                cost_usd: st.cost.as_ref().map_or(0.0, |c| c.accrued_usd),
                restarts: st.restarts.unwrap_or(0).max(0) as u32,
                sampled_gpu_hours: st.utilization.as_ref().map_or(0.0, |u| u.sampled_gpu_hours),
                busy_gpu_hours: st.utilization.as_ref().map_or(0.0, |u| u.busy_gpu_hours),
                idle_gpu_hours: st.utilization.as_ref().map_or(0.0, |u| u.idle_gpu_hours),
                job: j.clone(),
            })
        })
        .collect()
}

/// Nearest-rank percentile of unsorted values (0 when there are none).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    spillway_sim::report::percentile(&v, p)
}
