//! `ComputePool`: a set of GPU nodes, either the organisation's own or cloud instances that
//! Spillway launches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core::CapacityType;

use crate::common::duration_schema;

/// A pool of GPU nodes: exactly one of `private` (existing nodes, selected by label), `aws`
/// (EC2 instances Spillway launches and terminates) or `cluster` (the nodes of another
/// Kubernetes cluster, reached through its API server).
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "spillway.io",
    version = "v1alpha1",
    kind = "ComputePool",
    doc = "A pool of GPU nodes: private nodes selected by label, EC2 instances that Spillway launches, or the nodes of another Kubernetes cluster.",
    plural = "computepools",
    singular = "computepool",
    shortname = "cpool",
    category = "spillway",
    status = "ComputePoolStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".status.nodes.total"}"#,
    printcolumn = r#"{"name":"Ready Nodes","type":"integer","jsonPath":".status.nodes.ready"}"#,
    printcolumn = r#"{"name":"GPUs","type":"integer","jsonPath":".status.gpus.capacity"}"#,
    printcolumn = r#"{"name":"Allocated","type":"integer","jsonPath":".status.gpus.allocated"}"#,
    printcolumn = r#"{"name":"Spend/h","type":"number","jsonPath":".status.hourlyUSD"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend(
    "oneOf" = [{"required": ["private"]}, {"required": ["aws"]}, {"required": ["cluster"]}],
    "x-kubernetes-validations" = [
        {"rule": "(has(self.private) ? 1 : 0) + (has(self.aws) ? 1 : 0) + (has(self.cluster) ? 1 : 0) == 1",
         "message": "set exactly one of private, aws and cluster"},
        {"rule": "has(self.aws) == has(oldSelf.aws) && has(self.cluster) == has(oldSelf.cluster)",
         "message": "a pool cannot change between private, aws and cluster: create another pool and delete this one"},
    ],
))]
pub struct ComputePoolSpec {
    /// Existing private GPU nodes. Exactly one of `private`, `aws` and `cluster` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<PrivatePool>,

    /// EC2 instances that Spillway launches on demand. Exactly one of `private`, `aws` and
    /// `cluster` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsPool>,

    /// The GPU nodes of another Kubernetes cluster (another datacenter, a partner's cluster,
    /// an EKS cluster), which jobs spill to after the home cluster's private nodes and before
    /// the cloud, in the order of the queue's `burst.pools`. Exactly one of `private`, `aws`
    /// and `cluster` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterPool>,

    /// Caps on the pool's size and spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PoolLimits>,

    /// A cloud node with no job for this long is drained and terminated, such as `10m`.
    #[serde(default = "default_idle_timeout")]
    #[schemars(schema_with = "duration_schema")]
    pub idle_timeout: String,

    /// Labels Spillway puts on the pool's nodes (cloud) or expects on them (private).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,

    /// Taints of the pool's nodes; Spillway gives the job's pods matching tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["key", "effect"],
        "x-kubernetes-validations" = [
            {"rule": "self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",
             "message": "a taint's effect is NoSchedule, PreferNoSchedule or NoExecute"},
        ],
    ))]
    pub node_taints: Vec<Taint>,

    /// Telemetry of the pods that run in this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<PoolTelemetry>,
}

fn default_idle_timeout() -> String {
    "10m".to_string()
}

/// A pool of existing private GPU nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.nodeSelector) && size(self.nodeSelector) > 0",
     "message": "nodeSelector must name at least one label, or the pool would claim every node of the cluster"},
]))]
pub struct PrivatePool {
    /// Labels that select the pool's nodes. A node's GPUs are its allocatable
    /// `nvidia.com/gpu`; its model is the label `spillway.io/gpu-model`, else
    /// `nvidia.com/gpu.product`.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Amortised cost of one GPU for one hour, in USD, for cost reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpu_cost_per_hour: Option<f64>,
    /// The levels of the pool's interconnect (racks, NVLink domains), by node label, for
    /// jobs with `spec.topology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topology::PoolTopology>,
}

/// The nodes of another Kubernetes cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPool {
    /// The Secret holding a kubeconfig for the other cluster's API server, with credentials
    /// bound to the worker Role (docs/multi-cluster.md; the chart's `worker` mode installs it).
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
    /// The namespace of the other cluster where the jobs' pods are created.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
    /// Labels that select the other cluster's GPU nodes that belong to this pool; empty means
    /// every node there with `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// What one GPU-hour there costs the organisation, in USD (0 is allowed): the price the
    /// decision, the queue's budget and the cost reports count.
    #[schemars(range(min = 0))]
    pub gpu_cost_per_hour: f64,
    /// Where the cluster is (a region such as `us-west-2`, or a site name): what data rules
    /// and dataset locations are compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub location: Option<String>,
    /// How long the other cluster's API server may stay unreachable before the jobs running
    /// there are declared lost and requeued (as with a lost node), such as `10m`, or `never`
    /// (they wait for it, however long: no job runs twice across a partition). Until then
    /// they are kept as last seen, and no new job is sent there.
    #[serde(default = "default_lost_after")]
    #[schemars(schema_with = "lost_after_schema")]
    pub lost_after: String,
}

