//! `status` (queues and pools at a glance), `queues` and `pools`.

use clap::Args;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use spillway_api::{ComputePool, GpuQueue};

use super::{
    ClusterArgs, Failure, Format, OutputArgs, age, client, condition, opt, print_objects,
    print_value, table, usd,
};

/// Queues and pools at a glance.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// GpuQueues: quota, jobs, GPUs in use, spend against budget, validity.
#[derive(Args, Debug)]
pub struct QueuesArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// ComputePools: nodes, GPUs, instances, spend, health.
#[derive(Args, Debug)]
pub struct PoolsArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The queues table.
pub fn queue_table(queues: &[GpuQueue], wide: bool) -> String {
    let mut headers = vec![
        "NAME",
        "WEIGHT",
        "QUOTA",
        "PENDING",
        "RUNNING",
        "PRIVATE-GPUS",
        "CLOUD-GPUS",
        "BURST",
        "SPEND/H",
        "BUDGET/H",
        "MONTH",
        "BUDGET/MONTH",
        "READY",
        "AGE",
    ];
    if wide {
        headers.extend(["NAMESPACES", "POOLS", "MAX-WAIT"]);
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            let st = q.status.clone().unwrap_or_default();
            let gpus = st.gpus_in_use.clone().unwrap_or_default();
            let spend = st.spend.clone();
            let budget = q.spec.budget.as_ref();
            let burst = q.spec.burst.as_ref().filter(|b| b.enabled);
            let mut row = vec![
                q.name_any(),
                q.spec.weight.to_string(),
                opt(q.spec.private_quota.as_ref().map(|p| p.gpus)),
                st.pending.to_string(),
                st.running.to_string(),
                gpus.private.to_string(),
                gpus.cloud.to_string(),
                if burst.is_some() { "yes" } else { "no" }.into(),
                opt(spend.as_ref().map(|s| usd(s.hourly_usd))),
                opt(budget.and_then(|b| b.hourly_usd).map(usd)),
                opt(spend.as_ref().map(|s| usd(s.this_month_usd))),
                opt(budget.and_then(|b| b.monthly_usd).map(usd)),
                condition(&st.conditions, "Ready"),
                age(q.metadata.creation_timestamp.as_ref()),
            ];
            if wide {
                row.push(if q.spec.namespaces.is_empty() {
                    "<selector or all>".into()
                } else {
                    q.spec.namespaces.join(",")
                });
                row.push(match burst {
                    Some(b) if !b.pools.is_empty() => b.pools.join(","),
                    Some(_) => "<any cloud pool>".into(),
                    None => "-".into(),
                });
                row.push(opt(burst.map(|b| b.max_wait.clone())));
            }
            row
        })
        .collect();
    table(&headers, &rows)
}

/// The pools table.
pub fn pool_table(pools: &[ComputePool], wide: bool) -> String {
    let mut headers = vec![
        "NAME",
        "TYPE",
        "NODES",
        "READY",
        "IDLE",
        "GPUS",
        "ALLOCATED",
        "INSTANCES",
        "SPEND/H",
        "MONTH",
        "AGE",
    ];
    if wide {
        headers.extend(["REGION", "INSTANCE-TYPES", "LIMITS", "LAUNCH-HEALTHY"]);
    }
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            let nodes = st.nodes.clone().unwrap_or_default();
            let gpus = st.gpus.clone().unwrap_or_default();
            let aws = p.spec.aws.as_ref();
            let mut row = vec![
                p.name_any(),
                match (aws, &p.spec.cluster) {
                    (Some(_), _) => "aws",
                    (None, Some(_)) => "cluster",
                    (None, None) => "private",
                }
                .into(),
                nodes.total.to_string(),
                nodes.ready.to_string(),
                nodes.idle.to_string(),
                gpus.capacity.to_string(),
                gpus.allocated.to_string(),
                if aws.is_some() {
                    opt(st.instances)
                } else {
                    "-".into()
                },
                opt(st.hourly_usd.map(usd)),
                opt(st.this_month_usd.map(usd)),
                age(p.metadata.creation_timestamp.as_ref()),
            ];
            if wide {
                // An aws pool's region, a cluster pool's location.
                row.push(opt(aws.map(|a| a.region.clone()).or_else(|| {
                    p.spec.cluster.as_ref().and_then(|c| c.location.clone())
                })));
                row.push(opt(aws
                    .filter(|a| !a.instance_types.is_empty())
                    .map(|a| a.instance_types.join(","))));
                let limits = p.spec.limits.as_ref().map(|l| {
                    let mut parts = Vec::new();
                    if let Some(n) = l.max_nodes {
                        parts.push(format!("{n} nodes"));
                    }
                    if let Some(g) = l.max_gpus {
                        parts.push(format!("{g} GPUs"));
                    }
                    if let Some(h) = l.max_hourly_usd {
                        parts.push(format!("${h:.2}/h"));
                    }
                    parts.join(", ")
                });
                row.push(opt(limits.filter(|l| !l.is_empty())));
                row.push(if aws.is_some() {
                    condition(&st.conditions, "LaunchHealthy")
                } else {
                    "-".into()
                });
            }
            row
        })
        .collect();
    table(&headers, &rows)
}

