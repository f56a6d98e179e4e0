//! The JobSet controller (`sigs.k8s.io/jobset`'s manager, built from its Go module by
//! `scripts/jobset.sh`) run for real against the test control plane: its CRD, its defaulting
//! and validating webhooks (called by URL on loopback, with a CA made here) and its
//! controllers. Its webhooks see only namespaces labelled [`NAMESPACE_LABEL`], so the other
//! tests of the process never wait on it.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::cluster::TestCluster;
use crate::peers;
use crate::process::{Server, free_port};

/// The JobSet release `scripts/jobset.sh` builds.
pub const VERSION: &str = "v0.11.1";
pub use crate::peers::NAMESPACE_LABEL;

/// The running JobSet controller.
pub struct JobSetController {
    _server: Server,
}

static SHARED: OnceCell<JobSetController> = OnceCell::const_new();

/// Where `scripts/jobset.sh` put the build: `SPILLWAY_JOBSET`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    let cached = format!("jobset-{VERSION}");
    peers::build_dir(
        "SPILLWAY_JOBSET",
        &cached,
        "jobset-manager",
        "scripts/jobset.sh",
    )
}

/// JobSet's CRD, as its build keeps it.
pub fn crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    peers::read_crds(&build_dir()?.join("crd"))
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
        let ca = peers::loopback_certs(&certs)?;
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
        peers::install_webhooks(&client, &manifests, "jobset", port, &ca).await?;
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
        peers::wait_listening(port, &server, "the JobSet controller's webhook").await?;
        Ok(JobSetController { _server: server })
    }
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
