//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go does it.
//!
//! Every replica tries to hold the Lease. The holder renews it every `retry_period`; another
//! replica takes it over when it has seen the same record, unchanged, for longer than
//! `lease_duration` by its own clock (so clock skew between machines does not matter). Writes
//! use the Lease's `resourceVersion`, so two replicas cannot both win.
//!
//! Fencing: a leader that has not renewed for `renew_deadline` (shorter than the lease, as in
//! client-go) stops leading at that moment, even while a renewal is still hanging: it
//! publishes `false` on its leadership signal, which fences the executor, and returns an
//! error. Since the deadline is counted from when the last successful renewal was *sent*, and
//! other replicas count the lease from when they *saw* it, the old leader has stopped acting
//! at least `lease_duration - renew_deadline` before anyone can take over. On a clean stop the
//! caller first stops its loop and lets its actions finish, then asks for the Lease to be
//! released, so the next replica takes over at once and never while the old one still writes.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Error as KubeError};
use tokio::sync::watch;

use crate::error::Error;

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease lasts without renewal before another replica may take it (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading (10 s).
    pub renew_deadline: Duration,
    /// How often the leader renews and the others try to acquire (2 s).
    pub retry_period: Duration,
}

impl Election {
    /// client-go's defaults: a 15 s lease, a 10 s renew deadline, a 2 s retry period.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Election {
        Election {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Why these timings cannot work, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the retry period ({:?}) must be shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err("the lease duration must be at least 1 s".into());
        }
        Ok(())
    }
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

/// Runs the election until `release` turns true, publishing leadership on `leader`. Returns
/// an error when leadership, once held, is lost (the caller must stop acting and exit). When
/// `release` turns true while leading, the Lease is given up first.
pub async fn run(
    client: Client,
    election: Election,
    leader: watch::Sender<bool>,
    mut release: watch::Receiver<bool>,
) -> Result<(), Error> {
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let mut observed: Option<Observed> = None;
    let mut last_renewed: Option<Instant> = None;
    loop {
        if *release.borrow() {
            if *leader.borrow() {
                release_lease(&api, &election).await;
                let _ = leader.send(false);
            }
            return Ok(());
        }
        let leading = *leader.borrow();
        let sent = Instant::now();
        // A leader gives up at its renew deadline, even while a renewal hangs; the others
        // bound each attempt by the deadline too.
        let deadline = match (leading, last_renewed) {
            (true, Some(t)) => t + election.renew_deadline,
            _ => sent + election.renew_deadline,
        };
        let attempt = tokio::time::timeout_at(
            deadline.into(),
            try_acquire_or_renew(&api, &election, &mut observed),
        )
        .await;
        match attempt {
            Ok(Ok(true)) => {
                last_renewed = Some(sent);
                if !leading {
                    tracing::info!(identity = %election.identity, lease = %election.name, "became the leader");
                    let _ = leader.send(true);
                }
            }
            Ok(Ok(false)) if leading => {
                let _ = leader.send(false);
                return Err(Error::LostLeadership(format!(
                    "lease {}/{} is now held by another replica",
                    election.namespace, election.name
                )));
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leader election: cannot read or write the lease");
            }
            Err(_) => {
                tracing::warn!(
                    "leader election: no answer from the API server within the renew deadline"
                );
            }
        }
        if leading && last_renewed.is_none_or(|t| t.elapsed() >= election.renew_deadline) {
            let _ = leader.send(false);
            return Err(Error::LostLeadership(format!(
                "could not renew lease {}/{} within the renew deadline of {:?}",
                election.namespace, election.name, election.renew_deadline
            )));
        }
        let next = Instant::now() + election.retry_period;
        let wake = match (*leader.borrow(), last_renewed) {
            // Never sleep past the deadline.
            (true, Some(t)) => next.min(t + election.renew_deadline),
            _ => next,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            r = release.changed() => if r.is_err() {
                // The owner is gone: stop as if released.
                if *leader.borrow() {
                    let _ = leader.send(false);
                }
                return Ok(());
            },
        }
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    e: &Election,
    observed: &mut Option<Observed>,
) -> Result<bool, KubeError> {
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
                Err(KubeError::Api(s)) if s.code == 409 => Ok(false),
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
        Err(KubeError::Api(s)) if s.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Gives the Lease up so another replica takes over without waiting for it to expire.
async fn release_lease(api: &Api<Lease>, e: &Election) {
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
