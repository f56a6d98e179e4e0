//! `cost [--queue Q] [--since 7d]`: what the cluster's GPUs have cost, from what the operator
//! keeps in the status: each queue's and cloud pool's spend this month (UTC), and each job's
//! accrued cost (cloud instances and egress, plus private GPUs at their pool's
//! `gpuCostPerHour`).

use clap::Args;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use spillway_api::{ComputePool, GpuJob, GpuQueue};

use super::{ClusterArgs, Failure, Format, OutputArgs, client, opt, print_value, table, usd};

/// What the cluster's GPUs have cost.
#[derive(Args, Debug)]
pub struct CostArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub scope: super::JobScopeArgs,
    /// Only this queue (its spend and its jobs).
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// Only jobs running now or finished within this long, such as `7d` or `24h` (their costs
    /// are still totals since each started).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QueueCost {
    pub name: String,
    #[serde(rename = "hourlyUSD")]
    pub hourly_usd: f64,
    #[serde(rename = "thisMonthUSD")]
    pub this_month_usd: f64,
    #[serde(rename = "budgetMonthlyUSD")]
    pub budget_monthly_usd: Option<f64>,
    #[serde(rename = "budgetLeftUSD")]
    pub budget_left_usd: Option<f64>,
    #[serde(rename = "budgetHourlyUSD")]
    pub budget_hourly_usd: Option<f64>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolCost {
    pub name: String,
    pub instances: Option<i64>,
    #[serde(rename = "hourlyUSD")]
    pub hourly_usd: f64,
    #[serde(rename = "thisMonthUSD")]
    pub this_month_usd: f64,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobCostRow {
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub environment: Option<String>,
    pub pool: Option<String>,
    pub phase: Option<String>,
    #[serde(rename = "hourlyUSD")]
    pub hourly_usd: f64,
    #[serde(rename = "accruedUSD")]
    pub accrued_usd: f64,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    #[serde(rename = "jobsAccruedUSD")]
    pub jobs_accrued_usd: f64,
    #[serde(rename = "jobsHourlyUSD")]
    pub jobs_hourly_usd: f64,
    #[serde(rename = "queuesThisMonthUSD")]
    pub queues_this_month_usd: f64,
    #[serde(rename = "cloudPoolsThisMonthUSD")]
    pub cloud_pools_this_month_usd: f64,
}

/// The report `cost` prints (its JSON and YAML have these keys).
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CostReport {
    pub queue: Option<String>,
    pub since: Option<String>,
    pub queues: Vec<QueueCost>,
    pub cloud_pools: Vec<PoolCost>,
    pub jobs: Vec<JobCostRow>,
    pub totals: Totals,
}

/// Builds the report; `since` is the earliest finish time (milliseconds) a job may have.
pub fn report(
    queues: &[GpuQueue],
    pools: &[ComputePool],
    jobs: &[GpuJob],
    queue: Option<&str>,
    since: Option<(&str, i64)>,
) -> CostReport {
    let queues: Vec<QueueCost> = queues
        .iter()
        .filter(|q| queue.is_none_or(|name| q.name_any() == name))
        .map(|q| {
            let spend = q
                .status
                .as_ref()
                .and_then(|s| s.spend.clone())
                .unwrap_or_default();
            let budget = q.spec.budget.as_ref();
            let monthly = budget.and_then(|b| b.monthly_usd);
            QueueCost {
                name: q.name_any(),
                hourly_usd: spend.hourly_usd,
                this_month_usd: spend.this_month_usd,
                budget_monthly_usd: monthly,
                budget_left_usd: monthly.map(|m| (m - spend.this_month_usd).max(0.0)),
                budget_hourly_usd: budget.and_then(|b| b.hourly_usd),
            }
        })
        .collect();
    // Pools are shared by queues: their spend is shown for the whole cluster only.
    let cloud_pools: Vec<PoolCost> = if queue.is_some() {
        Vec::new()
    } else {
        pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .map(|p| {
                let st = p.status.clone().unwrap_or_default();
                PoolCost {
                    name: p.name_any(),
                    instances: st.instances,
                    hourly_usd: st.hourly_usd.unwrap_or(0.0),
                    this_month_usd: st.this_month_usd.unwrap_or(0.0),
                }
            })
            .collect()
    };
    let mut rows: Vec<JobCostRow> = jobs
        .iter()
        .filter(|j| queue.is_none_or(|name| j.spec.queue == name))
        .filter(|j| {
            let finished = j.status.as_ref().and_then(|s| s.finished_at.as_ref());
            match (since, finished) {
                (Some((_, from)), Some(t)) => t.0.as_millisecond() >= from,
                _ => true,
            }
        })
        .map(|j| {
            let st = j.status.clone().unwrap_or_default();
            let cost = st.cost.clone().unwrap_or_default();
            JobCostRow {
                namespace: j.namespace().unwrap_or_default(),
                name: j.name_any(),
                queue: j.spec.queue.clone(),
                environment: st.environment.map(|e| e.as_str().to_string()),
                pool: st.pool.clone(),
                phase: st.phase.map(|p| format!("{p:?}")),
                hourly_usd: cost.hourly_usd,
                accrued_usd: cost.accrued_usd,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.accrued_usd
            .total_cmp(&a.accrued_usd)
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    let totals = Totals {
        jobs_accrued_usd: rows.iter().map(|r| r.accrued_usd).sum(),
        jobs_hourly_usd: rows.iter().map(|r| r.hourly_usd).sum(),
        queues_this_month_usd: queues.iter().map(|q| q.this_month_usd).sum(),
        cloud_pools_this_month_usd: cloud_pools.iter().map(|p| p.this_month_usd).sum(),
    };
    CostReport {
        queue: queue.map(str::to_string),
        since: since.map(|(s, _)| s.to_string()),
        queues,
        cloud_pools,
        jobs: rows,
        totals,
    }
}

/// The report as tables.
pub fn render(r: &CostReport) -> String {
    let mut out = String::from("QUEUES (cloud spend this month, UTC)\n");
    if r.queues.is_empty() {
        out.push_str("No GpuQueues match.\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .queues
            .iter()
            .map(|q| {
                vec![
                    q.name.clone(),
                    usd(q.hourly_usd),
                    opt(q.budget_hourly_usd.map(usd)),
                    usd(q.this_month_usd),
                    opt(q.budget_monthly_usd.map(usd)),
                    opt(q.budget_left_usd.map(usd)),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "NAME",
                "SPEND/H",
                "BUDGET/H",
                "MONTH",
                "BUDGET/MONTH",
                "LEFT",
            ],
            &rows,
        ));
    }
    if r.queue.is_none() {
        out.push_str("\nCLOUD POOLS (spend this month, UTC)\n");
        if r.cloud_pools.is_empty() {
            out.push_str("No cloud ComputePools.\n");
        } else {
            let rows: Vec<Vec<String>> = r
                .cloud_pools
                .iter()
                .map(|p| {
                    vec![
                        p.name.clone(),
                        opt(p.instances),
                        usd(p.hourly_usd),
                        usd(p.this_month_usd),
                    ]
                })
                .collect();
            out.push_str(&table(&["NAME", "INSTANCES", "SPEND/H", "MONTH"], &rows));
        }
    }
    out.push_str(&match &r.since {
        Some(s) => {
            format!("\nJOBS running or finished in the last {s} (cost since each started)\n")
        }
        None => "\nJOBS (cost since each started)\n".to_string(),
    });
    if r.jobs.is_empty() {
        out.push_str("No GpuJobs match.\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .jobs
            .iter()
            .map(|j| {
                vec![
                    j.namespace.clone(),
                    j.name.clone(),
                    j.queue.clone(),
                    opt(j.phase.clone()),
                    opt(j.environment.clone()),
                    opt(j.pool.clone()),
                    usd(j.hourly_usd),
                    usd(j.accrued_usd),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "NAMESPACE",
                "NAME",
                "QUEUE",
                "PHASE",
                "WHERE",
                "POOL",
                "COST/H",
                "COST",
            ],
            &rows,
        ));
    }
    out.push_str(&format!(
        "\nTOTAL   jobs ${} accrued, ${}/h now   queues ${} this month",
        usd(r.totals.jobs_accrued_usd),
        usd(r.totals.jobs_hourly_usd),
        usd(r.totals.queues_this_month_usd)
    ));
    if r.queue.is_none() {
        out.push_str(&format!(
            "   cloud pools ${} this month",
            usd(r.totals.cloud_pools_this_month_usd)
        ));
    }
    out.push('\n');
    out
}

pub async fn cost(args: CostArgs) -> Result<(), Failure> {
    let since = match &args.since {
        Some(s) => {
            let d = spillway_core::Duration::parse(s)
                .map_err(|e| Failure::Usage(format!("--since {s:?}: {e}")))?;
            let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
            Some((s.as_str(), now - (d.as_secs_f64() * 1000.0) as i64))
        }
        None => None,
    };
    let client = client(&args.cluster).await?;
    let queues = Api::<GpuQueue>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    if let Some(q) = &args.queue
        && !queues.iter().any(|x| &x.name_any() == q)
    {
        return Err(Failure::Cluster(anyhow::anyhow!(
            "gpuqueue {q:?} not found"
        )));
    }
    let pools = Api::<ComputePool>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let jobs = args.scope.jobs(client.clone()).await?;
    let r = report(&queues, &pools, &jobs, args.queue.as_deref(), since);
    match args.output.output {
        f @ (Format::Json | Format::Yaml) => print_value(&r, f),
        _ => {
            print!("{}", render(&r));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, queue: &str, accrued: f64, finished: Option<&str>) -> GpuJob {
        let mut status = json!({"phase": "Running", "environment": "cloud", "pool": "aws",
                                "cost": {"accruedUSD": accrued, "hourlyUSD": 1.0}});
        if let Some(t) = finished {
            status["phase"] = json!("Succeeded");
            status["finishedAt"] = json!(t);
            status["cost"]["hourlyUSD"] = json!(0.0);
        }
        serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name, "namespace": "research"},
            "spec": {"queue": queue, "gpusPerReplica": 1,
                     "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": status,
        }))
        .unwrap()
    }

    fn queue(name: &str, month: f64) -> GpuQueue {
        serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue", "metadata": {"name": name},
            "spec": {"budget": {"monthlyUSD": 500}},
            "status": {"spend": {"thisMonthUSD": month, "hourlyUSD": 2.0}},
        }))
        .unwrap()
    }

    #[test]
    fn the_report_sums_jobs_and_queues_and_leaves_budget() {
        let pool: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": "aws"},
            "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["g6.xlarge"]}},
            "status": {"instances": 2, "hourlyUSD": 2.0, "thisMonthUSD": 130.0},
        }))
        .unwrap();
        let jobs = [
            job("a", "research", 10.0, None),
            job("b", "research", 20.0, None),
            job("c", "clinical", 5.0, None),
        ];
        let r = report(
            &[queue("research", 120.0), queue("clinical", 10.0)],
            &[pool],
            &jobs,
            None,
            None,
        );
        assert_eq!(r.totals.jobs_accrued_usd, 35.0);
        assert_eq!(r.totals.jobs_hourly_usd, 3.0);
        assert_eq!(r.totals.queues_this_month_usd, 130.0);
        assert_eq!(r.totals.cloud_pools_this_month_usd, 130.0);
        assert_eq!(r.queues[0].budget_left_usd, Some(380.0));
        assert_eq!(
            r.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
            ["b", "a", "c"],
            "costliest first"
        );
        let text = render(&r);
        assert!(text.contains("TOTAL   jobs $35.00 accrued, $3.00/h now   queues $130.00 this month   cloud pools $130.00 this month"), "{text}");

        let only = report(
            &[queue("research", 120.0), queue("clinical", 10.0)],
            &[],
            &jobs,
            Some("clinical"),
            None,
        );
        assert_eq!(only.queues.len(), 1);
        assert_eq!(only.jobs.len(), 1);
        assert!(
            only.cloud_pools.is_empty(),
            "pools are shared: not per queue"
        );
        assert!(!render(&only).contains("CLOUD POOLS"));
    }

    #[test]
    fn since_keeps_running_jobs_and_those_finished_in_the_window() {
        let jobs = [
            job("old", "q", 1.0, Some("2026-01-01T00:00:00Z")),
            job("recent", "q", 2.0, Some("2026-11-29T00:00:00Z")),
            job("running", "q", 3.0, None),
        ];
        let from = "2026-11-23T00:00:00Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_millisecond();
        let r = report(&[], &[], &jobs, None, Some(("7d", from)));
        let names: Vec<&str> = r.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["running", "recent"]);
        assert!(render(&r).contains("JOBS running or finished in the last 7d"));
    }

    #[test]
    fn empty_answers_say_so() {
        let r = report(&[], &[], &[], None, None);
        let text = render(&r);
        assert!(text.contains("No GpuQueues match."));
        assert!(text.contains("No cloud ComputePools."));
        assert!(text.contains("No GpuJobs match."));
    }
}
