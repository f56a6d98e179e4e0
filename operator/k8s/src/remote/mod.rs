//! Other clusters as pools: one connection per `cluster` ComputePool, made from the kubeconfig
//! Secret it names, with two watch caches there (the pool's GPU nodes, and Spillway's own pods
//! in the pool's namespace) and a record of whether its API server answers.
//!
//! The connections are kept by [`keep`], on every replica (like the home caches), and read by
//! the loop once per turn ([`Remotes::clusters`]): the turn lays the remote nodes and pods over
//! the home ones ([`view::overlay`]) so the world, the core and the jobs' lifecycle treat them
//! like any other, and asks for remote writes with their own action kinds, which the executor
//! sends through [`Remotes::client`].

pub mod cluster;
pub mod view;

pub use cluster::{RemoteCluster, RemoteState};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use spillway_api::ComputePool;
use spillway_api::pool::ClusterPool;
use spillway_core::Time;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::clock::now;
use crate::labels;

/// What the watches of one connection have seen.
#[derive(Debug, Default)]
struct Health {
    /// The nodes' and the pods' caches have listed at least once (the connection's state), and
    /// the Jobs' (copies of workloads may be sent there).
    listed: [bool; 3],
    /// Why the Jobs' cache fails, while it does (the worker Role of an older chart grants no
    /// Jobs): the pool then takes no copy of a workload, and its state is left alone.
    /// The first failure of the watches' current run of failures.
    failing_since: Option<Time>,
    error: Option<String>,
    /// The first failure of the probe's current run of failures, and its error: a watch can
    /// sit on a dead connection without an error for a while, the probe cannot.
    probe_failing: Option<(Time, String)>,
    jobs_error: Option<String>,
}

