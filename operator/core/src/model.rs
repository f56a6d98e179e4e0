//! The snapshot: everything `decide` looks at, as plain data.
//!
//! Adapters fill it: the Kubernetes watch caches in the operator, the virtual cluster in the
//! simulator, a YAML "situation" in `spillway policy test`. Names are the Kubernetes object
//! names; a job's id is `namespace/name`.

use std::collections::BTreeMap;

use crate::{CapacityType, Classification, Duration, GpuModel, Placement, Time};

/// How long a queue waits for private GPUs before it may burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Every job may wait `max_wait`.
    Fixed,
    /// A job's wait budget is `compute_wait_factor` x GPUs x estimated runtime (Starburst,
    /// USENIX ATC'24); a job without an estimate waits `max_wait`. Under conservative order a
    /// bursting queue plans its jobs in order of arrival less that budget
    /// (`decide::Cycle::plan_order`).
    ComputeWait,
    /// The default. A job may wait as long as the cloud cost its waiting saves is worth more
    /// than its wait at `wait_cost_per_hour`: GPUs x estimated runtime x the per-GPU-hour price
    /// of its cheapest fitting offering (spot for restartable jobs) / `wait_cost_per_hour`. On
    /// a catalog priced alike per GPU-hour it is compute-wait with factor price /
    /// `wait_cost_per_hour`. A job without an estimate waits `max_wait`; one no offering
    /// holds, its compute-wait budget. Planned in the same order as compute-wait.
    #[default]
    Priced,
    /// `max_wait` for jobs whose cheapest cloud capacity is the cheapest per GPU-hour; a job
    /// dearer to burst waits proportionally longer (twice the price per GPU-hour, twice the
    /// wait), since keeping it private saves more.
    CostAware,
}

/// A queue's bursting settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstSettings {
    pub enabled: bool,
    pub max_wait: Duration,
    pub wait_mode: WaitMode,
    /// Seconds of wait per GPU-second of work, in compute-wait mode.
    pub compute_wait_factor: f64,
    /// USD an hour of a job's waiting is worth, in priced mode.
    pub wait_cost_per_hour: f64,
    /// Cloud and cluster pools the queue may use; empty means all. Cluster pools are tried in
    /// this order (with an empty list: cheapest first, then by name), before any cloud pool.
    pub pools: Vec<String>,
    /// Allowed capacity types; empty means both (spot only for restartable jobs).
    pub capacity_types: Vec<CapacityType>,
}

impl Default for BurstSettings {
    fn default() -> Self {
        BurstSettings {
            enabled: false,
            max_wait: Duration::from_secs(15 * 60),
            wait_mode: WaitMode::Priced,
            compute_wait_factor: DEFAULT_COMPUTE_WAIT_FACTOR,
            wait_cost_per_hour: DEFAULT_WAIT_COST_PER_HOUR,
            pools: Vec::new(),
            capacity_types: Vec::new(),
        }
    }
}

/// Default seconds of wait per GPU-second of estimated work in compute-wait mode: a one-GPU,
/// one-hour job may wait 12 minutes, an 8-GPU, 4-hour job 6.4 hours.
pub const DEFAULT_COMPUTE_WAIT_FACTOR: f64 = 0.2;

/// Default USD an hour of a job's waiting is worth in priced mode: at $1 per GPU-hour a job
/// waits as compute-wait 0.2 lets it; a one-GPU hour at $0.80 waits 9.6 minutes, an 8-GPU,
/// 4-hour job at $2.74 per GPU-hour 17.5 hours. Chosen by measurement against Starburst and the
/// physical limit (docs/simulator.md, "The default queue").
pub const DEFAULT_WAIT_COST_PER_HOUR: f64 = 5.0;

/// A GpuQueue.
#[derive(Clone, Debug, PartialEq)]
pub struct Queue {
    pub name: String,
    /// Guaranteed private GPUs; `None` means no guarantee (fair share only).
    pub quota_gpus: Option<u32>,
    /// May use idle private GPUs beyond the quota.
    pub borrowing: bool,
    /// Fair-share weight (>= 1).
    pub weight: u32,
    pub burst: BurstSettings,
    pub budget_hourly_usd: Option<f64>,
    pub budget_monthly_usd: Option<f64>,
    /// The budget counts the queue's private GPU time at its pools' `gpu_cost_per_hour`.
    pub budget_counts_private: bool,
    /// Spend so far this month, USD (cloud, and private with `budget_counts_private`).
    pub spent_this_month_usd: f64,
    /// Jobs of this queue that are not restartable may be preempted when they run on borrowed
    /// GPUs that another queue reclaims (they lose their work). Off by default: restartable
    /// jobs only.
    pub preempt_non_restartable: bool,
    /// A running job of this queue is not chosen as a victim (quota reclaim, repatriation)
    /// before it has run this long.
    pub min_runtime: Duration,
}

