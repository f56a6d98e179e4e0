//! `spillway explain --job FILE [--config DIR|FILE] [--situation FILE]`: one decision, offline,
//! with every rule evaluated. `spillway explain gpujob NAME [-n NS]`: the same, live, from the
//! cluster (see `kubectl::explain`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use spillway_api::manifests::Manifests;
use spillway_policy::{PolicyEngine, RuleOutcome, testing};

/// Explain the decision for one job: the outcome, the reason, the offering and every
/// BurstPolicy rule evaluated. Live: `explain gpujob NAME [-n NS]`; offline: `--job FILE`.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Live: `gpujob NAME` (or `gpujob/NAME`), read from the cluster.
    #[arg(value_name = "KIND NAME", conflicts_with = "job")]
    pub target: Vec<String>,
    /// Namespace of the GpuJob (live; default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Kubeconfig file (live).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (live).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Offline: a GpuJob manifest.
    #[arg(long, value_name = "FILE")]
    job: Option<PathBuf>,
    /// Manifests: BurstPolicies, and the job's GpuQueue and Datasets.
    #[arg(long, value_name = "DIR|FILE")]
    config: Option<PathBuf>,
    /// The situation (YAML): waited, privateGpus, privateFreeGpus, queueState, offerings...
    /// (the `situation` of a policy test, see docs/policy.md).
    #[arg(long, value_name = "FILE")]
    situation: Option<PathBuf>,
}

pub fn fail(message: String) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn read_yaml(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| {
        let (l, c) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        format!(
            "{}:{l}:{c}: {}",
            path.display(),
            e.to_string().lines().next().unwrap_or("")
        )
    })
}

/// Whether these arguments ask for a live job (`gpujob NAME`) rather than a `--job FILE`.
#[cfg(feature = "cluster")]
pub fn is_live(args: &ExplainArgs) -> bool {
    args.job.is_none() && !args.target.is_empty()
}

/// Offline: the decision for `--job FILE` (the live form is `kubectl::explain`).
pub fn run(args: ExplainArgs) -> ExitCode {
    let Some(job_file) = args.job.clone() else {
        if args.target.is_empty() {
            return fail(
                "give `gpujob NAME` (live, from the cluster) or `--job FILE` (offline)".into(),
            );
        }
        return fail(
            "this spillway was built without the `cluster` feature: explain live jobs with a full build, or give `--job FILE`".into(),
        );
    };
    let jobs = match Manifests::load(&job_file) {
        Ok(m) => m.jobs,
        Err(e) => return fail(e.to_string()),
    };
    let Some(job) = jobs.into_iter().next() else {
        return fail(format!("{}: no GpuJob in this file", job_file.display()));
    };
    let config = match &args.config {
        Some(p) => match Manifests::load(p) {
            Ok(m) => m,
            Err(e) => return fail(e.to_string()),
        },
        None => Manifests::default(),
    };
    let mut situation = match &args.situation {
        Some(p) => match read_yaml(p) {
            Ok(v) => v,
            Err(e) => return fail(e),
        },
        None => serde_json::json!({}),
    };
    // The job's queue and datasets from the config, unless the situation says otherwise.
    if let Some(obj) = situation.as_object_mut() {
        if let Some(q) = config
            .queues
            .iter()
            .find(|q| q.object.metadata.name.as_deref() == Some(job.object.spec.queue.as_str()))
            && !obj.contains_key("queue")
            && let Ok(spec) = serde_json::to_value(&q.object.spec)
        {
            obj.insert("queue".into(), spec);
        }
        let datasets = obj
            .entry("datasets")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(map) = datasets.as_object_mut() {
            for d in &config.datasets {
                let name = d.object.metadata.name.clone().unwrap_or_default();
                if let (false, Ok(spec)) = (
                    map.contains_key(&name),
                    serde_json::to_value(&d.object.spec),
                ) {
                    map.insert(name, spec);
                }
            }
        }
    }
    let policies: Vec<_> = config.policies.iter().map(|p| p.object.clone()).collect();
    let engine = match PolicyEngine::compile(&policies) {
        Ok(e) => e,
        Err(errors) => {
            return fail(
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
        }
    };
    let spec = match serde_json::to_value(&job.object.spec) {
        Ok(v) => v,
        Err(e) => return fail(e.to_string()),
    };
    let (snapshot, now) = match testing::situation_snapshot(&spec, Some(&situation)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let plan = spillway_core::decide(&snapshot, &engine, now);
    let Some(d) = plan.decisions.iter().find(|d| d.job == testing::TEST_JOB) else {
        return fail("the core made no decision for the job".into());
    };
    let name = job.object.metadata.name.clone().unwrap_or_default();
    let spec = &job.object.spec;
    println!(
        "GpuJob {name}: {} x {} GPUs in queue {}, waited {}",
        spec.replicas,
        spec.gpus_per_replica,
        spec.queue,
        now.since(spillway_core::Time::from_millis(0))
    );
    print_decision(d);
    print_rules(&engine.rule_report(&snapshot, now));
    ExitCode::SUCCESS
}

/// Prints a core decision: outcome, reason, sentence, rule, offering and estimates.
pub fn print_decision(d: &spillway_core::Decision) {
    println!("Decision: {} ({})", d.outcome, d.reason);
    println!("  {}", d.message);
    if let Some(rule) = &d.rule {
        println!("  Deciding rule: {rule}");
    }
    if let Some(o) = &d.offering {
        println!(
            "  Offering: {} {} in {} at ${:.2}/h per instance; whole job ${:.2}/h, expected ${:.2} in total",
            o.instance_type,
            o.capacity_type,
            o.zone,
            o.hourly_price,
            d.estimated_hourly_cost.unwrap_or(0.0),
            d.estimated_total_cost.unwrap_or(0.0)
        );
    }
    if let Some(w) = d.estimated_wait {
        println!("  Estimated wait: {w}");
    }
}

/// Prints every rule evaluated, in order, with what it did.
pub fn print_rules(report: &[(String, RuleOutcome)]) {
    if report.is_empty() {
        println!("Rules: none (queue and pool settings decide)");
        return;
    }
    println!("Rules, in evaluation order:");
    for (rule, outcome) in report {
        let what = match outcome {
            RuleOutcome::Applied => "applied",
            RuleOutcome::NotApplied => "did not apply",
            RuleOutcome::Failed => "failed at run time (treated as not applying)",
        };
        println!("  {rule}: {what}");
    }
}
