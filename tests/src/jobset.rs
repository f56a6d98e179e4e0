//! The JobSet controller (`sigs.k8s.io/jobset`'s manager, built from its Go module by
//! `scripts/jobset.sh`) run for real against the test control plane: its CRD, its defaulting
//! and validating webhooks (called by URL on loopback, with a CA made here) and its
//! controllers. Its webhooks see only namespaces labelled [`NAMESPACE_LABEL`], so the other
//! tests of the process never wait on it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::cluster::TestCluster;
use crate::process::{Server, free_port};

/// The JobSet release `scripts/jobset.sh` builds.
pub const VERSION: &str = "v0.11.1";
/// A namespace's label that lets the JobSet webhooks (and the Kubeflow Trainer's) see it.
pub const NAMESPACE_LABEL: &str = "spillway.test/jobset";

/// The running JobSet controller.
pub struct JobSetController {
    _server: Server,
}

static SHARED: OnceCell<JobSetController> = OnceCell::const_new();

/// Where `scripts/jobset.sh` put the build: `SPILLWAY_JOBSET`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("SPILLWAY_JOBSET")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::cache_dir().join(format!("jobset-{VERSION}")));
    if !dir.join("bin/jobset-manager").is_file() {
        bail!(
            "no JobSet controller in {}: run scripts/jobset.sh (or scripts/test.sh) first",
            dir.display()
        );
    }
    Ok(dir)
}

/// JobSet's CRD, as its build keeps it.
pub fn crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    crate::read_crds(&build_dir()?.join("crd"))
}

impl JobSetController {
    /// The JobSet controller of this test process, on the shared control plane, started on
    /// first use.
    pub async fn shared() -> &'static JobSetController {
        SHARED
            .get_or_try_init(JobSetController::start)
            .await
            .unwrap_or_else(|e| panic!("could not start the JobSet controller: {e:#}"))
    }

    async fn start() -> anyhow::Result<JobSetController> {
        let cluster = TestCluster::shared().await;
        let client = cluster.client().await?;
        let dir = build_dir()?;
        cluster.install_crds(&client, &crds()?).await?;

        // Its webhooks are served on loopback with a certificate of a CA made here.
        let port = free_port()?;
        let certs = cluster.dir().join("jobset-certs");
        std::fs::create_dir_all(&certs)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs() as i64;
        let m = spillway_k8s::webhook::certs::renewed(
            None,
            &["127.0.0.1".to_string()],
            30 * 86_400,
            now,
        )?
        .context("new certificates")?;
        std::fs::write(certs.join("tls.crt"), &m.cert_pem)?;
        std::fs::write(certs.join("tls.key"), &m.key_pem)?;
        let config = cluster.dir().join("jobset-config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n  certDir: {}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: \"0\"\n",
                certs.display()
            ),
        )?;
        let manifests = std::fs::read_to_string(dir.join("webhook.yaml"))?;
        install_webhooks(&client, &manifests, "jobset", port, &m.ca_pem).await?;
        let server = Server::start(
            cluster.dir(),
            "jobset",
            &dir.join("bin/jobset-manager"),
            &[
                format!("--kubeconfig={}", cluster.kubeconfig.display()),
                format!("--config={}", config.display()),
                "--metrics-bind-address=0".into(),
                "--health-probe-bind-address=0".into(),
            ],
            &[],
        )?;
        // Up once its webhook answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                bail!(
                    "the JobSet controller's webhook did not listen within 60 s:\n{}",
                    server.log_tail(4000)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(JobSetController { _server: server })
    }
}

/// A peer controller's own webhook configurations (`manifests`, its kubebuilder
/// `manifests.yaml`), named `spillway-test-<peer>-<kind>`, pointed at `port` on loopback and
/// limited to namespaces labelled [`NAMESPACE_LABEL`].
pub(crate) async fn install_webhooks(
    client: &Client,
    manifests: &str,
    peer: &str,
    port: u16,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let text = manifests;
    let ca = ByteString(ca_pem.as_bytes().to_vec());
    let params = PatchParams::apply("spillway-tests").force();
    for doc in text.split("\n---").filter(|d| d.contains("kind:")) {
        let mut v: Value =
            serde_saphyr::from_str(doc).with_context(|| format!("{peer}'s webhook manifests"))?;
        for hook in v["webhooks"].as_array_mut().into_iter().flatten() {
            let path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}"),
                                          "caBundle": ca});
            hook["namespaceSelector"] = json!({"matchLabels": {NAMESPACE_LABEL: "true"}});
        }
        let name = format!(
            "spillway-test-{peer}-{}",
            v["kind"].as_str().unwrap_or_default().to_ascii_lowercase()
        );
        v["metadata"] = json!({"name": name});
        match v["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => {
                let c: MutatingWebhookConfiguration = serde_json::from_value(v)?;
                Api::<MutatingWebhookConfiguration>::all(client.clone())
                    .patch(&name, &params, &Patch::Apply(&c))
                    .await?;
            }
            Some("ValidatingWebhookConfiguration") => {
                let c: ValidatingWebhookConfiguration = serde_json::from_value(v)?;
                Api::<ValidatingWebhookConfiguration>::all(client.clone())
                    .patch(&name, &params, &Patch::Apply(&c))
                    .await?;
            }
            other => bail!("unexpected {other:?} in {peer}'s webhook manifests"),
        }
    }
    Ok(())
}

/// Lets the JobSet webhooks (and the Kubeflow Trainer's) see namespace `ns`.
pub async fn enable_namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})),
        )
        .await?;
    Ok(())
}