impl Health {
    /// Since when, and why, the cluster has not answered.
    fn failing(&self) -> Option<(Time, String)> {
        let watches = self
            .failing_since
            .map(|t| (t, self.error.clone().unwrap_or_default()));
        match (watches, self.probe_failing.clone()) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// One connection.
struct Connection {
    /// What it was made from (the Secret's version, the pool's selector and namespace): a
    /// change makes a new connection.
    source: String,
    /// Where its pods go: the server of the kubeconfig's context and the namespace there
    /// (`None` when it could not be made). A new connection to another place retires this one.
    place: Option<(String, String)>,
    client: Option<Client>,
    nodes: Option<Store<Node>>,
    pods: Option<Store<Pod>>,
    jobs: Option<Store<Job>>,
    health: Arc<Mutex<Health>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The connections to other clusters, by pool name, and the places pools no longer use,
/// watched until this cluster's pods there are gone.
#[derive(Clone, Default)]
pub struct Remotes {
    inner: Arc<Mutex<BTreeMap<String, Connection>>>,
    retiring: Arc<Mutex<BTreeMap<String, Retiring>>>,
}

/// A place a pool no longer uses.
struct Retiring {
    connection: Connection,
    since: Time,
}

/// How long a retiring place that never answers is watched before it is given up (with a
/// warning: pods of this cluster may be left there).
pub const RETIRE_WITHIN: Duration = Duration::from_secs(3600);

impl std::fmt::Debug for Remotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pools: Vec<String> = self.lock().keys().cloned().collect();
        f.debug_struct("Remotes").field("pools", &pools).finish()
    }
}

impl Remotes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Connection>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn retiring(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Retiring>> {
        self.retiring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The client of a cluster pool's connection (or of a retiring place, `<pool>#<n>`),
    /// when it has one.
    pub fn client(&self, pool: &str) -> Option<Client> {
        if pool.contains('#') {
            return (self.retiring().get(pool)).and_then(|r| r.connection.client.clone());
        }
        self.lock().get(pool).and_then(|c| c.client.clone())
    }

    /// Every cluster pool's state and caches, and every retiring place's, for one turn.
    pub fn clusters(&self) -> Vec<RemoteCluster> {
        let mut out: Vec<RemoteCluster> = (self.lock().iter())
            .map(|(pool, c)| c.view(pool, false))
            .collect();
        out.extend((self.retiring().iter()).map(|(key, r)| r.connection.view(key, true)));
        out
    }

    /// Keeps `connection`, which `pool` no longer uses, until this cluster's pods there are
    /// gone.
    fn retire(&self, pool: &str, connection: Connection) {
        if connection.client.is_none() {
            return;
        }
        let mut retiring = self.retiring();
        let n = (1..).find(|n| !retiring.contains_key(&format!("{pool}#{n}")));
        let key = format!("{pool}#{}", n.unwrap_or(0));
        tracing::info!(pool = %pool, place = ?connection.place, "watching a place the pool no longer uses until its pods there are gone");
        retiring.insert(
            key,
            Retiring {
                connection,
                since: now(),
            },
        );
    }

    /// Forgets the retiring places that hold no pod of their pool any more (listed, so known
    /// empty), and those that have not answered for [`RETIRE_WITHIN`].
    fn prune_retiring(&self) {
        self.retiring().retain(|key, r| {
            let view = r.connection.view(key, true);
            let pool = view.pool_name();
            let theirs = view
                .pods
                .iter()
                .any(|p| p.labels().get(labels::POOL_LABEL).map(String::as_str) == Some(pool));
            let listed = matches!(view.state, RemoteState::Connected);
            if listed && !theirs {
                tracing::info!(place = %key, "a place the pool no longer uses is clean");
                return false;
            }
            let waited = now().since(r.since);
            if waited.as_secs_f64() > RETIRE_WITHIN.as_secs_f64() {
                tracing::warn!(place = %key, place_was = ?r.connection.place, "a place the pool no longer uses has not been cleaned within an hour; giving it up: pods of this cluster may be left there");
                return false;
            }
            true
        });
    }
}

impl Connection {
    fn view(&self, key: &str, retiring: bool) -> RemoteCluster {
        let h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let listed = h.listed[0] && h.listed[1];
        let state = match (h.failing(), listed) {
            (None, true) => RemoteState::Connected,
            (Some((since, error)), true) => RemoteState::Unreachable { since, error },
            (failing, false) => RemoteState::Connecting {
                error: h.error.clone(),
                since: failing.map(|f| f.0),
            },
        };
        RemoteCluster {
            pool: key.to_string(),
            state,
            nodes: self.nodes.as_ref().map(|s| s.state()).unwrap_or_default(),
            pods: self.pods.as_ref().map(|s| s.state()).unwrap_or_default(),
            jobs: self.jobs.as_ref().map(|s| s.state()).unwrap_or_default(),
            jobs_problem: match (&h.jobs_error, h.listed[2]) {
                (Some(e), _) => Some(format!("its Jobs cannot be watched there: {e}")),
                (None, false) => Some("its Jobs are not listed yet".into()),
                (None, true) => None,
            },
            jobs_known: h.listed[2] || h.jobs_error.is_some(),
            retiring,
        }
    }
}

/// How often [`keep`] looks at the cluster pools and their Secrets.
pub const KEEP_PERIOD: Duration = Duration::from_secs(3);

/// Keeps one connection per cluster pool of `pools` (the home cache), made from the kubeconfig
/// its `kubeconfigSecretRef` names (read with `home`, by name: the only Secrets read), and
/// drops the connections of pools gone. Notifies `changed` when something changes.
pub async fn keep(
    remotes: Remotes,
    home: Client,
    pools: impl Fn() -> Vec<Arc<ComputePool>>,
    changed: Arc<Notify>,
) {
    loop {
        let wanted: BTreeMap<String, ClusterPool> = pools()
            .iter()
            .filter_map(|p| Some((p.name_any(), p.spec.cluster.clone()?)))
            .collect();
        let gone: Vec<String> = remotes
            .lock()
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for pool in gone {
            tracing::info!(pool = %pool, "closing the connection of a cluster pool that is gone");
            let old = remotes.lock().remove(&pool);
            if let Some(old) = old {
                remotes.retire(&pool, old);
            }
            changed.notify_one();
        }
        for (pool, spec) in &wanted {
            let made = connect(&home, pool, spec, &remotes, &changed).await;
            if let Some(conn) = made {
                let place = conn.place.clone();
                let old = remotes.lock().insert(pool.clone(), conn);
                if let Some(old) = old.filter(|o| o.place.is_some() && o.place != place) {
                    remotes.retire(pool, old);
                }
                changed.notify_one();
            }
        }
        remotes.prune_retiring();
        tokio::time::sleep(KEEP_PERIOD).await;
    }
}

/// A new connection for `pool`, when it has none or what it was made from changed.
async fn connect(
    home: &Client,
    pool: &str,
    spec: &ClusterPool,
    remotes: &Remotes,
    changed: &Arc<Notify>,
) -> Option<Connection> {
    let r = &spec.kubeconfig_secret_ref;
    let secrets: Api<Secret> = Api::namespaced(home.clone(), &r.namespace);
    let read = secrets.get_opt(&r.name).await;
    let current = remotes.lock().get(pool).map(|c| c.source.clone());
    let failed = |source: String, error: String| {
        // The same failure as before keeps its connection (and its first-failure time).
        if current.as_deref() == Some(source.as_str()) {
            return None;
        }
        tracing::warn!(pool = %pool, error = %error, "cannot connect to a cluster pool");
        Some(Connection {
            source,
            place: None,
            client: None,
            nodes: None,
            pods: None,
            jobs: None,
            health: Arc::new(Mutex::new(Health {
                failing_since: Some(now()),
                error: Some(error),
                ..Health::default()
            })),
            tasks: Vec::new(),
        })
    };
    let secret = match read {
        Ok(Some(s)) => s,
        Ok(None) => {
            return failed(
                "missing".into(),
                format!("Secret {}/{} not found", r.namespace, r.name),
            );
        }
        // The home API server is away, or the Secret may not be read: keep what there is.
        Err(e) if current.is_some() => {
            tracing::warn!(pool = %pool, error = %e, "cannot read the kubeconfig Secret; keeping the connection");
            return None;
        }
        Err(e) => {
            return failed(
                format!("unreadable:{e}"),
                format!("reading Secret {}/{}: {e}", r.namespace, r.name),
            );
        }
    };
    let source = format!(
        "{}/{}#{}#{}#{:?}",
        r.namespace,
        r.name,
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default(),
        spec.namespace,
        spec.node_selector
    );
    if current.as_deref() == Some(source.as_str()) {
        return None;
    }
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&r.key)) else {
        return failed(
            source,
            format!("Secret {}/{} has no key {:?}", r.namespace, r.name, r.key),
        );
    };
    let server = std::str::from_utf8(&bytes.0)
        .ok()
        .and_then(|t| Kubeconfig::from_yaml(t).ok())
        .and_then(|kc| {
            let context = kc.current_context.clone()?;
            let ctx = kc
                .contexts
                .iter()
                .find(|c| c.name == context)?
                .context
                .clone()?;
            let cluster = kc.clusters.iter().find(|c| c.name == ctx.cluster)?;
            cluster.cluster.as_ref()?.server.clone()
        })
        .unwrap_or_default();
    let client = match client_of(&bytes.0).await {
        Ok(c) => c,
        Err(e) => {
            return failed(
                source,
                format!(
                    "the kubeconfig in Secret {}/{} key {:?}: {e}",
                    r.namespace, r.name, r.key
                ),
            );
        }
    };
    tracing::info!(pool = %pool, namespace = %spec.namespace, "connecting to a cluster pool");
    let health = Arc::new(Mutex::new(Health::default()));
    let mut tasks = Vec::new();
    let selector: Vec<String> = spec
        .node_selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let nodes = watch(
        Api::all(client.clone()),
        watcher::Config::default().labels(&selector.join(",")),
        |n: &mut Node| n.metadata.managed_fields = None,
        (0, health.clone()),
        changed.clone(),
        &mut tasks,
    );
    let pods = watch(
        Api::namespaced(client.clone(), &spec.namespace),
        watcher::Config::default().labels(labels::JOB_UID_LABEL),
        |p: &mut Pod| p.metadata.managed_fields = None,
        (1, health.clone()),
        changed.clone(),
        &mut tasks,
    );
    let jobs = watch(
        Api::namespaced(client.clone(), &spec.namespace),
        watcher::Config::default().labels(labels::JOB_UID_LABEL),
        |j: &mut Job| j.metadata.managed_fields = None,
        (2, health.clone()),
        changed.clone(),
        &mut tasks,
    );
    tasks.push(tokio::spawn(probe(
        client.clone(),
        health.clone(),
        changed.clone(),
    )));
    Some(Connection {
        source,
        place: Some((server, spec.namespace.clone())),
        client: Some(client),
        nodes: Some(nodes),
        pods: Some(pods),
        jobs: Some(jobs),
        health,
        tasks,
    })
}

