//! The labels, annotations, names and owner references Spillway puts on (or reads from)
//! Kubernetes objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use spillway_api::GpuJob;

/// The controller owner reference to a GpuJob, on its pods and its token Secret.
pub fn owner_reference(job: &GpuJob) -> OwnerReference {
    OwnerReference {
        api_version: GpuJob::api_version(&()).into_owned(),
        kind: GpuJob::kind(&()).into_owned(),
        name: job.name_any(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// On a job's pods: the GpuJob's name.
pub const JOB_LABEL: &str = "spillway.io/job";
/// On a job's pods: the replica index, `0` to `replicas - 1`.
pub const REPLICA_LABEL: &str = "spillway.io/replica";
/// On a job's pods: the attempt (0, then 1 after the first requeue...).
pub const ATTEMPT_LABEL: &str = "spillway.io/attempt";
/// On a job's pods: the ComputePool chosen. On cloud nodes: the pool that launched them.
pub const POOL_LABEL: &str = "spillway.io/pool";
/// On a job's pods in another cluster: the GpuJob's uid (what they are owned by there, and
/// garbage-collected by when no GpuJob has it).
pub const JOB_UID_LABEL: &str = "spillway.io/job-uid";
/// On a job's pods in another cluster: the GpuJob's namespace at home.
pub const JOB_NAMESPACE_LABEL: &str = "spillway.io/job-namespace";
/// On everything the operator makes in another cluster (pods, token Secrets): the home
/// cluster's id ([`crate::remote::view::home_cluster_id`]). Only what carries this cluster's
/// id is collected as garbage: several home clusters may share a namespace there.
pub const HOME_CLUSTER_LABEL: &str = "spillway.io/home-cluster";
/// On a workload's copy in another cluster: the workload it copies,
/// `<home namespace>/<Kind>/<name>`.
pub const WORKLOAD_ANNOTATION: &str = "spillway.io/workload";
/// On the home view of a pod in another cluster (never written): the cluster pool it is in.
pub const CLUSTER_ANNOTATION: &str = "spillway.io/cluster";
/// On the home view of a pod in another cluster (never written): its namespace there.
pub const REMOTE_NAMESPACE_ANNOTATION: &str = "spillway.io/remote-namespace";
/// On cloud nodes: the EC2 instance id.
pub const INSTANCE_ID_LABEL: &str = "spillway.io/instance-id";
/// On a job's pods: the node the decision chose (the scheduler binds the pod there).
pub const NODE_ANNOTATION: &str = "spillway.io/node";
/// On nodes: the GPU model, in Spillway's names (`H100`, `A100-80GB`, ...).
pub const GPU_MODEL_LABEL: &str = "spillway.io/gpu-model";
/// On nodes, set by NVIDIA GPU feature discovery: the GPU product name.
pub const NVIDIA_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// The extended resource of NVIDIA GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "spillway";
/// The controller name in Events.
pub const CONTROLLER: &str = "spillway.io/operator";
/// On a GpuJob: `<generation>/<count>`, the machines launched for it (at that generation of
/// its spec) that joined without meeting its `requirements`; at
/// [`MAX_ENVIRONMENT_FAILURES`] no more are launched for it until its spec changes.
pub const ENVIRONMENT_FAILURES_ANNOTATION: &str = "spillway.io/environment-failures";
/// Machines that may join short of a job's `requirements` before no more are launched for it.
pub const MAX_ENVIRONMENT_FAILURES: u32 = 2;

/// The count of [`ENVIRONMENT_FAILURES_ANNOTATION`] on `job` at its current generation.
pub fn environment_failures(job: &GpuJob) -> u32 {
    let generation = job.metadata.generation.unwrap_or(0);
    job.annotations()
        .get(ENVIRONMENT_FAILURES_ANNOTATION)
        .and_then(|v| v.split_once('/'))
        .filter(|(g, _)| g.parse::<i64>().ok() == Some(generation))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// The taint (`NoSchedule`) of a node the interruption queue warned of; its value is the
/// notice's kind (`spot-interruption-warning`, `rebalance-recommendation`, `scheduled-change`).
pub const INTERRUPTED_TAINT: &str = "spillway.io/interrupted";
/// On a node warned of a spot interruption: when its instance is lost (RFC 3339). Its jobs
/// are moved off at once; the instance is terminated once its GPU pods are gone, or then.
pub const INTERRUPTION_DEADLINE_ANNOTATION: &str = "spillway.io/interruption-deadline";
/// On a node recommended for rebalancing in a pool with `rebalance: Replace`: since when
/// (RFC 3339). Its restartable jobs move at their next checkpoint announcement after that, or
/// at the pool's `rebalanceDeadline`.
pub const REBALANCE_AT_ANNOTATION: &str = "spillway.io/rebalance-at";

/// On GpuJobs with cloud instances: released (terminated) before the job is deleted.
pub const CLOUD_FINALIZER: &str = "spillway.io/cloud-resources";

/// The home name of node `node` of cluster pool `pool`.
pub fn node_name(pool: &str, node: &str) -> String {
    format!("{pool}/{node}")
}

/// The cluster pool and the remote name of a node seen as `POOL/NODE`.
pub fn split_node(name: &str) -> Option<(&str, &str)> {
    name.split_once('/')
}
