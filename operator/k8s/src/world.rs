//! From the watch caches to the core's [`Snapshot`]: which pool each node belongs to, how many
//! of its GPUs are free, where each job is in its life (from the pods it owns), and which jobs
//! cannot be run as written.
//!
//! Pure: the controller passes what its caches hold and what it has assumed but not yet seen
//! (pods it is creating), and gets plain data back. Unit tests drive it with literal objects.

use std::collections::BTreeMap;

use crate::hashing::{HashMap, HashMapExt};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use spillway_api::job::JobPhase;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue, convert};
use spillway_core::{self as core, GpuModel, JobState, Snapshot, Time};

use crate::labels;

mod job;
mod life;
mod memo;
mod workload;
pub use life::phase_of;
use life::{lifecycle, unseen_run};
pub use memo::Memo;
use memo::Tally;
pub use workload::shows_run;

/// What the caches hold, as the controller passes it in.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub jobs: Vec<Arc<GpuJob>>,
    pub queues: Vec<Arc<GpuQueue>>,
    pub pools: Vec<Arc<ComputePool>>,
    pub datasets: Vec<Arc<Dataset>>,
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub namespaces: Vec<Arc<Namespace>>,
    /// Cloud needs with instances launched or launching, by need key, with their pool: a
    /// pending job whose need is here is provisioning.
    pub needs: HashMap<String, String>,
    /// Jobs the controller has just marked Succeeded or Failed (its write may not be visible
    /// in the cache yet): nothing more to decide for them.
    pub finished: crate::hashing::HashSet<String>,
    /// The cluster's BurstPolicies.
    pub policies: Vec<Arc<BurstPolicy>>,
    /// BurstPolicies loaded from `--policy-dir` (a cluster object of the same name wins).
    pub file_policies: Vec<Arc<BurstPolicy>>,
    /// Spillway objects the caches hold but cannot read (their JSON does not fit the type).
    pub unreadable: Vec<Unreadable>,
    /// The identity issuer's keys Secret, when it exists.
    pub identity_keys: Option<Arc<k8s_openapi::api::core::v1::Secret>>,
    /// The spend ledger ConfigMap ([`crate::spend_record`]), when it exists.
    pub spend_record: Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    /// The indicator ledger ConfigMap ([`crate::indicators`]), when it exists.
    pub indicator_record: Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    /// The other clusters of the cluster pools, as their connections see them; the turn lays
    /// their nodes and pods over `nodes` and `pods` ([`crate::remote::view::overlay`]).
    pub remote: Vec<crate::remote::cluster::RemoteCluster>,
    /// Cluster pools whose other cluster this operator has not listed yet, and not for their
    /// `lostAfter`: a job that its status says runs there is kept as that status says
    /// (set by the overlay).
    pub unseen_pools: crate::hashing::HashSet<String>,
    /// The workloads labelled with a queue, of the kinds Spillway manages
    /// ([`crate::workloads`]).
    pub workloads: Vec<Arc<kube::core::DynamicObject>>,
    /// The only namespaces whose GpuJobs run (`--job-namespaces`); a job elsewhere is invalid.
    pub job_namespaces: Option<Arc<std::collections::BTreeSet<String>>>,
    /// What Prometheus last said of the pods' GPU use (`--prometheus-url`); `None`: not read.
    pub utilization: Option<Arc<crate::utilization::Samples>>,
}

/// An object of one of Spillway's kinds that cannot be read as its type.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    /// `GpuJob`, `GpuQueue`, `ComputePool`, `Dataset` or `BurstPolicy`.
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    /// Why it cannot be read.
    pub error: String,
}

/// A start the controller has decided and is writing (its pods may not be visible yet).
#[derive(Clone, Debug, PartialEq)]
pub struct Assumed {
    pub attempt: u32,
    pub pool: String,
    pub environment: core::Environment,
    /// One node per replica.
    pub nodes: Vec<String>,
    pub at: Time,
}

