//! Identity's part of a turn: the issuer's keys rotated on schedule, and a token for every
//! running job, issued when it starts (or moves) and refreshed at 80 % of its lifetime, until
//! it ends. Tokens are signed only with keys the keys Secret already holds (seen in the cache),
//! so no token can name a key that was never published. The tokens of one of a namespace's
//! tokens Secrets ([`identity::tokens_secret_name`]) are written together whenever one of them
//! is issued; a job that stops running has its key left out (server-side apply removes it)
//! at that Secret's next write, or [`REMOVAL_WAIT`] after it stopped if none comes sooner: in
//! a busy namespace removals ride on the writes that issue tokens. A job whose pods already
//! mount a tokens Secret keeps that one.

use crate::hashing::{HashMap, HashSet, HashSetExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;
use spillway_api::{ComputePool, GpuQueue};
use spillway_core::{Duration, Time};
use spillway_identity::token::{self, Request, Workload};
use spillway_identity::{KeyRing, rotation};

use super::State;
use crate::actions::{Action, SecretApply};
use crate::identity::{self, IdentityConfig};
use crate::pods::PodIdentity;
use crate::world::{self, Inputs, Lifecycle};

/// How long the key of a job that stopped running may stay in its tokens Secret at home
/// waiting for the Secret's next write (a token stays valid until it expires whether or not
/// it is in the Secret; this bounds how long the pods of a new job that mount the Secret can
/// read it).
pub(super) const REMOVAL_WAIT: Duration = Duration::from_secs(30);

/// A token issued, and when to issue the next.
#[derive(Clone, PartialEq)]
pub(super) struct TokenRecord {
    /// (attempt, pool) it was issued for: a job that moves gets a new one.
    placement: (u32, String),
    refresh_at: Time,
    namespace: String,
    job: String,
    token: String,
    /// Its tokens Secret at home (the job's namespace).
    secret: String,
    /// Where its Secret is: `None` at home (the job's namespace), else the cluster pool, its
    /// namespace there and the job's uid (each job its own Secret there).
    remote: Option<(String, String, String)>,
}

/// A Secret tokens are written to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Target {
    /// A tokens Secret of a home namespace (namespace, Secret): the tokens of its running jobs
    /// whose names hash to it, by job name.
    Home(String, String),
    /// One job's Secret in another cluster: (pool, namespace there, Secret name).
    Remote(String, String, String),
}

impl TokenRecord {
    /// Which Secret holds it.
    fn target(&self) -> Target {
        match &self.remote {
            Some((pool, ns, uid)) => Target::Remote(
                pool.clone(),
                ns.clone(),
                crate::remote::view::remote_token_secret(uid),
            ),
            None => Target::Home(self.namespace.clone(), self.secret.clone()),
        }
    }

    /// Its key in that Secret.
    fn key(&self) -> String {
        match &self.remote {
            Some(_) => crate::remote::view::REMOTE_TOKEN_KEY.into(),
            None => self.job.clone(),
        }
    }
}

impl std::fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord")
            .field("placement", &self.placement)
            .field("refresh_at", &self.refresh_at)
            .field("token", &"(hidden)")
            .finish()
    }
}

impl State {
    fn identity_config(&self) -> Option<&IdentityConfig> {
        self.settings.identity.as_ref()
    }

    /// Queues whose `identity.audiences` name an audience the issuer does not offer are
    /// invalid (their jobs wait, saying so).
    pub(super) fn check_queue_identity(&self, built: &mut world::Built, inputs: &Inputs) {
        let Some(cfg) = self.identity_config() else {
            return;
        };
        for q in &inputs.queues {
            let Some(id) = &q.spec.identity else { continue };
            let bad: Vec<String> = id
                .audiences
                .iter()
                .enumerate()
                .filter(|(_, a)| !cfg.audiences.contains(a))
                .map(|(i, a)| format!("spec.identity.audiences[{i}]: {a:?}"))
                .collect();
            if bad.is_empty() {
                continue;
            }
            let why = format!(
                "{} not among the operator's --identity-audience values ({})",
                bad.join(", "),
                cfg.audiences.join(", ")
            );
            let name = q.name_any();
            built.snapshot.queues.retain(|c| c.name != name);
            built
                .snapshot
                .invalid_queues
                .insert(name.clone(), why.clone());
            built
                .invalid_objects
                .entry(format!("GpuQueue/{name}"))
                .or_insert(why);
        }
    }