impl Queue {
    /// A queue with no quota, borrowing on, weight 1 and bursting off.
    pub fn new(name: impl Into<String>) -> Queue {
        Queue {
            name: name.into(),
            quota_gpus: None,
            borrowing: true,
            weight: 1,
            burst: BurstSettings::default(),
            budget_hourly_usd: None,
            budget_monthly_usd: None,
            budget_counts_private: false,
            spent_this_month_usd: 0.0,
            preempt_non_restartable: false,
            min_runtime: Duration::ZERO,
        }
    }
}

/// What kind of pool.
#[derive(Clone, Debug, PartialEq)]
pub enum PoolKind {
    /// Existing private nodes; `gpu_cost_per_hour` is their amortised cost, for reports.
    Private { gpu_cost_per_hour: Option<f64> },
    /// Cloud instances launched on demand in `region`.
    Cloud {
        region: String,
        capacity_types: Vec<CapacityType>,
    },
    /// The nodes of another Kubernetes cluster: a GPU-hour there costs `gpu_cost_per_hour`;
    /// `location` (a region or site) is what data rules compare.
    Cluster {
        gpu_cost_per_hour: f64,
        location: Option<String>,
    },
}

/// A ComputePool.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub name: String,
    pub kind: PoolKind,
    pub max_nodes: Option<u32>,
    pub max_gpus: Option<u32>,
    pub max_hourly_usd: Option<f64>,
    pub idle_timeout: Duration,
    /// Why a cluster pool takes no copy of a workload (a job whose `kind` is not `GpuJob`):
    /// the operator cannot watch or create them there. `None`: it takes them.
    pub refuses_copies: Option<String>,
}

impl Pool {
    pub fn private(name: impl Into<String>) -> Pool {
        Pool {
            name: name.into(),
            kind: PoolKind::Private {
                gpu_cost_per_hour: None,
            },
            max_nodes: None,
            max_gpus: None,
            max_hourly_usd: None,
            idle_timeout: Duration::from_secs(600),
            refuses_copies: None,
        }
    }

    pub fn cloud(name: impl Into<String>, region: impl Into<String>) -> Pool {
        Pool {
            name: name.into(),
            kind: PoolKind::Cloud {
                region: region.into(),
                capacity_types: Vec::new(),
            },
            max_nodes: None,
            max_gpus: None,
            max_hourly_usd: None,
            idle_timeout: Duration::from_secs(600),
            refuses_copies: None,
        }
    }

    /// A pool of another cluster's nodes, with its GPU-hour price.
    pub fn cluster(name: impl Into<String>, gpu_cost_per_hour: f64) -> Pool {
        Pool {
            kind: PoolKind::Cluster {
                gpu_cost_per_hour,
                location: None,
            },
            ..Pool::private(name)
        }
    }

    pub fn is_cloud(&self) -> bool {
        matches!(self.kind, PoolKind::Cloud { .. })
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, PoolKind::Cluster { .. })
    }

    /// Where the jobs of this pool run.
    pub fn environment(&self) -> crate::Environment {
        match self.kind {
            PoolKind::Private { .. } => crate::Environment::Private,
            PoolKind::Cloud { .. } => crate::Environment::Cloud,
            PoolKind::Cluster { .. } => crate::Environment::Remote,
        }
    }
}

/// A node that can run GPU pods.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub pool: String,
    pub gpu_model: Option<GpuModel>,
    pub gpus: u32,
    /// GPUs not taken by running or starting jobs.
    pub free_gpus: u32,
    /// Ready and schedulable (not cordoned, not being drained).
    pub schedulable: bool,
    /// Of the GPUs not free, those held by pods being stopped (preempted, or of a job's
    /// earlier attempt): free once their grace period ends. Included in `gpus - free_gpus`.
    pub releasing_gpus: u32,
    /// For cloud nodes: the instance behind it.
    pub instance_id: Option<String>,
    /// Since when the node has had no job (`None` while it runs one).
    pub idle_since: Option<Time>,
    /// What its GPUs come with (GFD's labels).
    pub facts: crate::Facts,
    /// Its place in its pool's topology: (level's label key, its value) for each level of
    /// the pool (`spec.private.topology.levels`, outermost first) the node is labelled with.
    pub domains: Vec<(String, String)>,
}