/// The free GPUs of each topology domain of the pools that have levels (`None` when none has).
pub fn domain_table(pools: &[ComputePool]) -> Option<String> {
    let rows: Vec<Vec<String>> = pools
        .iter()
        .flat_map(|p| {
            let st = p.status.clone().unwrap_or_default();
            st.domains.into_iter().map(move |d| {
                vec![
                    p.name_any(),
                    d.domain,
                    d.nodes.to_string(),
                    d.capacity.to_string(),
                    d.free.to_string(),
                ]
            })
        })
        .collect();
    (!rows.is_empty()).then(|| table(&["POOL", "DOMAIN", "NODES", "GPUS", "FREE"], &rows))
}

async fn lists(cluster: &ClusterArgs) -> Result<(Vec<GpuQueue>, Vec<ComputePool>), Failure> {
    let client = client(cluster).await?;
    let queues = Api::<GpuQueue>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let pools = Api::<ComputePool>::all(client)
        .list(&ListParams::default())
        .await?
        .items;
    Ok((queues, pools))
}

pub async fn status(args: StatusArgs) -> Result<(), Failure> {
    let (queues, pools) = lists(&args.cluster).await?;
    let format = args.output.output;
    if matches!(format, Format::Json | Format::Yaml) {
        return print_value(
            &serde_json::json!({"queues": queues, "pools": pools}),
            format,
        );
    }
    let wide = format == Format::Wide;
    println!("QUEUES");
    if queues.is_empty() {
        println!("No GpuQueues in the cluster.");
    } else {
        print!("{}", queue_table(&queues, wide));
    }
    println!();
    println!("POOLS");
    if pools.is_empty() {
        println!("No ComputePools in the cluster.");
    } else {
        print!("{}", pool_table(&pools, wide));
    }
    Ok(())
}

pub async fn queues(args: QueuesArgs) -> Result<(), Failure> {
    let (queues, _) = lists(&args.cluster).await?;
    match args.output.output {
        f @ (Format::Json | Format::Yaml) => print_objects(&queues, f),
        _ if queues.is_empty() => {
            eprintln!("No GpuQueues in the cluster.");
            Ok(())
        }
        f => {
            print!("{}", queue_table(&queues, f == Format::Wide));
            Ok(())
        }
    }
}

