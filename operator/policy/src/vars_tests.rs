//! The variables built straight into CEL values against serde's rendering of the same views
//! (the reference), and against the list `variables::VARIABLES` documents.

use std::collections::{BTreeMap, BTreeSet};

use cel::Value;
use serde::Serialize;
use spillway_core::*;

use super::vars;
use crate::reads::Reads;

static ALL: std::sync::LazyLock<Reads> = std::sync::LazyLock::new(Reads::all);
use crate::variables;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobView<'a> {
    name: &'a str,
    namespace: &'a str,
    queue: &'a str,
    priority: i64,
    replicas: u64,
    gpus_per_replica: u64,
    total_gpus: u64,
    gpu_models: Vec<&'a str>,
    datasets: Vec<DatasetView<'a>>,
    restartable: bool,
    placement: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_runtime_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_runtime_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_hourly_cost: Option<f64>,
    requirements: RequirementsView,
    labels: &'a BTreeMap<String, String>,
    kind: &'a str,
    topology: TopologyView<'a>,
}

#[derive(Serialize)]
struct TopologyView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    required: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preferred: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequirementsView {
    #[serde(skip_serializing_if = "Option::is_none")]
    min_driver_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_cuda_version: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gpu_products: Vec<String>,
    #[serde(rename = "minGpuMemoryGiB", skip_serializing_if = "Option::is_none")]
    min_gpu_memory_gib: Option<u64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DatasetView<'a> {
    name: &'a str,
    classification: &'a str,
    #[serde(rename = "sizeGiB")]
    size_gib: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueueView<'a> {
    name: &'a str,
    pending_jobs: u64,
    running_jobs: u64,
    private_gpus_in_use: u64,
    cloud_gpus_in_use: u64,
    remote_gpus_in_use: u64,
    #[serde(rename = "hourlyUSD")]
    hourly_usd: f64,
    #[serde(rename = "spentThisMonthUSD")]
    spent_this_month_usd: f64,
    #[serde(
        rename = "budgetLeftHourlyUSD",
        skip_serializing_if = "Option::is_none"
    )]
    budget_left_hourly_usd: Option<f64>,
    #[serde(
        rename = "budgetLeftMonthlyUSD",
        skip_serializing_if = "Option::is_none"
    )]
    budget_left_monthly_usd: Option<f64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OfferingView<'a> {
    pool: &'a str,
    pool_kind: &'a str,
    instance_type: &'a str,
    gpu_model: &'a str,
    gpus: u64,
    capacity_type: &'a str,
    region: &'a str,
    zone: &'a str,
    hourly_price: f64,
    #[serde(rename = "gpuMemoryGiB")]
    gpu_memory_gib: f64,
    recent_interruptions: u64,
}

