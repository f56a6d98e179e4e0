//! Kueue (`sigs.k8s.io/kueue`'s manager, built from its Go module by `scripts/kueue.sh`) run for
//! real against a test control plane, as a platform team would deploy it for batch Jobs: its
//! CRDs (with their conversion webhook), its webhooks for its own kinds and `batch/v1` Jobs
//! (called by URL on loopback, with a CA made here), the deployment's configuration as Kueue
//! ships it (client QPS 50, burst 100, its controllers' concurrency; [`Tuning`] raises them)
//! with only the `batch/job` integration, and one ClusterQueue. The scale comparison (`scripts/scale.sh --peer kueue`)
//! runs the same stream of jobs through it as through Spillway.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, WebhookClientConfig, WebhookConversion,
};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cluster::TestCluster;
use crate::peers;
use crate::process::{Server, free_port};

/// The Kueue release `scripts/kueue.sh` builds.
pub const VERSION: &str = "v0.17.0";
/// The label that names a Job's LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
pub use crate::peers::NAMESPACE_LABEL;

/// Where Kueue's manager reads its metrics certificate (fixed in its `main`).
const METRICS_CERTS: &str = "/etc/kueue/metrics/certs";

/// The CRDs whose versions Kueue converts (its kustomization's `webhook_in_*` patches).
const CONVERTED: [&str; 5] = [
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
];

/// The webhooks of its own kinds and of `batch/v1` Jobs, the one integration enabled.
const WEBHOOKS: [&str; 8] = [
    "mjob.kb.io",
    "vjob.kb.io",
    "mclusterqueue.kb.io",
    "vclusterqueue.kb.io",
    "vcohort.kb.io",
    "mresourceflavor.kb.io",
    "vresourceflavor.kb.io",
    "mworkload.kb.io",
];

/// Kueue's client and controller settings: as it ships (QPS 50, burst 100, 5 Job and
/// Workload reconcilers) unless `SPILLWAY_KUEUE_QPS` (burst twice that) or
/// `SPILLWAY_KUEUE_CONCURRENCY` say otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuning {
    pub qps: u32,
    pub concurrency: u32,
}

impl Tuning {
    pub fn from_env() -> Tuning {
        let var = |k: &str, d: u32| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Tuning {
            qps: var("SPILLWAY_KUEUE_QPS", 50),
            concurrency: var("SPILLWAY_KUEUE_CONCURRENCY", 5),
        }
    }
}

/// Where `scripts/kueue.sh` put the build: `SPILLWAY_KUEUE`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    peers::build_dir(
        "SPILLWAY_KUEUE",
        &format!("kueue-{VERSION}"),
        "kueue",
        "scripts/kueue.sh",
    )
}

/// The running Kueue manager.
pub struct Kueue {
    server: Server,
}