/// A client from a kubeconfig's bytes (its current context), once [`check_kubeconfig`] passes.
pub async fn client_of(bytes: &[u8]) -> Result<Client, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let kc = Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    check_kubeconfig(&kc)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

/// What a cluster pool's kubeconfig may not hold (every entry is checked, not only the current
/// context's). It is a Secret any namespace admin may have written, read by an operator that
/// holds cluster-wide credentials, so nothing in it may point at the operator's own files or
/// weaken the connection:
/// - no file (`tokenFile`, `client-certificate`, `client-key`, `certificate-authority`): a
///   `tokenFile` of the operator's own ServiceAccount token would send it to whatever server the
///   kubeconfig names; only the `-data` forms and an inline `token` are read;
/// - no `insecure-skip-tls-verify` and no `http://` server: the credential would cross the
///   network unauthenticated or in clear;
/// - no exec plugin or auth provider: the operator's image has no cloud CLIs.
///
/// `proxy-url` is honoured: the TLS session to the server goes through it end to end.
pub fn check_kubeconfig(kc: &Kubeconfig) -> Result<(), String> {
    let mut refused = Vec::new();
    for c in &kc.clusters {
        let Some(cluster) = &c.cluster else { continue };
        let at = format!("clusters[{}]", c.name);
        if cluster.insecure_skip_tls_verify == Some(true) {
            refused.push(format!("{at}.insecure-skip-tls-verify"));
        }
        if cluster.certificate_authority.is_some() {
            refused.push(format!(
                "{at}.certificate-authority (a file; use certificate-authority-data)"
            ));
        }
        if let Some(server) = &cluster.server
            && !server.starts_with("https://")
        {
            refused.push(format!("{at}.server {server:?} (not https)"));
        }
    }
    for a in &kc.auth_infos {
        let Some(auth) = &a.auth_info else { continue };
        let at = format!("users[{}]", a.name);
        let files = [
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ];
        for (field, set) in files {
            if set {
                refused.push(format!("{at}.{field} (a file; put the credential inline)"));
            }
        }
        if auth.exec.is_some() || auth.auth_provider.is_some() {
            refused.push(format!(
                "{at}: exec plugins and auth providers (use a token or a client certificate)"
            ));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the kubeconfig holds what a cluster pool may not use: {} (docs/multi-cluster.md)",
            refused.join("; ")
        ))
    }
}

