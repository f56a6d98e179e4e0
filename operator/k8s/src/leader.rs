//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go does it.
//!
//! Every replica tries to hold the Lease. The holder renews it every `retry_period`; another
//! replica takes it over when it has seen the same record, unchanged, for longer than
//! `lease_duration` by its own clock (so clock skew between machines does not matter). Writes
//! use the Lease's `resourceVersion`, so two replicas cannot both win. A leader that cannot
//! renew for `lease_duration` steps down; on shutdown it releases the Lease, so the next
//! replica takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Error};
use tokio::sync::watch;

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub retry_period: Duration,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// What a replica last saw of the Lease, and when (by its own clock).
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// Runs the election until `shutdown` turns true, publishing leadership on `leader`. Returns
/// an error when leadership, once held, is lost (the caller should stop writing and exit).
pub async fn run(
    client: Client,
    election: Election,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let mut observed: Option<Observed> = None;
    let mut last_renewed: Option<Instant> = None;
    loop {
        if *shutdown.borrow() {
            if *leader.borrow() {
                release(&api, &election).await;
                let _ = leader.send(false);
            }
            return Ok(());
        }
        match try_acquire_or_renew(&api, &election, &mut observed).await {
            Ok(true) => {
                last_renewed = Some(Instant::now());
                if !*leader.borrow() {
                    tracing::info!(identity = %election.identity, lease = %election.name, "became the leader");
                    let _ = leader.send(true);
                }
            }
            Ok(false) => {
                if *leader.borrow() {
                    let _ = leader.send(false);
                    anyhow::bail!(
                        "lost leadership: lease {}/{} is now held by another replica",
                        election.namespace,
                        election.name
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election: cannot read or write the lease");
                if *leader.borrow()
                    && last_renewed.is_some_and(|t| t.elapsed() > election.lease_duration)
                {
                    let _ = leader.send(false);
                    anyhow::bail!(
                        "lost leadership: could not renew lease {}/{} for {:?}",
                        election.namespace,
                        election.name,
                        election.lease_duration
                    );
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(election.retry_period) => {}
            _ = shutdown.changed() => {}
        }
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    e: &Election,
    observed: &mut Option<Observed>,
) -> Result<bool, Error> {
    let duration_s = e.lease_duration.as_secs().max(1) as i32;
    let current = match api.get_opt(&e.name).await? {
        Some(l) => l,
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(e.name.clone()),
                    namespace: Some(e.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(e.identity.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(Error::Api(s)) if s.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        }
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let changed = observed
        .as_ref()
        .is_none_or(|o| o.holder != holder || o.renew != spec.renew_time);
    if changed {
        *observed = Some(Observed {
            holder: holder.clone(),
            renew: spec.renew_time.clone(),
            at: Instant::now(),
        });
    }
    let mine = holder.as_deref() == Some(e.identity.as_str());
    let lease_for =
        Duration::from_secs(spec.lease_duration_seconds.unwrap_or(duration_s).max(1) as u64);
    let expired = holder.is_none()
        || observed
            .as_ref()
            .is_some_and(|o| o.at.elapsed() > lease_for);
    if !mine && !expired {
        return Ok(false);
    }
    let mut next = current.clone();
    let mut new_spec = spec.clone();
    new_spec.renew_time = Some(now());
    new_spec.lease_duration_seconds = Some(duration_s);
    if !mine {
        new_spec.holder_identity = Some(e.identity.clone());
        new_spec.acquire_time = Some(now());
        new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    next.spec = Some(new_spec.clone());
    match api.replace(&e.name, &PostParams::default(), &next).await {
        Ok(_) => {
            *observed = Some(Observed {
                holder: new_spec.holder_identity,
                renew: new_spec.renew_time,
                at: Instant::now(),
            });
            Ok(true)
        }
        Err(Error::Api(s)) if s.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Gives the Lease up so another replica takes over without waiting for it to expire.
async fn release(api: &Api<Lease>, e: &Election) {
    let Ok(Some(mut lease)) = api.get_opt(&e.name).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(e.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    match api.replace(&e.name, &PostParams::default(), &lease).await {
        Ok(_) => tracing::info!(lease = %e.name, "released the leader lease"),
        Err(err) => tracing::warn!(error = %err, "could not release the leader lease"),
    }
}
