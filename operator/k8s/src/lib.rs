//! Spillway's Kubernetes operator: watch caches -> [`world::build`] (the core's snapshot) ->
//! `spillway_core::decide` -> pods, status, Events ([`controller`]).
//!
//! Invariants:
//! - One field manager (`spillway`) for every write; status goes through server-side apply.
//! - Only the leader ([`leader`]) writes; every replica keeps its caches warm and serves
//!   `/metrics`, `/healthz` and `/readyz` ([`http`]).
//! - Nothing here decides where a job runs: that is the core's job. This crate observes,
//!   assumes, and writes.

pub mod bootstrap;
pub mod cloud;
pub mod controller;
pub mod http;
pub mod labels;
pub mod leader;
pub mod metrics;
pub mod pods;
pub mod status;
pub mod world;
pub mod writes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use controller::{Caches, Settings};
pub use leader::Election;
pub use metrics::Metrics;

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Leader election; `None` runs as the only replica.
    pub election: Option<Election>,
    pub controller: Settings,
}

/// Aborts its tasks when dropped, so an operator stopped by any means leaves nothing running.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// A task that is aborted when its guard is dropped, and can still be awaited.
struct Guarded<T>(JoinHandle<T>);

impl<T> Drop for Guarded<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the operator until `shutdown` turns true. Returns an error when it cannot start or
/// when it loses leadership (the process should then exit and be restarted).
pub async fn run(
    client: Client,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let health = Arc::new(http::Health::default());
    let listener = TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.metrics_addr))?;
    let mut tasks = Tasks(vec![tokio::spawn(http::serve(
        listener,
        metrics.clone(),
        health.clone(),
    ))]);

    let changed = Arc::new(Notify::new());
    let (caches, watch_tasks) = Caches::start(&client, changed.clone());
    tasks.0.extend(watch_tasks);
    tokio::select! {
        r = caches.ready() => r?,
        _ = shutdown.changed() => return Ok(()),
    }
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!("watch caches synced");

    let (leader_tx, mut leader_rx) = watch::channel(config.election.is_none());
    let mut election_task = None;
    if let Some(e) = config.election.clone() {
        tracing::info!(identity = %e.identity, lease = %format!("{}/{}", e.namespace, e.name), "waiting to become the leader");
        election_task = Some(Guarded(tokio::spawn(leader::run(
            client.clone(),
            e,
            leader_tx,
            shutdown.clone(),
        ))));
    }
    while !*leader_rx.borrow() {
        tokio::select! {
            r = leader_rx.changed() => if r.is_err() { break },
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    if let Some(mut t) = election_task { let _ = (&mut t.0).await; }
                    return Ok(());
                }
            }
        }
    }
    if !*leader_rx.borrow() {
        // The election task ended without ever leading: it failed.
        return match election_task {
            Some(mut t) => (&mut t.0).await?,
            None => Ok(()),
        };
    }
    metrics.set_leader(true);

    // Stop the loop on shutdown or when leadership is lost.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut leader_watch = leader_rx.clone();
    let mut shutdown_watch = shutdown.clone();
    tasks.0.push(tokio::spawn(async move {
        loop {
            if *shutdown_watch.borrow() || !*leader_watch.borrow() {
                let _ = stop_tx.send(true);
                return;
            }
            tokio::select! {
                r = leader_watch.changed() => if r.is_err() { let _ = stop_tx.send(true); return; },
                r = shutdown_watch.changed() => if r.is_err() { let _ = stop_tx.send(true); return; },
            }
        }
    }));
    let controller = controller::Controller::new(
        client.clone(),
        caches,
        config.controller.clone(),
        metrics.clone(),
        changed,
    );
    controller.run(health, stop_rx).await?;
    metrics.set_leader(false);
    let lost = !*leader_rx.borrow() && !*shutdown.borrow();
    if let Some(mut t) = election_task {
        let r = tokio::time::timeout(Duration::from_secs(10), &mut t.0).await;
        if let Ok(Ok(Err(e))) = r {
            return Err(e);
        }
    }
    drop(tasks);
    if lost {
        anyhow::bail!("lost leadership; stopping so that only one replica writes");
    }
    Ok(())
}