impl Node {
    /// The node's domain at topology level `level` (a label key), if it is in one.
    pub fn domain(&self, level: &str) -> Option<&str> {
        self.domains
            .iter()
            .find(|(k, _)| k == level)
            .map(|(_, v)| v.as_str())
    }
}

/// Where a gang wants its replicas (`GpuJob spec.topology`): within one domain of a topology
/// level (`required`), or in as few of that level's domains as hold it (`preferred`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologyWish {
    /// The level: a node label key of the private pools' `topology.levels`.
    pub level: String,
    pub required: bool,
}

/// Whether an offering's instances get Elastic Fabric Adapter interfaces (the pool's
/// `spec.aws.efa`, and what the provider says of the instance type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Efa {
    /// The pool does not ask for EFA.
    #[default]
    NotAsked,
    /// The pool asks for EFA and the type supports it: its instances get an EFA interface.
    Given,
    /// The pool asks for EFA and the provider does not say the type supports it: its
    /// instances get a plain interface, and gangs with `spec.topology` do not use it.
    Unsupported,
}

/// Something a cloud pool can launch: an instance type bought one way in one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub pool: String,
    pub instance_type: String,
    pub gpu_model: GpuModel,
    pub gpus: u32,
    pub capacity_type: CapacityType,
    pub region: String,
    pub zone: String,
    /// USD per hour for one instance.
    pub hourly_price: f64,
    /// After a capacity error, skipped until then.
    pub unavailable_until: Option<Time>,
    /// Memory of one GPU, GiB (0 when unknown).
    pub gpu_memory_gib: f64,
    /// Spot interruptions of this offering remembered within [`crate::spot::WINDOW`].
    pub recent_interruptions: u32,
    /// `Cloud` for an EC2 offering; `Remote` for the GPUs of a cluster pool, as its rules'
    /// offering filters see them (`decide/remote.rs`).
    pub environment: crate::Environment,
    /// What its instances come with, as its pool promises (driver and CUDA of the image) and
    /// its instance type says (GPU model and memory).
    pub facts: crate::Facts,
    pub efa: Efa,
}

/// A Dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub name: String,
    pub classification: Classification,
    /// Regions holding a cloud copy.
    pub cloud_regions: Vec<String>,
    /// Locations of other clusters holding a copy (`environment: remote` copies).
    pub remote_locations: Vec<String>,
    pub size_gib: f64,
    pub egress_usd_per_gib: f64,
}

/// Where a job is in its life, as far as placement is concerned.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    /// Waiting for a decision.
    Pending,
    /// Instances are launching for it (the need key it waits on).
    Provisioning { need: String, pool: String },
    /// Running (or its pods are starting) on these nodes, one entry per replica.
    Running {
        nodes: Vec<String>,
        started_at: Time,
        environment: crate::Environment,
    },
    /// Moving from the cloud to these private nodes (one per replica) of `pool`, which are held
    /// for it; `ready` once its cloud pods have stopped.
    Suspended {
        nodes: Vec<String>,
        pool: String,
        ready: bool,
    },
}

