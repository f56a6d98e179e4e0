//! The operator, run in the test process against the test control plane.
//!
//! Tests that run an operator take turns ([`serial`]): every operator sees every GpuJob of the
//! shared control plane, so two running at once (outside the leader-election test) would both
//! act. Each test still uses its own namespace, queues, pools and nodes, and an operator
//! started by a later test finds earlier tests' objects as they were left.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use spillway_k8s::{Election, Metrics, OperatorConfig, Settings};
use tokio::sync::{MutexGuard, watch};
use tokio::task::JoinHandle;

/// Operator tests take turns.
pub async fn serial() -> MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// An operator running as a task of the test.
pub struct RunningOperator {
    pub metrics: Arc<Metrics>,
    pub metrics_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), spillway_k8s::Error>>,
    ended_at: Arc<std::sync::OnceLock<std::time::SystemTime>>,
}

impl Drop for RunningOperator {
    /// A test that fails (panics) must not leave its operator acting on later tests' jobs.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Settings that make tests quick: a short debounce and resync.
pub fn test_settings(instance: &str) -> Settings {
    Settings {
        resync: Duration::from_secs(5),
        debounce: Duration::from_millis(20),
        instance: instance.to_string(),
        ..Settings::default()
    }
}

impl RunningOperator {
    /// Starts an operator with test settings (no leader election unless given).
    pub async fn start(client: Client, election: Option<Election>) -> anyhow::Result<Self> {
        let instance = election
            .as_ref()
            .map(|e| e.identity.clone())
            .unwrap_or_else(|| "test-operator".into());
        Self::start_with(client, election, test_settings(&instance)).await
    }

    pub async fn start_with(
        client: Client,
        election: Option<Election>,
        settings: Settings,
    ) -> anyhow::Result<Self> {
        Self::start_full(client, election, settings, None).await
    }

    /// Starts an operator that also serves the admission webhook.
    pub async fn start_full(
        client: Client,
        election: Option<Election>,
        settings: Settings,
        webhook: Option<spillway_k8s::webhook::WebhookConfig>,
    ) -> anyhow::Result<Self> {
        let port = crate::process::free_port()?;
        let metrics_addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let metrics = Arc::new(Metrics::default());
        let (shutdown, rx) = watch::channel(false);
        let config = OperatorConfig {
            webhook,
            metrics_addr,
            election,
            controller: settings,
        };
        let ended_at = Arc::new(std::sync::OnceLock::new());
        let ended = ended_at.clone();
        let run = spillway_k8s::run(client, config, metrics.clone(), rx);
        let task = tokio::spawn(async move {
            let result = run.await;
            let _ = ended.set(std::time::SystemTime::now());
            result
        });
        Ok(RunningOperator {
            metrics,
            metrics_addr,
            shutdown,
            task,
            ended_at,
        })
    }

    /// Stops it as SIGTERM would, and returns how its run ended.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        match tokio::time::timeout(Duration::from_secs(30), &mut self.task).await {
            Ok(Ok(r)) => r.map_err(anyhow::Error::from),
            Ok(Err(e)) => Err(anyhow::anyhow!("operator task panicked: {e}")),
            Err(_) => Err(anyhow::anyhow!("operator did not stop within 30 s")),
        }
    }

    /// Stops it abruptly, as a crash or `kill -9` would (no lease release, writes cut off).
    pub fn kill(self) {
        // Dropping aborts the task.
    }

    /// Whether its run has ended (with its result), without stopping it.
    pub fn finished(&self) -> bool {
        self.task.is_finished()
    }

    /// When its run returned, by the wall clock (which the API server and the Lease's
    /// `acquireTime` share on this machine); `None` while it runs or if it was aborted.
    pub fn ended_at(&self) -> Option<std::time::SystemTime> {
        self.ended_at.get().copied()
    }

    /// GET on its HTTP endpoint: (status code, body).
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let (code, _, body) = http_get(self.metrics_addr, path).await?;
        Ok((code, body))
    }
}

/// A plain HTTP/1.1 GET: (status code, headers, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (headers, body) = response
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_string(), b.to_string()))
        .unwrap_or_default();
    Ok((code, headers, body))
}

/// Identity settings for tests: the issuer served on a free loopback port over plain HTTP,
/// its keys in `namespace`.
pub fn test_identity(
    namespace: &str,
    lifetime_s: u64,
    rotation_s: u64,
) -> anyhow::Result<spillway_k8s::identity::IdentityConfig> {
    let port = crate::process::free_port()?;
    Ok(spillway_k8s::identity::IdentityConfig {
        issuer: format!("http://127.0.0.1:{port}"),
        audiences: vec!["spillway".into(), "sts.amazonaws.com".into()],
        schedule: spillway_identity::Schedule {
            token_lifetime: spillway_core::Duration::from_secs(lifetime_s),
            rotation: spillway_core::Duration::from_secs(rotation_s),
            algorithm: spillway_identity::Algorithm::ES256,
        },
        namespace: namespace.to_string(),
        secret: "spillway-identity-keys".into(),
        addr: Some(([127, 0, 0, 1], port).into()),
        tls: None,
    })
}

