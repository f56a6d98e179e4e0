//! `GpuQueue`: where jobs wait, with a private quota, a fair share and a burst policy.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, MicroTime};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core::CapacityType;

use crate::common::{Budget, duration_schema, optional_duration_schema};

/// A queue of GpuJobs from some namespaces, with a private GPU quota, a fair-share weight, a
/// burst policy and a dollar budget.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "spillway.io",
    version = "v1alpha1",
    kind = "GpuQueue",
    doc = "A queue of GpuJobs with a private GPU quota, a fair-share weight, a burst policy and a dollar budget.",
    plural = "gpuqueues",
    singular = "gpuqueue",
    shortname = "gq",
    category = "spillway",
    status = "GpuQueueStatus",
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.running"}"#,
    printcolumn = r#"{"name":"Private GPUs","type":"integer","jsonPath":".status.gpusInUse.private"}"#,
    printcolumn = r#"{"name":"Cloud GPUs","type":"integer","jsonPath":".status.gpusInUse.cloud"}"#,
    printcolumn = r#"{"name":"Spend/h","type":"number","jsonPath":".status.spend.hourlyUSD"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.namespaces) || size(self.namespaces) == 0 || !has(self.namespaceSelector)",
     "message": "set either namespaces or namespaceSelector, not both"},
]))]
pub struct GpuQueueSpec {
    /// Namespaces whose GpuJobs may use this queue. Leave empty and set `namespaceSelector`
    /// to select namespaces by label; leave both empty to admit every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 253), regex(pattern = crate::common::DNS_SUBDOMAIN_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,

    /// Selects the namespaces whose GpuJobs may use this queue, by label. Mutually exclusive
    /// with `namespaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// The private GPUs this queue is guaranteed. Without it the queue has no guarantee and
    /// uses private GPUs by fair share only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_quota: Option<PrivateQuota>,

    /// May use idle private GPUs beyond its quota (they are given back as other queues need
    /// their quota). Defaults to true.
    #[serde(default = "default_true")]
    pub borrowing: bool,

    /// How this queue's jobs are preempted when another queue reclaims GPUs they borrowed
    /// beyond this queue's quota. Restartable jobs always may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<QueuePreemption>,

    /// Fair-share weight relative to other queues (at least 1). A queue of weight 3 gets three
    /// times the private GPUs of a queue of weight 1 when both have work waiting.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1))]
    pub weight: i32,

    /// The highest `priority` a job of this queue may ask for. Priority orders a queue's
    /// jobs and decides which borrowed GPUs a reclaim takes back, so it is the platform
    /// team's to grant: by default (0) no job may rank above another by asking. A GpuJob
    /// whose `priority` is above it does not run: it is refused with reason `InvalidSpec`
    /// and a message naming this ceiling.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub max_priority: i32,

    /// When and where this queue's jobs may burst to the cloud.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<QueueBurst>,

    /// Dollar limits on this queue's cloud spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,

    /// The workload identity of this queue's pods (every pod gets a token from Spillway's
    /// issuer; this narrows its audiences and names an AWS role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<QueueIdentity>,

    /// Telemetry of this queue's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<QueueTelemetry>,

    /// What happens to this queue's jobs whose GPUs stay idle (with `--prometheus-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<QueueIdle>,
}

/// A queue's idle policy: a running job whose GPU activity stays below `threshold` for
/// `after` gets `action`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueIdle {
    /// GPU activity (percent, 0-100) below which a job counts as idle. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub threshold: Option<f64>,
    /// How long a job stays idle before the action, such as `30m` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub after: Option<String>,
    /// `Warn` (the default: condition `Idle` and a Warning Event), `Suspend` (restartable jobs
    /// are requeued, freeing their GPUs; others are warned) or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<IdleAction>,
    /// A job annotated `spillway.io/idle-exempt: "true"` is spared the action. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_exempt: Option<bool>,
}

/// What an idle job gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IdleAction {
    /// Condition `Idle` and a Warning Event naming its GPUs, cost per hour and how long.
    #[default]
    Warn,
    /// Restartable jobs are suspended and requeued (their GPUs freed); others are warned.
    Suspend,
    /// Nothing (its utilization is still measured and shown).
    None,
}

/// The idle threshold when a queue names none (percent).
pub const DEFAULT_IDLE_THRESHOLD: f64 = 5.0;
/// How long a job stays idle before the action when a queue names no `after`.
pub const DEFAULT_IDLE_AFTER: &str = "30m";

/// How a queue's jobs are preempted when the GPUs they borrowed are reclaimed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePreemption {
    /// Jobs that are not restartable may be preempted too (they lose all their work and start
    /// over). Off by default: only restartable jobs give borrowed GPUs back.
    #[serde(default)]
    pub allow_non_restartable: bool,
    /// The longest a preempted pod may take to stop, such as `2m`: its template's
    /// `terminationGracePeriodSeconds`, capped by this. Without it the template's value (or
    /// Kubernetes' default of 30 s) holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub max_grace_period: Option<String>,
    /// How long a job of this queue runs, such as `10m`, before quota reclaim or repatriation
    /// may choose it as a victim (its start-up is not wasted). Deadlines and budgets still
    /// stop it. Without it (or `0s`) any running job may be chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub min_runtime: Option<String>,
}

/// Telemetry settings of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueTelemetry {
    /// OTLP endpoint of this queue's pods (`OTEL_EXPORTER_OTLP_ENDPOINT`) when their pool sets
    /// none, for example `http://otel-collector.research:4317`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub otlp_endpoint: Option<String>,
}

