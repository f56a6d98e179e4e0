//! A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-scheduler and
//! kube-controller-manager on free loopback ports.
//!
//! [`TestCluster::shared`] starts it once per test process; every test of the process shares
//! it, each in its own namespace ([`TestCluster::namespace`]) and with its own node names.
//! The controller manager runs every controller but `nodelifecycle`, so fake nodes without a
//! real kubelet stay Ready; it creates service-account tokens (without which no pod can be
//! created) and runs the garbage collector that owner references rely on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tokio::sync::OnceCell;

use crate::process::{Server, find_binary, free_port, temp_dir};

/// A running control plane.
pub struct TestCluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server_url: String,
    pub ca_file: PathBuf,
    pub token: String,
    servers: std::sync::Mutex<Vec<Server>>,
    /// How kube-apiserver was started (binary and arguments), to start it again.
    apiserver: (PathBuf, Vec<String>),
}

static SHARED: OnceCell<TestCluster> = OnceCell::const_new();
static SECOND: OnceCell<TestCluster> = OnceCell::const_new();

/// Where the Kubernetes binaries are: `KUBEBUILDER_ASSETS`, else the harness cache.
pub fn binary_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("KUBEBUILDER_ASSETS") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(crate::cache_dir().join(format!("k8s-{CURRENT}/bin")));
    dirs
}

/// The Kubernetes release `scripts/k8s-binaries.sh` builds by default (the whole suite runs on
/// it); `KUBEBUILDER_ASSETS` may point at another.
pub const CURRENT: &str = "1.37.2";

fn binary(name: &str) -> anyhow::Result<PathBuf> {
    find_binary(name, &binary_dirs()).with_context(|| {
        format!(
            "{name} not found in KUBEBUILDER_ASSETS, {} or PATH; run scripts/k8s-binaries.sh (or scripts/test.sh) first",
            crate::cache_dir().join(format!("k8s-{CURRENT}/bin")).display()
        )
    })
}

impl TestCluster {
    /// The shared control plane with Spillway's CRDs served, and a client of it.
    pub async fn with_crds() -> (&'static TestCluster, Client) {
        let cluster = TestCluster::shared().await;
        let client = cluster.client().await.expect("client");
        cluster
            .install_crds(&client, &spillway_api::crds())
            .await
            .expect("install CRDs");
        (cluster, client)
    }