/// The variables as serde made them: job, queue, offering.
fn reference(
    ctx: &PolicyContext<'_>,
    offering: Option<&Offering>,
) -> (Value, Value, Option<Value>) {
    let job = ctx.job;
    let name = job.id.split_once('/').map_or(job.id.as_str(), |(_, n)| n);
    let view = JobView {
        name,
        namespace: &job.namespace,
        queue: &job.queue,
        priority: i64::from(job.priority),
        replicas: u64::from(job.replicas),
        gpus_per_replica: u64::from(job.gpus_per_replica),
        total_gpus: u64::from(job.total_gpus()),
        gpu_models: job.gpu_models.iter().map(|m| m.as_str()).collect(),
        datasets: ctx
            .datasets
            .iter()
            .map(|d| DatasetView {
                name: &d.name,
                classification: d.classification.as_str(),
                size_gib: d.size_gib,
            })
            .collect(),
        restartable: job.restartable,
        placement: job.placement.as_str(),
        estimated_runtime_seconds: job.estimated_runtime.map(|d| d.as_secs_f64()),
        max_runtime_seconds: job.max_runtime.map(|d| d.as_secs_f64()),
        max_hourly_cost: job.max_hourly_cost,
        requirements: RequirementsView {
            min_driver_version: job.requirements.min_driver.map(|v| v.to_string()),
            min_cuda_version: job.requirements.min_cuda.map(|v| v.to_string()),
            gpu_products: job.requirements.gpu_products.clone(),
            min_gpu_memory_gib: job.requirements.min_gpu_memory_gib.map(u64::from),
        },
        labels: &job.labels,
        kind: &job.kind,
        topology: TopologyView {
            required: (job.topology.as_ref())
                .filter(|t| t.required)
                .map(|t| t.level.as_str()),
            preferred: (job.topology.as_ref())
                .filter(|t| !t.required)
                .map(|t| t.level.as_str()),
        },
    };
    let q = ctx.queue_state;
    let queue = QueueView {
        name: &ctx.queue.name,
        pending_jobs: u64::from(q.pending_jobs),
        running_jobs: u64::from(q.running_jobs),
        private_gpus_in_use: u64::from(q.private_gpus_in_use),
        cloud_gpus_in_use: u64::from(q.cloud_gpus_in_use),
        remote_gpus_in_use: u64::from(q.remote_gpus_in_use),
        hourly_usd: q.hourly_usd,
        spent_this_month_usd: q.spent_this_month_usd,
        budget_left_hourly_usd: ctx
            .queue
            .budget_hourly_usd
            .map(|b| (b - q.hourly_usd).max(0.0)),
        budget_left_monthly_usd: ctx
            .queue
            .budget_monthly_usd
            .map(|b| (b - q.spent_this_month_usd).max(0.0)),
    };
    let offering = offering.map(|o| {
        cel::to_value(OfferingView {
            pool: &o.pool,
            pool_kind: "aws",
            instance_type: &o.instance_type,
            gpu_model: o.gpu_model.as_str(),
            gpus: u64::from(o.gpus),
            capacity_type: o.capacity_type.as_str(),
            region: &o.region,
            zone: &o.zone,
            hourly_price: o.hourly_price,
            gpu_memory_gib: o.gpu_memory_gib,
            recent_interruptions: u64::from(o.recent_interruptions),
        })
        .unwrap()
    });
    (
        cel::to_value(view).unwrap(),
        cel::to_value(queue).unwrap(),
        offering,
    )
}

