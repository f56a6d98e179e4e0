//! The plan: what `decide` wants done, with a decision (and its reason) for every job it
//! looked at. Executors carry it out; nothing in it has happened yet.

use std::fmt;

use crate::{CapacityType, Duration, Environment, Time};

/// What was decided for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Start now on private nodes.
    StartPrivate,
    /// Start in the cloud: on existing cloud nodes, or on instances being launched for it.
    StartCloud,
    /// Start on free GPUs of another cluster (a `cluster` pool).
    StartRemote,
    /// Keep waiting.
    Wait,
    /// Cannot run as specified (for example, an unknown queue).
    Reject,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::StartPrivate => "StartPrivate",
            Outcome::StartCloud => "StartCloud",
            Outcome::StartRemote => "StartRemote",
            Outcome::Wait => "Wait",
            Outcome::Reject => "Reject",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why, as a PascalCase word that status, Events and metrics share (a bounded set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The whole gang fits on free private GPUs.
    FitsPrivate,
    /// Started ahead of a bigger job without delaying its estimated start.
    Backfilled,
    /// Waited past its queue's (or a rule's) maximum wait.
    MaxWaitExceeded,
    /// Waited past its compute-wait or priced wait budget.
    ComputeWaitExceeded,
    /// Would miss its deadline on private capacity.
    DeadlineAtRisk,
    /// Its planned private start is later than its wait allows: waiting would only delay the
    /// burst.
    PrivateStartTooLate,
    /// `placement: CloudOnly`.
    CloudOnlyPlacement,
    /// A policy rule requires the cloud.
    RequiredByPolicy,
    /// Existing idle cloud nodes fit it.
    FitsExistingCloudNodes,
    /// The instances launched for it have joined.
    InstancesReady,
    /// Free GPUs of another cluster (a `cluster` pool) fit the whole gang, first in the
    /// queue's order of such pools.
    RemoteCapacity,
    /// Its pods name Secrets, ServiceAccount tokens or host paths of this cluster, so they do
    /// not run in another (a `cluster` pool).
    NotPortable,
    /// A cluster pool its queue may use has not been seen since the operator started (and not
    /// for its `lostAfter`): its pods may already run there, started by the operator before,
    /// so it is placed nowhere until that cluster is listed.
    ClusterUnseen,
    /// Pods of its earlier attempt may still run (being deleted, or asked for and not seen
    /// yet): its next attempt starts once none can.
    PreviousAttemptStopping,
    /// No private node could hold it (size or GPU model), so waiting is pointless.
    NoPrivateCapacity,
    /// Waiting for private GPUs; may burst later.
    WaitingForPrivate,
    /// A gang that must run within one domain of a topology level (`spec.topology.required`):
    /// no domain has room for it now.
    TopologyUnfit,
    /// Private GPUs are expected to free up before a cloud node could be ready.
    PrivateStartSoon,
    /// Instances are being launched for it.
    Provisioning,
    /// It runs in the cloud and finishing it on free private GPUs is cheaper, restart
    /// included: its cloud pods are stopping, the private GPUs are held for it.
    Repatriating,
    /// Moved home from the cloud: started on the private GPUs held for it.
    Repatriated,
    /// Its queue is within its private quota and the GPUs it needs are lent to other queues:
    /// they are being given back (borrowing jobs preempted, or their pods stopping).
    Reclaiming,
    /// Its queue does not allow bursting.
    BurstDisabled,
    /// `placement: PrivateOnly`.
    PrivateOnlyPlacement,
    /// It reads a Restricted dataset.
    RestrictedData,
    /// It reads a Confidential dataset and no rule allows that in the cloud.
    ConfidentialData,
    /// A policy rule forbids the cloud.
    ForbiddenByPolicy,
    /// Launching would exceed the queue's budget.
    BudgetExhausted,
    /// Launching would exceed a pool's limits.
    PoolLimitReached,
    /// Every fitting offering costs more than the job's or a rule's hourly cap.
    OverCostCap,
    /// No offering fits the gang, the GPU model and the rules (or all are unavailable).
    NoFittingOffering,
    /// The queue's quota is used up and borrowing is off.
    QuotaExhausted,
    /// The job names a queue that does not exist.
    QueueNotFound,
    /// The job names a dataset that does not exist.
    DatasetNotFound,
    /// The job's queue exists but is invalid (its `Ready` condition says why).
    QueueInvalid,
    /// A dataset the job reads exists but is invalid (its `Ready` condition says why).
    DatasetInvalid,
    /// The spec cannot be run (for example zero replicas).
    InvalidSpec,
    /// No private node or cloud offering could ever hold one replica.
    NeverFits,
    /// Nodes and offerings of its size and model exist, but none meets its `requirements`
    /// (driver, CUDA, GPU product or memory): it waits for one that does.
    RequirementsUnmet,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FitsPrivate => "FitsPrivate",
            Reason::Backfilled => "Backfilled",
            Reason::MaxWaitExceeded => "MaxWaitExceeded",
            Reason::ComputeWaitExceeded => "ComputeWaitExceeded",
            Reason::DeadlineAtRisk => "DeadlineAtRisk",
            Reason::PrivateStartTooLate => "PrivateStartTooLate",
            Reason::CloudOnlyPlacement => "CloudOnlyPlacement",
            Reason::RequiredByPolicy => "RequiredByPolicy",
            Reason::FitsExistingCloudNodes => "FitsExistingCloudNodes",
            Reason::InstancesReady => "InstancesReady",
            Reason::RemoteCapacity => "RemoteCapacity",
            Reason::NoPrivateCapacity => "NoPrivateCapacity",
            Reason::WaitingForPrivate => "WaitingForPrivate",
            Reason::TopologyUnfit => "TopologyUnfit",
            Reason::PrivateStartSoon => "PrivateStartSoon",
            Reason::Provisioning => "Provisioning",
            Reason::Reclaiming => "Reclaiming",
            Reason::Repatriating => "Repatriating",
            Reason::Repatriated => "Repatriated",
            Reason::BurstDisabled => "BurstDisabled",
            Reason::PrivateOnlyPlacement => "PrivateOnlyPlacement",
            Reason::RestrictedData => "RestrictedData",
            Reason::ConfidentialData => "ConfidentialData",
            Reason::ForbiddenByPolicy => "ForbiddenByPolicy",
            Reason::BudgetExhausted => "BudgetExhausted",
            Reason::PoolLimitReached => "PoolLimitReached",
            Reason::OverCostCap => "OverCostCap",
            Reason::NoFittingOffering => "NoFittingOffering",
            Reason::QuotaExhausted => "QuotaExhausted",
            Reason::QueueNotFound => "QueueNotFound",
            Reason::QueueInvalid => "QueueInvalid",
            Reason::DatasetInvalid => "DatasetInvalid",
            Reason::DatasetNotFound => "DatasetNotFound",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::NeverFits => "NeverFits",
            Reason::RequirementsUnmet => "RequirementsUnmet",
            Reason::NotPortable => "NotPortable",
            Reason::ClusterUnseen => "ClusterUnseen",
            Reason::PreviousAttemptStopping => "PreviousAttemptStopping",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The offering a cloud decision chose.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferingChoice {
    pub pool: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub region: String,
    pub zone: String,
    /// USD per hour, one instance.
    pub hourly_price: f64,
    pub gpus_per_instance: u32,
}

/// A decision about one job.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub job: String,
    pub outcome: Outcome,
    pub reason: Reason,
    /// One human sentence.
    pub message: String,
    /// The policy rule that decided (`policy/rule`), if one did.
    pub rule: Option<String>,
    pub estimated_wait: Option<Duration>,
    /// Hourly cost of the placement, whole job, USD.
    pub estimated_hourly_cost: Option<f64>,
    /// Expected total cost (hourly x runtime, plus data egress), USD, for cloud placements.
    pub estimated_total_cost: Option<f64>,
    /// Data egress to the chosen cloud region, USD (in `estimated_total_cost`), for cloud
    /// placements.
    pub estimated_egress_usd: Option<f64>,
    pub offering: Option<Box<OfferingChoice>>,
}

