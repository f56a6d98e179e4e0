//! The kubectl plugin's commands (also `spillway status|jobs|explain gpujob`): queues and pools
//! at a glance, jobs with their decisions, and one decision explained from the live cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_k8s::world::{self, Inputs};
use spillway_policy::PolicyEngine;

use crate::explain::{ExplainArgs, fail, print_decision, print_rules};

/// Where the cluster is.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Queues and pools at a glance.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// GpuJobs with where they run and why (like `kubectl get gpujobs`, plus the decision).
#[derive(Args, Debug)]
pub struct JobsArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Jobs of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Also print each decision's message.
    #[arg(short = 'w', long)]
    pub wide: bool,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

async fn client(c: &ClusterArgs) -> anyhow::Result<Client> {
    crate::kube_client(c.kubeconfig.as_deref(), c.context.as_deref()).await
}

/// Prints rows under headers, columns padded as kubectl does.
fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.into_iter().enumerate() {
            if i == last {
                out.push_str(&c);
            } else {
                out.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

fn age(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    let Some(t) = t else {
        return "<unknown>".into();
    };
    let secs = k8s_openapi::jiff::Timestamp::now()
        .duration_since(t.0)
        .as_secs()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let client = client(&args.cluster).await?;
        let queues = Api::<GpuQueue>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let pools = Api::<ComputePool>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let rows: Vec<Vec<String>> = queues
            .items
            .iter()
            .map(|q| {
                let st = q.status.clone().unwrap_or_default();
                let gpus = st.gpus_in_use.clone().unwrap_or_default();
                let spend = st.spend.clone();
                let budget = q.spec.budget.as_ref();
                vec![
                    q.name_any(),
                    q.spec.weight.to_string(),
                    opt(q.spec.private_quota.as_ref().map(|p| p.gpus)),
                    st.pending.to_string(),
                    st.running.to_string(),
                    gpus.private.to_string(),
                    gpus.cloud.to_string(),
                    opt(spend.as_ref().map(|s| format!("{:.2}", s.hourly_usd))),
                    opt(budget.and_then(|b| b.hourly_usd).map(|v| format!("{v:.2}"))),
                    if q.spec.burst.as_ref().is_some_and(|b| b.enabled) {
                        "yes".into()
                    } else {
                        "no".into()
                    },
                ]
            })
            .collect();
        println!("QUEUES");
        print_table(
            &[
                "NAME",
                "WEIGHT",
                "QUOTA",
                "PENDING",
                "RUNNING",
                "PRIVATE-GPUS",
                "CLOUD-GPUS",
                "SPEND/H",
                "BUDGET/H",
                "BURST",
            ],
            &rows,
        );
        let rows: Vec<Vec<String>> = pools
            .items
            .iter()
            .map(|p| {
                let st = p.status.clone().unwrap_or_default();
                let nodes = st.nodes.clone().unwrap_or_default();
                let gpus = st.gpus.clone().unwrap_or_default();
                vec![
                    p.name_any(),
                    if p.spec.aws.is_some() {
                        "aws"
                    } else {
                        "private"
                    }
                    .into(),
                    nodes.total.to_string(),
                    nodes.ready.to_string(),
                    nodes.idle.to_string(),
                    gpus.capacity.to_string(),
                    gpus.allocated.to_string(),
                    opt(st.hourly_usd.map(|v| format!("{v:.2}"))),
                ]
            })
            .collect();
        println!();
        println!("POOLS");
        print_table(
            &[
                "NAME",
                "TYPE",
                "NODES",
                "READY",
                "IDLE",
                "GPUS",
                "ALLOCATED",
                "SPEND/H",
            ],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    })
}

pub fn jobs(args: JobsArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let client = client(&args.cluster).await?;
        let api: Api<GpuJob> = if args.all_namespaces {
            Api::all(client.clone())
        } else {
            let ns = args
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            Api::namespaced(client.clone(), &ns)
        };
        let list = api.list(&ListParams::default()).await?;
        let mut headers = vec![];
        if args.all_namespaces {
            headers.push("NAMESPACE");
        }
        headers.extend([
            "NAME", "QUEUE", "GPUS", "PHASE", "WHERE", "POOL", "WAIT", "COST", "OUTCOME", "REASON",
            "RULE", "AGE",
        ]);
        if args.wide {
            headers.push("MESSAGE");
        }
        let rows: Vec<Vec<String>> = list
            .items
            .iter()
            .map(|j| {
                let st = j.status.clone().unwrap_or_default();
                let d = st.decision.clone().unwrap_or_default();
                let mut row = Vec::new();
                if args.all_namespaces {
                    row.push(j.namespace().unwrap_or_default());
                }
                row.extend([
                    j.name_any(),
                    j.spec.queue.clone(),
                    format!("{}x{}", j.spec.replicas, j.spec.gpus_per_replica),
                    opt(st.phase.map(|p| format!("{p:?}"))),
                    opt(st.environment.map(|e| e.as_str().to_string())),
                    opt(st.pool.clone()),
                    opt(d.estimated_wait_seconds.map(|s| format!("{s}s"))),
                    opt(st.cost.as_ref().map(|c| format!("{:.2}", c.accrued_usd))),
                    opt(d.outcome.clone()),
                    opt(d.reason.clone()),
                    opt(d.rule.clone()),
                    age(j.metadata.creation_timestamp.as_ref()),
                ]);
                if args.wide {
                    row.push(d.message.clone().unwrap_or_default());
                }
                row
            })
            .collect();
        if rows.is_empty() {
            eprintln!("No GpuJobs found.");
        } else {
            print_table(&headers, &rows);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `explain gpujob NAME`: the recorded decision, then what the core decides with the cluster
/// as it is now, with every rule evaluated.
pub fn explain_live(args: &ExplainArgs) -> ExitCode {
    let name = match args.target.as_slice() {
        [kind, name] if is_gpujob(kind) => name.clone(),
        [one] => match one.split_once('/') {
            Some((kind, name)) if is_gpujob(kind) => name.to_string(),
            _ => {
                return fail(format!(
                    "cannot explain {one:?}: give `gpujob NAME` or `gpujob/NAME`"
                ));
            }
        },
        other => {
            return fail(format!(
                "cannot explain {:?}: give `gpujob NAME`",
                other.join(" ")
            ));
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(e.to_string()),
    };
    let cluster = ClusterArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    match rt.block_on(explain_job(&cluster, args.namespace.clone(), &name)) {
        Ok(code) => code,
        Err(e) => fail(format!("{e:#}")),
    }
}

fn is_gpujob(kind: &str) -> bool {
    matches!(
        kind.to_ascii_lowercase().as_str(),
        "gpujob" | "gpujobs" | "gj" | "gpujob.spillway.io" | "gpujobs.spillway.io"
    )
}

async fn list_all<K>(client: &Client) -> anyhow::Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(Arc::new)
        .collect())
}

async fn explain_job(
    cluster: &ClusterArgs,
    namespace: Option<String>,
    name: &str,
) -> anyhow::Result<ExitCode> {
    let client = client(cluster).await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let job = Api::<GpuJob>::namespaced(client.clone(), &ns)
        .get_opt(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gpujob {name:?} not found in namespace {ns:?}"))?;
    let spec = &job.spec;
    let st = job.status.clone().unwrap_or_default();
    println!(
        "GpuJob {ns}/{name}: {} x {} GPUs in queue {}, placement {:?}, priority {}",
        spec.replicas, spec.gpus_per_replica, spec.queue, spec.placement, spec.priority
    );
    println!(
        "Phase: {}   Where: {}   Pool: {}   Nodes: {}",
        opt(st.phase.map(|p| format!("{p:?}"))),
        opt(st.environment.map(|e| e.as_str().to_string())),
        opt(st.pool.clone()),
        if st.nodes.is_empty() {
            "-".into()
        } else {
            st.nodes.join(",")
        }
    );
    match &st.decision {
        Some(d) => {
            println!(
                "Recorded decision: {} ({}){}",
                opt(d.outcome.clone()),
                opt(d.reason.clone()),
                d.time
                    .as_ref()
                    .map(|t| format!(" at {}", t.0))
                    .unwrap_or_default()
            );
            if let Some(m) = &d.message {
                println!("  {m}");
            }
            if let Some(r) = &d.rule {
                println!("  Deciding rule: {r}");
            }
            if let Some(o) = &d.offering {
                println!(
                    "  Offering: {} {} in {} at ${:.2}/h",
                    o.instance_type,
                    o.capacity_type,
                    o.zone.clone().unwrap_or_default(),
                    o.hourly_price
                );
            }
        }
        None => println!("Recorded decision: none yet (is the operator running?)"),
    }
    for c in &st.conditions {
        println!(
            "Condition {}={} ({}): {}",
            c.type_, c.status, c.reason, c.message
        );
    }

    // The situation now, as the operator would see it.
    let inputs = Inputs {
        jobs: list_all::<GpuJob>(&client).await?,
        queues: list_all::<GpuQueue>(&client).await?,
        pools: list_all::<ComputePool>(&client).await?,
        datasets: list_all::<Dataset>(&client).await?,
        nodes: list_all::<Node>(&client).await?,
        pods: list_all::<Pod>(&client).await?,
        namespaces: list_all::<Namespace>(&client).await?,
        ..Inputs::default()
    };
    let policies: Vec<BurstPolicy> = list_all::<BurstPolicy>(&client)
        .await?
        .iter()
        .map(|p| (**p).clone())
        .collect();
    let engine = PolicyEngine::compile(&policies).map_err(|errors| {
        anyhow::anyhow!(
            "the cluster's BurstPolicies do not compile:\n{}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
    })?;
    let now = spillway_k8s::controller::now();
    let built = world::build(
        &inputs,
        &Default::default(),
        &Default::default(),
        spillway_core::Settings::default(),
        now,
    );
    let id = format!("{ns}/{name}");
    if let Some(why) = built.jobs.get(&id).and_then(|v| v.invalid.clone()) {
        println!("Now: the job cannot run as written: {why}");
        return Ok(ExitCode::SUCCESS);
    }
    let plan = spillway_core::decide(&built.snapshot, &engine, now);
    println!();
    match plan.decision(&id) {
        Some(d) => {
            println!("If decided now:");
            print_decision(d);
        }
        None => println!("Now: no decision to make (the job is placed or finished)."),
    }
    // The rule report is for the first job of a snapshot: put this one first.
    let mut snapshot = built.snapshot.clone();
    if let Some(i) = snapshot.jobs.iter().position(|j| j.id == id) {
        let j = snapshot.jobs.remove(i);
        snapshot.jobs.insert(0, j);
        print_rules(&engine.rule_report(&snapshot, now));
    }
    Ok(ExitCode::SUCCESS)
}
