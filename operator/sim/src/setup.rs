//! Building the simulated world from the inputs users give: manifests (`--config`), a private
//! inventory (`--nodes` or `--private-gpus`) and a price catalog (`--catalog`).

use spillway_api::manifests::Manifests;
use spillway_core::catalog::{self, CatalogRow};
use spillway_core::{Node, Pool, PoolKind, Queue, Snapshot, WaitMode};

use crate::trace::InventoryNode;

/// The name of the queue, private pool and cloud pool made up when `--config` gives none.
pub const DEFAULT_QUEUE: &str = "default";
pub const DEFAULT_PRIVATE_POOL: &str = "private";
pub const DEFAULT_CLOUD_POOL: &str = "cloud";

/// Builds the starting snapshot. Without manifests: one queue with bursting enabled (15 minute
/// maximum wait, `cost-aware` wait mode, the recommended setting), one private pool holding the inventory, one cloud pool offering every row of
/// the catalog. With manifests, their queues, pools and datasets are used; the inventory goes to
/// the first private pool (one named `private` is added if there is none) and each cloud pool
/// offers the catalog rows of its region and instance types.
pub fn snapshot(
    manifests: Option<&Manifests>,
    inventory: &[InventoryNode],
    catalog_rows: &[CatalogRow],
) -> Result<Snapshot, String> {
    let mut snap = Snapshot::default();
    let empty = Manifests::default();
    let m = manifests.unwrap_or(&empty);
    for q in &m.queues {
        snap.queues.push(
            spillway_api::convert::queue(&q.object)
                .map_err(|e| format!("{}:{}: {e}", q.file.display(), q.line))?,
        );
    }
    for d in &m.datasets {
        snap.datasets.push(
            spillway_api::convert::dataset(&d.object)
                .map_err(|e| format!("{}:{}: {e}", d.file.display(), d.line))?,
        );
    }
    let mut aws_types: Vec<(String, Vec<String>)> = Vec::new();
    for p in &m.pools {
        let pool = spillway_api::convert::pool(&p.object)
            .map_err(|e| format!("{}:{}: {e}", p.file.display(), p.line))?;
        if let Some(aws) = &p.object.spec.aws {
            aws_types.push((pool.name.clone(), aws.instance_types.clone()));
        }
        snap.pools.push(pool);
    }
    if snap.queues.is_empty() {
        let mut q = Queue::new(DEFAULT_QUEUE);
        q.burst.enabled = true;
        q.burst.wait_mode = WaitMode::CostAware;
        snap.queues.push(q);
    }
    let private_pool = match snap.pools.iter().find(|p| !p.is_cloud()) {
        Some(p) => p.name.clone(),
        None => {
            snap.pools.push(Pool::private(DEFAULT_PRIVATE_POOL));
            DEFAULT_PRIVATE_POOL.to_string()
        }
    };
    if manifests.is_none() || !snap.pools.iter().any(Pool::is_cloud) && m.pools.is_empty() {
        let region = catalog_rows
            .iter()
            .map(|r| r.region.clone())
            .find(|r| !r.is_empty())
            .unwrap_or_else(|| "us-east-1".into());
        snap.pools.push(Pool::cloud(DEFAULT_CLOUD_POOL, region));
        aws_types.push((DEFAULT_CLOUD_POOL.to_string(), Vec::new()));
    }
    for pool in &snap.pools {
        if let PoolKind::Cloud { region, .. } = &pool.kind {
            let types = aws_types
                .iter()
                .find(|(n, _)| *n == pool.name)
                .map(|(_, t)| t.as_slice())
                .unwrap_or(&[]);
            snap.offerings
                .extend(catalog::offerings(catalog_rows, &pool.name, region, types));
        }
    }
    for n in inventory {
        snap.nodes.push(Node {
            name: n.name.clone(),
            pool: private_pool.clone(),
            gpu_model: n.model.clone(),
            gpus: n.gpus,
            free_gpus: n.gpus,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
        });
    }
    if snap.nodes.is_empty() && snap.offerings.is_empty() {
        return Err("nothing to run on: no private nodes and no cloud offerings".into());
    }
    Ok(snap)
}
