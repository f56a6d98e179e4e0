//! `GpuJob`: a gang of pods that needs GPUs, submitted by a researcher.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core::{CapacityType, Environment, Placement};

use crate::common::optional_duration_schema;

/// A GPU workload: `replicas` pods of `gpusPerReplica` GPUs each, started together or not at
/// all, on private GPU nodes first and on cloud instances when its queue and the burst policies
/// allow it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "spillway.io",
    version = "v1alpha1",
    kind = "GpuJob",
    doc = "A GPU workload that runs on private GPU nodes first and bursts to the cloud when its queue and the burst policies allow it. See docs/ for the full story.",
    plural = "gpujobs",
    singular = "gpujob",
    shortname = "gj",
    category = "spillway",
    namespaced,
    status = "GpuJobStatus",
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.queue"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Where","type":"string","jsonPath":".status.environment"}"#,
    printcolumn = r#"{"name":"Pool","type":"string","jsonPath":".status.pool"}"#,
    printcolumn = r#"{"name":"Wait","type":"integer","description":"Seconds queued before start, or estimated wait while queued","jsonPath":".status.decision.estimatedWaitSeconds"}"#,
    printcolumn = r#"{"name":"Cost","type":"number","description":"Accrued cost in USD","jsonPath":".status.cost.accruedUSD"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.decision.reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.template) != has(self.workloadRef)",
     "message": "set exactly one of template (the pods Spillway makes) or workloadRef (the workload whose pods are run)"},
]))]
pub struct GpuJobSpec {
    /// Name of the GpuQueue this job is submitted to. The queue must admit the job's namespace.
    #[schemars(length(min = 1, max = 253), regex(pattern = crate::common::DNS_SUBDOMAIN_PATTERN))]
    pub queue: String,

    /// Higher runs first within a queue. Jobs of equal priority run in arrival order.
    #[serde(default)]
    pub priority: i32,

    /// Gang size: the number of pods (1 to 1024). All replicas start together or none do.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1024))]
    pub replicas: i32,

    /// GPUs each replica needs, all on the same node (1 to 16).
    #[schemars(range(min = 1, max = 16))]
    pub gpus_per_replica: i32,

    /// Acceptable GPU models, for example `H100`, `A100-80GB`, `L40S`, `A10G`, `V100`. Empty
    /// means any model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1)), extend("x-kubernetes-list-type" = "set"))]
    pub gpu_models: Vec<String>,

    /// Names of the Datasets the job reads. Their classification decides where it may run, and
    /// their locations whether a cloud placement pays data egress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 253), regex(pattern = crate::common::DNS_SUBDOMAIN_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub datasets: Vec<String>,

    /// The job checkpoints and may be stopped and resumed. Allows spot capacity, preemption when
    /// GPUs its queue borrowed beyond its quota are reclaimed, and moving back to private GPUs
    /// from the cloud when that is cheaper.
    #[serde(default)]
    pub restartable: bool,

    /// How often a restartable job saves a checkpoint, such as `30m`. When the job's pods do
    /// not announce checkpoints (the `spillway.io/checkpoint-time` annotation on the GpuJob),
    /// Spillway estimates the work a preemption or a move loses from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub checkpoint_interval: Option<String>,

    /// How long the job is expected to run, such as `90m` or `4h`. Used for backfilling, deadline
    /// checks and cost estimates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub estimated_runtime: Option<String>,

    /// The job is stopped and marked Failed after running this long, such as `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub max_runtime: Option<String>,

    /// The time (RFC 3339) by which the job should have finished. A job that cannot meet it on
    /// private capacity may burst early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,

    /// Upper bound on the hourly price of a cloud placement for the whole job, in USD per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_hourly_cost: Option<f64>,

    /// What the GPUs' driver, CUDA version, product and memory must be (GPU feature
    /// discovery's labels on nodes, the pool's `aws.environment` for cloud offerings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<crate::environment::JobRequirements>,