fn value(v: &(dyn cel::common::value::Val + '_)) -> Value {
    Value::try_from(v).expect("converts")
}

/// A variable as the interpreter resolves it.
fn var(vars: &crate::Vars<'_, '_>, name: &str) -> Option<Value> {
    use cel::context::VariableResolver;
    vars.resolve(name).map(|v| value(v.as_ref()))
}

/// The value with every type spelt out and maps in key order (`Value`'s own equality counts
/// `1` and `1u` equal, and a rule can tell them apart).
fn canon(v: &Value) -> String {
    match v {
        Value::Map(m) => {
            let mut fields: Vec<String> = m
                .map
                .iter()
                .map(|(k, v)| format!("{k:?}: {}", canon(v)))
                .collect();
            fields.sort();
            format!("{{{}}}", fields.join(", "))
        }
        Value::List(l) => format!("[{}]", l.iter().map(canon).collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}"),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    match v {
        Value::Map(m) => m
            .map
            .keys()
            .map(|k| match k {
                cel::objects::Key::String(s) => s.to_string(),
                other => panic!("non-string key {other:?}"),
            })
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

fn listed(name: &str) -> BTreeSet<String> {
    variables::variable(name)
        .map(|v| v.fields.iter().map(|f| f.name.to_string()).collect())
        .unwrap_or_default()
}

fn offering() -> Offering {
    Offering {
        facts: Default::default(),
        pool: "aws".into(),
        instance_type: "p4d.24xlarge".into(),
        gpu_model: GpuModel::normalize("A100"),
        gpus: 8,
        capacity_type: CapacityType::Spot,
        region: "us-east-1".into(),
        zone: "us-east-1b".into(),
        hourly_price: 8.5,
        unavailable_until: None,
        gpu_memory_gib: 40.0,
        recent_interruptions: 3,
        efa: Default::default(),
        environment: spillway_core::Environment::Cloud,
    }
}

/// Every job shape the fields can take: optional fields set and not, labels, datasets,
/// models, budgets.
/// A Confidential dataset the jobs that read data read.
fn contracts() -> Dataset {
    Dataset {
        name: "contracts".into(),
        classification: Classification::Confidential,
        cloud_regions: vec![],
        remote_locations: vec![],
        size_gib: 50.0,
        egress_usd_per_gib: 0.09,
    }
}

/// `job` in `queue`, having waited `waited_s` seconds (the clock 5 s past that), reading
/// `dataset` when it reads any.
fn context<'a>(
    job: &'a Job,
    queue: &'a Queue,
    state: &'a QueueState,
    dataset: &'a Dataset,
    waited_s: u64,
) -> PolicyContext<'a> {
    PolicyContext {
        job,
        queue,
        queue_state: state,
        datasets: if job.datasets.is_empty() {
            vec![]
        } else {
            vec![dataset]
        },
        waited: Duration::from_secs(waited_s),
        now: Time::from_millis((waited_s as i64 + 5) * 1000),
    }
}

fn jobs() -> Vec<(Job, Queue)> {
    let mut plain = Job::new("ml/plain", "research", 1, Time::from_millis(0));
    plain.namespace = "ml".into();
    let mut full = Job::new("team-a/train", "research", 4, Time::from_millis(5_000));
    full.namespace = "team-a".into();
    full.replicas = 2;
    full.priority = -3;
    full.restartable = true;
    full.placement = Placement::PrivateOnly;
    full.gpu_models = vec![GpuModel::normalize("H100"), GpuModel::normalize("A100")];
    full.datasets = vec!["contracts".into()];
    full.estimated_runtime = Some(Duration::from_secs(7_200));
    full.max_runtime = Some(Duration::from_secs(9_000));
    full.max_hourly_cost = Some(12.5);
    full.requirements = Requirements {
        min_driver: Some("550.54".parse().unwrap()),
        min_cuda: Some("12.4".parse().unwrap()),
        gpu_products: vec!["*H100*".into()],
        min_gpu_memory_gib: Some(80),
    };
    full.labels = BTreeMap::from([
        ("team".to_string(), "vision".to_string()),
        ("tier".to_string(), "gold".to_string()),
    ]);
    full.kind = "Job".into();
    full.topology = Some(spillway_core::TopologyWish {
        level: "spillway.io/rack".into(),
        required: true,
    });
    let q = Queue::new("research");
    let mut budgeted = Queue::new("research");
    budgeted.budget_hourly_usd = Some(30.0);
    budgeted.budget_monthly_usd = Some(50_000.0);
    budgeted.spent_this_month_usd = 1_234.5;
    vec![
        (plain.clone(), q.clone()),
        (full.clone(), budgeted.clone()),
        (full, q),
        (plain, budgeted),
    ]
}

#[test]
fn the_values_equal_serdes_rendering_of_the_same_views() {
    let dataset = contracts();
    let state = QueueState {
        pending_jobs: 7,
        running_jobs: 2,
        private_gpus_in_use: 16,
        cloud_gpus_in_use: 8,
        remote_gpus_in_use: 4,
        hourly_usd: 21.96,
        spent_this_month_usd: 1_234.5,
    };
    let o = offering();
    for (job, queue) in jobs() {
        let ctx = context(&job, &queue, &state, &dataset, 1_800);
        for offering in [None, Some(&o)] {
            let built = vars(&ctx, offering, &ALL);
            let (job_ref, queue_ref, offering_ref) = reference(&ctx, offering);
            assert_eq!(
                canon(&var(&built, "job").unwrap()),
                canon(&job_ref),
                "{}",
                job.id
            );
            assert_eq!(canon(&var(&built, "queue").unwrap()), canon(&queue_ref));
            assert_eq!(
                var(&built, "offering").map(|v| canon(&v)),
                offering_ref.as_ref().map(canon)
            );
            assert_eq!(canon(&var(&built, "waited").unwrap()), "Float(1800.0)");
            assert_eq!(canon(&var(&built, "now").unwrap()), "Float(1805.0)");
        }
    }
}

/// The values the engine builds have exactly the fields `variables::VARIABLES` lists (all
/// optional ones present here).
#[test]
fn the_variable_list_matches_what_rules_see() {
    let (job, queue) = jobs().swap_remove(1);
    let state = QueueState::default();
    let o = offering();
    let ctx = PolicyContext {
        job: &job,
        queue: &queue,
        queue_state: &state,
        datasets: vec![],
        waited: Duration::ZERO,
        now: Time::from_millis(0),
    };
    let built = vars(&ctx, Some(&o), &ALL);
    assert_eq!(keys(&var(&built, "job").unwrap()), listed("job"));
    assert_eq!(keys(&var(&built, "queue").unwrap()), listed("queue"));
    assert_eq!(keys(&var(&built, "offering").unwrap()), listed("offering"));
}

/// Building only the fields the rules read changes no rule's result: every rule of the example
/// policies, and rules that read fields in each way the analysis knows (and some it treats as
/// reading everything), give the same value, error or not, with the pruned variables as with
/// the whole ones, for every job here, with and without an offering.
#[test]
fn pruned_variables_give_every_rule_the_same_result() {
    use cel::Context;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let m = spillway_api::manifests::Manifests::load(&dir).expect("example policies load");
    let policies: Vec<spillway_api::BurstPolicy> =
        m.policies.into_iter().map(|p| p.object).collect();
    let extra = [
        ("select", "job.labels['team'] == 'a' || job.priority > 5"),
        ("kind", "job.kind == 'Job' && job.totalGpus > 0u"),
        (
            "topology",
            "has(job.topology.required) && job.topology.required == 'spillway.io/rack'",
        ),
        (
            "index",
            "job['queue'] == 'research' && queue['pendingJobs'] >= 0u",
        ),
        (
            "absent",
            "job.maxHourlyCost < 10.0 || job.maxRuntimeSeconds > 1.0",
        ),
        (
            "presence",
            "has(job.estimatedRuntimeSeconds) && has(queue.budgetLeftHourlyUSD)",
        ),
        (
            "requirements",
            "has(job.requirements.minCudaVersion) && job.requirements.minCudaVersion == '12.4' && job.requirements.minGpuMemoryGiB >= 80u",
        ),
        // A field no job has, read by index (a dotted read of it is refused when the rule
        // compiles): it fails at every evaluation, with and without pruning.
        ("missing", "job['doesNotExist'] == 1"),
        ("computed", "job.labels.exists(k, job['labels'][k] == 'x')"),
        (
            "deep",
            "job.datasets.all(d, d.sizeGiB < 100.0) && job.gpuModels.size() >= 0",
        ),
        (
            "whole",
            "size(job) > 10 && [queue].exists(q, q.name == 'research')",
        ),
    ];
    // The examples alone; with the extra rules but the last; with all of them.
    let mut engines = vec![crate::PolicyEngine::compile(&policies).expect("compiles")];
    for n in [extra.len() - 1, extra.len()] {
        let rules: Vec<serde_json::Value> = extra[..n]
            .iter()
            .map(|(name, when)| {
                serde_json::json!({
                    "name": name, "when": when, "maxWait": "1m",
                    "offeringFilter": "offering.gpus >= 1u && offering['region'] != 'x'",
                })
            })
            .collect();
        let mut all = policies.clone();
        all.push(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
                "metadata": {"name": "zz-reads"},
                "spec": {"rules": rules},
            }))
            .expect("extra policy"),
        );
        engines.push(crate::PolicyEngine::compile(&all).expect("compiles"));
    }
    let pruned = |e: &crate::PolicyEngine| !e.reads.job.wants("placement");
    assert!(pruned(&engines[0]) && pruned(&engines[1]) && !pruned(&engines[2]));
    let dataset = contracts();
    let state = QueueState::default();
    let o = offering();
    let mut compared = 0;
    for (job, queue) in jobs() {
        let ctx = context(&job, &queue, &state, &dataset, 60);
        for (offering, engine) in [None, Some(&o)]
            .into_iter()
            .flat_map(|o| engines.iter().map(move |e| (o, e)))
        {
            let whole = vars(&ctx, offering, &ALL);
            let pruned = vars(&ctx, offering, &engine.reads);
            for rule in &engine.rules {
                for program in [&rule.when, &rule.offering_filter].into_iter().flatten() {
                    let run = |v: &crate::Vars<'_, '_>| {
                        let mut c = Context::with_env(engine.env.clone());
                        c.set_variable_resolver(v);
                        format!("{:?}", program.execute(&c))
                    };
                    assert_eq!(run(&pruned), run(&whole), "{} for {}", rule.id, job.id);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 40, "{compared}");
}
