//! `parity`: what each pool's GPUs come with (driver, CUDA, GPU products and memory, kernels and
//! container runtimes), as the operator last wrote it in the pools' status, and where the
//! cloud and cluster pools differ from the private side. The drift is worked out by the same
//! function as the pools' `EnvironmentDrift` condition.

use clap::Args;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use spillway_api::ComputePool;
use spillway_api::environment::PoolEnvironment;
use spillway_core::environment::{self as env, Provided};

use super::{ClusterArgs, Failure, Format, OutputArgs, client, print_value, table};

/// Facts of each pool's nodes or image, and drift between private and other pools flagged.
#[derive(Args, Debug)]
pub struct ParityArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One pool's row.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolParity {
    pub pool: String,
    /// `private`, `aws` or `cluster`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// What the operator last wrote; `None` before it has.
    pub environment: Option<PoolEnvironment>,
    /// How a cloud or cluster pool differs from the private pools (empty: it does not, or it
    /// was not compared).
    pub drift: Vec<String>,
    /// A cloud or cluster pool whose driver or CUDA is unknown on a side.
    pub compared: bool,
}

fn kind(p: &ComputePool) -> &'static str {
    match (&p.spec.aws, &p.spec.cluster) {
        (Some(_), _) => "aws",
        (None, Some(_)) => "cluster",
        (None, None) => "private",
    }
}

/// Every pool's environment and drift, private pools first.
pub fn parity(pools: &[ComputePool]) -> Vec<PoolParity> {
    let env_of = |p: &ComputePool| p.status.as_ref().and_then(|s| s.environment.clone());
    let private_facts: Vec<spillway_core::Facts> = pools
        .iter()
        .filter(|p| kind(p) == "private")
        .filter_map(env_of)
        .flat_map(|e| e.facts())
        .collect();
    let private = Provided::of(&private_facts);
    let mut rows: Vec<PoolParity> = pools
        .iter()
        .map(|p| {
            let environment = env_of(p);
            let k = kind(p);
            let here = Provided::of(&environment.as_ref().map(|e| e.facts()).unwrap_or_default());
            let compared = k != "private" && !here.is_empty() && !private.is_empty();
            let drift = if compared {
                env::drift(&here, &private)
                    .iter()
                    .map(ToString::to_string)
                    .collect()
            } else {
                Vec::new()
            };
            PoolParity {
                pool: p.name_any(),
                kind: k,
                environment,
                drift,
                compared,
            }
        })
        .collect();
    rows.sort_by(|a, b| (a.kind != "private", &a.pool).cmp(&(b.kind != "private", &b.pool)));
    rows
}

/// The parity table.
pub fn parity_table(rows: &[PoolParity]) -> String {
    let headers = [
        "POOL", "TYPE", "SOURCE", "DRIVER", "CUDA", "GPU", "MEMORY", "KERNEL", "RUNTIME", "DRIFT",
    ];
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let e = r.environment.clone().unwrap_or_default();
            let memory: Vec<String> = e
                .gpu_memory_mib
                .iter()
                .map(|m| format!("{:.0}GiB", *m as f64 / 1024.0))
                .collect();
            let drift = match (r.kind, r.compared, r.drift.is_empty()) {
                ("private", ..) => "-".to_string(),
                (_, false, _) => "unknown".to_string(),
                (_, true, true) => "none".to_string(),
                (_, true, false) => format!("yes: {}", r.drift.join("; ")),
            };
            vec![
                r.pool.clone(),
                r.kind.to_string(),
                if r.environment.is_some() {
                    e.source.clone()
                } else {
                    "-".into()
                },
                list(&e.driver_versions),
                list(&e.cuda_versions),
                list(&e.gpu_products),
                list(&memory),
                list(&e.kernel_versions),
                list(&e.container_runtimes),
                drift,
            ]
        })
        .collect();
    table(&headers, &cells)
}

pub async fn run(args: ParityArgs) -> Result<(), Failure> {
    let client = client(&args.cluster).await?;
    let pools = Api::<ComputePool>::all(client)
        .list(&ListParams::default())
        .await?
        .items;
    let rows = parity(&pools);
    match args.output.output {
        f @ (Format::Json | Format::Yaml) => print_value(&rows, f),
        _ if rows.is_empty() => {
            eprintln!("No ComputePools in the cluster.");
            Ok(())
        }
        _ => {
            print!("{}", parity_table(&rows));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, spec: serde_json::Value, env: serde_json::Value) -> ComputePool {
        serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": name}, "spec": spec, "status": {"environment": env},
        }))
        .expect("a pool")
    }

    #[test]
    fn the_table_shows_each_side_and_flags_where_the_cloud_differs() {
        let pools = [
            pool(
                "aws",
                json!({"aws": {"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g6.xlarge"]}}),
                json!({"source": "image", "driverVersions": ["550.54.15"],
                       "cudaVersions": ["12.4"], "gpuProducts": ["L4"], "gpuMemoryMiB": [24576]}),
            ),
            pool(
                "onprem",
                json!({"private": {"nodeSelector": {"pool": "onprem"}}}),
                json!({"source": "nodes", "driverVersions": ["535.104.05"],
                       "cudaVersions": ["12.2"], "gpuProducts": ["NVIDIA-A100-SXM4-80GB"],
                       "gpuMemoryMiB": [81920], "kernelVersions": ["5.15.0-105-generic"],
                       "containerRuntimes": ["containerd://1.7.12"]}),
            ),
            pool(
                "dr-site",
                json!({"cluster": {"kubeconfigSecretRef": {"name": "k", "namespace": "n"},
                                   "namespace": "jobs", "gpuCostPerHour": 1.0}}),
                json!({"source": "nodes", "driverVersions": ["535.129.03"],
                       "cudaVersions": ["12.2"]}),
            ),
        ];
        let rows = parity(&pools);
        assert_eq!(
            parity_table(&rows),
            "POOL      TYPE      SOURCE   DRIVER       CUDA   GPU                     MEMORY   KERNEL               RUNTIME               DRIFT\n\
             onprem    private   nodes    535.104.05   12.2   NVIDIA-A100-SXM4-80GB   80GiB    5.15.0-105-generic   containerd://1.7.12   -\n\
             aws       aws       image    550.54.15    12.4   L4                      24GiB    -                    -                     yes: driver branch 550 here, 535 on private nodes; CUDA 12.4 here, 12.2 on private nodes\n\
             dr-site   cluster   nodes    535.129.03   12.2   -                       -        -                    -                     none\n"
        );
        // Nothing stated privately: nothing compared.
        let rows = parity(&pools[..1]);
        assert!(!rows[0].compared);
        assert!(parity_table(&rows).ends_with("unknown\n"));
    }
}