/// Polls `check` until it returns `Some`, or fails after `timeout` with `what` and the last
/// value seen.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                if Instant::now() > deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes what earlier operator tests of this process left: the Nodes they registered, their
/// cluster pools, the labelled batch Jobs and JobSets (whose GpuJobs the operator would make again) and the
/// GpuJobs of their namespaces (`prefixes`). Operator tests take turns, so this is safe.
pub async fn clean_up_earlier_tests(client: &kube::Client, prefixes: &[&str]) {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt;
    use kube::api::{Api, DeleteParams, ListParams};
    let jobs: Api<Job> = Api::all(client.clone());
    if let Ok(list) = jobs
        .list(&ListParams::default().labels("spillway.io/queue"))
        .await
    {
        for j in list.items {
            let ns = j.namespace().unwrap_or_default();
            if prefixes.iter().any(|p| ns.starts_with(p)) {
                let _ = Api::<Job>::namespaced(client.clone(), &ns)
                    .delete(&j.name_any(), &DeleteParams::background())
                    .await;
            }
        }
    }
    // Labelled JobSets, where the JobSet CRD is installed.
    let jobsets = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let all_jobsets: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &jobsets);
    if let Ok(list) = all_jobsets
        .list(&ListParams::default().labels("spillway.io/queue"))
        .await
    {
        for j in list.items {
            let ns = j.namespace().unwrap_or_default();
            if prefixes.iter().any(|p| ns.starts_with(p)) {
                let _ = Api::<kube::core::DynamicObject>::namespaced_with(
                    client.clone(),
                    &ns,
                    &jobsets,
                )
                .delete(&j.name_any(), &DeleteParams::background())
                .await;
            }
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for selector in ["spillway.test/pool", "spillway.io/instance-id"] {
        let _ = nodes
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default().labels(selector),
            )
            .await;
    }
    // Cluster pools of earlier tests: their other cluster's nodes would otherwise stay in play.
    let pools: Api<spillway_api::ComputePool> = Api::all(client.clone());
    if let Ok(list) = pools.list(&ListParams::default()).await {
        for p in list.items {
            let name = p.name_any();
            if p.spec.cluster.is_some() && prefixes.iter().any(|x| name.starts_with(x)) {
                let _ = pools.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
    let all: Api<spillway_api::GpuJob> = Api::all(client.clone());
    if let Ok(list) = all.list(&ListParams::default()).await {
        for j in list.items {
            let ns = j.namespace().unwrap_or_default();
            if prefixes.iter().any(|p| ns.starts_with(p)) {
                let _ = Api::<spillway_api::GpuJob>::namespaced(client.clone(), &ns)
                    .delete(&j.name_any(), &DeleteParams::background())
                    .await;
            }
        }
    }
}

/// The operator's webhook served on loopback `port` with a self-signed CA it makes (its Secret
/// in `namespace`), keeping the caBundle of the configurations named `configuration`.
pub fn local_webhook(
    namespace: &str,
    port: u16,
    configuration: &str,
) -> spillway_k8s::webhook::WebhookConfig {
    spillway_k8s::webhook::WebhookConfig {
        addr: ([127, 0, 0, 1], port).into(),
        namespace: namespace.to_string(),
        secret: "spillway-webhook-tls".into(),
        hosts: vec!["127.0.0.1".into()],
        self_signed: true,
        lifetime: Duration::from_secs(90 * 86_400),
        configuration: Some(configuration.to_string()),
    }
}

/// The chart's mutating webhooks (`hold` on the batch Jobs and JobSets labelled with a queue,
/// `hold-pod` on the plain pods labelled with one, `inject` on the pods labelled with a
/// GpuJob's uid; those of `which`), calling the operator on loopback `port`, for namespace `ns`
/// only, failing open.
pub fn mutating_configuration(
    name: &str,
    port: u16,
    ns: &str,
    which: &[&str],
) -> k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration {
    let hook = |name: &str, rules: serde_json::Value, key: &str| {
        serde_json::json!({
            "name": name,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate")},
            "rules": rules,
            "objectSelector": {"matchExpressions": [{"key": key, "operator": "Exists"}]},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        })
    };
    let mut hooks = Vec::new();
    if which.contains(&"hold") {
        hooks.push(hook(
            "hold.spillway.io",
            serde_json::json!([
                {"apiGroups": ["batch"], "apiVersions": ["v1"],
                 "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]},
                {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"],
                 "operations": ["CREATE", "UPDATE"], "resources": ["jobsets"]},
            ]),
            "spillway.io/queue",
        ));
    }
    if which.contains(&"hold-pod") {
        let mut h = hook(
            "hold-pod.spillway.io",
            serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
                                "operations": ["CREATE"], "resources": ["pods"]}]),
            "spillway.io/queue",
        );
        h["objectSelector"]["matchExpressions"]
            .as_array_mut()
            .expect("expressions")
            .push(serde_json::json!({"key": "spillway.io/job-uid", "operator": "DoesNotExist"}));
        hooks.push(h);
    }
    if which.contains(&"inject") {
        hooks.push(hook(
            "inject.spillway.io",
            serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
                                "operations": ["CREATE"], "resources": ["pods"]}]),
            "spillway.io/job-uid",
        ));
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": hooks,
    }))
    .expect("a MutatingWebhookConfiguration")
}