/// A GpuJob.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// `namespace/name`.
    pub id: String,
    pub namespace: String,
    pub queue: String,
    pub priority: i32,
    pub replicas: u32,
    pub gpus_per_replica: u32,
    /// Acceptable models; empty means any.
    pub gpu_models: Vec<GpuModel>,
    pub datasets: Vec<String>,
    pub restartable: bool,
    /// When the workload last saved a checkpoint (restartable jobs announce it), if known.
    pub checkpointed_at: Option<Time>,
    /// How often the workload checkpoints: the estimate of lost work when `checkpointed_at`
    /// is unknown.
    pub checkpoint_interval: Option<Duration>,
    pub estimated_runtime: Option<Duration>,
    pub max_runtime: Option<Duration>,
    pub deadline: Option<Time>,
    pub max_hourly_cost: Option<f64>,
    pub placement: Placement,
    /// Where its replicas go relative to each other on private nodes, when it says.
    pub topology: Option<TopologyWish>,
    /// What it requires of the GPUs' driver, CUDA, product and memory.
    pub requirements: crate::Requirements,
    pub labels: BTreeMap<String, String>,
    /// What it runs: `GpuJob` (the pods of its template), else the kind of the workload it
    /// stands for (`Job`, ...).
    pub kind: String,
    /// Why its pods cannot run in another cluster (its template names Secrets, tokens or host
    /// paths of this one), when they cannot: cluster pools are not for it.
    pub not_portable: Option<String>,
    /// Why no more cloud instances are launched for it, when none are: machines launched for
    /// it kept failing its `requirements` at join (reason `RequirementsUnmet`).
    pub cloud_closed: Option<String>,
    pub queued_at: Time,
    /// Incremented each time the job is stopped and requeued; part of its need key.
    pub attempt: u32,
    pub state: JobState,
}

impl Job {
    /// A pending one-replica job of `gpus` GPUs in `queue`, queued at `queued_at`.
    pub fn new(id: impl Into<String>, queue: impl Into<String>, gpus: u32, queued_at: Time) -> Job {
        let id = id.into();
        let namespace = id
            .split_once('/')
            .map(|(ns, _)| ns.to_string())
            .unwrap_or_default();
        Job {
            id,
            namespace,
            queue: queue.into(),
            priority: 0,
            replicas: 1,
            gpus_per_replica: gpus,
            gpu_models: Vec::new(),
            datasets: Vec::new(),
            restartable: false,
            checkpointed_at: None,
            checkpoint_interval: None,
            estimated_runtime: None,
            max_runtime: None,
            deadline: None,
            max_hourly_cost: None,
            placement: Placement::Auto,
            topology: None,
            requirements: crate::Requirements::default(),
            labels: BTreeMap::new(),
            not_portable: None,
            kind: "GpuJob".into(),
            cloud_closed: None,
            queued_at,
            attempt: 0,
            state: JobState::Pending,
        }
    }

    pub fn total_gpus(&self) -> u32 {
        self.replicas.saturating_mul(self.gpus_per_replica)
    }

    /// The key of this job's current need for cloud capacity: one per job and attempt.
    pub fn need_key(&self) -> String {
        format!("{}#{}", self.id, self.attempt)
    }

    /// Whether instances (or nodes) with these GPUs can hold every replica at once, each
    /// replica on one of them.
    pub fn fits_in_instances(&self, gpus: impl IntoIterator<Item = u32>) -> bool {
        let g = self.gpus_per_replica;
        g == 0
            || gpus.into_iter().map(|n| u64::from(n / g)).sum::<u64>() >= u64::from(self.replicas)
    }

    pub fn accepts_model(&self, model: Option<&GpuModel>) -> bool {
        self.gpu_models.is_empty() || model.is_some_and(|m| self.gpu_models.contains(m))
    }

    /// Whether GPUs of this model and these facts will do: a model it accepts and every
    /// requirement met.
    pub fn accepts(&self, model: Option<&GpuModel>, facts: &crate::Facts) -> bool {
        self.accepts_model(model) && self.requirements.met_by(facts)
    }

    /// Whether GPUs of every model and any facts will do (no model named, no requirement).
    pub fn accepts_any(&self) -> bool {
        self.gpu_models.is_empty() && self.requirements.is_empty()
    }

    /// Whether a node will do (model and requirements; not its free GPUs).
    pub fn accepts_node(&self, node: &Node) -> bool {
        self.accepts(node.gpu_model.as_ref(), &node.facts)
    }

    /// Whether two jobs accept the same GPUs (for lookups kept per gang shape).
    pub fn same_accepts(&self, models: &[GpuModel], requirements: &crate::Requirements) -> bool {
        self.gpu_models == models && self.requirements == *requirements
    }

    /// How much of its work a job running since `started_at` loses if stopped at `now`: a
    /// restartable job since its last checkpoint (announced, else estimated from its
    /// checkpoint interval, else since it started); any other job everything since it started.
    pub fn work_at_risk(&self, started_at: Time, now: Time) -> Duration {
        let ran = now.since(started_at);
        if !self.restartable {
            return ran;
        }
        match (self.checkpointed_at, self.checkpoint_interval) {
            (Some(c), _) if c >= started_at => now.since(c),
            (_, Some(i)) if i > Duration::ZERO => {
                Duration::from_millis(ran.as_millis() % i.as_millis())
            }
            _ => ran,
        }
    }

