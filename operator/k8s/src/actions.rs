//! What a turn asks for: typed actions that the executor carries out.
//!
//! A turn never calls the API or the cloud; it returns [`Action`]s. Each names the object it
//! acts on ([`Key`]), which the executor uses to keep one object's actions in order and to
//! retry them; each has a bounded [`ActionKind`] for metrics.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use spillway_api::{ComputePool, GpuJob};
use spillway_core as core;

/// The object an action is about: `kind` and `namespace/name` (or `name` when cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: &'static str,
    pub name: String,
}

impl Key {
    pub fn new(kind: &'static str, name: impl Into<String>) -> Key {
        Key {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// The kinds whose status the loop writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusKind {
    GpuJob,
    GpuQueue,
    ComputePool,
    Dataset,
    BurstPolicy,
}

impl StatusKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::GpuJob => "GpuJob",
            StatusKind::GpuQueue => "GpuQueue",
            StatusKind::ComputePool => "ComputePool",
            StatusKind::Dataset => "Dataset",
            StatusKind::BurstPolicy => "BurstPolicy",
        }
    }
}

/// A status written by server-side apply (field manager `spillway`, forced).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusPatch {
    pub kind: StatusKind,
    /// The namespace of a GpuJob; `None` for the cluster-scoped kinds.
    pub namespace: Option<String>,
    pub name: String,
    /// The apply body (apiVersion, kind, metadata name/namespace, status).
    pub body: serde_json::Value,
}

impl StatusPatch {
    /// `namespace/name` or `name`: the key the loop remembers what it wrote under.
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A Kubernetes Event about one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub regarding: ObjectReference,
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// What was done (`Decide`, `Requeue`, `Launch`, `Validate`, ...).
    pub action: String,
    /// One human sentence (truncated to 1,000 bytes when published).
    pub note: String,
}

/// Instances to launch for one need.
#[derive(Clone, Debug)]
pub struct LaunchOrder {
    pub launch: core::Launch,
    pub pool: Arc<ComputePool>,
    pub job: Arc<GpuJob>,
}

/// A Secret written by server-side apply. Its data (a token, private keys) never shows in
/// `Debug` output, so it cannot reach a log.
#[derive(Clone, PartialEq)]
pub struct SecretApply(pub Box<Secret>);

impl SecretApply {
    pub fn namespace(&self) -> &str {
        self.0.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.0.metadata.name.as_deref().unwrap_or_default()
    }
}

impl fmt::Debug for SecretApply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret {}/{} (data hidden)",
            self.namespace(),
            self.name()
        )
    }
}

pub use crate::action_kind::ActionKind;

/// A merge patch of one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadPatch {
    /// `group/version` and kind (one of [`crate::workloads::kinds`]).
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    /// The workload's name (a pod group's: the group's).
    pub name: String,
    /// The object patched: the workload, or one pod of a pod group.
    pub object: String,
    /// `run` or `suspend`, for logs.
    pub what: &'static str,
    pub patch: serde_json::Value,
    /// The GpuJob id (`namespace/name`) whose start this is, for a run.
    pub job: Option<String>,
}

