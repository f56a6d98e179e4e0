//! `spillway policy test`: runs the `tests` of BurstPolicy files through the real decision core.
//!
//! A test gives a job (a GpuJob `spec`; `template` may be left out), a situation and the
//! expected decision. The situation (all fields optional):
//!
//! ```yaml
//! situation:
//!   waited: 20m                 # how long the job has been queued (default 0s)
//!   privateGpus: 1x8            # private nodes, NODESxGPUS[:MODEL] (default 1x8)
//!   privateFreeGpus: 0          # free GPUs on each private node (default 0: all busy)
//!   queue: {burst: {enabled: true}}   # the job's GpuQueue spec (default: bursting, 15m)
//!   queueState: {hourlyUSD: 10, spentThisMonthUSD: 900}
//!   datasets: {patients: {classification: Restricted, sizeGiB: 100}}   # name -> Dataset spec
//!   offerings:                  # what the cloud offers (default: nothing)
//!   - {instanceType: p4d.24xlarge, gpuModel: A100, gpus: 8, capacityType: on-demand,
//!      region: us-east-1, zone: us-east-1a, hourlyPrice: 21.96}
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use spillway_api::policy::PolicyTest;
use spillway_api::{BurstPolicy, DatasetSpec, GpuJob, GpuQueue, GpuQueueSpec};
use spillway_core::{
    CapacityType, Duration, Environment, GpuModel, Node, Offering, Outcome, Pool, Snapshot, Time,
};

use crate::PolicyEngine;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Situation {
    #[serde(default)]
    waited: Option<String>,
    #[serde(default)]
    private_gpus: Option<String>,
    #[serde(default)]
    private_free_gpus: Option<u32>,
    #[serde(default)]
    queue: Option<GpuQueueSpec>,
    #[serde(default)]
    queue_state: Option<QueueStateSpec>,
    #[serde(default)]
    datasets: BTreeMap<String, DatasetSpec>,
    #[serde(default)]
    offerings: Vec<OfferingSpec>,
    /// Other clusters (`cluster` pools), tried in this order.
    #[serde(default)]
    remote_clusters: Vec<RemoteSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RemoteSpec {
    name: String,
    /// Its nodes, `NODESxGPUS[:MODEL]`.
    gpus: String,
    /// Free GPUs per node (default: all).
    #[serde(default)]
    free_gpus: Option<u32>,
    #[serde(default)]
    gpu_cost_per_hour: f64,
    #[serde(default)]
    location: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct QueueStateSpec {
    #[serde(rename = "hourlyUSD", default)]
    hourly_usd: f64,
    #[serde(rename = "spentThisMonthUSD", default)]
    spent_this_month_usd: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OfferingSpec {
    instance_type: String,
    gpu_model: String,
    gpus: u32,
    #[serde(default = "on_demand")]
    capacity_type: CapacityType,
    region: String,
    #[serde(default)]
    zone: Option<String>,
    hourly_price: f64,
    /// Memory of one GPU; the built-in table's value for the model when left out.
    #[serde(rename = "gpuMemoryGiB", default)]
    gpu_memory_gib: Option<f64>,
    #[serde(default)]
    recent_interruptions: u32,
}

fn on_demand() -> CapacityType {
    CapacityType::OnDemand
}

/// The outcome of one test.
#[derive(Clone, Debug, PartialEq)]
pub struct TestResult {
    /// `policy/test`.
    pub name: String,
    /// Problems, empty when the test passed.
    pub failures: Vec<String>,
    /// What was decided, in one line.
    pub actual: String,
    /// The rules that applied to the job, in order.
    pub trail: Vec<String>,
}

impl TestResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl fmt::Display for TestResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            return write!(f, "PASS {}", self.name);
        }
        writeln!(f, "FAIL {}", self.name)?;
        for m in &self.failures {
            writeln!(f, "    {m}")?;
        }
        writeln!(f, "    decided: {}", self.actual)?;
        write!(
            f,
            "    rules that applied: {}",
            if self.trail.is_empty() {
                "none".to_string()
            } else {
                self.trail.join(", ")
            }
        )
    }
}

/// Runs every test of `policies` with all of `policies` in force.
pub fn run_tests(engine: &PolicyEngine, policies: &[BurstPolicy]) -> Vec<TestResult> {
    let mut out = Vec::new();
    for p in policies {
        let pname = p.metadata.name.clone().unwrap_or_default();
        for t in &p.spec.tests {
            let name = format!("{pname}/{}", t.name);
            out.push(match run_one(engine, t) {
                Ok(mut r) => {
                    r.name = name;
                    r
                }
                Err(e) => TestResult {
                    name,
                    failures: vec![format!("invalid test: {e}")],
                    actual: "nothing".into(),
                    trail: vec![],
                },
            });
        }
    }
    out
}