impl Kueue {
    /// Kueue against `cluster`: CRDs, webhooks, then its manager, up once its webhook answers.
    pub async fn start(cluster: &TestCluster) -> anyhow::Result<Kueue> {
        let client = cluster.client().await?;
        let dir = build_dir()?;
        let port = free_port()?;
        let certs = cluster.dir().join("kueue-certs");
        let ca = peers::loopback_certs(&certs)?;
        // Without its internal certificate management Kueue reads its metrics server's
        // certificate from this fixed path (where its Deployment mounts a Secret), and will
        // not start without one; the loopback certificate serves.
        let metrics = std::path::Path::new(METRICS_CERTS);
        std::fs::create_dir_all(metrics)
            .and_then(|()| std::fs::copy(certs.join("tls.crt"), metrics.join("tls.crt")))
            .and_then(|_| std::fs::copy(certs.join("tls.key"), metrics.join("tls.key")))
            .with_context(|| {
                format!("Kueue {VERSION} needs its metrics certificate in {METRICS_CERTS}, which this user cannot write")
            })?;
        let mut crds = peers::read_crds(&dir.join("crd"))?;
        for crd in crds
            .iter_mut()
            .filter(|c| CONVERTED.contains(&c.metadata.name.as_deref().unwrap_or_default()))
        {
            crd.spec.conversion = Some(CustomResourceConversion {
                strategy: "Webhook".into(),
                webhook: Some(WebhookConversion {
                    client_config: Some(WebhookClientConfig {
                        url: Some(format!("https://127.0.0.1:{port}/convert")),
                        ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
                        service: None,
                    }),
                    conversion_review_versions: vec!["v1".into()],
                }),
            });
        }
        cluster.install_crds(&client, &crds).await?;
        cluster.namespace(&client, "kueue-system").await?;
        let manifests = std::fs::read_to_string(dir.join("webhook.yaml"))?;
        peers::install_webhooks_of(&client, &manifests, "kueue", port, &ca, |name| {
            WEBHOOKS.contains(&name)
        })
        .await?;
        let tuning = Tuning::from_env();
        let config = cluster.dir().join("kueue-config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n\
                 namespace: kueue-system\n\
                 health:\n  healthProbeBindAddress: \"0\"\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n  certDir: {}\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n\
                 controller:\n  groupKindConcurrency:\n    Job.batch: {c}\n    Pod: 5\n\
                 \x20   Workload.kueue.x-k8s.io: {c}\n    LocalQueue.kueue.x-k8s.io: 1\n\
                 \x20   Cohort.kueue.x-k8s.io: 1\n    ClusterQueue.kueue.x-k8s.io: 1\n\
                 \x20   ResourceFlavor.kueue.x-k8s.io: 1\n\
                 clientConnection:\n  qps: {qps}\n  burst: {burst}\n\
                 integrations:\n  frameworks:\n  - batch/job\n",
                certs.display(),
                c = tuning.concurrency,
                qps = tuning.qps,
                burst = tuning.qps * 2,
            ),
        )?;
        let server = Server::start(
            cluster.dir(),
            "kueue",
            &dir.join("bin/kueue"),
            &[
                format!("--kubeconfig={}", cluster.kubeconfig.display()),
                format!("--config={}", config.display()),
                // The on-demand visibility API is an aggregated API server of its own, not
                // part of admitting jobs.
                "--feature-gates=VisibilityOnDemand=false".into(),
                "--zap-log-level=error".into(),
            ],
            &[],
        )?;
        peers::wait_listening(port, &server, "Kueue's webhook").await?;
        Ok(Kueue { server })
    }

    /// The manager's process id.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    pub fn log_tail(&self) -> String {
        self.server.log_tail(4000)
    }

    /// One ResourceFlavor `name` of the nodes labelled `node_labels`, a ClusterQueue `name`
    /// with `gpus` of `nvidia.com/gpu` nominal quota for every namespace, and a LocalQueue
    /// `name` of it in `ns` (labelled for the webhooks); waits for the ClusterQueue to be
    /// active.
    pub async fn queue(
        &self,
        client: &Client,
        ns: &str,
        name: &str,
        gpus: u32,
        node_labels: Value,
    ) -> anyhow::Result<()> {
        Api::<Namespace>::all(client.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})),
            )
            .await?;
        let params = PatchParams::apply("spillway-tests");
        let objects = [
            (
                "ResourceFlavor",
                None,
                json!({"spec": {"nodeLabels": node_labels}}),
            ),
            (
                "ClusterQueue",
                None,
                json!({"spec": {"namespaceSelector": {}, "resourceGroups": [{
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": name, "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}),
            ),
            (
                "LocalQueue",
                Some(ns),
                json!({"spec": {"clusterQueue": name}}),
            ),
        ];
        for (kind, namespace, mut body) in objects {
            let api = kueue_api(client, kind, namespace);
            body["apiVersion"] = json!("kueue.x-k8s.io/v1beta2");
            body["kind"] = json!(kind);
            body["metadata"] = json!({"name": name});
            api.patch(name, &params, &Patch::Apply(&body)).await?;
        }
        let queues = kueue_api(client, "ClusterQueue", None);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let cq = queues.get(name).await?;
            let active = cq.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Active" && c["status"] == "True");
            if active {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "ClusterQueue {name} not active in 60 s: {}\n{}",
                    cq.data["status"],
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn kueue_api(client: &Client, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind);
    let resource = ApiResource::from_gvk(&gvk);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}