/// Where a job is in its life, as observed.
#[derive(Clone, Debug, PartialEq)]
pub enum Lifecycle {
    /// Waiting for a decision.
    Pending,
    /// Cloud instances are launching (or launched and not yet joined) for it.
    Provisioning { pool: String },
    /// Placed: its pods exist (or are being created) on these nodes.
    Running {
        nodes: Vec<String>,
        pool: Option<String>,
        started_at: Time,
        /// Every replica's pod reports `Running`.
        all_running: bool,
    },
    /// Every replica succeeded.
    Succeeded { at: Time },
    /// A replica failed, or the job ran past `maxRuntime`.
    Failed {
        at: Time,
        reason: &'static str,
        message: String,
    },
    /// Moving home from the cloud (status phase `Suspended`): these private nodes of `pool`
    /// are held for it; `ready` once its cloud pods are gone.
    Suspended {
        nodes: Vec<String>,
        pool: String,
        ready: bool,
    },
    /// Some replicas' pods are missing (lost with a node, deleted by someone, or left half
    /// created by a crash): the rest must go before the job is requeued or failed.
    Broken { message: String },
    /// Finished earlier (status says so); nothing left to decide.
    Done,
}

/// One GpuJob with what the controller needs to act on it.
#[derive(Clone, Debug)]
pub struct JobView {
    pub job: Arc<GpuJob>,
    /// `namespace/name`, the core's job id.
    pub id: String,
    pub attempt: u32,
    /// When the job entered its queue.
    pub queued_at: Time,
    /// Pods it owns for the current attempt, not being deleted.
    pub pods: Vec<Arc<Pod>>,
    /// Pods it owns that should not exist any more (earlier attempts, or the remains of a
    /// finished or broken gang), not yet being deleted.
    pub surplus_pods: Vec<Arc<Pod>>,
    pub lifecycle: Lifecycle,
    /// Why the spec cannot be run, when it cannot (field errors, queue not admitting the
    /// namespace). The core sees such a job as never existing.
    pub invalid: Option<String>,
    /// The job carries its trace context (a valid `spillway.io/traceparent` annotation).
    pub trace_stored: bool,
}

/// What the controller works from in one cycle.
#[derive(Clone, Debug, Default)]
pub struct Built {
    pub snapshot: Snapshot,
    /// Every GpuJob by id: the memo's table, shared until a turn changes a view of it (a
    /// start), which copies it for that turn.
    pub jobs: Arc<BTreeMap<Arc<str>, Arc<JobView>>>,
    /// Pool of each node that belongs to one.
    pub node_pool: HashMap<String, String>,
    /// Problems with queues, pools and datasets (by `Kind/name`), which the core skips.
    pub invalid_objects: BTreeMap<String, String>,
    /// The cluster placement group of each need whose listed instances are in one.
    pub cloud_groups: HashMap<String, String>,
}