fn run_one(engine: &PolicyEngine, t: &PolicyTest) -> Result<TestResult, String> {
    let (snapshot, now) = situation_snapshot(&t.job, t.situation.as_ref())?;
    let plan = spillway_core::decide(&snapshot, engine, now);
    let trail = engine.applied_rules(&snapshot, now);
    let Some(d) = plan.decisions.into_iter().find(|d| d.job == TEST_JOB) else {
        return Err("the core made no decision for the job".into());
    };
    Ok(check(&t.expect, d, trail))
}

/// The id of the job a situation holds.
pub const TEST_JOB: &str = "test/test-job";

/// The world a test or `spillway explain` describes: one job (a GpuJob `spec`, `template` and
/// `queue` optional) in a situation (see the module docs). Returns the snapshot and `now`.
pub fn situation_snapshot(
    job: &serde_json::Value,
    situation: Option<&serde_json::Value>,
) -> Result<(Snapshot, Time), String> {
    let situation: Situation = match situation {
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("situation: {e}"))?,
        None => Situation::default(),
    };
    let mut job_spec = job.clone();
    if let Some(obj) = job_spec.as_object_mut() {
        obj.entry("template").or_insert_with(
            || serde_json::json!({"spec": {"containers": [{"name": "test", "image": "test"}]}}),
        );
        obj.entry("queue")
            .or_insert_with(|| serde_json::json!("test-queue"));
    }
    let job: GpuJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "test-job", "namespace": "test"}, "spec": job_spec,
    }))
    .map_err(|e| format!("job: {e}"))?;
    let waited = match &situation.waited {
        Some(w) => Duration::parse(w).map_err(|e| format!("situation.waited: {e}"))?,
        None => Duration::ZERO,
    };
    let core_job =
        spillway_api::convert::job(&job, Time::from_millis(0)).map_err(|e| format!("job: {e}"))?;
    let queue_spec = situation.queue.clone().unwrap_or_else(|| {
        serde_json::from_value(serde_json::json!({"burst": {"enabled": true}}))
            .unwrap_or_else(|_| empty_queue())
    });
    let queue: GpuQueue = GpuQueue::new(&core_job.queue, queue_spec);
    let mut core_queue =
        spillway_api::convert::queue(&queue).map_err(|e| format!("situation.queue: {e}"))?;
    let mut snapshot = Snapshot {
        pools: vec![Pool::private("private"), Pool::cloud("cloud", "any")],
        ..Default::default()
    };
    let shape = situation.private_gpus.as_deref().unwrap_or("1x8");
    let spillway_core::NodeShape {
        nodes: count,
        gpus,
        model,
    } = spillway_core::NodeShape::parse(shape).map_err(|e| format!("situation.privateGpus {e}"))?;
    for i in 0..count {
        snapshot.nodes.push(Node {
            facts: Default::default(),
            name: format!("private-{i}"),
            pool: "private".into(),
            gpu_model: model.clone(),
            gpus,
            free_gpus: situation.private_free_gpus.unwrap_or(0).min(gpus),
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            domains: Vec::new(),
        });
    }
    for (k, r) in situation.remote_clusters.iter().enumerate() {
        let field = format!("situation.remoteClusters[{k}]");
        spillway_api::validate::check_dns_subdomain(&r.name)
            .map_err(|e| format!("{field}.name: {e}"))?;
        if !(r.gpu_cost_per_hour.is_finite() && r.gpu_cost_per_hour >= 0.0) {
            return Err(format!(
                "{field}.gpuCostPerHour: must be a number of at least 0"
            ));
        }
        if snapshot.pools.iter().any(|p| p.name == r.name) {
            return Err(format!(
                "{field}.name: pool {:?} already exists (`private` and `cloud` are the situation's own)",
                r.name
            ));
        }
        let shape =
            spillway_core::NodeShape::parse(&r.gpus).map_err(|e| format!("{field}.gpus {e}"))?;
        let mut pool = Pool::cluster(r.name.clone(), r.gpu_cost_per_hour);
        pool.kind = spillway_core::PoolKind::Cluster {
            gpu_cost_per_hour: r.gpu_cost_per_hour,
            location: r.location.clone(),
        };
        snapshot.pools.push(pool);
        for i in 0..shape.nodes {
            snapshot.nodes.push(Node {
                facts: Default::default(),
                name: format!("{}-{i}", r.name),
                pool: r.name.clone(),
                gpu_model: shape.model.clone(),
                gpus: shape.gpus,
                free_gpus: r.free_gpus.unwrap_or(shape.gpus).min(shape.gpus),
                schedulable: true,
                releasing_gpus: 0,
                instance_id: None,
                idle_since: None,
                domains: Vec::new(),
            });
        }
    }
    if !situation.remote_clusters.is_empty() {
        // The queue tries the situation's clusters first, in order, then its own list (an
        // empty one: the cloud).
        let mut listed = std::mem::take(&mut core_queue.burst.pools);
        if listed.is_empty() {
            listed.push("cloud".into());
        }
        core_queue.burst.pools = situation
            .remote_clusters
            .iter()
            .map(|r| r.name.clone())
            .chain(listed)
            .collect();
    }
    for (name, spec) in &situation.datasets {
        let d = spillway_api::Dataset::new(name, spec.clone());
        snapshot.datasets.push(
            spillway_api::convert::dataset(&d)
                .map_err(|e| format!("situation.datasets.{name}: {e}"))?,
        );
    }
    for o in &situation.offerings {
        snapshot.offerings.push(Offering {
            facts: Default::default(),
            pool: "cloud".into(),
            instance_type: o.instance_type.clone(),
            gpu_model: GpuModel::normalize(&o.gpu_model),
            gpus: o.gpus,
            capacity_type: o.capacity_type,
            region: o.region.clone(),
            zone: o.zone.clone().unwrap_or_else(|| format!("{}a", o.region)),
            hourly_price: o.hourly_price,
            unavailable_until: None,
            gpu_memory_gib: o
                .gpu_memory_gib
                .or_else(|| GpuModel::normalize(&o.gpu_model).memory_gib())
                .unwrap_or(0.0),
            recent_interruptions: o.recent_interruptions,
            efa: Default::default(),
            environment: Environment::Cloud,
        });
    }
    let state = situation.queue_state.unwrap_or_default();
    core_queue.spent_this_month_usd = state.spent_this_month_usd;
    if state.hourly_usd > 0.0 {
        // The queue's current spend, as one running instance of that price.
        snapshot.instances.push(spillway_core::Instance {
            id: "i-situation".into(),
            pool: "cloud".into(),
            instance_type: "situation".into(),
            capacity_type: CapacityType::OnDemand,
            zone: String::new(),
            gpus: 0,
            hourly_price: state.hourly_usd,
            need: "situation".into(),
            queue: core_queue.name.clone(),
            node: Some("situation".into()),
            launched_at: Time::from_millis(0),
        });
    }
    snapshot.queues = vec![core_queue];
    snapshot.jobs = vec![core_job];
    Ok((snapshot, Time::from_millis(0) + waited))
}