    /// What a job's pods carry for their identity.
    pub(super) fn pod_identity(
        &self,
        view: &world::JobView,
        queues: &HashMap<String, Arc<GpuQueue>>,
    ) -> Option<PodIdentity> {
        self.identity_config()?;
        Some(PodIdentity {
            secret: home_secret(view),
            key: view.job.name_any(),
            aws_role_arn: queues
                .get(&view.job.spec.queue)
                .and_then(|q| q.spec.identity.as_ref())
                .and_then(|i| i.aws_role_arn.clone()),
        })
    }

    /// Rotates the keys; returns the ring tokens are signed with (what the Secret holds).
    pub(super) fn keys(&mut self, inputs: &Inputs, now: Time) -> Option<KeyRing> {
        let cfg = self.identity_config()?.clone();
        let stored = match inputs
            .identity_keys
            .as_deref()
            .filter(|s| identity::holds_keys(s))
            .map(identity::ring_of)
        {
            Some(Ok(ring)) => Some(ring),
            Some(Err(e)) => {
                tracing::error!(secret = %format!("{}/{}", cfg.namespace, cfg.secret), error = %e,
                    "the issuer's keys cannot be read; starting a new key ring (tokens signed by the old keys stop verifying)");
                None
            }
            None => None,
        };
        if self.keys_written.is_some() && self.keys_written == stored {
            self.keys_written = None;
        }
        let base = self
            .keys_written
            .clone()
            .or_else(|| stored.clone())
            .unwrap_or_default();
        match rotation::plan(&base, &cfg.schedule, now) {
            Ok(Some(ring)) => {
                let kids: Vec<&str> = ring.keys.iter().map(|k| k.kid.as_str()).collect();
                tracing::info!(keys = ?kids, "the issuer's key ring changes");
                self.emit(Action::ApplySecret(SecretApply(Box::new(
                    identity::keys_secret(&cfg, &ring),
                ))));
                self.keys_written = Some(ring);
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "cannot rotate the issuer's keys"),
        }
        stored
    }