impl Decision {
    /// A decision with no estimates and no offering.
    pub fn new(
        job: &str,
        outcome: Outcome,
        reason: Reason,
        message: String,
        rule: Option<String>,
    ) -> Decision {
        Decision {
            job: job.to_string(),
            outcome,
            reason,
            message,
            rule,
            estimated_wait: None,
            estimated_hourly_cost: None,
            estimated_total_cost: None,
            estimated_egress_usd: None,
            offering: None,
        }
    }
}

/// Start a job on named nodes (one entry per replica).
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    pub job: String,
    pub environment: Environment,
    pub pool: String,
    pub nodes: Vec<String>,
}

/// Launch `count` instances of an offering for one need.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub job: String,
    pub queue: String,
    /// Idempotency key: one per job and attempt. Executors tag instances with it and never
    /// launch for a need that already has instances.
    pub need: String,
    pub offering: OfferingChoice,
    pub count: u32,
    /// The instances should share a network spine: the gang needs more than one of them, or
    /// it states a topology (`spec.topology`). A provider that can places them in one cluster
    /// placement group.
    pub together: bool,
}

/// Drain and terminate a cloud node (and its instance).
#[derive(Clone, Debug, PartialEq)]
pub struct Termination {
    pub pool: String,
    pub node: String,
    pub instance_id: Option<String>,
    pub idle_for: Duration,
}