/// The GPUs a pod asks for (limits, else requests, summed over its containers; an init
/// container's count when larger, as the scheduler computes it).
pub fn pod_gpus(pod: &Pod) -> u32 {
    pod.spec.as_ref().map_or(0, crate::pods::spec_gpus)
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// A pod that holds its resources: not finished.
pub fn pod_active(pod: &Pod) -> bool {
    !matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// The node a pod runs on, or the node Spillway placed it on before the scheduler binds it.
pub fn pod_node(pod: &Pod) -> Option<String> {
    pod_node_name(pod).map(str::to_string)
}

/// [`pod_node`], borrowed from the pod.
fn pod_node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .or_else(|| {
            pod.metadata
                .annotations
                .as_ref()?
                .get(labels::NODE_ANNOTATION)
                .map(String::as_str)
        })
}

fn millis(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Time {
    Time::from_millis(t.0.as_millisecond())
}

/// A node's GPU model: `spillway.io/gpu-model`, else NVIDIA's `nvidia.com/gpu.product`.
pub fn node_model(node: &Node) -> Option<GpuModel> {
    let l = node.labels();
    l.get(labels::GPU_MODEL_LABEL)
        .or_else(|| l.get(labels::NVIDIA_PRODUCT_LABEL))
        .map(|m| GpuModel::normalize(m))
}

/// The EC2 instance behind a node: the `spillway.io/instance-id` label, else its
/// `providerID` (`aws:///ZONE/INSTANCE_ID`).
pub fn node_instance_id(node: &Node) -> Option<String> {
    node.labels()
        .get(labels::INSTANCE_ID_LABEL)
        .cloned()
        .or_else(|| {
            let p = node.spec.as_ref()?.provider_id.as_deref()?;
            let id = p.strip_prefix("aws://")?.rsplit('/').next()?;
            id.starts_with("i-").then(|| id.to_string())
        })
}

/// GPUs the node offers (`status.allocatable["nvidia.com/gpu"]`).
pub fn node_gpus(node: &Node) -> u32 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(labels::GPU_RESOURCE))
        .and_then(|q| q.0.parse::<u32>().ok())
        .unwrap_or(0)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Ready, not cordoned, and without a NoSchedule/NoExecute taint the pool does not tolerate.
fn node_schedulable(node: &Node, pool: &ComputePool) -> bool {
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) || !node_ready(node) {
        return false;
    }
    spec.and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| {
            pool.spec
                .node_taints
                .iter()
                .any(|p| p.key == t.key && p.value == t.value && p.effect == t.effect)
        })
}

/// The pool a node belongs to: a cloud pool by the `spillway.io/pool` label Spillway puts on
/// its nodes, a private pool by its `nodeSelector` (first match in name order).
/// A node of another cluster is seen as `POOL/NODE` ([`crate::remote::view`]) and belongs to
/// that cluster pool only.
pub fn pool_of_node<'p>(node: &Node, pools: &'p [Arc<ComputePool>]) -> Option<&'p ComputePool> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some((pool, _)) = crate::labels::split_node(name) {
        return pools
            .iter()
            .find(|p| p.spec.cluster.is_some() && p.metadata.name.as_deref() == Some(pool))
            .map(|p| p.as_ref());
    }
    let node_labels = node.labels();
    if let Some(name) = node_labels.get(labels::POOL_LABEL)
        && let Some(p) = pools
            .iter()
            .find(|p| p.spec.aws.is_some() && p.name_any() == *name)
    {
        return Some(p);
    }
    pools
        .iter()
        .filter(|p| {
            p.spec.private.as_ref().is_some_and(|pp| {
                !pp.node_selector.is_empty()
                    && pp
                        .node_selector
                        .iter()
                        .all(|(k, v)| node_labels.get(k) == Some(v))
            })
        })
        .min_by_key(|p| p.name_any())
        .map(|p| p.as_ref())
}