    /// Issues or refreshes the token of every running job; returns when the next is due.
    pub(super) fn tokens(
        &mut self,
        built: &world::Built,
        ring: Option<&KeyRing>,
        queues: &HashMap<String, Arc<GpuQueue>>,
        pools: &HashMap<String, Arc<ComputePool>>,
        now: Time,
    ) -> Option<Time> {
        let cfg = self.identity_config()?.clone();
        let mut wake: Option<Time> =
            ring.and_then(|r| rotation::next_change(r, &cfg.schedule, now));
        let mut running = HashSet::new();
        let mut write: BTreeSet<Target> = BTreeSet::new();
        for view in built.jobs.values() {
            let Lifecycle::Running {
                pool: Some(pool), ..
            } = &view.lifecycle
            else {
                continue;
            };
            running.insert(view.id.clone());
            let placement = (view.attempt, pool.clone());
            let due = self
                .tokens
                .get(&view.id)
                .is_none_or(|t| t.placement != placement || now >= t.refresh_at);
            if !due {
                continue;
            }
            let Some(ring) = ring else { continue };
            let in_pool = pools.get(pool);
            let environment = match in_pool.map(|p| (p.spec.aws.is_some(), &p.spec.cluster)) {
                Some((true, _)) => "cloud",
                Some((_, Some(_))) => "remote",
                _ => "private",
            };
            let remote = in_pool.and_then(|p| p.spec.cluster.as_ref()).map(|c| {
                let uid = view.job.metadata.uid.clone().unwrap_or_default();
                (pool.clone(), c.namespace.clone(), uid)
            });
            let queue = queues.get(&view.job.spec.queue);
            let audiences = queue
                .and_then(|q| q.spec.identity.as_ref())
                .map(|i| i.audiences.clone())
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| cfg.audiences.clone());
            let template = view.job.spec.pod_spec();
            let account =
                template.and_then(|s| s.service_account_name.clone().or(s.service_account.clone()));
            let request = Request {
                issuer: &cfg.issuer,
                subject: token::subject(&view.namespace_or_default(), account.as_deref()),
                audiences,
                workload: Workload {
                    job: view.job.name_any(),
                    queue: view.job.spec.queue.clone(),
                    environment: environment.into(),
                    pool: pool.clone(),
                },
                lifetime: cfg.schedule.token_lifetime,
            };
            match token::issue(ring, request, now) {
                Ok(issued) => {
                    let refresh_at = now + refresh_after(cfg.schedule.token_lifetime);
                    let record = TokenRecord {
                        placement,
                        refresh_at,
                        namespace: view.namespace_or_default(),
                        job: view.job.name_any(),
                        token: issued.token,
                        secret: home_secret(view),
                        remote,
                    };
                    // A job that moved between home and a cluster pool leaves its old Secret.
                    if let Some(old) = self.tokens.get(&view.id) {
                        write.insert(old.target());
                    }
                    write.insert(record.target());
                    self.tokens.insert(view.id.clone(), record);
                }
                Err(e) => tracing::error!(job = %view.id, error = %e, "cannot issue a token"),
            }
        }
        let stale = &mut self.stale_tokens;
        self.tokens.retain(|id, t| {
            let keep = running.contains(id);
            if !keep {
                match t.target() {
                    home @ Target::Home(..) => {
                        stale.entry(home).or_insert(now + REMOVAL_WAIT);
                    }
                    remote => {
                        write.insert(remote);
                    }
                }
            }
            keep
        });
        // Keys to take out go with the Secret's next write, or once the oldest has waited.
        stale.retain(|target, due| {
            if now >= *due || write.contains(target) {
                write.insert(target.clone());
                false
            } else {
                wake = Some(wake.map_or(*due, |w| w.min(*due)));
                true
            }
        });
        let home = self.remote.home.clone().unwrap_or_default();
        for target in write {
            let tokens: BTreeMap<String, String> = self
                .tokens
                .values()
                .filter(|t| t.target() == target)
                .map(|t| (t.key(), t.token.clone()))
                .collect();
            self.emit(match target {
                Target::Home(namespace, name) => Action::ApplySecret(SecretApply(Box::new(
                    identity::tokens_secret(&namespace, &name, &tokens),
                ))),
                // A job that stopped running there: its Secret goes.
                Target::Remote(pool, namespace, name) if tokens.is_empty() => {
                    Action::DeleteRemoteSecret {
                        pool,
                        namespace,
                        name,
                    }
                }
                Target::Remote(pool, namespace, name) => Action::ApplyRemoteSecret {
                    pool,
                    secret: SecretApply(Box::new(identity::remote_token_secret(
                        &namespace, &name, &tokens, &home,
                    ))),
                },
            });
        }
        for t in self.tokens.values() {
            wake = Some(wake.map_or(t.refresh_at, |w| w.min(t.refresh_at)));
        }
        wake
    }

    /// A token write failed: issue that Secret's tokens again next turn; when the failure may
    /// pass (`retryable`: not a namespace gone or a refusal), write it then even if none of
    /// its jobs runs any more (the keys it was to take out).
    pub(super) fn token_failed(&mut self, namespace: &str, name: &str, retryable: bool) {
        if let Some(cfg) = self.identity_config()
            && cfg.namespace == namespace
            && cfg.secret == name
        {
            self.keys_written = None;
            return;
        }
        if identity::is_tokens_secret(name) {
            self.tokens
                .retain(|_, t| t.remote.is_some() || t.namespace != namespace || t.secret != name);
            if retryable {
                let home = Target::Home(namespace.into(), name.into());
                self.stale_tokens.insert(home, Time::from_millis(i64::MIN));
            }
        }
    }

    /// A token Secret in a cluster pool could not be written: issue its token again next turn.
    pub(super) fn remote_tokens_failed(&mut self, pool: &str, name: &str) {
        self.tokens.retain(|_, t| {
            t.remote.as_ref().is_none_or(|(p, _, uid)| {
                p != pool || crate::remote::view::remote_token_secret(uid) != name
            })
        });
    }
}

/// The tokens Secret a job's token is written to at home: the one its pods mount (pods made
/// before the tokens were spread over shards keep theirs), else its name's shard.
fn home_secret(view: &world::JobView) -> String {
    view.pods
        .iter()
        .find_map(|p| identity::mounted_tokens_secret(p))
        .map_or_else(
            || identity::tokens_secret_name(&view.job.name_any()),
            str::to_string,
        )
}

/// Tokens are refreshed at 80 % of their lifetime.
fn refresh_after(lifetime: Duration) -> Duration {
    Duration::from_millis(lifetime.as_millis() / 5 * 4)
}

trait Namespaced {
    fn namespace_or_default(&self) -> String;
}

impl Namespaced for world::JobView {
    fn namespace_or_default(&self) -> String {
        self.job.namespace().unwrap_or_else(|| "default".into())
    }
}