/// Stop a running private job that uses borrowed GPUs, so a queue within its quota gets them
/// back. The job goes back to its queue (a new attempt).
#[derive(Clone, Debug, PartialEq)]
pub struct Preemption {
    pub job: String,
    /// The preempted job's queue (it was using more than its quota).
    pub queue: String,
    /// The queue reclaiming its quota.
    pub by_queue: String,
    /// The waiting job the GPUs go to.
    pub for_job: String,
    /// GPUs given back (the whole job).
    pub gpus: u32,
    pub restartable: bool,
    /// GPU-seconds of work lost: since its last checkpoint (restartable jobs), else since it
    /// started.
    pub lost_gpu_seconds: f64,
    /// One human sentence, for the job's `Preempted` condition and Event.
    pub message: String,
}

/// Move a restartable cloud job home: stop its cloud pods and start it on private nodes,
/// held for it meanwhile (the job is `Suspended`).
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub job: String,
    /// The private pool and nodes (one per replica) it moves to.
    pub pool: String,
    pub nodes: Vec<String>,
    /// The cloud pool it leaves.
    pub from_pool: String,
    /// Expected saving, USD: its cloud cost over its remaining time, minus the private cost of
    /// that time, its lost work and the restart overhead, minus the idle time of instances it
    /// leaves empty.
    pub saving_usd: f64,
    /// GPU-seconds of work lost (since its last checkpoint).
    pub lost_gpu_seconds: f64,
    /// One human sentence, for its status and Event.
    pub message: String,
}

/// Everything one `decide` call wants done.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub starts: Vec<Start>,
    pub launches: Vec<Launch>,
    pub terminations: Vec<Termination>,
    /// Borrowing jobs to stop so queues get their quota back.
    pub preemptions: Vec<Preemption>,
    /// Cloud jobs to move home.
    pub moves: Vec<Move>,
    /// One per job looked at, in the order they were considered.
    pub decisions: Vec<Decision>,
    /// The earliest time at which a decision would change with nothing else happening (a wait
    /// threshold or an idle timeout passing): callers should decide again then.
    pub next_wake: Option<Time>,
    /// Until when deciding again with nothing changed gives the same outcomes: `next_wake`,
    /// and the moments that change a decision's outcome or reason without asking for a wake
    /// (a planned private start coming within a cloud node's boot time, a running job
    /// passing its expected end). `None`: no such time. Cloud offerings' cooldowns ending are
    /// not in it (they are in the snapshot; [`Plan::holds_until`] adds them).
    /// The decide time itself when nothing makes the plan stable (rules that read the
    /// clock; EASY backfilling; a running job past its expected end).
    pub stable_until: Option<Time>,
    /// Queues in which a job arriving after this cycle would be passed over, so that deciding
    /// again for it gives this same plan ([`crate::Quiet`]); filled only when the cycle asks
    /// for no wait decisions, in strict order, with no rules.
    pub quiet: crate::Quiet,
}

impl Plan {
    /// Until when deciding `snapshot` (the world this plan was decided on at `now`) again
    /// gives the same outcomes: `stable_until`, or earlier the end of a cloud offering's
    /// cooldown (an offering becoming available again can turn a waiting job into a launch).
    /// `None`: no such time.
    pub fn holds_until(&self, snapshot: &crate::Snapshot, now: Time) -> Option<Time> {
        snapshot
            .offerings
            .iter()
            .filter_map(|o| o.unavailable_until.filter(|&t| t > now))
            .chain(self.stable_until)
            .min()
    }

    /// Whether the plan asks for anything: an action, or a decision.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
            && self.launches.is_empty()
            && self.terminations.is_empty()
            && self.preemptions.is_empty()
            && self.moves.is_empty()
            && self.decisions.is_empty()
    }

    pub fn decision(&self, job: &str) -> Option<&Decision> {
        self.decisions.iter().find(|d| d.job == job)
    }
}
