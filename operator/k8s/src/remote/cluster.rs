//! What the turn reads of a cluster pool's connection: its state and its caches' objects (a
//! plain record below the connections and the world, which both use it).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use spillway_core::Time;

/// How a cluster pool's connection stands.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteState {
    /// Not listed yet: the Secret, the kubeconfig or the first list has not worked (`error`
    /// says why, and `since` since when, once something failed).
    Connecting {
        error: Option<String>,
        since: Option<Time>,
    },
    /// Listed, and its watches are answered.
    Connected,
    /// Listed once, but its API server has not answered since `since`.
    Unreachable { since: Time, error: String },
}

/// One cluster pool as the turn reads it: its state and what its caches hold.
#[derive(Clone, Debug)]
pub struct RemoteCluster {
    /// The ComputePool's name.
    pub pool: String,
    pub state: RemoteState,
    /// The pool's nodes there, as that cluster names them.
    pub nodes: Vec<Arc<Node>>,
    /// Spillway's pods there (labelled with their job's uid), as that cluster has them.
    pub pods: Vec<Arc<Pod>>,
    /// Spillway's copies of workloads there (batch Jobs labelled with their job's uid).
    pub jobs: Vec<Arc<Job>>,
    /// Why its Jobs cannot be read (not listed yet, or the watch fails): it then takes no copy.
    pub jobs_problem: Option<String>,
    /// Whether what copies it holds is known: its Jobs were listed, or cannot be watched at
    /// all (then it holds none of this operator's making). Until then, a workload's job that
    /// may go there is placed nowhere (a copy made before a restart may run there).
    pub jobs_known: bool,
    /// A place the pool no longer uses (the pool was deleted, or its kubeconfig now names
    /// another server, or its `namespace` changed), watched until this cluster's pods there
    /// are gone: `pool` is then `<pool>#<n>`, the key its deletions go through.
    pub retiring: bool,
}

impl RemoteCluster {
    /// The ComputePool's name (without the `#<n>` of a retiring place).
    pub fn pool_name(&self) -> &str {
        self.pool
            .split_once('#')
            .map_or(self.pool.as_str(), |(p, _)| p)
    }
}
