//! Spillway's Kubernetes operator: watch caches ([`caches`]) -> the snapshot ([`world`]) ->
//! `spillway_core::decide` -> a turn's typed actions ([`turn`], [`actions`]) -> the executor
//! ([`executor`], [`effects`]) that carries them out against the API and the cloud.
//!
//! Invariants:
//! - One field manager (`spillway`) for every write; status goes through server-side apply.
//! - The turn does no I/O: every API and cloud call is an [`actions::Action`] that the
//!   executor runs, in order per object, with retries by error category.
//! - Only the leader ([`leader`]) acts, and only while its Lease is renewed within the renew
//!   deadline: the executor is fenced the moment it is not. Every replica keeps its caches
//!   warm and serves `/metrics`, `/healthz` and `/readyz` ([`http`]).
//! - Nothing here decides where a job runs: that is the core's job. This crate observes,
//!   assumes, and acts.

pub mod action_kind;
pub mod actions;
pub mod bootstrap;
pub mod caches;
pub mod clock;
pub mod cloud;
pub mod controller;
pub mod effects;
pub mod error;
pub mod executor;
pub mod hashing;
pub mod http;
pub mod https;
pub mod identity;
pub mod indicators;
pub mod interruptions;
pub mod labels;
pub mod leader;
pub mod metrics;
pub mod order;
pub mod otel;
pub mod pods;
pub mod remote;
pub mod serve;
pub mod spend;
pub mod spend_record;
pub mod status;
pub mod telemetry;
pub mod topology;
pub mod turn;
pub mod utilization;
pub mod webhook;
pub mod workloads;
pub mod world;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use controller::{Caches, Settings, Stopped};
pub use error::Error;
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
    /// The admission webhook every replica serves; `None` serves none.
    pub webhook: Option<webhook::WebhookConfig>,
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
///
/// The order of a clean stop matters: the loop stops, its actions in flight finish (bounded),
/// and only then is the Lease released, so the next leader never overlaps with this one.
pub async fn run(
    client: Client,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    if let Some(e) = &config.election {
        e.check().map_err(Error::Settings)?;
    }
    let health = Arc::new(http::Health::default());
    let listener = TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|source| Error::Listen {
            addr: config.metrics_addr,
            source,
        })?;
    let mut tasks = Tasks(vec![tokio::spawn(http::serve(
        listener,
        metrics.clone(),
        health.clone(),
        serve::LIMITS,
    ))]);

    let identity = config.controller.identity.clone();
    if let Some(id) = &identity {
        id.schedule
            .check()
            .map_err(|e| Error::Settings(e.to_string()))?;
        if id.audiences.is_empty() {
            return Err(Error::Settings(
                "at least one --identity-audience is needed".into(),
            ));
        }
    }
    let integrations = workloads::served(&client, &config.controller.integrations).await?;
    let changed = Arc::new(Notify::new());
    let (caches, watch_tasks) = Caches::start(
        &client,
        changed.clone(),
        identity
            .as_ref()
            .map(|i| (i.namespace.as_str(), i.secret.as_str())),
        [
            config.controller.spend_record.as_ref(),
            config.controller.indicator_record.as_ref(),
        ]
        .map(|r| r.map(|r| (r.namespace.as_str(), r.name.as_str()))),
        &integrations,
    );
    tasks.0.extend(watch_tasks);
    // Every replica serves the issuer's documents from its cache, leader or not.
    if let (Some(id), Some(keys)) = (&identity, &caches.keys)
        && let Some(addr) = id.addr
    {
        let tls = id.tls.as_ref().map(identity::tls_acceptor).transpose()?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        tracing::info!(%addr, issuer = %id.issuer, tls = tls.is_some(), "serving the identity issuer's discovery document and JWKS");
        tasks.0.push(tokio::spawn(identity::serve(
            listener,
            id.issuer.clone(),
            keys.clone(),
            tls,
            serve::LIMITS,
        )));
    }
    // Every replica serves the admission webhook from its caches, leader or not.
    if let Some(w) = &config.webhook {
        let listener = TcpListener::bind(w.addr)
            .await
            .map_err(|source| Error::Listen {
                addr: w.addr,
                source,
            })?;
        let resolver = Arc::new(webhook::Resolver::default());
        let world = webhook::CacheLookup {
            queues: caches.queues.clone(),
            namespaces: caches.namespaces.clone(),
            jobs: caches.jobs.clone(),
            pools: caches.pools.clone(),
            pod_settings: webhook::pods::PodSettings {
                identity: config.controller.identity.is_some(),
                otlp_endpoint: config.controller.pod_otlp_endpoint.clone(),
            },
        };
        tracing::info!(addr = %w.addr, secret = %format!("{}/{}", w.namespace, w.secret), self_signed = w.self_signed, "serving the admission webhook");
        tasks.0.push(tokio::spawn(webhook::serve(
            listener,
            resolver.clone(),
            world,
            metrics.clone(),
            serve::LIMITS,
        )));
        tasks.0.push(tokio::spawn(webhook::keep(
            client.clone(),
            w.clone(),
            resolver,
        )));
    }
    // Every replica keeps its connections to the cluster pools' other clusters warm.
    let remotes = remote::Remotes::default();
    {
        let pools = caches.clone();
        tasks.0.push(tokio::spawn(remote::keep(
            remotes.clone(),
            client.clone(),
            move || pools.pools(),
            changed.clone(),
        )));
    }
    tokio::select! {
        r = caches.ready() => r?,
        _ = shutdown.changed() => return Ok(()),
    }
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!("watch caches synced");

    let (leader_tx, mut leader_rx) = watch::channel(config.election.is_none());
    let (release_tx, release_rx) = watch::channel(false);
    let mut election_task = None;
    if let Some(e) = config.election.clone() {
        tracing::info!(identity = %e.identity, lease = %format!("{}/{}", e.namespace, e.name), "waiting to become the leader");
        election_task = Some(Guarded(tokio::spawn(leader::run(
            client.clone(),
            e,
            leader_tx,
            release_rx,
        ))));
    }
    while !*leader_rx.borrow() {
        tokio::select! {
            r = leader_rx.changed() => if r.is_err() { break },
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    let _ = release_tx.send(true);
                    if let Some(mut t) = election_task { let _ = (&mut t.0).await; }
                    return Ok(());
                }
            }
        }
    }
    if !*leader_rx.borrow() {
        // The election task ended without ever leading: it failed.
        return match election_task {
            Some(mut t) => match (&mut t.0).await {
                Ok(r) => r,
                Err(e) => Err(Error::LostLeadership(format!("election task failed: {e}"))),
            },
            None => Ok(()),
        };
    }
    metrics.set_leader(true);
    let fence = match &election_task {
        Some(_) => executor::Fence::new(leader_rx.clone()),
        None => executor::Fence::open(),
    };
    let controller = controller::Controller::new(
        client.clone(),
        caches,
        config.controller.clone(),
        metrics.clone(),
        changed,
        remotes,
    );
    let stopped = controller.run(health, fence, shutdown.clone()).await?;
    metrics.set_leader(false);
    // The loop is stopped and its actions are done or cancelled: only now give the Lease up.
    let _ = release_tx.send(true);
    let mut lost = None;
    if let Some(mut t) = election_task {
        match tokio::time::timeout(Duration::from_secs(10), &mut t.0).await {
            Ok(Ok(Err(e))) => lost = Some(e),
            Ok(Err(e)) => lost = Some(Error::LostLeadership(format!("election task failed: {e}"))),
            _ => {}
        }
    }
    drop(tasks);
    match (stopped, lost) {
        (_, Some(e)) => Err(e),
        (Stopped::Fenced, None) => Err(Error::LostLeadership(
            "stopped leading; stopping so that only one replica acts".into(),
        )),
        (Stopped::Shutdown, None) => Ok(()),
    }
}