/// One thing the executor does.
#[derive(Clone, Debug)]
pub enum Action {
    /// Creates one replica's pod of a start (an existing pod of that name counts as done).
    /// A failure drops the start's assumption, so the job is decided again.
    CreatePod { job: String, pod: Box<Pod> },
    /// Deletes a pod, only if it is still the one with `uid`.
    DeletePod {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Stops a pod of a preempted job: deletes it, only if it is still the one with `uid`,
    /// giving it `grace_seconds` to stop.
    EvictPod {
        namespace: String,
        name: String,
        uid: String,
        grace_seconds: i64,
    },
    /// Creates one replica's pod of a start in the other cluster of cluster pool `pool` (an
    /// existing pod of that name counts as done). A failure drops the start's assumption.
    CreateRemotePod {
        pool: String,
        job: String,
        pod: Box<Pod>,
    },
    /// Deletes a pod in the other cluster of `pool`, only if it is still the one with `uid`,
    /// giving it `grace_seconds` to stop (its own grace period when `None`).
    DeleteRemotePod {
        pool: String,
        namespace: String,
        name: String,
        uid: String,
        grace_seconds: Option<i64>,
    },
    /// Creates a workload's copy (a batch Job) in the other cluster of cluster pool `pool` (an
    /// existing copy of that name for the same job, cluster and attempt counts as done). A
    /// failure drops the start's assumption.
    CreateRemoteCopy {
        pool: String,
        job: String,
        copy: Box<k8s_openapi::api::batch::v1::Job>,
    },
    /// Deletes a workload's copy in the other cluster of `pool`, only if it is still the one
    /// with `uid`; its pods go with it (gone already is done).
    DeleteRemoteCopy {
        pool: String,
        namespace: String,
        name: String,
        uid: String,
    },
    /// Writes a Secret (the identity tokens of the pool's jobs) in the other cluster of
    /// `pool`, by server-side apply.
    ApplyRemoteSecret { pool: String, secret: SecretApply },
    /// Deletes a job's token Secret in the other cluster of `pool` (the job stopped running
    /// there, or its pods there are garbage); gone already is done.
    DeleteRemoteSecret {
        pool: String,
        namespace: String,
        name: String,
    },
    /// Applies a status. A newer status of the same object supersedes one not yet applied.
    ApplyStatus(StatusPatch),
    /// Publishes an Event.
    Publish(Note),
    /// Adds the cloud finalizer to the job, makes a bootstrap token when the pool joins nodes
    /// with one, then launches the need's instances (adopting any the need already has).
    /// Never retried by the executor: a failure cools the offering down and the next turn
    /// plans again.
    Launch(Box<LaunchOrder>),
    /// Marks a node unschedulable (first step of retiring it).
    Cordon { node: String },
    /// Cordons a node warned of by the interruption queue and taints it
    /// `spillway.io/interrupted=<value>:NoSchedule`, with `annotations` (when it will be lost,
    /// or since when it is to be rebalanced): read afresh and written over its version.
    MarkNode {
        node: String,
        value: String,
        annotations: std::collections::BTreeMap<String, String>,
    },
    /// Deletes message `message` of an interruption queue (by the receipt of its latest
    /// delivery), once acted on or found not to concern this cluster in a queue it owns.
    DeleteNotice { message: String },
    /// Terminates an instance, then deletes its Node if it has one.
    Terminate {
        instance: String,
        node: Option<String>,
        why: String,
    },
    /// Deletes a cluster placement group no instance is in any more.
    DeletePlacementGroup { region: String, name: String },
    /// Deletes a Node whose instance is gone.
    DeleteNode { node: String, why: String },
    /// Adds or removes the cloud finalizer of a GpuJob (reading it afresh on each attempt).
    PatchFinalizer {
        namespace: String,
        name: String,
        add: bool,
    },
    /// Writes a Secret (a job's identity token, the issuer's keys) by server-side apply.
    ApplySecret(SecretApply),
    /// Writes the spend ledger ConfigMap ([`crate::spend_record`]) by server-side apply: the
    /// whole data, so a newer write makes an older one moot.
    RecordSpend(Box<k8s_openapi::api::core::v1::ConfigMap>),
    /// Writes the indicator ledger ConfigMap ([`crate::indicators`]) by server-side apply: the
    /// whole data, so a newer write makes an older one moot.
    RecordIndicators(Box<k8s_openapi::api::core::v1::ConfigMap>),
    /// Records a span of a job's trace (no API call: the loop hands it to the telemetry
    /// exporter, which never blocks).
    Span(Box<crate::otel::SpanRecord>),
    /// Writes the GpuJob that stands for a workload (its spec and the workload's end), by
    /// server-side apply: made when missing, kept in step with the workload after.
    ApplyWorkloadJob(Box<GpuJob>),
    /// Runs or suspends a workload (a labelled Job, ...) by merge patch; gone already is done.
    /// A failed run drops the start's assumption of `job` (its GpuJob), so it is decided again.
    PatchWorkload(Box<WorkloadPatch>),
    /// Pins a workload's pod made without the admission webhook, held by the placement gate,
    /// to its placement's nodes and lifts the gate: a merge patch written only over version
    /// `resource_version` (a pod changed or gone meanwhile is left to the next turn).
    PinPod {
        namespace: String,
        name: String,
        resource_version: String,
        patch: serde_json::Value,
    },
    /// Sets one annotation of a GpuJob (its trace context), by merge patch.
    Annotate {
        namespace: String,
        name: String,
        key: String,
        value: String,
    },
}

impl Action {
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::CreatePod { .. } => ActionKind::CreatePod,
            Action::DeletePod { .. } => ActionKind::DeletePod,
            Action::CreateRemotePod { .. } => ActionKind::CreateRemotePod,
            Action::DeleteRemotePod { .. } => ActionKind::DeleteRemotePod,
            Action::CreateRemoteCopy { .. } => ActionKind::CreateRemoteCopy,
            Action::DeleteRemoteCopy { .. } => ActionKind::DeleteRemoteCopy,
            Action::ApplyRemoteSecret { .. } => ActionKind::ApplyRemoteSecret,
            Action::DeleteRemoteSecret { .. } => ActionKind::DeleteRemoteSecret,
            Action::EvictPod { .. } => ActionKind::EvictPod,
            Action::ApplyStatus(_) => ActionKind::ApplyStatus,
            Action::Publish(_) => ActionKind::Publish,
            Action::Launch(_) => ActionKind::Launch,
            Action::Cordon { .. } => ActionKind::Cordon,
            Action::MarkNode { .. } => ActionKind::MarkNode,
            Action::DeleteNotice { .. } => ActionKind::DeleteNotice,
            Action::Terminate { .. } => ActionKind::Terminate,
            Action::DeletePlacementGroup { .. } => ActionKind::DeletePlacementGroup,
            Action::DeleteNode { .. } => ActionKind::DeleteNode,
            Action::PatchFinalizer { .. } => ActionKind::PatchFinalizer,
            Action::ApplySecret(_) => ActionKind::ApplySecret,
            Action::RecordSpend(_) => ActionKind::RecordSpend,
            Action::RecordIndicators(_) => ActionKind::RecordIndicators,
            Action::Annotate { .. } => ActionKind::Annotate,
            Action::ApplyWorkloadJob(_) => ActionKind::ApplyWorkloadJob,
            Action::PatchWorkload(_) => ActionKind::PatchWorkload,
            Action::PinPod { .. } => ActionKind::PinPod,
            Action::Span(_) => ActionKind::Span,
        }
    }

    /// The object whose actions must stay in order. Retiring a node (cordon, terminate,
    /// delete) keys by the node, so those steps run one after the other.
    pub fn key(&self) -> Key {
        match self {
            Action::CreatePod { pod, .. } => Key::new(
                "Pod",
                format!(
                    "{}/{}",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::DeletePod {
                namespace, name, ..
            }
            | Action::EvictPod {
                namespace, name, ..
            }
            | Action::PinPod {
                namespace, name, ..
            } => Key::new("Pod", format!("{namespace}/{name}")),
            Action::CreateRemotePod { pool, pod, .. } => Key::new(
                "RemotePod",
                format!(
                    "{pool}/{}/{}",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::DeleteRemotePod {
                pool,
                namespace,
                name,
                ..
            } => Key::new("RemotePod", format!("{pool}/{namespace}/{name}")),
            Action::CreateRemoteCopy { pool, copy, .. } => Key::new(
                "RemoteCopy",
                format!(
                    "{pool}/{}/{}",
                    copy.metadata.namespace.as_deref().unwrap_or_default(),
                    copy.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::DeleteRemoteCopy {
                pool,
                namespace,
                name,
                ..
            } => Key::new("RemoteCopy", format!("{pool}/{namespace}/{name}")),
            Action::ApplyRemoteSecret { pool, secret } => Key::new(
                "RemoteSecret",
                format!("{pool}/{}/{}", secret.namespace(), secret.name()),
            ),
            Action::DeleteRemoteSecret {
                pool,
                namespace,
                name,
            } => Key::new("RemoteSecret", format!("{pool}/{namespace}/{name}")),
            Action::ApplyStatus(p) => Key::new(status_key_kind(p.kind), p.id()),
            Action::Publish(n) => Key::new(
                "Event",
                format!(
                    "{}/{}",
                    n.regarding.namespace.as_deref().unwrap_or_default(),
                    n.regarding.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::Launch(l) => Key::new("Need", l.launch.need.clone()),
            Action::Cordon { node }
            | Action::DeleteNode { node, .. }
            | Action::MarkNode { node, .. } => Key::new("Node", node.clone()),
            Action::DeleteNotice { message } => Key::new("Notice", message.clone()),
            Action::DeletePlacementGroup { name, .. } => Key::new("PlacementGroup", name.clone()),
            Action::Terminate { instance, node, .. } => match node {
                Some(n) => Key::new("Node", n.clone()),
                None => Key::new("Instance", instance.clone()),
            },
            Action::PatchFinalizer {
                namespace, name, ..
            }
            | Action::Annotate {
                namespace, name, ..
            } => Key::new("GpuJob", format!("{namespace}/{name}")),
            Action::ApplySecret(s) => Key::new("Secret", format!("{}/{}", s.namespace(), s.name())),
            Action::RecordSpend(c) | Action::RecordIndicators(c) => Key::new(
                "ConfigMap",
                format!(
                    "{}/{}",
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::Span(s) => Key::new("Span", s.name),
            Action::ApplyWorkloadJob(j) => Key::new(
                "GpuJob",
                format!(
                    "{}/{}",
                    j.metadata.namespace.as_deref().unwrap_or_default(),
                    j.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            Action::PatchWorkload(p) => Key::new(
                "Workload",
                format!("{}/{}/{}", p.kind, p.namespace, p.object),
            ),
        }
    }

    /// Whether a newer action of the same key makes this one moot (status writes carry the
    /// whole status).
    pub fn supersedable(&self) -> bool {
        matches!(
            self,
            Action::ApplyStatus(_)
                | Action::ApplySecret(_)
                | Action::ApplyRemoteSecret { .. }
                | Action::DeleteRemoteSecret { .. }
                | Action::RecordSpend(_)
                | Action::RecordIndicators(_)
        )
    }

    /// The job id (`namespace/name`) an action is for, when it is for one.
    pub fn job(&self) -> Option<&str> {
        match self {
            Action::CreatePod { job, .. }
            | Action::CreateRemotePod { job, .. }
            | Action::CreateRemoteCopy { job, .. } => Some(job),
            Action::PatchWorkload(p) => p.job.as_deref(),
            Action::Launch(l) => Some(&l.launch.job),
            _ => None,
        }
    }
}

/// Status writes of each kind are ordered apart from the object's other actions.
fn status_key_kind(kind: StatusKind) -> &'static str {
    match kind {
        StatusKind::GpuJob => "GpuJob/status",
        StatusKind::GpuQueue => "GpuQueue/status",
        StatusKind::ComputePool => "ComputePool/status",
        StatusKind::Dataset => "Dataset/status",
        StatusKind::BurstPolicy => "BurstPolicy/status",
    }
}