pub async fn pools(args: PoolsArgs) -> Result<(), Failure> {
    let (_, pools) = lists(&args.cluster).await?;
    match args.output.output {
        f @ (Format::Json | Format::Yaml) => print_objects(&pools, f),
        _ if pools.is_empty() => {
            eprintln!("No ComputePools in the cluster.");
            Ok(())
        }
        f => {
            print!("{}", pool_table(&pools, f == Format::Wide));
            if let Some(domains) = domain_table(&pools) {
                println!();
                print!("{domains}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queue() -> GpuQueue {
        serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": "research"},
            "spec": {"namespaces": ["research"], "privateQuota": {"gpus": 16}, "weight": 2,
                     "burst": {"enabled": true, "maxWait": "15m", "pools": ["aws"]},
                     "budget": {"monthlyUSD": 500, "hourlyUSD": 50}},
            "status": {"pending": 1, "running": 2, "gpusInUse": {"private": 8, "cloud": 16},
                       "spend": {"thisMonthUSD": 123.456, "hourlyUSD": 43.92}},
        }))
        .unwrap()
    }

    #[test]
    fn a_queue_row_reads_quota_jobs_gpus_and_spend_against_budget() {
        let t = queue_table(&[queue()], false);
        let row: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row[..13],
            [
                "research", "2", "16", "1", "2", "8", "16", "yes", "43.92", "50.00", "123.46",
                "500.00", "-"
            ]
        );
        let wide = queue_table(&[queue()], true);
        assert!(
            wide.lines()
                .next()
                .unwrap()
                .ends_with("NAMESPACES   POOLS   MAX-WAIT"),
            "{wide}"
        );
        assert!(
            wide.lines()
                .nth(1)
                .unwrap()
                .ends_with("research     aws     15m"),
            "{wide}"
        );
    }

    #[test]
    fn the_domains_of_pools_with_topology_show_their_free_gpus() {
        let pool: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": "onprem"},
            "spec": {"private": {"nodeSelector": {"a": "b"},
                                 "topology": {"levels": ["spillway.io/rack"]}}},
            "status": {"domains": [
                {"domain": "spillway.io/rack=r1", "nodes": 2, "capacity": 16, "free": 8},
                {"domain": "spillway.io/rack=r2", "nodes": 2, "capacity": 16, "free": 0}]},
        }))
        .unwrap();
        let out = domain_table(std::slice::from_ref(&pool)).expect("a table");
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], ["POOL", "DOMAIN", "NODES", "GPUS", "FREE"]);
        assert_eq!(lines[1], ["onprem", "spillway.io/rack=r1", "2", "16", "8"]);
        assert_eq!(lines[2], ["onprem", "spillway.io/rack=r2", "2", "16", "0"]);
        let mut plain = pool;
        plain.status = None;
        assert_eq!(domain_table(&[plain]), None);
    }

    #[test]
    fn a_pool_row_says_its_type_and_a_private_pool_has_no_instances() {
        let private: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": "onprem"},
            "spec": {"private": {"nodeSelector": {"gpu-pool": "onprem"}}},
            "status": {"nodes": {"total": 2, "ready": 2, "idle": 1}, "gpus": {"capacity": 16, "allocated": 8}},
        }))
        .unwrap();
        let aws: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": "aws"},
            "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["g6.xlarge"]},
                     "limits": {"maxGpus": 64, "maxHourlyUSD": 200}},
            "status": {"instances": 1, "hourlyUSD": 0.8, "thisMonthUSD": 12.5},
        }))
        .unwrap();
        let cluster: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": "dc2"},
            "spec": {"cluster": {"kubeconfigSecretRef": {"name": "dc2", "namespace": "spillway-system"},
                                 "namespace": "gpu-jobs", "gpuCostPerHour": 0.5, "location": "dc-east"}},
        }))
        .unwrap();
        let t = pool_table(&[private, aws, cluster], true);
        let rows: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[3][..2], ["dc2", "cluster"]);
        assert!(rows[3].contains(&"dc-east"), "{t}");
        assert_eq!(
            rows[1][..8],
            ["onprem", "private", "2", "2", "1", "16", "8", "-"]
        );
        assert_eq!(
            rows[2][..10],
            ["aws", "aws", "0", "0", "0", "0", "0", "1", "0.80", "12.50"]
        );
        assert!(t.contains("64 GPUs, $200.00/h"), "{t}");
        assert!(t.contains("us-east-1"), "{t}");
    }
}
