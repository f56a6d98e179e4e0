//! What the peer controllers the tests run (JobSet, Kubeflow Trainer, KubeRay; each built from
//! its Go module by a script under `scripts/`) have in common: where their build is, their
//! CRDs, a serving certificate for their webhooks on loopback, and their webhook
//! configurations pointed there.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::process::Server;

/// A namespace's label that lets the peers' webhooks (JobSet's, the Kubeflow Trainer's) see it.
pub const NAMESPACE_LABEL: &str = "spillway.test/jobset";

/// Where `script` put a peer's build: the directory `var` names, else `cached` in the harness
/// cache; it must hold `bin/<binary>`.
pub(crate) fn build_dir(
    var: &str,
    cached: &str,
    binary: &str,
    script: &str,
) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::cache_dir().join(cached));
    if !dir.join("bin").join(binary).is_file() {
        bail!(
            "no {binary} in {}: run {script} (or scripts/test.sh) first",
            dir.display()
        );
    }
    Ok(dir)
}

/// A serving certificate for 127.0.0.1 of a CA made here, written as `tls.crt` and `tls.key`
/// in `dir`; returns the CA's PEM.
pub(crate) fn loopback_certs(dir: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let m =
        spillway_k8s::webhook::certs::renewed(None, &["127.0.0.1".to_string()], 30 * 86_400, now)?
            .context("new certificates")?;
    std::fs::write(dir.join("tls.crt"), &m.cert_pem)?;
    std::fs::write(dir.join("tls.key"), &m.key_pem)?;
    Ok(m.ca_pem)
}

/// Waits up to a minute for `server` (`what`) to listen on loopback `port`.
pub(crate) async fn wait_listening(port: u16, server: &Server, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!(
                "{what} did not listen within 60 s:\n{}",
                server.log_tail(4000)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The CustomResourceDefinitions of the YAML files in `dir` (a peer controller's build), by
/// file name.
pub(crate) fn read_crds(dir: &Path) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    // Some (KubeRay's) nest deep enough that reading them needs more stack than a test
    // thread's: read on a thread of their own.
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            paths
                .iter()
                .map(|p| {
                    let text = std::fs::read_to_string(p)?;
                    serde_saphyr::from_str(&text)
                        .with_context(|| format!("a CRD in {}", p.display()))
                })
                .collect()
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("reading the CRDs in {} panicked", dir.display()))?
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
    install_webhooks_of(client, manifests, peer, port, ca_pem, |_| true).await
}

/// [`install_webhooks`], keeping only the webhooks whose name `keep` accepts.
pub(crate) async fn install_webhooks_of(
    client: &Client,
    manifests: &str,
    peer: &str,
    port: u16,
    ca_pem: &str,
    keep: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let text = manifests;
    let ca = ByteString(ca_pem.as_bytes().to_vec());
    let params = PatchParams::apply("spillway-tests").force();
    for doc in text.split("\n---").filter(|d| d.contains("kind:")) {
        let mut v: Value =
            serde_saphyr::from_str(doc).with_context(|| format!("{peer}'s webhook manifests"))?;
        if let Some(hooks) = v["webhooks"].as_array_mut() {
            hooks.retain(|h| keep(h["name"].as_str().unwrap_or_default()));
        }
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