    /// Where the job may run: `Auto` (private first, cloud when allowed), `PrivateOnly` or
    /// `CloudOnly`.
    #[serde(default)]
    pub placement: Placement,

    /// Where the replicas of a gang go relative to each other on private nodes: inside one
    /// domain of a topology level (`required`), or in as few as hold it (`preferred`). See
    /// ComputePool `spec.private.topology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topology::JobTopology>,

    /// The pod each replica runs. Spillway adds the GPU limits, the node placement, the
    /// workload identity (a token mounted at `/var/run/secrets/spillway.io/identity/token`,
    /// `SPILLWAY_IDENTITY_TOKEN_FILE`, and with the queue's AWS role `AWS_ROLE_ARN` and
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`) and the telemetry settings (`OTEL_RESOURCE_ATTRIBUTES`,
    /// `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_ENDPOINT` of its pool or queue, and the job's
    /// `TRACEPARENT`); variables and volumes of its own win. The admission webhook refuses a
    /// field a PodTemplateSpec does not have (a misspelt one); the API server checks the rest
    /// when the pods are created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_template_schema")]
    pub template: Option<PodTemplateSpec>,

    /// The workload (a labelled `batch/v1` Job, ...) whose pods this job stands for, in place
    /// of `template`: Spillway made this GpuJob for it, owned by it, and runs it by lifting its
    /// suspension with the placement written into its pod template (docs/workloads.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
}

/// The workload a GpuJob stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// The workload's API version, for example `batch/v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The workload's kind, for example `Job`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The workload's name, in the GpuJob's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl GpuJobSpec {
    /// The pod spec of the template, when the job has one (a workload's job has none).
    pub fn pod_spec(&self) -> Option<&k8s_openapi::api::core::v1::PodSpec> {
        self.template.as_ref().and_then(|t| t.spec.as_ref())
    }
}

/// The pod template's schema: the API server keeps every field (so that the admission webhook
/// can name a misspelt one instead of the server dropping it unseen) and requires a pod spec
/// with at least one container. The whole template is checked by the API server against the
/// Pod schema when Spillway creates the pods.
fn pod_template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let _ = generator;
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["spec"],
        "properties": {
            "spec": {
                "description": "The pods' spec, a Kubernetes PodSpec.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["containers"],
                "properties": {
                    "containers": {
                        "description": "The pods' containers, at least one.",
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                },
            },
        },
    })
}

/// The annotation a restartable job's pods (or a sidecar) set on their GpuJob, an RFC 3339
/// time, each time the workload has saved a checkpoint.
pub const CHECKPOINT_ANNOTATION: &str = "spillway.io/checkpoint-time";

/// On a GpuJob (or a labelled workload): `"true"` exempts it from its queue's idle action
/// where the queue allows it (`spec.idle.allowExempt`).
pub const IDLE_EXEMPT_ANNOTATION: &str = "spillway.io/idle-exempt";

/// On a GpuJob that stands for a workload, written by the operator: whether a copy of the
/// workload may run in another cluster: [`PORTABLE`], else why not. A GpuJob without it (made
/// by an operator from before it) is placed in no other cluster until the operator writes it.
pub const PORTABILITY_ANNOTATION: &str = "spillway.io/portability";

/// The value of [`PORTABILITY_ANNOTATION`] for a workload a cluster pool may run a copy of.
pub const PORTABLE: &str = "portable";

/// The largest gang one GpuJob may ask for: 1,024 pods (16,384 GPUs at 16 per pod).
pub const MAX_REPLICAS: i32 = 1024;

fn default_replicas() -> i32 {
    1
}

/// The lifecycle of a GpuJob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum JobPhase {
    Queued,
    Provisioning,
    Running,
    Succeeded,
    Failed,
    Suspended,
}

