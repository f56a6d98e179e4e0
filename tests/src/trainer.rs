//! The Kubeflow Trainer controller (`github.com/kubeflow/trainer/v2`'s
//! trainer-controller-manager, built from its Go module by `scripts/trainer.sh`) run for real
//! against the test control plane, beside the JobSet controller it drives: its CRDs, its
//! defaulting and validating webhooks (called by URL on loopback, with a CA made here, seeing
//! only namespaces labelled [`crate::jobset::NAMESPACE_LABEL`]), its controllers, and a
//! ClusterTrainingRuntime of one trainer step.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::cluster::TestCluster;
use crate::jobset::JobSetController;
use crate::peers;
use crate::process::{Server, free_port};

/// The Trainer release `scripts/trainer.sh` builds.
pub const VERSION: &str = "v2.2.0";
/// The ClusterTrainingRuntime the tests' TrainJobs refer to: one replicated job `node`.
pub const RUNTIME: &str = "spillway-test-torch";

/// The running Trainer controller.
pub struct TrainerController {
    _server: Server,
}

static SHARED: OnceCell<TrainerController> = OnceCell::const_new();

/// Where `scripts/trainer.sh` put the build: `SPILLWAY_TRAINER`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    let cached = format!("trainer-{VERSION}");
    peers::build_dir(
        "SPILLWAY_TRAINER",
        &cached,
        "trainer-manager",
        "scripts/trainer.sh",
    )
}

/// The API resource of the TrainJob kind, for dynamic calls.
pub fn train_jobs() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    )
}

/// The Trainer's CRDs, as its build keeps them.
pub fn crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    peers::read_crds(&build_dir()?.join("crd"))
}

impl TrainerController {
    /// The Trainer controller of this test process (and the JobSet controller it needs), on
    /// the shared control plane, started on first use.
    pub async fn shared() -> &'static TrainerController {
        SHARED
            .get_or_try_init(TrainerController::start)
            .await
            .unwrap_or_else(|e| panic!("could not start the Kubeflow Trainer controller: {e:#}"))
    }

    async fn start() -> anyhow::Result<TrainerController> {
        JobSetController::shared().await;
        let cluster = TestCluster::shared().await;
        let client = cluster.client().await?;
        let dir = build_dir()?;
        cluster.install_crds(&client, &crds()?).await?;

        // Its webhooks are served on loopback with a certificate of a CA made here, from
        // controller-runtime's default directory under the process's TMPDIR.
        let port = free_port()?;
        let tmp = cluster.dir().join("trainer-tmp");
        let ca = peers::loopback_certs(&tmp.join("k8s-webhook-server/serving-certs"))?;
        let config = cluster.dir().join("trainer-config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 certManagement:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: \"0\"\n"
            ),
        )?;
        let manifests = std::fs::read_to_string(dir.join("webhook.yaml"))?;
        peers::install_webhooks(&client, &manifests, "trainer", port, &ca).await?;
        let tmp_dir = tmp.display().to_string();
        let server = Server::start(
            cluster.dir(),
            "trainer",
            &dir.join("bin/trainer-manager"),
            &[
                format!("--kubeconfig={}", cluster.kubeconfig.display()),
                format!("--config={}", config.display()),
            ],
            &[("TMPDIR", tmp_dir.as_str())],
        )?;
        // Up once its webhook answers.
        peers::wait_listening(port, &server, "the Trainer's webhook").await?;
        install_runtime(&client).await?;
        Ok(TrainerController { _server: server })
    }
}

/// The tests' ClusterTrainingRuntime: the torch runtime's shape (one replicated job `node`,
/// its container `node`), without the torch plugin's launcher settings.
async fn install_runtime(client: &Client) -> anyhow::Result<()> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
        "clustertrainingruntimes",
    );
    let runtime: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "node", "image": "trainer"}]}}},
                },
            }]}},
        },
    }))?;
    // The Trainer's validating webhook may not answer for a moment after it listens.
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api
            .patch(
                RUNTIME,
                &PatchParams::apply("spillway-tests").force(),
                &Patch::Apply(&runtime),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "the test runtime not accepted yet");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context("the test ClusterTrainingRuntime"),
        }
    }
}