    /// The runtime to plan with: the estimate, else the limit.
    pub fn planning_runtime(&self) -> Option<Duration> {
        self.estimated_runtime.or(self.max_runtime)
    }
}

/// A cloud instance Spillway launched (running or still launching).
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub pool: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub zone: String,
    pub gpus: u32,
    pub hourly_price: f64,
    /// The need it was launched for.
    pub need: String,
    /// The queue that pays for it.
    pub queue: String,
    /// The node it became, once joined.
    pub node: Option<String>,
    pub launched_at: Time,
}

/// Scheduler knobs. The defaults are Spillway's own strategy; the simulator turns them off to
/// replay baselines.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// How a queue treats a job that does not fit yet.
    pub order: QueueOrder,
    /// How private nodes are chosen for a job that fits.
    pub packing: Packing,
    /// Do not burst a job whose estimated private start is sooner than a cloud node could be
    /// ready (`cloud_ready_delay`).
    pub runtime_aware: bool,
    /// How long a launched instance takes to become a usable node.
    pub cloud_ready_delay: Duration,
    /// Runtime assumed for cost estimates when a job has neither estimate nor limit.
    pub default_runtime: Duration,
    /// What restarting a job elsewhere costs besides its lost work (pulling its image, loading
    /// its checkpoint): counted against the saving of moving a cloud job home.
    pub restart_overhead: Duration,
    /// Write a human sentence into every decision. The simulator turns it off: it reads only
    /// outcomes and reasons, and thousands of waiting jobs per cycle make the sentences its
    /// main cost.
    pub explain: bool,
    /// Put a decision into the plan for every job that keeps waiting in its queue. The
    /// operator writes them into statuses; the simulator acts only on starts, launches,
    /// terminations and rejections and turns it off, which also lets a cycle pass over jobs
    /// whose only possible outcome is to keep waiting (see `decide/private.rs`).
    pub wait_decisions: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            order: QueueOrder::Conservative,
            packing: Packing::BestFit,
            runtime_aware: true,
            cloud_ready_delay: Duration::from_secs(180),
            default_runtime: Duration::from_secs(3600),
            restart_overhead: Duration::from_secs(300),
            explain: true,
            wait_decisions: true,
        }
    }
}

/// What a queue does when its next job does not fit on free private GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QueueOrder {
    /// Nothing behind the blocked job starts privately (strict arrival order per queue).
    Strict,
    /// EASY backfilling: the blocked job reserves the GPUs it is expected to get; smaller jobs
    /// start ahead of it when they do not delay that start.
    #[default]
    Backfill,
    /// Every job that fits starts, in order, with no reservation for the blocked ones
    /// (Starburst's "loop" scheduling). Large jobs can be passed over indefinitely.
    Greedy,
    /// Conservative backfilling: every waiting job with a runtime estimate is planned, in
    /// order, at the earliest time its gang fits for its whole runtime, and holds that slot;
    /// a job starts now only if it delays no planned one. A job that may burst and whose
    /// planned start is later than its wait allows bursts at once instead of waiting first
    /// (`PrivateStartTooLate`). Jobs without estimates start only where they delay nothing and
    /// otherwise wait as usual.
    Conservative,
}

/// Which private nodes a job takes among those with room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Packing {
    /// The nodes with the least room that suffices (keeps whole nodes free for gangs).
    #[default]
    BestFit,
    /// The first nodes in inventory order with room.
    FirstFit,
}

/// Everything `decide` looks at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub settings: Settings,
    pub jobs: Vec<Job>,
    pub queues: Vec<Queue>,
    pub pools: Vec<Pool>,
    pub nodes: Vec<Node>,
    pub offerings: Vec<Offering>,
    pub datasets: Vec<Dataset>,
    pub instances: Vec<Instance>,
    /// Queues that exist but cannot be used as written, by name, with why. Their jobs wait
    /// with reason `QueueInvalid` instead of `QueueNotFound`.
    pub invalid_queues: std::collections::BTreeMap<String, String>,
    /// Datasets that exist but cannot be used as written, by name, with why.
    pub invalid_datasets: std::collections::BTreeMap<String, String>,
}
