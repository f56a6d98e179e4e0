//! `helm install` into the real test API server with Helm 3 and Helm 4; the operator binary run
//! locally with the chart's ServiceAccount token (TokenRequest) and the chart's own arguments
//! doing its whole job (a private placement, a burst to moto) and refused what the chart does
//! not grant; `helm upgrade` keeping the operator's state; `helm uninstall` leaving nothing of
//! the release but the CRDs.
//!
//! What is simulated: the Deployment's pods do not run the operator (no container runtime
//! here; the fake kubelet marks them Running); the operator runs as a local process with
//! exactly the identity and arguments those pods would have. Machines booting in EC2 are
//! played by the harness (`BootingMachines`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceStateName};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::helm::{Helm, chart_dir, text};
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::MotoServer;
use spillway_tests::operator::eventually;
use spillway_tests::workload;

pub const WAIT: Duration = Duration::from_secs(90);

/// Tests of this binary that install the chart take turns: they share one API server, and an
/// operator sees every GpuJob of it.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Kinds a release is made of, by API group (the version is what the server serves).
const RELEASE_KINDS: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "Secret"),
    ("", "ConfigMap"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("coordination.k8s.io", "Lease"),
    ("policy", "PodDisruptionBudget"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
];

/// Every object labelled as part of `release`, as `Kind namespace/name`.
pub async fn release_objects(client: &Client, release: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (group, kind) in RELEASE_KINDS {
        let g = discovery::group(client, group).await.expect("API group");
        let (ar, caps) = g.recommended_kind(kind).expect("kind served");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &ar),
            Scope::Namespaced => Api::all_with(client.clone(), &ar),
        };
        let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
        for o in api.list(&lp).await.expect("list").items {
            found.push(format!(
                "{kind} {}/{}",
                o.namespace().unwrap_or_default(),
                o.name_any()
            ));
        }
    }
    found
}

/// A kubeconfig for the chart's ServiceAccount, with a token from the TokenRequest API.
pub async fn service_account_kubeconfig(
    cluster: &TestCluster,
    client: &Client,
    ns: &str,
    sa: &str,
    dir: &Path,
) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }))
    .unwrap();
    let issued: TokenRequest = sas
        .create_subresource("token", sa, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {ns}/{sa}: {e}"));
    let token = issued.status.and_then(|s| s.token).expect("a token");
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {sa}\n  user:\n    token: {token}\ncontexts:\n- name: {sa}\n  context: {{cluster: test, user: {sa}, namespace: {ns}}}\ncurrent-context: {sa}\n",
            cluster.server_url,
            cluster.ca_file.display()
        ),
    )
    .unwrap();
    path
}

/// A client from a kubeconfig file.
pub async fn client_of(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// The operator binary run as the chart's Deployment would run it: the container's arguments
/// and environment read back from the installed Deployment, the listening addresses moved to
/// loopback ports, credentials from `kubeconfig`, EC2 at moto.
pub struct LocalOperator {
    child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
    /// The proxy in front of moto its EC2 calls go through: it serves the placement groups
    /// moto lacks (`spillway_tests::placement`).
    _ec2: spillway_tests::faults::FaultProxy,
}

impl LocalOperator {
    pub async fn start(
        client: &Client,
        ns: &str,
        deployment: &str,
        kubeconfig: &Path,
        dir: &Path,
    ) -> LocalOperator {
        let d = Api::<Deployment>::namespaced(client.clone(), ns)
            .get(deployment)
            .await
            .expect("the chart's Deployment");
        let c = d.spec.template.spec.unwrap().containers.remove(0);
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port()
        };
        let metrics_port = free();
        let mut args: Vec<String> = c
            .args
            .unwrap_or_default()
            .into_iter()
            .map(|a| match a.split_once('=') {
                Some(("--metrics-addr", _)) => format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                Some(("--identity-addr", _)) => format!("--identity-addr=127.0.0.1:{}", free()),
                Some(("--webhook-addr", _)) => format!("--webhook-addr=127.0.0.1:{}", free()),
                _ => a,
            })
            .collect();
        args.push(format!("--kubeconfig={}", kubeconfig.display()));
        let log = dir.join(format!("{deployment}-operator.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("POD_NAME", format!("{deployment}-local"))
            .env("POD_NAMESPACE", ns);
        for e in c.env.unwrap_or_default() {
            if let Some(v) = e.value {
                cmd.env(e.name, v);
            }
        }
        let moto = MotoServer::shared().await;
        let ec2 = spillway_tests::faults::FaultProxy::start(&moto.endpoint)
            .await
            .expect("the EC2 proxy");
        cmd.env("AWS_ENDPOINT_URL_EC2", &ec2.endpoint)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("start the operator binary");
        LocalOperator {
            child,
            log,
            metrics_port,
            _ec2: ec2,
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut start = text.len().saturating_sub(6000);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].to_string()
    }

    /// SIGTERM, and the exit status is success (a clean stop releases the Lease).
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("wait");
        assert!(
            status.success(),
            "operator exit {status:?}\n{}",
            self.log_tail()
        );
    }
}

impl Drop for LocalOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn create<K>(api: Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).expect("object JSON");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", obj.name_any()));
}