/// Workload identity settings of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueIdentity {
    /// The audiences of this queue's tokens: a subset of the operator's `--identity-audience`
    /// values. Empty means all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1)), extend("x-kubernetes-list-type" = "set"))]
    pub audiences: Vec<String>,
    /// An IAM role the pods assume through STS with their token, on private and cloud nodes
    /// alike: they get `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE`, which every AWS SDK
    /// reads. Its trust policy must trust Spillway's issuer (see docs/identity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^arn:aws[^:]*:iam:[^:]*:[^:]*:role/.+$"))]
    pub aws_role_arn: Option<String>,
}

fn default_true() -> bool {
    true
}

fn default_weight() -> i32 {
    1
}

/// A nominal quota of private GPUs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrivateQuota {
    /// Number of private GPUs guaranteed to this queue.
    #[schemars(range(min = 0))]
    pub gpus: i32,
}

/// How long a wait is acceptable before a job bursts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WaitMode {
    /// Every job may wait `maxWait`.
    #[serde(rename = "fixed")]
    Fixed,
    /// A job's wait budget grows with its size, GPUs x estimated runtime x
    /// `computeWaitFactor` (the Starburst rule, USENIX ATC'24), and jobs are planned on the
    /// private GPUs in order of arrival less that budget; jobs without an estimate wait
    /// `maxWait`.
    #[serde(rename = "compute-wait")]
    ComputeWait,
    /// Jobs whose cheapest cloud capacity is the cheapest per GPU-hour wait `maxWait`; a job
    /// dearer to burst waits proportionally longer (twice the price, twice the wait).
    #[serde(rename = "cost-aware")]
    CostAware,
    /// The default. A job waits as long as the cloud cost its waiting saves (GPUs x estimated
    /// runtime x the GPU-hour price of its cheapest fitting offering, spot for restartable
    /// jobs) is worth more than its wait at `waitCostPerHour`; planned as compute-wait; jobs
    /// without an estimate wait `maxWait`.
    #[serde(rename = "priced")]
    #[default]
    Priced,
}

/// Bursting settings of a queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueBurst {
    /// Whether jobs of this queue may run on cloud instances at all.
    #[serde(default)]
    pub enabled: bool,
    /// How long a job waits for private GPUs before it may burst, such as `15m`.
    #[serde(default = "default_max_wait")]
    #[schemars(schema_with = "duration_schema")]
    pub max_wait: String,
    /// `priced` (the default: a job waits while the cloud cost its waiting saves is worth more
    /// than `waitCostPerHour` per hour of wait; jobs without a runtime estimate wait
    /// `maxWait`), `compute-wait` (bigger, longer jobs wait longer), `fixed` (every job waits
    /// `maxWait`) or `cost-aware` (jobs dearer to burst wait longer).
    #[serde(default)]
    pub wait_mode: WaitMode,
    /// In `compute-wait` mode, seconds of wait per GPU-second of estimated work (default 0.2:
    /// a one-GPU, one-hour job may wait 12 minutes, an 8-GPU, 4-hour job 6.4 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub compute_wait_factor: Option<f64>,
    /// In `priced` mode, USD an hour of a job's waiting is worth (default 5: a one-GPU hour at
    /// $0.80 per GPU-hour may wait 9.6 minutes, an 8-GPU, 4-hour job at $2.74 17.5 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub wait_cost_per_hour: Option<f64>,
    /// The cloud and cluster ComputePools this queue may burst to; cluster pools are tried in
    /// this list's order (after private nodes, before the cloud). Empty means every cloud pool
    /// and every cluster pool, cheapest `gpuCostPerHour` first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 253), regex(pattern = crate::common::DNS_SUBDOMAIN_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub pools: Vec<String>,
    /// Allowed capacity types, a subset of `spot` and `on-demand`. Empty means both, with
    /// spot only for restartable jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub capacity_types: Vec<CapacityType>,
}

impl Default for QueueBurst {
    fn default() -> Self {
        QueueBurst {
            enabled: false,
            max_wait: default_max_wait(),
            wait_mode: WaitMode::Priced,
            compute_wait_factor: None,
            wait_cost_per_hour: None,
            pools: Vec::new(),
            capacity_types: Vec::new(),
        }
    }
}

fn default_max_wait() -> String {
    "15m".to_string()
}

/// GPUs in use, by environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpusByEnvironment {
    /// GPUs on private nodes.
    #[serde(default)]
    pub private: i64,
    /// GPUs on cloud instances.
    #[serde(default)]
    pub cloud: i64,
}

/// Spend of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpend {
    /// USD spent in the cloud this calendar month (UTC).
    #[serde(rename = "thisMonthUSD", default)]
    pub this_month_usd: f64,
    /// Current cloud spend rate, in USD per hour.
    #[serde(rename = "hourlyUSD", default)]
    pub hourly_usd: f64,
    /// `thisMonthUSD` holds every instance's spend up to this time. After a restart or a
    /// failover the operator bills each instance from here (or from its launch, if later), so
    /// the time no operator was running is billed exactly once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accrued_through: Option<MicroTime>,
}

/// The observed state of a GpuQueue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuQueueStatus {
    /// Jobs waiting.
    #[serde(default)]
    pub pending: i64,
    /// Jobs provisioning or running.
    #[serde(default)]
    pub running: i64,
    /// GPUs in use by this queue's jobs, per environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_in_use: Option<GpusByEnvironment>,
    /// Cloud spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<QueueSpend>,
    /// Time to start, GPU-hours, private GPU allocation, recovery time, cost per run and burst
    /// share over the last 24 hours and 30 days (docs/indicators.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indicators: Option<crate::indicators::QueueIndicators>,
    /// `Ready` (`False` with reason `Invalid` and the field when the queue cannot be used; its
    /// jobs then wait) and, with a budget, `BudgetExhausted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