/// Asks the other API server its version every [`KEEP_PERIOD`] (allowed to every
/// authenticated user: no extra grant), and keeps `health.probe_failing`.
async fn probe(client: Client, health: Arc<Mutex<Health>>, changed: Arc<Notify>) {
    loop {
        tokio::time::sleep(KEEP_PERIOD).await;
        let answer = tokio::time::timeout(KEEP_PERIOD, client.apiserver_version()).await;
        let error = match answer {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer in {} s", KEEP_PERIOD.as_secs())),
        };
        let mut h = health.lock().unwrap_or_else(|p| p.into_inner());
        match (error, h.probe_failing.is_some()) {
            (None, true) => {
                h.probe_failing = None;
                changed.notify_one();
            }
            (Some(e), false) => {
                h.probe_failing = Some((now(), e));
                changed.notify_one();
            }
            (Some(e), true) => {
                if let Some(f) = h.probe_failing.as_mut() {
                    f.1 = e;
                }
            }
            (None, false) => {}
        }
    }
}

/// A watch cache on the other cluster whose events keep `health` (slot `slot` of `listed`).
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    (slot, health): (usize, Arc<Mutex<Health>>),
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let mut h = health.lock().unwrap_or_else(|p| p.into_inner());
            if slot == 2 {
                // The Jobs' cache: its failures are its own (see `Health::jobs_error`).
                let was = h.jobs_error.is_some();
                match item {
                    Ok(e) => {
                        h.jobs_error = None;
                        let done = matches!(e, watcher::Event::InitDone);
                        h.listed[2] |= done;
                        if was
                            || done
                            || matches!(e, watcher::Event::Apply(_) | watcher::Event::Delete(_))
                        {
                            changed.notify_one();
                        }
                    }
                    Err(e) => {
                        h.jobs_error = Some(e.to_string());
                        if !was {
                            changed.notify_one();
                        }
                    }
                }
                continue;
            }
            match item {
                Ok(e) => {
                    let was_failing = h.failing_since.take().is_some();
                    h.error = None;
                    let done = matches!(e, watcher::Event::InitDone);
                    if done {
                        h.listed[slot] = true;
                    }
                    if done
                        || was_failing
                        || matches!(e, watcher::Event::Apply(_) | watcher::Event::Delete(_))
                    {
                        changed.notify_one();
                    }
                }
                Err(e) => {
                    if h.failing_since.is_none() {
                        h.failing_since = Some(now());
                        changed.notify_one();
                    }
                    h.error = Some(e.to_string());
                }
            }
        }
    }));
    reader
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dc2\n  cluster:\n{cluster}\nusers:\n- name: w\n  user:\n{user}\ncontexts:\n- name: c\n  context: {{cluster: dc2, user: w}}\ncurrent-context: c\n"
        ))
        .expect("kubeconfig")
    }

    #[test]
    fn an_inline_token_over_verified_https_is_accepted() {
        let kc = kubeconfig(
            "    server: https://dc2.example:6443\n    certificate-authority-data: Q0E=\n    proxy-url: http://proxy:3128",
            "    token: abc",
        );
        assert_eq!(check_kubeconfig(&kc), Ok(()));
    }

    #[test]
    fn files_insecure_tls_plain_http_and_plugins_are_refused_by_name() {
        let cases = [
            (
                "    server: https://x:6443",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "users[w].tokenFile",
            ),
            (
                "    server: https://x:6443",
                "    client-certificate: /etc/c.crt\n    client-key: /etc/c.key",
                "users[w].client-certificate",
            ),
            (
                "    server: https://x:6443\n    insecure-skip-tls-verify: true",
                "    token: abc",
                "clusters[dc2].insecure-skip-tls-verify",
            ),
            (
                "    server: https://x:6443\n    certificate-authority: /etc/ca.crt",
                "    token: abc",
                "clusters[dc2].certificate-authority",
            ),
            ("    server: http://x:8080", "    token: abc", "not https"),
            (
                "    server: https://x:6443",
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws",
                "exec plugins",
            ),
        ];
        for (cluster, user, want) in cases {
            let err = check_kubeconfig(&kubeconfig(cluster, user)).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }
}