/// Whether `labels` match a Kubernetes label selector (matchLabels and matchExpressions).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// Why a job in `namespace` is not this operator's to run, if it is not: `--job-namespaces`
/// (the chart's `rbac.jobNamespaces`) names the namespaces where it may create pods.
pub(crate) fn managed_problem(
    managed: Option<&std::collections::BTreeSet<String>>,
    namespace: &str,
) -> Option<String> {
    let managed = managed?;
    (!managed.contains(namespace)).then(|| {
        format!(
            "Namespace {namespace:?} is not one this Spillway runs jobs in (its --job-namespaces, the chart's rbac.jobNamespaces: {}); it cannot create pods here.",
            managed.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Why `queue` does not admit `job`'s namespace, if it does not.
///
/// A job's view is kept across turns while its queue and namespace read the same as far as
/// this goes (`memo.rs`: `queue_alike`, `namespace_alike`): what it reads of them must stay in
/// step with those.
pub(crate) fn admission_problem(
    queue: &GpuQueue,
    namespace: &str,
    namespaces: &HashMap<&str, &Arc<Namespace>>,
) -> Option<String> {
    let spec = &queue.spec;
    if !spec.namespaces.is_empty() {
        if spec.namespaces.iter().any(|n| n == namespace) {
            return None;
        }
        return Some(format!(
            "GpuQueue {:?} does not admit namespace {namespace:?} (spec.namespaces: {}).",
            queue.name_any(),
            spec.namespaces.join(", ")
        ));
    }
    if let Some(selector) = &spec.namespace_selector {
        let labels = namespaces
            .get(namespace)
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        if !selector_matches(selector, &labels) {
            return Some(format!(
                "GpuQueue {:?} does not admit namespace {namespace:?}: its labels do not match spec.namespaceSelector.",
                queue.name_any()
            ));
        }
    }
    None
}

/// Why `job` may not start in `queue`, if its `priority` is above the queue's `maxPriority`.
/// A job already started keeps running with its priority capped at the ceiling (it neither
/// ranks nor reclaims above it), so lowering a queue's ceiling never loses a running job.
pub(crate) fn priority_problem(queue: &GpuQueue, job: &GpuJob) -> Option<String> {
    (job.spec.priority > queue.spec.max_priority).then(|| {
        format!(
            "spec.priority {} is above GpuQueue {:?}'s maxPriority {}: lower the job's priority, or ask the platform team to raise the queue's spec.maxPriority.",
            job.spec.priority,
            queue.name_any(),
            queue.spec.max_priority
        )
    })
}

/// Whether `pod` is one of `job`'s: owned by it, or (a job standing for a workload) made by
/// the workload's controller from the template Spillway placed, which labels it with the
/// job's uid.
fn owned_by(pod: &Pod, job: &GpuJob) -> bool {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return false;
    };
    if job.spec.workload_ref.is_some() {
        return pod.labels().get(labels::JOB_UID_LABEL).map(String::as_str) == Some(uid);
    }
    pod.owner_references()
        .iter()
        .any(|o| o.uid == uid && o.kind == "GpuJob")
}

/// The attempt a pod is labelled as.
pub(crate) fn pod_attempt(pod: &Pod) -> Option<u32> {
    pod.labels()
        .get(labels::ATTEMPT_LABEL)
        .and_then(|a| a.parse().ok())
}

/// The replica a pod is labelled as.
pub(crate) fn pod_replica(pod: &Pod) -> Option<u32> {
    pod.labels()
        .get(labels::REPLICA_LABEL)
        .and_then(|a| a.parse().ok())
}

/// Builds the snapshot and the per-job views.
///
/// `assumed` holds starts being written (by job id); `attempt_floor` the attempts the
/// controller moved jobs to whose status write may not be visible yet.
pub fn build(
    inputs: &Inputs,
    assumed: &HashMap<String, Assumed>,
    attempt_floor: &HashMap<String, u32>,
    settings: core::Settings,
    now: Time,
) -> Built {
    let mut memo = Memo::default();
    let mut built = build_kept(&mut memo, inputs, assumed, attempt_floor, settings, now);
    built.snapshot.jobs = core_jobs_in_order(&memo, inputs);
    built
}

/// The core jobs of `memo`'s last build, in the order of the GpuJobs in `inputs`.
fn core_jobs_in_order(memo: &Memo, inputs: &Inputs) -> Vec<core::Job> {
    let mut by_id: HashMap<&str, &core::Job> =
        memo.core_jobs().map(|j| (j.id.as_str(), j)).collect();
    (inputs.jobs.iter())
        .filter_map(|j| {
            let ns = j.metadata.namespace.as_deref().unwrap_or_default();
            let id = format!("{ns}/{}", j.metadata.name.as_deref().unwrap_or_default());
            by_id.remove(id.as_str()).cloned()
        })
        .collect()
}

/// [`build`], keeping the views in `memo` from one build to the next: a job nothing of which
/// changed since the last build keeps its view ([`Memo`]), and is not even looked at while
/// the memo can tell which jobs changed (`memo/quick.rs`). The snapshot's jobs are left
/// empty: the core's jobs stay in `memo`, and the ones that changed are taken from it as
/// changes ([`Memo::take_job_changes`]) for a scheduler that keeps them.
pub fn build_kept(
    memo: &mut Memo,
    inputs: &Inputs,
    assumed: &HashMap<String, Assumed>,
    attempt_floor: &HashMap<String, u32>,
    settings: core::Settings,
    now: Time,
) -> Built {
    let mut built = Built::default();
    let snap = &mut built.snapshot;
    snap.settings = settings;

    for q in &inputs.queues {
        match convert::queue(q) {
            Ok(q) => snap.queues.push(q),
            Err(e) => {
                snap.invalid_queues.insert(q.name_any(), e.to_string());
                built
                    .invalid_objects
                    .insert(format!("GpuQueue/{}", q.name_any()), e.to_string());
            }
        }
    }
    for p in &inputs.pools {
        match convert::pool(p) {
            Ok(p) => snap.pools.push(p),
            Err(e) => {
                built
                    .invalid_objects
                    .insert(format!("ComputePool/{}", p.name_any()), e.to_string());
            }
        }
    }
    for u in &inputs.unreadable {
        let why = format!("it cannot be read: {}", u.error);
        match u.kind {
            "GpuQueue" => {
                snap.invalid_queues.insert(u.name.clone(), why);
            }
            "Dataset" => {
                snap.invalid_datasets.insert(u.name.clone(), why);
            }
            _ => {}
        }
    }
    let valid_pools: Vec<Arc<ComputePool>> = inputs
        .pools
        .iter()
        .filter(|p| snap.pools.iter().any(|c| c.name == p.name_any()))
        .cloned()
        .collect();
    for d in &inputs.datasets {
        match convert::dataset(d) {
            Ok(d) => snap.datasets.push(d),
            Err(e) => {
                snap.invalid_datasets.insert(d.name_any(), e.to_string());
                built
                    .invalid_objects
                    .insert(format!("Dataset/{}", d.name_any()), e.to_string());
            }
        }
    }

    let mut node_pool: HashMap<String, String> = HashMap::with_capacity(inputs.nodes.len());
    for n in &inputs.nodes {
        if let Some(p) = pool_of_node(n, &valid_pools) {
            node_pool.insert(n.name_any(), p.name_any());
        }
    }
    let facts = job::Facts {
        inputs,
        assumed,
        attempt_floor,
        namespaces: (inputs.namespaces.iter())
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
            .collect(),
        queues: (inputs.queues.iter())
            .filter_map(|q| Some((q.metadata.name.as_deref()?, q)))
            .collect(),
        // A pod being deleted on a node that is gone or not Ready will never be confirmed
        // stopped (no kubelet answers for it): it is dead with its node, not stopping.
        nodes: (inputs.nodes.iter().enumerate())
            .filter_map(|(at, n)| {
                let name = n.metadata.name.as_deref()?;
                let fact = job::NodeFact {
                    at,
                    ready: node_ready(n),
                    pool: node_pool.get(name),
                };
                Some((name, fact))
            })
            .collect(),
        pools: &snap.pools,
        now,
    };

    // Jobs: only those whose view may have changed when the memo can tell which
    // (`memo/quick.rs`), else every one.
    memo.begin(&snap.pools, &inputs.needs, inputs);
    let mut tally = Tally::default();
    if memo.quick(&facts, &mut tally).is_none() {
        tally = Tally::default();
        every_job(memo, &facts, &mut tally);
    }
    // GPUs in use per node (by its place in `inputs.nodes`): every active pod bound (or placed
    // by us) there; of those, GPUs of pods on their way out.
    let (used, releasing) = memo.entries().pod_usage(inputs.nodes.len());
    let Tally {
        used_more,
        releasing_more,
    } = tally;
    built.jobs = memo.views().clone();
    drop(facts);

    // Nodes. Those of one pool mostly come together: the last pool found is compared first.
    let mut last_pool: Option<&Arc<ComputePool>> = None;
    for (at, n) in inputs.nodes.iter().enumerate() {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let Some(pool) = node_pool.get(name).and_then(|pool| {
            let named = |p: &&Arc<ComputePool>| p.metadata.name.as_deref() == Some(pool.as_str());
            let found = last_pool
                .filter(named)
                .or_else(|| valid_pools.iter().find(named));
            last_pool = found.or(last_pool);
            found
        }) else {
            continue;
        };
        let gpus = node_gpus(n);
        if gpus == 0 {
            continue;
        }
        let count =
            |m: &[u32], more: &HashMap<String, u32>| m[at] + more.get(name).copied().unwrap_or(0);
        let in_use = count(&used, &used_more);
        snap.nodes.push(core::Node {
            facts: core::Facts::from_labels(n.labels()),
            name: name.to_string(),
            pool: pool.name_any(),
            gpu_model: node_model(n),
            gpus,
            free_gpus: gpus.saturating_sub(in_use),
            schedulable: node_schedulable(n, pool),
            releasing_gpus: count(&releasing, &releasing_more),
            instance_id: node_instance_id(n),
            idle_since: None,
            domains: node_domains(n, pool),
        });
    }
    snap.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    built.node_pool = node_pool;
    built
}

/// A node's domains in its pool's topology: (level, its label's value) for each level of
/// `spec.private.topology` the node is labelled with.
fn node_domains(n: &Node, pool: &ComputePool) -> Vec<(String, String)> {
    let Some(t) = (pool.spec.private.as_ref()).and_then(|p| p.topology.as_ref()) else {
        return Vec::new();
    };
    let labels = n.labels();
    (t.levels.iter())
        .filter_map(|k| labels.get(k).map(|v| (k.clone(), v.clone())))
        .collect()
}

/// The build that visits every job: each one's view from the memo (kept when nothing it was
/// derived from changed), and what the build saw recorded for the next one.
fn every_job(memo: &mut Memo, facts: &job::Facts<'_>, tally: &mut Tally) {
    let inputs = facts.inputs;
    memo.record_start(inputs);
    // Of each pod, its node as the views read it (one lookup per pod).
    let mut seen: Vec<job::Seen> = Vec::with_capacity(inputs.pods.len());
    // The pods labelled with each job, in the caches' order: the first and last of them by
    // job, each pod followed by the next (no list per job).
    let mut pods_by_job: HashMap<(&str, &str), (usize, usize)> =
        HashMap::with_capacity(inputs.jobs.len());
    let mut next_pod: Vec<usize> = vec![usize::MAX; inputs.pods.len()];
    for (at, pod) in inputs.pods.iter().enumerate() {
        let node = pod_node_name(pod).map(|n| facts.nodes.get(n));
        seen.push(node.map(job::seen_of));
        memo.record_pod(pod, node.flatten().map(|f| f.at));
        if let Some(job) = (pod.metadata.labels.as_ref()).and_then(|l| l.get(labels::JOB_LABEL)) {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            match pods_by_job.entry((ns, job)) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let (_, last) = e.get_mut();
                    next_pod[*last] = at;
                    *last = at;
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert((at, at));
                }
            }
        }
    }
    let mut id = String::new();
    let mut group: Vec<&Arc<Pod>> = Vec::new();
    let mut group_seen: Vec<job::Seen> = Vec::new();
    for job in &inputs.jobs {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.as_deref().unwrap_or_default();
        id.clear();
        id.extend([ns, "/", name]);
        group.clear();
        group_seen.clear();
        if let Some((first, _)) = pods_by_job.remove(&(ns, name)) {
            let mut at = first;
            while at != usize::MAX {
                group.push(&inputs.pods[at]);
                group_seen.push(seen[at]);
                at = next_pod[at];
            }
        }
        let view = memo.view(facts, job, &id, &group, &group_seen);
        let contributes = job::add_usage(
            &view,
            facts.assumed.get(&view.id),
            &mut tally.used_more,
            &mut tally.releasing_more,
        );
        memo.record_job(job, &id, contributes);
    }
    memo.end();
    memo.record_end(facts);
}