    /// The control plane of this test process, started on first use.
    pub async fn shared() -> &'static TestCluster {
        SHARED
            .get_or_try_init(TestCluster::start_retrying)
            .await
            .unwrap_or_else(|e| panic!("could not start the test control plane: {e:#}"))
    }

    /// A second control plane of this test process, started on first use: the other cluster of
    /// a cluster pool. Its own etcd, API server (its own CA and admin token), scheduler and
    /// controller manager; no Spillway CRD.
    pub async fn second() -> &'static TestCluster {
        SECOND
            .get_or_try_init(TestCluster::start_retrying)
            .await
            .unwrap_or_else(|e| panic!("could not start the second test control plane: {e:#}"))
    }

    /// [`TestCluster::start`], again on fresh ports when a server lost its port to another
    /// process between the port's pick and its bind (test binaries run side by side).
    async fn start_retrying() -> anyhow::Result<TestCluster> {
        let mut tries = 0;
        loop {
            tries += 1;
            match TestCluster::start().await {
                Err(e) if tries < 3 && format!("{e:#}").contains("address already in use") => {
                    eprintln!("a control plane port was taken meanwhile; starting again: {e:#}");
                }
                r => return r,
            }
        }
    }

    async fn start() -> anyhow::Result<TestCluster> {
        let started = Instant::now();
        let dir = temp_dir("spillway-cp")?;
        let etcd_bin = binary("etcd")?;
        let apiserver_bin = binary("kube-apiserver")?;
        let scheduler_bin = binary("kube-scheduler")?;
        let kcm_bin = binary("kube-controller-manager")?;
        let mut servers = Vec::new();

        // etcd
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        servers.push(Server::start(
            &dir,
            "etcd",
            &etcd_bin,
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--name=default".into(),
                "--log-level=warn".into(),
            ],
            &[],
        )?);

        // Keys and the admin token.
        let sa_key = dir.join("sa.key");
        let status = std::process::Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&sa_key)
            .arg("2048")
            .stderr(std::process::Stdio::null())
            .status()
            .context("running openssl to make the service-account key")?;
        if !status.success() {
            bail!("openssl genrsa failed");
        }
        // Each control plane its own admin token (the second one must refuse the first's).
        let token = format!(
            "spillway-test-{}",
            dir.file_name().unwrap_or_default().to_string_lossy()
        );
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin,\"system:masters\"\n"),
        )?;
        let cert_dir = dir.join("certs");
        std::fs::create_dir_all(&cert_dir)?;

        // kube-apiserver
        let port = free_port()?;
        let server_url = format!("https://127.0.0.1:{port}");
        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // The `kubernetes` Service's endpoint would be 127.0.0.1, which the reconciler
            // refuses (a loopback address); nothing in the tests reaches the server through it.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", cert_dir.display()),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-key-file={}", sa_key.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--enable-priority-and-fairness=false".into(),
            "--v=1".into(),
        ];
        servers.push(Server::start(
            &dir,
            "kube-apiserver",
            &apiserver_bin,
            &apiserver_args,
            &[],
        )?);

        let ca_file = cert_dir.join("apiserver.crt");
        let kubeconfig = dir.join("kubeconfig");
        let mut cluster = TestCluster {
            dir: dir.clone(),
            kubeconfig: kubeconfig.clone(),
            server_url,
            ca_file,
            token,
            servers: std::sync::Mutex::new(servers),
            apiserver: (apiserver_bin.clone(), apiserver_args),
        };

        // Wait for the serving certificate, then for the API.
        let deadline = Instant::now() + Duration::from_secs(90);
        while !cluster.ca_file.exists() {
            cluster.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver wrote no certificate in 90 s\n{}",
                    cluster.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        cluster.write_kubeconfig()?;
        loop {
            cluster.check_alive()?;
            if let Ok(client) = cluster.client().await
                && ready(&client).await
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("kube-apiserver not ready in 90 s\n{}", cluster.logs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        let kc = kubeconfig.display().to_string();
        let scheduler = Server::start(
            &dir,
            "kube-scheduler",
            &scheduler_bin,
            &[
                format!("--kubeconfig={kc}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
            &[],
        )?;
        let mut kcm_args = vec![
            format!("--kubeconfig={kc}"),
            format!("--service-account-private-key-file={}", sa_key.display()),
            format!("--root-ca-file={}", cluster.ca_file.display()),
            // The token cleaner deletes expired bootstrap tokens (off by default, as on a
            // kubeadm-less cluster; kubeadm turns it on), which the operator only creates.
            "--controllers=*,tokencleaner,-nodelifecycle".into(),
            "--use-service-account-credentials=false".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ];
        // Flags a run adds, as a large cluster's platform team tunes its controllers (the
        // scale comparison: `scripts/scale.sh --kcm-args`).
        kcm_args.extend(
            std::env::var("SPILLWAY_KCM_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from),
        );
        let kcm = Server::start(&dir, "kube-controller-manager", &kcm_bin, &kcm_args, &[])?;
        {
            let mut servers = cluster.servers.lock().expect("server list poisoned");
            servers.push(scheduler);
            servers.push(kcm);
        }
        // The default namespace is usable once its service account has a token.
        let client = cluster.client().await?;
        cluster
            .wait_for_service_account(&client, "default", false)
            .await?;
        eprintln!(
            "test control plane up in {:.1}s at {} (logs in {})",
            started.elapsed().as_secs_f64(),
            cluster.server_url,
            cluster.dir.display()
        );
        Ok(cluster)
    }

    fn write_kubeconfig(&mut self) -> anyhow::Result<()> {
        let yaml = format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: spillway-test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: spillway-test
  context:
    cluster: spillway-test
    user: admin
    namespace: default
current-context: spillway-test
"#,
            server = self.server_url,
            ca = self.ca_file.display(),
            token = self.token
        );
        std::fs::write(&self.kubeconfig, yaml)?;
        Ok(())
    }

    /// A new client for the cluster (make one per test: clients belong to a tokio runtime).
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Crashes kube-apiserver (SIGKILL), keeps it down for `down`, starts it again on the same
    /// port with the same certificates and etcd, and waits until it is ready. Clients, watches,
    /// the scheduler and the controller manager have to find it again by themselves.
    pub async fn restart_apiserver(&self, down: Duration) -> anyhow::Result<()> {
        {
            let mut servers = self.servers.lock().expect("server list poisoned");
            let s = servers
                .iter_mut()
                .find(|s| s.name == "kube-apiserver")
                .context("no kube-apiserver")?;
            s.crash()?;
        }
        tokio::time::sleep(down).await;
        let fresh = Server::start(
            &self.dir,
            "kube-apiserver",
            &self.apiserver.0,
            &self.apiserver.1,
            &[],
        )?;
        {
            let mut servers = self.servers.lock().expect("server list poisoned");
            if let Some(s) = servers.iter_mut().find(|s| s.name == "kube-apiserver") {
                *s = fresh;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            self.check_alive()?;
            if let Ok(client) = self.client().await
                && ready(&client).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("kube-apiserver not ready again in 90 s\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Fails if any server of the control plane has exited, with its log.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        let mut servers = self.servers.lock().expect("server list poisoned");
        for s in servers.iter_mut() {
            if s.exited() {
                bail!("{} exited:\n{}", s.name, s.log_tail(4000));
            }
        }
        Ok(())
    }

    /// The tails of all server logs, for failure messages.
    pub fn logs(&self) -> String {
        let servers = self.servers.lock().expect("server list poisoned");
        servers
            .iter()
            .map(|s| format!("--- {} ---\n{}", s.name, s.log_tail(2000)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Creates a fresh namespace (named after `prefix`) whose default service account has a
    /// token, so pods can be created in it at once.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> anyhow::Result<String> {
        let name = crate::unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        self.wait_for_service_account(client, &name, true).await?;
        Ok(name)
    }

    /// Waits for the namespace's `default` ServiceAccount (made by the controller manager):
    /// the API server refuses pods that name a ServiceAccount that does not exist yet. Their
    /// tokens are projected (TokenRequest), so no token Secret is waited for. If the controller
    /// manager has not made it within 5 s (its informers back off for up to a minute after
    /// another test of a shared cluster restarted the API server), the harness creates it, as
    /// the controller would: an empty ServiceAccount named `default` (`or_make`; at start the
    /// wait proves the controller manager works, so it does not).
    async fn wait_for_service_account(
        &self,
        client: &Client,
        ns: &str,
        or_make: bool,
    ) -> anyhow::Result<()> {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            if sas.get_opt("default").await?.is_some() {
                return Ok(());
            }
            if or_make && started.elapsed() > Duration::from_secs(5) {
                let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}
                }))?;
                match sas.create(&PostParams::default(), &sa).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "no default service account in namespace {ns} after 60 s\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Installs (server-side applies) the given CRDs and waits until they are served.
    pub async fn install_crds(
        &self,
        client: &Client,
        crds: &[CustomResourceDefinition],
    ) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        // Tests of one process install the same CRDs concurrently: one at a time.
        static INSTALLING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _guard = INSTALLING.lock().await;
        // Create or replace (as `kubectl apply` and `helm install` do).
        for crd in crds {
            let name = crd.metadata.name.clone().context("CRD without a name")?;
            let mut attempts = 0;
            loop {
                attempts += 1;
                let result = match api.get_opt(&name).await? {
                    None => api.create(&PostParams::default(), crd).await.map(|_| ()),
                    Some(existing) => {
                        let mut updated = crd.clone();
                        updated.metadata.resource_version = existing.metadata.resource_version;
                        api.replace(&name, &PostParams::default(), &updated)
                            .await
                            .map(|_| ())
                    }
                };
                match result {
                    Ok(()) => break,
                    // Another process or an earlier attempt got there first: look again.
                    Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => continue,
                    Err(e) => return Err(e).with_context(|| format!("installing CRD {name}")),
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            loop {
                let current = api.get(&name).await?;
                let established = current
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("CRD {name} not established after 30 s");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Where the logs and state of this control plane are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

async fn ready(client: &Client) -> bool {
    match client.apiserver_version().await {
        Ok(_) => {
            // /readyz turns ok once the post-start hooks (RBAC bootstrap among them) are done.
            let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
                return false;
            };
            client
                .request_text(req)
                .await
                .is_ok_and(|body| body.trim() == "ok")
        }
        Err(_) => false,
    }
}
