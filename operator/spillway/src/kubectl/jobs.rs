//! `jobs`: GpuJobs with where they run and why (like `kubectl get gpujobs`, plus the decision).

use clap::Args;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use spillway_api::GpuJob;

use super::{
    ClusterArgs, Failure, Format, OutputArgs, ScopeArgs, age, client, opt, print_objects, table,
    usd,
};

/// GpuJobs with where they run and why.
#[derive(Args, Debug)]
pub struct JobsArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Same as `-o wide`: also each decision's message.
    #[arg(short = 'w', long)]
    pub wide: bool,
}

/// The GpuJobs of the scope, and how to name the scope in an empty answer.
pub async fn list(client: &Client, scope: &ScopeArgs) -> Result<(Vec<GpuJob>, String), Failure> {
    if scope.all_namespaces {
        let items = Api::<GpuJob>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        return Ok((items, "any namespace".into()));
    }
    let ns = scope
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let items = Api::<GpuJob>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items;
    Ok((items, format!("namespace {ns}")))
}

/// The jobs table; with `all` a NAMESPACE column first.
pub fn job_table(jobs: &[GpuJob], all: bool, wide: bool) -> String {
    let mut headers = vec![];
    if all {
        headers.push("NAMESPACE");
    }
    headers.extend([
        "NAME", "QUEUE", "GPUS", "PHASE", "WHERE", "POOL", "WAIT", "COST", "OUTCOME", "REASON",
        "RULE", "AGE",
    ]);
    if wide {
        headers.push("MESSAGE");
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let st = j.status.clone().unwrap_or_default();
            let d = st.decision.clone().unwrap_or_default();
            let mut row = Vec::new();
            if all {
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
                opt(st.cost.as_ref().map(|c| usd(c.accrued_usd))),
                opt(d.outcome.clone()),
                opt(d.reason.clone()),
                opt(d.rule.clone()),
                age(j.metadata.creation_timestamp.as_ref()),
            ]);
            if wide {
                row.push(d.message.clone().unwrap_or_default());
            }
            row
        })
        .collect();
    table(&headers, &rows)
}

pub async fn jobs(args: JobsArgs) -> Result<(), Failure> {
    let client = client(&args.cluster).await?;
    let (mut jobs, scope) = list(&client, &args.scope).await?;
    jobs.sort_by_key(|j| (j.namespace(), j.name_any()));
    match args.output.output {
        f @ (Format::Json | Format::Yaml) => print_objects(&jobs, f),
        _ if jobs.is_empty() => {
            eprintln!("No GpuJobs in {scope}.");
            Ok(())
        }
        f => {
            let wide = args.wide || f == Format::Wide;
            print!("{}", job_table(&jobs, args.scope.all_namespaces, wide));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_row_reads_where_it_runs_and_why() {
        let j: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "gang", "namespace": "research"},
            "spec": {"queue": "research", "replicas": 2, "gpusPerReplica": 8,
                     "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"phase": "Running", "environment": "cloud", "pool": "aws",
                       "cost": {"accruedUSD": 12.345, "hourlyUSD": 43.92},
                       "decision": {"outcome": "StartCloud", "reason": "NoPrivateCapacity",
                                    "message": "The job fits on no private node; launching."}},
        }))
        .unwrap();
        let t = job_table(std::slice::from_ref(&j), true, true);
        let row: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row[..12],
            [
                "research",
                "gang",
                "research",
                "2x8",
                "Running",
                "cloud",
                "aws",
                "-",
                "12.35",
                "StartCloud",
                "NoPrivateCapacity",
                "-"
            ]
        );
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .ends_with("The job fits on no private node; launching.")
        );
        assert!(t.starts_with("NAMESPACE   NAME"), "{t}");
        assert!(!job_table(&[j], false, false).contains("NAMESPACE"));
    }
}