/// What Spillway decided for a job, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionStatus {
    /// What was decided: `StartPrivate`, `StartCloud`, `Wait`, `Stop` or `Reject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why, as one PascalCase word, for example `FitsPrivate`, `MaxWaitExceeded` or
    /// `BudgetExhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The same, as one human sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The BurstPolicy rule that decided, as `policy/rule`, when a rule did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Estimated seconds until the job starts (0 once started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_wait_seconds: Option<i64>,
    /// Estimated hourly cost of the chosen placement for the whole job, in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_hourly_cost: Option<f64>,
    /// Estimated cost of moving the job's data to the chosen cloud region, in USD: the size of
    /// every dataset it reads with no copy in that region times its `egressUSDPerGiB`. Paid once
    /// and included in `cost.accruedUSD` (cloud placements).
    #[serde(
        rename = "estimatedEgressUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub estimated_egress_usd: Option<f64>,
    /// The cloud offering chosen, for cloud placements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offering: Option<OfferingStatus>,
    /// When this decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

/// One cloud offering: an instance type bought a certain way in one zone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OfferingStatus {
    /// EC2 instance type, for example `p4d.24xlarge`.
    pub instance_type: String,
    /// `on-demand` or `spot`.
    pub capacity_type: CapacityType,
    /// Availability zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Price of one instance, in USD per hour.
    pub hourly_price: f64,
}

/// How busy a running job's GPUs are, as dcgm-exporter reports them through Prometheus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobUtilization {
    /// Mean activity of the job's GPUs over the last 10 minutes, 0-100: the graphics engine's
    /// active ratio (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`) where the GPU reports it, else the
    /// device utilization (`DCGM_FI_DEV_GPU_UTIL`).
    #[schemars(range(min = 0, max = 100))]
    pub gpu_percent: f64,
    /// The DCGM field the figure comes from.
    pub source: String,
    /// When Prometheus answered with this figure (it is written again when it moves by a
    /// point or more, when the job turns idle or busy, and at least every 10 minutes).
    pub sampled_at: Time,
    /// Since when the figure has stayed below the queue's idle threshold (absent while it is
    /// above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Time>,
    /// GPU-hours of this run (attempt) that Prometheus reported on, up to `sampledAt`: the
    /// time between two figures counts when they are at most 15 minutes apart.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sampled_gpu_hours: f64,
    /// Of those, the busy part: each stretch's GPU-hours times the activity that held over it
    /// (`busyGpuHours / sampledGpuHours` is the run's utilization).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub busy_gpu_hours: f64,
    /// Of those, the GPU-hours held while below the queue's idle threshold.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_gpu_hours: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What a job has cost so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobCost {
    /// USD spent on this job so far (cloud instances, plus private GPUs at their pool's
    /// `gpuCostPerHour` when set).
    #[serde(rename = "accruedUSD", default)]
    pub accrued_usd: f64,
    /// Current spend rate for this job, in USD per hour.
    #[serde(rename = "hourlyUSD", default)]
    pub hourly_usd: f64,
}

/// The observed state of a GpuJob, written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuJobStatus {
    /// `Queued`, `Provisioning`, `Running`, `Succeeded`, `Failed` or `Suspended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Where the job runs: `private` or `cloud`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// The ComputePool the job runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The nodes the job's replicas run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// For a job with `spec.topology` placed on private nodes: the domains of its level its
    /// replicas run in, `<level>=<value>[,<value>...]` (one value when `required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_domain: Option<String>,
    /// For a job whose instances were launched into an EC2 cluster placement group: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
    /// The latest scheduling decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionStatus>,
    /// What the job has cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<JobCost>,
    /// When the job entered its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Time>,
    /// When all replicas started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the job first started (its pods created), kept across restarts: its time to start
    /// is this minus `queuedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_started_at: Option<Time>,
    /// When the job lost a replica (a lost node, a spot reclaim, a lost instance) and was
    /// requeued; cleared when it runs again (its recovery time is then that start minus this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_at: Option<Time>,
    /// When the job succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// How many times the job was stopped and requeued (spot loss, repatriation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i32>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How busy its GPUs are while it runs (with `--prometheus-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<JobUtilization>,
    /// Standard conditions: `Admitted`, `Running`, `Burst`, `Invalid`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