pub async fn wait_phase(
    jobs: &Api<GpuJob>,
    name: &str,
    phase: JobPhase,
    op: &LocalOperator,
) -> GpuJob {
    let mut last = String::new();
    for _ in 0..(WAIT.as_millis() / 300) {
        let j = jobs.get(name).await.expect("job");
        if j.status.as_ref().and_then(|s| s.phase) == Some(phase) {
            return j;
        }
        last = format!("{:?}", j.status);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!(
        "job {name} not {phase:?} in {WAIT:?}: {last}\noperator log:\n{}",
        op.log_tail()
    );
}

/// Install, run, upgrade, uninstall with one Helm.
async fn lifecycle(helm: Helm) {
    let _turn = serial().await;
    let cluster = TestCluster::shared().await;
    let client = cluster.client().await.expect("client");
    // The peers' CRDs (JobSet, Kubeflow Trainer, KubeRay), so the chart grants what their
    // integrations need, and only that.
    let peers = [
        spillway_tests::jobset::crds(),
        spillway_tests::trainer::crds(),
        spillway_tests::kuberay::crds(),
    ];
    for crds in peers {
        let crds = crds.expect("a peer's CRDs (scripts/test.sh builds them)");
        cluster.install_crds(&client, &crds).await.expect("install");
    }
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let ns = cluster
        .namespace(&client, &format!("helm{}-system", helm.major))
        .await
        .expect("ns");
    let release = format!("sw{}", helm.major);
    let fullname = format!("{release}-spillway");
    let dir = std::env::temp_dir().join(spillway_tests::unique_name("helm-install"));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = chart_dir().display().to_string();

    // What an earlier test of this process left (after a failure) must not take our jobs.
    spillway_tests::operator::clean_up_earlier_tests(&client, &["helm"]).await;
    let kubelet = Arc::new(FakeKubelet::start(client.clone()));
    // The release namespace enforces the restricted Pod Security Standard, and a node (no
    // GPUs) takes the operator's pods: `--wait` returns once they are admitted and Ready.
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await
        .expect("restricted namespace");
    // Its own node: the chart's nodeSelector keeps the pods off other tests' nodes (and the
    // pool label lets a later test's clean-up find it after a failure).
    let system_node = format!("{ns}-system");
    kubelet
        .register(FakeNode::gpu(&system_node, 0).label("spillway.test/pool", &system_node))
        .await
        .expect("system node");
    let on_system_node = format!("nodeSelector.spillway\\.test/pool={system_node}");

    let cluster_name = format!("aws.clusterName={ns}");
    let job_namespaces = format!("rbac.jobNamespaces[0]={ns}");
    let mut install_args = vec![
        "install",
        &release,
        &chart,
        "--namespace",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        &cluster_name,
        "--set",
        "resync=5",
        // Bootstrap tokens expire at the join timeout; the token cleaner then deletes them.
        "--set",
        "aws.joinTimeout=20",
        "--set-string",
        &on_system_node,
        "--wait",
        "--timeout",
        "3m",
    ];
    // Helm 4 installs with the jobs' namespace named, Helm 3 with the default (every one).
    if helm.major >= 4 {
        install_args.extend(["--set", job_namespaces.as_str()]);
    }
    let install = helm.run(&install_args);
    assert!(
        install.status.success(),
        "helm {} install: {}",
        helm.major,
        text(&install)
    );
    assert!(
        text(&install).contains("kubectl spillway explain"),
        "NOTES: {}",
        text(&install)
    );

    // The CRDs (from crds/, or already there from an earlier install) and every object.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in spillway_api::crds() {
        assert!(
            crds.get_opt(&crd.name_any()).await.unwrap().is_some(),
            "CRD {}",
            crd.name_any()
        );
    }
    let objects = release_objects(&client, &release).await;
    for want in [
        format!("Deployment {ns}/{fullname}"),
        format!("Service {ns}/{fullname}-metrics"),
        format!("Service {ns}/{fullname}-identity"),
        format!("ServiceAccount {ns}/{fullname}"),
        format!("ClusterRole /{fullname}"),
        format!("ClusterRoleBinding /{fullname}"),
        format!("Role {ns}/{fullname}"),
        format!("Role kube-system/{fullname}-bootstrap"),
        format!("RoleBinding {ns}/{fullname}"),
        format!("PodDisruptionBudget {ns}/{fullname}"),
        format!("Lease {ns}/{fullname}"),
        format!("Secret {ns}/{fullname}-identity-keys"),
        format!("ConfigMap {ns}/{fullname}-spend"),
        format!("ConfigMap {ns}/{fullname}-indicators"),
        format!("Service {ns}/{fullname}-webhook"),
        format!("Secret {ns}/{fullname}-webhook-tls"),
        format!("ValidatingWebhookConfiguration /{fullname}"),
        format!("MutatingWebhookConfiguration /{fullname}"),
        format!("ValidatingAdmissionPolicy /{fullname}-bootstrap-tokens"),
        format!("ValidatingAdmissionPolicyBinding /{fullname}-bootstrap-tokens"),
    ] {
        assert!(
            objects.contains(&want),
            "{want} after helm {} install: {objects:?}",
            helm.major
        );
    }

    // The operator with the chart's identity and arguments.
    let sa_kubeconfig = service_account_kubeconfig(cluster, &client, &ns, &fullname, &dir).await;
    let sa = client_of(&sa_kubeconfig).await;
    let victims = super::privilege::refused_what_the_chart_does_not_grant(
        cluster, &client, &sa, &ns, helm.major,
    )
    .await;
    super::privilege::workloads_granted_only_what_their_integration_needs(&sa, &ns, helm.major)
        .await;
    super::privilege::tokens_secrets_granted_by_name(&sa, &ns).await;
    let op = LocalOperator::start(&client, &ns, &fullname, &sa_kubeconfig, &dir).await;

    // A world of its own: one private GPU, a queue that bursts after 2 s to an AWS pool in moto.
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let ami = ec2.describe_images().send().await.expect("images").images()[0]
        .image_id()
        .unwrap()
        .to_string();
    let (private, aws) = (format!("{ns}-private"), format!("{ns}-aws"));
    kubelet
        .register(FakeNode::gpu(format!("{ns}-gpu-0"), 1).label("spillway.test/pool", &private))
        .await
        .expect("node");
    let machines = BootingMachines::start(
        ec2.clone(),
        kubelet.clone(),
        ns.clone(),
        Some(Duration::from_secs(2)),
    );
    create(Api::<ComputePool>::all(client.clone()), json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": private},
        "spec": {"private": {"nodeSelector": {"spillway.test/pool": private}}},
    })).await;
    create(
        Api::<ComputePool>::all(client.clone()),
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": aws},
            "spec": {"aws": {"region": "us-east-1", "amiId": ami, "instanceTypes": ["g6.xlarge"],
                             "capacityTypes": ["on-demand"]}, "idleTimeout": "3s"},
        }),
    )
    .await;
    create(
        Api::<GpuQueue>::all(client.clone()),
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue", "metadata": {"name": ns},
            "spec": {"burst": {"enabled": true, "maxWait": "2s", "pools": [aws]}},
        }),
    )
    .await;
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    // The namespace enforces the restricted Pod Security Standard: the jobs' own containers
    // comply, and what Spillway adds to their pods (the identity token, the OpenTelemetry
    // settings, the placement) must keep them admitted, on private and on cloud nodes.
    let restricted = json!({"template": {"spec": {
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "train", "image": "pytorch:2", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    }}});
    workload::submit(&jobs, "private", &ns, restricted.clone(), None).await;
    let j = wait_phase(&jobs, "private", JobPhase::Running, &op).await;
    assert_eq!(j.status.unwrap().pool.as_deref(), Some(private.as_str()));
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], op.metrics_port).into();
    let (code, _, body) = spillway_tests::operator::http_get(metrics, "/metrics")
        .await
        .expect("/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("spillway_leader 1"),
        "this replica leads:\n{body}"
    );
    workload::submit(&jobs, "burst", &ns, restricted.clone(), None).await;
    let j = wait_phase(&jobs, "burst", JobPhase::Running, &op).await;
    assert_eq!(
        j.status.unwrap().pool.as_deref(),
        Some(aws.as_str()),
        "{}",
        op.log_tail()
    );
    // Each running job got its identity token (in its namespace's tokens Secret).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for job in ["private", "burst"] {
        eventually(WAIT, &format!("{job}'s token"), || async {
            let s = secrets
                .get_opt(&spillway_k8s::identity::tokens_secret_name(job))
                .await
                .map_err(|e| e.to_string())?
                .ok_or("none yet".to_string())?;
            s.data
                .and_then(|d| d.get(job).cloned())
                .ok_or(format!("no {job} key yet"))
        })
        .await;
    }
    // The webhook's certificate: made by the operator (with the chart's Role) in the chart's
    // empty Secret, and its CA put in the chart's configuration (with the ClusterRole's one
    // grant on it).
    let configs: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let mutating: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    eventually(WAIT, "the webhook's caBundle", || async {
        let tls = secrets_in(&client, &ns)
            .get(&format!("{fullname}-webhook-tls"))
            .await
            .map_err(|e| e.to_string())?;
        let data = tls.data.unwrap_or_default();
        let ca = data.get("ca.crt").ok_or("no certificate yet")?;
        if !data.contains_key("tls.crt") || !data.contains_key("tls.key") {
            return Err("no serving pair".to_string());
        }
        let hooks = configs
            .get(&fullname)
            .await
            .map_err(|e| e.to_string())?
            .webhooks
            .unwrap_or_default();
        match hooks
            .first()
            .and_then(|h| h.client_config.ca_bundle.as_ref())
        {
            Some(bundle) if bundle == ca => {}
            other => return Err(format!("caBundle {:?}", other.map(|b| b.0.len()))),
        }
        // The mutating one that holds labelled Jobs (integrations) gets the same CA.
        let hooks = mutating
            .get(&fullname)
            .await
            .map_err(|e| e.to_string())?
            .webhooks
            .unwrap_or_default();
        match hooks
            .first()
            .and_then(|h| h.client_config.ca_bundle.as_ref())
        {
            Some(bundle) if bundle == ca => Ok(()),
            other => Err(format!("mutating caBundle {:?}", other.map(|b| b.0.len()))),
        }
    })
    .await;
    // The Secrets the operator could not touch are as they were.
    for at in &victims {
        let s = Api::<Secret>::namespaced(client.clone(), at)
            .get(&format!("{ns}-users-own"))
            .await
            .expect("still there");
        assert_eq!(
            s.data.unwrap_or_default()["password"].0,
            b"hunter2",
            "in {at}"
        );
        super::privilege::assert_refused_everything(&sa, at, &format!("{ns}-users-own")).await;
        let _ = Api::<Secret>::namespaced(client.clone(), at)
            .delete(&format!("{ns}-users-own"), &DeleteParams::default())
            .await;
    }
    let keys_name = format!("{fullname}-identity-keys");
    let keys_before = secrets_in(&client, &ns)
        .get(&keys_name)
        .await
        .unwrap()
        .data
        .expect("the operator wrote keys");

    let kube_system: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    eventually(
        Duration::from_secs(90),
        "the bootstrap token deleted by Kubernetes' token cleaner once expired",
        || async {
            let left = kube_system
                .list(&ListParams::default().labels("spillway.io/bootstrap"))
                .await
                .map_err(|e| e.to_string())?;
            let ours: Vec<String> = left
                .items
                .iter()
                .filter(|s| {
                    s.annotations()
                        .get("spillway.io/need")
                        .is_some_and(|n| n.contains(&ns))
                })
                .map(|s| s.name_any())
                .collect();
            if ours.is_empty() {
                Ok(())
            } else {
                Err(format!("{ours:?}"))
            }
        },
    )
    .await;
    // helm upgrade: the chart changes, the operator's state does not.
    let upgrade = helm.run(&[
        "upgrade",
        &release,
        &chart,
        "--namespace",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--reuse-values",
        "--set",
        "replicas=3",
        "--set",
        "logLevel=debug",
    ]);
    assert!(
        upgrade.status.success(),
        "helm {} upgrade: {}",
        helm.major,
        text(&upgrade)
    );
    let d = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&fullname)
        .await
        .unwrap();
    assert_eq!(d.spec.replicas, Some(3));
    let keys_after = secrets_in(&client, &ns).get(&keys_name).await.unwrap().data;
    assert_eq!(
        keys_after.as_ref(),
        Some(&keys_before),
        "helm {} upgrade touched the issuer's keys",
        helm.major
    );
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get(&fullname)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(format!("{fullname}-local").as_str()),
        "helm {} upgrade took the Lease from its holder",
        helm.major
    );

    // Give back: delete the jobs; the instance is terminated.
    jobs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    eventually(
        WAIT,
        "the jobs gone (the cloud finalizer released)",
        || async {
            let left = jobs
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            if left.items.is_empty() {
                Ok(())
            } else {
                Err(format!("{} left\n{}", left.items.len(), op.log_tail()))
            }
        },
    )
    .await;
    eventually(WAIT, "the instance terminated", || async {
        let out = ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:spillway.io/cluster")
                    .values(&ns)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let live: Vec<String> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                !matches!(
                    i.state().and_then(|s| s.name()),
                    Some(InstanceStateName::Terminated)
                )
            })
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        if live.is_empty() {
            Ok(())
        } else {
            Err(format!("{live:?}"))
        }
    })
    .await;
    // The operator, with the chart's Role, recorded the queue's and the pool's spend in the
    // ledger.
    let ledgers = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let ledger_name = format!("{fullname}-spend");
    let recorded = ledgers
        .get(&ledger_name)
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    for suffix in [format!(".queue.{ns}"), format!(".pool.{aws}")] {
        assert!(
            recorded.keys().any(|k| k.ends_with(&suffix)),
            "no *{suffix} in the spend ledger: {recorded:?}"
        );
    }
    // And the queue's indicators in theirs.
    let indicators = ledgers
        .get(&format!("{fullname}-indicators"))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(
        indicators
            .keys()
            .any(|k| k.ends_with(&format!(".queue.{ns}"))),
        "the queue in the indicator ledger: {indicators:?}"
    );
    drop(machines);
    op.stop();

    // helm uninstall: nothing of the release is left but the CRDs and the two ledgers.
    let uninstall = helm.run(&[
        "uninstall",
        &release,
        "--namespace",
        &ns,
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(
        uninstall.status.success(),
        "helm {} uninstall: {}",
        helm.major,
        text(&uninstall)
    );
    let mut kept = vec![
        format!("ConfigMap {ns}/{ledger_name}"),
        format!("ConfigMap {ns}/{fullname}-indicators"),
    ];
    kept.sort();
    eventually(WAIT, "no object of the release left", || async {
        let mut left = release_objects(&client, &release).await;
        left.sort();
        if left == kept {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let helm_records = secrets_in(&client, &ns)
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .unwrap();
    assert!(
        helm_records.items.is_empty(),
        "Helm's release records are gone"
    );
    for crd in spillway_api::crds() {
        assert!(
            crds.get_opt(&crd.name_any()).await.unwrap().is_some(),
            "CRD {} kept (Helm's rule)",
            crd.name_any()
        );
    }
    for pool in [&private, &aws] {
        let _ = Api::<ComputePool>::all(client.clone())
            .delete(pool, &DeleteParams::default())
            .await;
    }
    let _ = Api::<GpuQueue>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    let _ = ledgers.delete(&ledger_name, &DeleteParams::default()).await;
    let _ = kubelet.remove(&format!("{ns}-gpu-0")).await;
    let _ = kubelet.remove(&system_node).await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn secrets_in(client: &Client, ns: &str) -> Api<Secret> {
    Api::namespaced(client.clone(), ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm3_installs_runs_the_operator_with_least_privilege_upgrades_and_uninstalls() {
    lifecycle(Helm::v3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm4_installs_runs_the_operator_with_least_privilege_upgrades_and_uninstalls() {
    lifecycle(Helm::v4()).await;
}
