//! The KubeRay operator (`github.com/ray-project/kuberay/ray-operator`, built from its Go module
//! by `scripts/kuberay.sh`) run for real against the test control plane: its RayCluster and
//! RayJob CRDs and controllers. No Ray runs here (the fake kubelet runs no containers), so a
//! RayJob's clusters are made, placed and run, but its job is never submitted to Ray.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::{ApiResource, GroupVersionKind};
use tokio::sync::OnceCell;

use crate::cluster::TestCluster;
use crate::peers;
use crate::process::Server;

/// The KubeRay release `scripts/kuberay.sh` builds.
pub const VERSION: &str = "v1.6.0";

/// The running KubeRay operator.
pub struct KubeRayOperator {
    _server: Server,
}

static SHARED: OnceCell<KubeRayOperator> = OnceCell::const_new();

/// Where `scripts/kuberay.sh` put the build: `SPILLWAY_KUBERAY`, else the harness cache.
fn build_dir() -> anyhow::Result<PathBuf> {
    let cached = format!("kuberay-{VERSION}");
    peers::build_dir(
        "SPILLWAY_KUBERAY",
        &cached,
        "ray-operator",
        "scripts/kuberay.sh",
    )
}

/// The API resource of the RayJob kind, for dynamic calls.
pub fn ray_jobs() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

/// KubeRay's RayCluster and RayJob CRDs, as its build keeps them.
pub fn crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    peers::read_crds(&build_dir()?.join("crd"))
}

impl KubeRayOperator {
    /// The KubeRay operator of this test process, on the shared control plane, started on
    /// first use.
    pub async fn shared() -> &'static KubeRayOperator {
        SHARED
            .get_or_try_init(KubeRayOperator::start)
            .await
            .unwrap_or_else(|e| panic!("could not start the KubeRay operator: {e:#}"))
    }

    async fn start() -> anyhow::Result<KubeRayOperator> {
        let cluster = TestCluster::shared().await;
        let client = cluster.client().await?;
        let dir = build_dir()?;
        cluster.install_crds(&client, &crds()?).await?;
        let kubeconfig = cluster.kubeconfig.display().to_string();
        let server = Server::start(
            cluster.dir(),
            "kuberay",
            &dir.join("bin/ray-operator"),
            &[
                format!("--kubeconfig={}", cluster.kubeconfig.display()),
                "--metrics-addr=0".into(),
                "--health-probe-bind-address=0".into(),
                "--enable-leader-election=false".into(),
            ],
            &[("KUBECONFIG", kubeconfig.as_str())],
        )?;
        Ok(KubeRayOperator { _server: server })
    }
}