fn default_lost_after() -> String {
    "10m".to_string()
}

fn lost_after_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let _ = generator;
    schemars::json_schema!({
        "type": "string",
        "pattern": format!("^never$|{}", spillway_core::duration::DURATION_PATTERN),
    })
}

impl ClusterPool {
    /// `lostAfter` as a duration; `None` for `never`. An unreadable value (validation refuses
    /// it) is the default, 10 minutes.
    pub fn lost_after(&self) -> Option<spillway_core::Duration> {
        if self.lost_after == "never" {
            return None;
        }
        Some(
            spillway_core::Duration::parse(&self.lost_after)
                .unwrap_or(spillway_core::Duration::from_secs(600)),
        )
    }
}

/// A key of a Secret holding a kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The Secret's namespace (in the home cluster).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The key holding the kubeconfig (default `kubeconfig`).
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "kubeconfig".to_string()
}

/// A pool of EC2 instances.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("anyOf" = [{"required": ["amiId"]}, {"required": ["launchTemplate"]}]))]
pub struct AwsPool {
    /// AWS region, for example `us-east-1`.
    #[schemars(length(min = 1))]
    pub region: String,
    /// Zones to launch in. Empty means every zone of the subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub availability_zones: Vec<String>,
    /// Subnets to launch into; instances spread over their zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_ids: Vec<String>,
    /// Security groups of the instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
    /// The AMI to boot (`ami-...`). Set this or `launchTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^ami-\S+$"))]
    pub ami_id: Option<String>,
    /// A launch template to start from. Set this or `amiId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateRef>,
    /// Name or ARN of the IAM instance profile of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_instance_profile: Option<String>,
    /// Instance types Spillway may launch, for example `p4d.24xlarge`, `g5.12xlarge`.
    #[schemars(length(min = 1), inner(regex(pattern = r"^[^.\s]+\.\S+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub instance_types: Vec<String>,
    /// Allowed capacity types, a subset of `on-demand` and `spot`. Empty means both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub capacity_types: Vec<CapacityType>,
    /// Extra tags on every instance (Spillway adds its own `spillway.io/*` tags).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// What the image provides (driver and CUDA versions), held against jobs' `requirements`
    /// when an offering is chosen. Without it, a job with a driver or CUDA requirement is not
    /// sent to this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::environment::ImageEnvironment>,
    /// User data template that joins an instance to the cluster. `{{apiServer}}`,
    /// `{{caData}}` (the cluster CA, base64 PEM), `{{token}}` (a bootstrap token made for the
    /// launch), `{{nodeLabels}}`, `{{nodeTaints}}` (kubelet flag syntax), `{{pool}}` and
    /// `{{cluster}}` are replaced. Without it, pools with `amiId` get Spillway's kubelet
    /// bootstrap script and pools with `launchTemplate` keep the template's own user data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// URL of an SQS queue receiving EventBridge's EC2 events for this pool's region (spot
    /// interruption warnings, rebalance recommendations, instance state changes, AWS Health
    /// scheduled changes). The operator long-polls it and acts on notices for its own
    /// instances ahead of the loss: see docs/aws.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub interruption_queue: Option<String>,
    /// The interruption queue is Spillway's alone: messages that concern no instance of this
    /// cluster (or that are not EC2 events) are deleted. Otherwise they are left for whoever
    /// else reads the queue. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owns_interruption_queue: bool,
    /// What a rebalance recommendation or an AWS Health scheduled change of an instance does:
    /// `Ignore`, `Cordon` (the default: no new work on the node; its jobs run on), or
    /// `Replace` (cordoned too; its restartable jobs move at their next checkpoint
    /// announcement, or at `rebalanceDeadline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<Rebalance>,
    /// With `rebalance: Replace`, how long a restartable job may run on a node recommended for
    /// rebalancing before it moves without a new checkpoint, such as `10m` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance_deadline: Option<String>,
    /// Launch each gang that needs more than one instance (and every gang with
    /// `spec.topology`) into an EC2 cluster placement group made for it, all in one
    /// availability zone; the group is deleted once its instances are gone. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_placement: Option<bool>,
    /// Give instances an Elastic Fabric Adapter interface (instead of a plain one) where the
    /// instance type supports it, and send gangs with `spec.topology` only to such types.
    /// Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub efa: bool,
}

impl AwsPool {
    /// Whether gangs go into cluster placement groups (`clusterPlacement`, default true).
    pub fn cluster_placement(&self) -> bool {
        self.cluster_placement.unwrap_or(true)
    }
}

