//! Other clusters (`cluster` pools): their nodes are in the snapshot from the start, like
//! private ones; a job placed there starts at once (dispatch to a running API server is not
//! a boot) and its GPUs are billed at the pool's price per GPU-hour while it runs.

use spillway_core::{PoolKind, Snapshot};

/// What the jobs of one cluster pool used over a replay.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolSpend {
    pub pool: String,
    pub gpu_seconds: f64,
    pub cost_usd: f64,
}

/// GPUs busy in each cluster pool now, with their price, and what they used so far.
#[derive(Clone, Debug, Default)]
pub(super) struct RemoteUse {
    /// Per cluster pool of the snapshot, in its order: busy GPUs, USD per GPU-hour, figures.
    pools: Vec<(u32, f64, PoolSpend)>,
}

impl RemoteUse {
    pub(super) fn new(snap: &Snapshot) -> RemoteUse {
        RemoteUse {
            pools: snap
                .pools
                .iter()
                .filter_map(|p| match p.kind {
                    PoolKind::Cluster {
                        gpu_cost_per_hour, ..
                    } => Some((
                        0,
                        gpu_cost_per_hour,
                        PoolSpend {
                            pool: p.name.clone(),
                            ..Default::default()
                        },
                    )),
                    _ => None,
                })
                .collect(),
        }
    }

    fn find(&mut self, pool: &str) -> Option<&mut (u32, f64, PoolSpend)> {
        self.pools.iter_mut().find(|(_, _, s)| s.pool == pool)
    }

    /// Whether `pool` is a cluster pool.
    pub(super) fn is_remote(&self, pool: &str) -> bool {
        !self.pools.is_empty() && self.pools.iter().any(|(_, _, s)| s.pool == pool)
    }

    pub(super) fn take(&mut self, pool: &str, gpus: u32) {
        if let Some(p) = self.find(pool) {
            p.0 += gpus;
        }
    }

    pub(super) fn give_back(&mut self, pool: &str, gpus: u32) {
        if let Some(p) = self.find(pool) {
            p.0 = p.0.saturating_sub(gpus);
        }
    }

    /// Accrues `dt` seconds of the GPUs busy now.
    pub(super) fn advance(&mut self, dt: f64) {
        for (busy, price, spend) in &mut self.pools {
            let g = f64::from(*busy);
            spend.gpu_seconds += g * dt;
            spend.cost_usd += g * *price * dt / 3600.0;
        }
    }

    /// GPUs busy in every cluster pool now.
    pub(super) fn busy(&self) -> u32 {
        self.pools.iter().map(|p| p.0).sum()
    }

    /// Spend so far over every cluster pool, USD.
    pub(super) fn cost(&self) -> f64 {
        self.pools.iter().map(|p| p.2.cost_usd).sum()
    }

    pub(super) fn into_spend(self) -> Vec<PoolSpend> {
        self.pools.into_iter().map(|p| p.2).collect()
    }
}

/// Adds GPU-seconds and cost to `pool`'s entry of `spend` (made at its first use).
pub(super) fn add_spend(spend: &mut Vec<PoolSpend>, pool: &str, gpu_seconds: f64, cost_usd: f64) {
    let i = match spend.iter().position(|s| s.pool == pool) {
        Some(i) => i,
        None => {
            spend.push(PoolSpend {
                pool: pool.to_string(),
                ..Default::default()
            });
            spend.len() - 1
        }
    };
    spend[i].gpu_seconds += gpu_seconds;
    spend[i].cost_usd += cost_usd;
}
