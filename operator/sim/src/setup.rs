//! Building the simulated world from the inputs users give: manifests (`--config`), a private
//! inventory (`--nodes` or `--private-gpus`) and a price catalog (`--catalog`).

use spillway_api::manifests::Manifests;
use spillway_core::catalog::{self, CatalogRow};
use spillway_core::{Node, NodeShape, Pool, PoolKind, Queue, Snapshot};

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
    // Each cloud pool's instance types and the environment its image promises.
    let mut aws_types: Vec<(String, Vec<String>, spillway_core::Facts)> = Vec::new();
    for p in &m.pools {
        let pool = spillway_api::convert::pool(&p.object)
            .map_err(|e| format!("{}:{}: {e}", p.file.display(), p.line))?;
        if let Some(aws) = &p.object.spec.aws {
            let promised = aws.environment.as_ref().map(|e| e.facts());
            aws_types.push((
                pool.name.clone(),
                aws.instance_types.clone(),
                promised.unwrap_or_default(),
            ));
        }
        snap.pools.push(pool);
    }
    if snap.queues.is_empty() {
        let mut q = Queue::new(DEFAULT_QUEUE);
        q.burst.enabled = true;
        snap.queues.push(q);
    }
    let private_pool = match snap
        .pools
        .iter()
        .find(|p| matches!(p.kind, PoolKind::Private { .. }))
    {
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
        aws_types.push((
            DEFAULT_CLOUD_POOL.to_string(),
            Vec::new(),
            spillway_core::Facts::default(),
        ));
    }
    for pool in &snap.pools {
        if let PoolKind::Cloud { region, .. } = &pool.kind {
            let (types, promised) = aws_types
                .iter()
                .find(|(n, ..)| *n == pool.name)
                .map(|(_, t, f)| (t.as_slice(), f.clone()))
                .unwrap_or_default();
            snap.offerings.extend(
                catalog::offerings(catalog_rows, &pool.name, region, types)
                    .into_iter()
                    .map(|mut o| {
                        o.facts.driver = promised.driver;
                        o.facts.cuda = promised.cuda;
                        o
                    }),
            );
        }
    }
    for n in inventory {
        snap.nodes.push(Node {
            facts: crate::environment::of_model(n.model.as_ref()),
            name: n.name.clone(),
            pool: private_pool.clone(),
            gpu_model: n.model.clone(),
            gpus: n.gpus,
            free_gpus: n.gpus,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            domains: Vec::new(),
        });
    }
    if snap.nodes.is_empty() && snap.offerings.is_empty() {
        return Err("nothing to run on: no private nodes and no cloud offerings".into());
    }
    Ok(snap)
}

/// Another cluster for the simulator (`--remote-cluster NAME=NODESxGPUS[:MODEL][@PRICE]`):
/// its nodes, and its price per GPU-hour when the flag makes the pool up.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteCluster {
    pub name: String,
    pub shape: NodeShape,
    pub gpu_cost_per_hour: Option<f64>,
}

impl std::str::FromStr for RemoteCluster {
    type Err = String;

    fn from_str(spec: &str) -> Result<RemoteCluster, String> {
        let (name, rest) = spec.split_once('=').ok_or_else(|| {
            format!("{spec:?}: expected NAME=NODESxGPUS[:MODEL][@PRICE], such as dc2=4x8:A100@1.20")
        })?;
        spillway_api::validate::check_dns_subdomain(name.trim())
            .map_err(|e| format!("{spec:?}: pool name {e}"))?;
        let (shape, price) = match rest.rsplit_once('@') {
            Some((shape, price)) => {
                let p: f64 = price.trim().parse().map_err(|_| {
                    format!("{spec:?}: {price:?} is not a price per GPU-hour in USD")
                })?;
                if !(p.is_finite() && p >= 0.0) {
                    return Err(format!("{spec:?}: the price per GPU-hour must be >= 0"));
                }
                (shape, Some(p))
            }
            None => (rest, None),
        };
        Ok(RemoteCluster {
            name: name.trim().to_string(),
            shape: NodeShape::parse(shape)?,
            gpu_cost_per_hour: price,
        })
    }
}

/// Gives the cluster pools their nodes. A pool the manifests declare (`spec.cluster`) takes
/// its price from them, and the queues that list it use it; any other is made up with the
/// flag's price (default 0) and every queue tries the made-up ones first, in the flags' order,
/// then what it lists (a queue listing no pools uses every pool anyway).
pub fn add_remote_clusters(snap: &mut Snapshot, remotes: &[RemoteCluster]) -> Result<(), String> {
    let mut made_up = Vec::new();
    for r in remotes {
        let flag = format!("--remote-cluster {}", r.name);
        match snap.pools.iter().find(|p| p.name == r.name) {
            Some(p) if !p.is_cluster() => {
                return Err(format!(
                    "{flag}: pool {} is not a cluster pool (spec.cluster)",
                    r.name
                ));
            }
            Some(_) if r.gpu_cost_per_hour.is_some() => {
                return Err(format!(
                    "{flag}: the manifests set this pool's price (spec.cluster.gpuCostPerHour); leave @PRICE out"
                ));
            }
            Some(_) => {}
            None => {
                snap.pools.push(Pool::cluster(
                    r.name.clone(),
                    r.gpu_cost_per_hour.unwrap_or(0.0),
                ));
                made_up.push(r.name.clone());
            }
        }
        if snap.nodes.iter().any(|n| n.pool == r.name) {
            return Err(format!("{flag}: given twice"));
        }
        for i in 0..r.shape.nodes {
            snap.nodes.push(Node {
                facts: Default::default(),
                name: format!("{}-{i}", r.name),
                pool: r.name.clone(),
                gpu_model: r.shape.model.clone(),
                gpus: r.shape.gpus,
                free_gpus: r.shape.gpus,
                schedulable: true,
                releasing_gpus: 0,
                instance_id: None,
                idle_since: None,
                domains: Vec::new(),
            });
        }
    }
    if !made_up.is_empty() {
        // What an empty list means, made explicit: every other cluster pool in the core's
        // order, then the cloud pools.
        let every_pool: Vec<String> = spillway_core::decide::cluster_pools_by_price(&snap.pools)
            .into_iter()
            .map(|p| snap.pools[p].name.clone())
            .filter(|n| !made_up.contains(n))
            .chain(
                snap.pools
                    .iter()
                    .filter(|p| p.is_cloud())
                    .map(|p| p.name.clone()),
            )
            .collect();
        for q in &mut snap.queues {
            let listed = if q.burst.pools.is_empty() {
                every_pool.clone()
            } else {
                std::mem::take(&mut q.burst.pools)
            };
            q.burst.pools = made_up.iter().cloned().chain(listed).collect();
        }
    }
    Ok(())
}