/// What a rebalance recommendation does to an instance's node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Rebalance {
    /// Nothing (the notice is counted and consumed).
    Ignore,
    /// The node is cordoned and tainted `spillway.io/interrupted`: it takes no new work, its
    /// jobs run on and it is scaled down once idle.
    #[default]
    Cordon,
    /// Cordoned too, and its restartable jobs move at their next checkpoint announcement (the
    /// `spillway.io/checkpoint-time` annotation) or at the pool's `rebalanceDeadline`.
    Replace,
}

impl Rebalance {
    pub fn as_str(self) -> &'static str {
        match self {
            Rebalance::Ignore => "Ignore",
            Rebalance::Cordon => "Cordon",
            Rebalance::Replace => "Replace",
        }
    }
}

/// A reference to an EC2 launch template, by id or by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.id) != has(self.name)", "message": "set exactly one of id and name"},
]))]
pub struct LaunchTemplateRef {
    /// Launch template id (`lt-...`). Set this or `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Launch template name. Set this or `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Version: a number, `$Latest` or `$Default` (default `$Default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Caps on a pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLimits {
    /// Maximum number of nodes (for cloud pools: instances running or launching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_nodes: Option<i32>,
    /// Maximum number of GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_gpus: Option<i32>,
    /// Maximum spend rate of the pool's instances, in USD per hour.
    #[serde(
        rename = "maxHourlyUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub max_hourly_usd: Option<f64>,
}

/// Telemetry settings of a pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolTelemetry {
    /// OTLP endpoint the pods of this pool export to (`OTEL_EXPORTER_OTLP_ENDPOINT`), for
    /// example `http://otel-collector:4317`: the collector this pool's nodes can reach. It wins
    /// over the queue's; the pod template's own value wins over both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub otlp_endpoint: Option<String>,
}

/// An offering of a cloud pool left out of decisions after one of its instances joined short of
/// the environment the pool promises (kept in status so that a new leader keeps it out too).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    /// The instance type.
    pub instance_type: String,
    /// Left out until then (or until the pool's spec changes).
    pub until: MicroTime,
    /// The pool's `metadata.generation` then.
    pub generation: i64,
    /// What the instance fell short of.
    pub what: String,
}

/// Node counts of a pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PoolNodes {
    /// All nodes of the pool.
    #[serde(default)]
    pub total: i64,
    /// Nodes that are Ready.
    #[serde(default)]
    pub ready: i64,
    /// Ready nodes with no job.
    #[serde(default)]
    pub idle: i64,
}

/// GPU counts of a pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PoolGpus {
    /// GPUs on the pool's nodes.
    #[serde(default)]
    pub capacity: i64,
    /// GPUs taken by jobs.
    #[serde(default)]
    pub allocated: i64,
}

/// Free GPUs of one domain of a private pool's topology level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolDomain {
    /// `<level>=<value>`, for example `spillway.io/rack=r12`.
    pub domain: String,
    /// Its nodes.
    #[serde(default)]
    pub nodes: i64,
    /// GPUs on its nodes.
    #[serde(default)]
    pub capacity: i64,
    /// GPUs not taken by jobs on its ready nodes.
    #[serde(default)]
    pub free: i64,
}

/// The observed state of a ComputePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputePoolStatus {
    /// Node counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<PoolNodes>,
    /// GPU counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<PoolGpus>,
    /// Cloud instances running or launching (cloud pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<i64>,
    /// Current spend rate of the pool, in USD per hour.
    #[serde(rename = "hourlyUSD", default, skip_serializing_if = "Option::is_none")]
    pub hourly_usd: Option<f64>,
    /// Cloud spend of the pool's instances this calendar month (UTC), in USD (cloud pools).
    #[serde(
        rename = "thisMonthUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub this_month_usd: Option<f64>,
    /// `thisMonthUSD` holds every instance's spend up to this time; after a restart or a
    /// failover the operator bills from here, so no time is billed twice or lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accrued_through: Option<MicroTime>,
    /// What the pool's GPUs come with (driver, CUDA, GPU products and memory, kernels and
    /// container runtimes), as `kubectl spillway parity` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::environment::PoolEnvironment>,
    /// Offerings left out of decisions after an instance joined short of the pool's promise
    /// (cloud pools), each until when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// For a private pool with `topology`: each domain of its levels (but levels whose
    /// every domain is one node) with its free GPUs, as `kubectl spillway pools` shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<PoolDomain>,
    /// `Ready` (`False` with reason `Invalid` and the field when the pool cannot be used) and,
    /// for cloud pools, `LaunchHealthy` (recent capacity errors, throttling, offerings
    /// cooling down, instances that joined short of the promised environment); for cloud and
    /// cluster pools, `EnvironmentDrift` (`True` when their driver branch or CUDA version
    /// differs from the private nodes', `Unknown` when a side states neither).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