fn check(
    e: &spillway_api::policy::PolicyExpectation,
    d: spillway_core::Decision,
    trail: Vec<String>,
) -> TestResult {
    let env = match d.outcome {
        Outcome::StartPrivate => Some(Environment::Private),
        Outcome::StartCloud => Some(Environment::Cloud),
        Outcome::StartRemote => Some(Environment::Remote),
        _ => None,
    };
    let instance = d.offering.as_ref().map(|o| o.instance_type.clone());
    let actual = format!(
        "{} {} (rule {}{}): {}",
        d.outcome,
        d.reason,
        d.rule.as_deref().unwrap_or("none"),
        instance
            .as_deref()
            .map(|i| format!(", {i}"))
            .unwrap_or_default(),
        d.message
    );
    let mut failures = Vec::new();
    if let Some(want) = &e.outcome
        && want != d.outcome.as_str()
    {
        failures.push(format!("outcome: expected {want}, got {}", d.outcome));
    }
    if let Some(want) = e.environment
        && Some(want) != env
    {
        failures.push(format!(
            "environment: expected {want}, got {}",
            env.map_or("none", |e| e.as_str())
        ));
    }
    if let Some(want) = &e.reason
        && want != d.reason.as_str()
    {
        failures.push(format!("reason: expected {want}, got {}", d.reason));
    }
    if let Some(want) = &e.rule {
        let got = d.rule.clone().unwrap_or_default();
        if got != *want && !got.ends_with(&format!("/{want}")) {
            failures.push(format!(
                "rule: expected {want}, got {}",
                if got.is_empty() { "none" } else { &got }
            ));
        }
    }
    if let Some(want) = &e.instance_type
        && Some(want) != instance.as_ref()
    {
        failures.push(format!(
            "instanceType: expected {want}, got {}",
            instance.as_deref().unwrap_or("none")
        ));
    }
    if let Some(want) = e.capacity_type {
        let got = d.offering.as_ref().map(|o| o.capacity_type);
        if got != Some(want) {
            failures.push(format!(
                "capacityType: expected {want}, got {}",
                got.map_or("none", |c| c.as_str())
            ));
        }
    }
    TestResult {
        name: String::new(),
        failures,
        actual,
        trail,
    }
}

fn empty_queue() -> GpuQueueSpec {
    GpuQueueSpec {
        namespaces: Vec::new(),
        namespace_selector: None,
        private_quota: None,
        borrowing: true,
        weight: 1,
        max_priority: 0,
        burst: None,
        budget: None,
        preemption: None,
        identity: None,
        telemetry: None,
        idle: None,
    }
}
