//! What a replay reports: each job's record, the time series and the totals.

use super::PoolSpend;

/// What happened to one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRecord {
    pub arrival_s: f64,
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    pub cloud: bool,
    /// Ran (first) in another cluster (a `cluster` pool).
    pub remote: bool,
    pub gpus: u32,
    pub runtime_s: f64,
    pub rejected: bool,
    pub interruptions: u32,
    /// Moved from the cloud to private GPUs this many times.
    pub moves: u32,
    /// How busy its GPUs were (percent), when the trace says.
    pub gpu_percent: Option<f64>,
    pub replicas: u32,
    /// Waited at least once for one domain with room for the whole gang (`TopologyUnfit`).
    pub waited_for_domain: bool,
    /// Racks its first start spanned (`--private-topology`; 0 without racks).
    pub racks: u32,
}

/// A point of the time series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub t_s: f64,
    pub queued: u32,
    pub private_busy_gpus: u32,
    pub cloud_busy_gpus: u32,
    pub cloud_spend_usd: f64,
    /// GPUs busy in other clusters, and their spend so far.
    pub remote_busy_gpus: u32,
    pub remote_spend_usd: f64,
}

/// The outcome of a replay.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub jobs: Vec<JobRecord>,
    pub samples: Vec<Sample>,
    pub cloud_cost_usd: f64,
    pub cloud_gpu_seconds: f64,
    /// Per cluster pool, in the snapshot's order: GPU-seconds its jobs used and their cost.
    pub remote: Vec<PoolSpend>,
    /// Per cloud pool that launched: GPU-seconds of its instances and their cost.
    pub cloud_by_pool: Vec<PoolSpend>,
    pub private_busy_gpu_seconds: f64,
    pub private_gpus: u32,
    pub instances_launched: u32,
    pub capacity_errors: u32,
    pub spot_interruptions: u32,
    /// Spot interruptions warned of ahead (with an interruption warning lead time).
    pub interruption_warnings: u32,
    /// GPU-seconds of work spot interruptions lost (the work since the last checkpoint of a
    /// restartable job reclaimed without warning; all of a job that is not restartable).
    pub interrupted_gpu_seconds_lost: f64,
    /// Per interruption of a job: seconds from the interruption (its warning, or the loss)
    /// until the job ran again.
    pub recovery_seconds: Vec<f64>,
    /// Jobs preempted to give a queue its quota back.
    pub preemptions: u32,
    /// GPU-seconds of work those preemptions lost.
    pub preempted_gpu_seconds_lost: f64,
    /// Cloud jobs moved home, and the GPU-seconds of work the moves lost.
    pub repatriations: u32,
    pub repatriated_gpu_seconds_lost: f64,
    pub decide_calls: u64,
    /// Instants at which only jobs arrived that the last plan shows cannot change it
    /// ([`spillway_core::Quiet`]): not decided again.
    pub cycles_skipped: u64,
    pub end_s: f64,
}
