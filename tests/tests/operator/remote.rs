//! Cluster pools end to end: a second real control plane, with its own fake kubelet, is the
//! other cluster. The chart's worker mode is installed there with real Helm, and the operator
//! reaches it only with that ServiceAccount's token (scripts/worker-kubeconfig.sh), so every
//! test here also proves the worker Role is enough.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, Environment, GpuJob};
use spillway_k8s::action_kind::ActionKind;
use spillway_k8s::executor::Crash;
use spillway_tests::cluster::TestCluster;
use spillway_tests::helm::{Helm, chart_dir, text};
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::workload::WAIT;

use crate::world::World;

const UID_LABEL: &str = "spillway.io/job-uid";

/// One cluster pool: a namespace of the second cluster for its jobs, the worker chart installed
/// in a namespace of its own beside it, its own GPU nodes there, and the home ComputePool
/// pointing at it.
pub struct Worker {
    pub cluster: &'static TestCluster,
    /// The test's admin view of the other cluster.
    pub admin: Client,
    /// The operator's credentials there (the worker ServiceAccount).
    pub creds: Client,
    /// The jobs' namespace there (the pool's `spec.cluster.namespace`).
    pub ns: String,
    /// The worker release's namespace there (its ServiceAccount and token).
    pub system: String,
    pub pool: String,
    pub nodes: Vec<String>,
    pub kubelet: FakeKubelet,
}

impl Worker {
    /// Installs the chart in worker mode in a new namespace of the second cluster, registers
    /// `nodes` nodes of `gpus` GPUs there, stores the worker's kubeconfig in the test's home
    /// namespace, and creates pool `<home ns>-<name>` at `price` per GPU-hour.
    pub async fn install(w: &World, name: &str, price: f64, nodes: usize, gpus: u32) -> Worker {
        let cluster = TestCluster::second().await;
        let admin = cluster.client().await.expect("client of the other cluster");
        let ns = cluster
            .namespace(&admin, &format!("op-{name}"))
            .await
            .expect("namespace there");
        let system = cluster
            .namespace(&admin, &format!("op-{name}-sys"))
            .await
            .expect("the worker's namespace there");
        let helm = Helm::v3();
        let kubeconfig = cluster.kubeconfig.display().to_string();
        let chart = chart_dir().display().to_string();
        let jobs_there = format!("worker.namespace={ns}");
        let out = helm.run(&[
            "install",
            &ns,
            &chart,
            "--namespace",
            &system,
            "--kubeconfig",
            &kubeconfig,
            "--skip-crds",
            "--set",
            "mode=worker",
            "--set",
            &jobs_there,
        ]);
        assert!(out.status.success(), "helm install worker: {}", text(&out));
        let script = chart_dir().join("../../scripts/worker-kubeconfig.sh");
        let path = format!(
            "{}:{}",
            helm.kubectl().parent().expect("kubectl dir").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new(script)
            .env("PATH", path)
            .args([
                "--kubeconfig",
                &kubeconfig,
                "--namespace",
                &system,
                "--secret",
            ])
            .arg(format!("{ns}-spillway-worker-token"))
            .output()
            .expect("run scripts/worker-kubeconfig.sh");
        assert!(out.status.success(), "worker-kubeconfig.sh: {}", text(&out));
        let yaml = String::from_utf8(out.stdout).expect("UTF-8");
        let creds = {
            let kc = Kubeconfig::from_yaml(&yaml).expect("the script's kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .expect("config");
            Client::try_from(config).expect("client")
        };
        let secret = format!("{name}-kubeconfig");
        let s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret}, "stringData": {"kubeconfig": yaml},
        }))
        .expect("Secret JSON");
        Api::<Secret>::namespaced(w.client.clone(), &w.ns)
            .create(&PostParams::default(), &s)
            .await
            .expect("kubeconfig Secret");
        let kubelet = FakeKubelet::start(admin.clone());
        let mut names = Vec::new();
        for _ in 0..nodes {
            let n = spillway_tests::unique_name(&format!("{name}-gpu"));
            kubelet
                .register(FakeNode::gpu(&n, gpus).label("spillway.test/site", &ns))
                .await
                .expect("register a node there");
            names.push(n);
        }
        let pool = format!("{}-{name}", w.ns);
        let p: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": pool},
            "spec": {"cluster": {
                "kubeconfigSecretRef": {"name": secret, "namespace": w.ns},
                "namespace": ns,
                "nodeSelector": {"spillway.test/site": ns},
                "gpuCostPerHour": price,
                "location": "dc2",
                "lostAfter": "2m",
            }},
        }))
        .expect("pool JSON");
        Api::<ComputePool>::all(w.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .expect("create the cluster pool");
        Worker {
            cluster,
            admin,
            creds,
            ns,
            system,
            pool,
            nodes: names,
            kubelet,
        }
    }

    /// Registers one more GPU node there.
    pub async fn add_node(&mut self, gpus: u32) {
        let n = spillway_tests::unique_name(&format!("{}-gpu", self.ns));
        self.kubelet
            .register(FakeNode::gpu(&n, gpus).label("spillway.test/site", &self.ns))
            .await
            .expect("register a node there");
        self.nodes.push(n);
    }

    /// The pods there of the home job `job` (by its uid label).
    pub async fn pods_of(&self, job: &GpuJob) -> Vec<Pod> {
        let uid = job.metadata.uid.clone().unwrap_or_default();
        Api::<Pod>::namespaced(self.admin.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("{UID_LABEL}={uid}")))
            .await
            .expect("list pods there")
            .items
    }

    /// Waits until `replicas` pods of `job` run there, each bound to one of this pool's nodes.
    pub async fn wait_running(&self, job: &GpuJob, replicas: usize) -> Vec<Pod> {
        eventually(WAIT, "the job's pods to run there", || async {
            let pods = self.pods_of(job).await;
            let running = pods
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some_and(|n| self.nodes.contains(n))
                })
                .count();
            if running == replicas && pods.len() == replicas {
                Ok(pods)
            } else {
                Err(format!("{running} of {} running", pods.len()))
            }
        })
        .await
    }

    /// The job's token there, from its own Secret.
    pub async fn token_of(&self, job: &GpuJob) -> Result<String, String> {
        let name = format!(
            "spillway-token-{}",
            job.metadata.uid.clone().unwrap_or_default()
        );
        let s = Api::<Secret>::namespaced(self.admin.clone(), &self.ns)
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or(format!("no Secret {name} yet"))?;
        let t = s
            .data
            .and_then(|d| d.get("token").cloned())
            .ok_or("no token in it")?;
        String::from_utf8(t.0).map_err(|e| e.to_string())
    }

    /// Deletes the home pool (a later test's operator must not see it) and this pool's nodes.
    pub async fn remove(self, w: &World) {
        let _ = Api::<ComputePool>::all(w.client.clone())
            .delete(&self.pool, &DeleteParams::default())
            .await;
        for n in &self.nodes {
            let _ = self.kubelet.remove(n).await;
        }
    }
}

/// A pool's condition `type_`: (status, reason, message).
async fn pool_condition(w: &World, pool: &str, type_: &str) -> Option<(String, String, String)> {
    let p = Api::<ComputePool>::all(w.client.clone())
        .get(pool)
        .await
        .ok()?;
    p.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

pub(crate) async fn wait_pool_ready(w: &World, pool: &str, want: (&str, &str)) -> String {
    eventually(
        Duration::from_secs(90),
        &format!("pool {pool} Ready {want:?}"),
        || async {
            match pool_condition(w, pool, "Ready").await {
                Some((s, r, m)) if (s.as_str(), r.as_str()) == want => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// A burst queue of the test that may spill to `pools`, in that order, at once.
pub(crate) async fn burst_queue(w: &World, pools: &[&str]) -> String {
    let name = format!("{}-burst", w.ns);
    w.create_queue(
        &name,
        json!({"burst": {"enabled": true, "maxWait": "0s", "pools": pools}}),
    )
    .await;
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_spill_to_other_clusters_in_the_queues_order_as_the_home_identity_and_are_billed_there()
 {
    let _turn = serial().await;
    let w = World::new("op-remote").await;
    w.nodes(1, 8, None).await;
    let first = Worker::install(&w, "dear", 3.0, 2, 8).await;
    let second = Worker::install(&w, "cheap", 1.0, 2, 8).await;
    let queue = burst_queue(&w, &[&first.pool, &second.pool]).await;
    let identity = spillway_tests::operator::test_identity(&w.ns, 600, 3600).expect("identity");
    let (jwks_addr, issuer) = (identity.addr.expect("addr"), identity.issuer.clone());
    let mut settings = test_settings("op-remote");
    settings.identity = Some(identity);
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    wait_pool_ready(&w, &first.pool, ("True", "Valid")).await;

    // Home private capacity first, even for a queue that may spill.
    w.submit_to("home", &queue, json!({"gpusPerReplica": 8}), None)
        .await;
    let home = w.wait_phase("home", JobPhase::Running).await;
    assert_eq!(
        home.status.as_ref().and_then(|s| s.environment),
        Some(Environment::Private)
    );

    // A gang that only another cluster holds goes to the first pool of the queue's list,
    // though the second is cheaper.
    let gang = json!({"gpusPerReplica": 8, "replicas": 2});
    w.submit_to("gang", &queue, gang.clone(), None).await;
    let job = w.wait_phase("gang", JobPhase::Running).await;
    let st = job.status.clone().unwrap_or_default();
    assert_eq!(st.environment, Some(Environment::Remote), "{st:?}");
    assert_eq!(st.pool.as_deref(), Some(first.pool.as_str()));
    let d = st.decision.clone().expect("decision");
    assert_eq!(d.outcome.as_deref(), Some("StartRemote"), "{d:?}");
    assert_eq!(d.reason.as_deref(), Some("RemoteCapacity"), "{d:?}");
    let pods = first.wait_running(&job, 2).await;
    assert!(w.pods_of("gang").await.is_empty(), "no pod at home");
    let there: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    assert_eq!(there.len(), 2, "one replica per node: {there:?}");
    let mut seen_nodes = st.nodes.clone();
    seen_nodes.sort();
    let want: Vec<String> = there
        .iter()
        .map(|n| format!("{}/{n}", first.pool))
        .collect();
    assert_eq!(seen_nodes, want, "status.nodes names POOL/NODE");
    for p in &pods {
        assert!(p.owner_references().is_empty(), "owned by its label only");
        assert_eq!(p.labels()["spillway.io/job-namespace"], w.ns);
        let attrs = env_of(p, "OTEL_RESOURCE_ATTRIBUTES").expect("OTEL_RESOURCE_ATTRIBUTES");
        assert!(
            attrs.contains(&format!("k8s.cluster.name={}", first.pool))
                && attrs.contains("spillway.environment=remote"),
            "{attrs}"
        );
        assert!(env_of(p, "TRACEPARENT").is_some_and(|t| t.starts_with("00-")));
    }

    // The next gang finds the first pool full and takes the second.
    w.submit_to("gang2", &queue, gang.clone(), None).await;
    let job2 = w.wait_phase("gang2", JobPhase::Running).await;
    assert_eq!(
        job2.status.as_ref().and_then(|s| s.pool.as_deref()),
        Some(second.pool.as_str())
    );
    second.wait_running(&job2, 2).await;

    // Restricted data never leaves home, whatever is free elsewhere.
    let patients = format!("{}-patients", w.ns);
    let ds: spillway_api::Dataset = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
        "metadata": {"name": patients},
        "spec": {"classification": "Restricted", "locations": [{"environment": "private"}]},
    }))
    .expect("dataset");
    Api::<spillway_api::Dataset>::all(w.client.clone())
        .create(&PostParams::default(), &ds)
        .await
        .expect("dataset");
    Api::<GpuJob>::namespaced(w.client.clone(), &w.ns)
        .delete("gang2", &DeleteParams::default())
        .await
        .expect("delete gang2");
    eventually(WAIT, "gang2's pods deleted there", || async {
        match second.pods_of(&job2).await.len() {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
    w.submit_to(
        "restricted",
        &queue,
        json!({"gpusPerReplica": 8, "replicas": 2, "datasets": [patients]}),
        None,
    )
    .await;
    let restricted = eventually(WAIT, "a decision for restricted", || async {
        let j = w.job("restricted").await;
        match j.status.as_ref().and_then(|s| s.decision.clone()) {
            Some(d) => Ok((j, d)),
            None => Err("no decision yet".to_string()),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (r, d) = (w.job("restricted").await, restricted.1);
    assert_ne!(d.outcome.as_deref(), Some("StartRemote"), "{d:?}");
    assert_eq!(
        r.status.as_ref().and_then(|s| s.phase),
        Some(JobPhase::Queued)
    );
    assert!(second.pods_of(&restricted.0).await.is_empty());
    w.jobs()
        .delete("restricted", &DeleteParams::default())
        .await
        .expect("delete restricted");

    // The pods there carry the home identity: a token the home JWKS verifies, with the same
    // issuer and subject as at home, and environment remote in that pool.
    let token_there = eventually(WAIT, "the job's token Secret there", || async {
        first.token_of(&job).await
    })
    .await;
    let token_home = eventually(WAIT, "the home token", || async {
        let s = Api::<Secret>::namespaced(w.client.clone(), &w.ns)
            .get_opt(&spillway_k8s::identity::tokens_secret_name("home"))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        let t = s
            .data
            .and_then(|d| d.get("home").cloned())
            .ok_or("no key for home")?;
        String::from_utf8(t.0).map_err(|e| e.to_string())
    })
    .await;
    let (code, _, jwks) = spillway_tests::operator::http_get(jwks_addr, "/openid/v1/jwks")
        .await
        .expect("JWKS");
    assert_eq!(code, 200);
    let verifier =
        spillway_identity::Verifier::new(jwks.as_bytes(), &issuer, "spillway").expect("verifier");
    let now = spillway_k8s::clock::now();
    let there = verifier
        .verify(&token_there, now)
        .expect("the remote token");
    let here = verifier.verify(&token_home, now).expect("the home token");
    assert_eq!(
        (there.iss.as_str(), there.sub.as_str()),
        (issuer.as_str(), here.sub.as_str())
    );
    assert_eq!(there.spillway.environment, "remote");
    assert_eq!(there.spillway.pool, first.pool);
    assert_eq!(there.spillway.job, "gang");

    // Spend and capacity by pool: 16 GPUs at 3 USD in the first, none left in the second.
    eventually(WAIT, "the pools' status", || async {
        let pools = Api::<ComputePool>::all(w.client.clone());
        let a = pools.get(&first.pool).await.map_err(|e| e.to_string())?;
        let b = pools.get(&second.pool).await.map_err(|e| e.to_string())?;
        let (a, b) = (a.status.unwrap_or_default(), b.status.unwrap_or_default());
        let gpus = |s: &spillway_api::pool::ComputePoolStatus| {
            s.gpus.as_ref().map(|g| (g.capacity, g.allocated))
        };
        match (a.hourly_usd, gpus(&a), b.hourly_usd, gpus(&b)) {
            (Some(x), Some((16, 16)), Some(y), Some((16, 0)))
                if (x - 48.0).abs() < 1e-6 && y.abs() < 1e-6 =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A pod this cluster made there whose job is gone is collected; one that another home
    // cluster made in the same namespace (its id on it) is not.
    let home_id = Api::<k8s_openapi::api::core::v1::Namespace>::all(w.client.clone())
        .get("kube-system")
        .await
        .expect("kube-system")
        .metadata
        .uid
        .expect("uid");
    let stray_pod = |name: &str, home: &str| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {UID_LABEL: "00000000-gone",
                "spillway.io/pool": second.pool, "spillway.io/home-cluster": home}},
            "spec": {"nodeName": second.nodes[0], "containers": [{"name": "c", "image": "x"}]},
        }))
        .expect("pod")
    };
    let stray = stray_pod("stray", &home_id);
    let pods_there = Api::<Pod>::namespaced(second.admin.clone(), &second.ns);
    pods_there
        .create(&PostParams::default(), &stray)
        .await
        .expect("a stray pod there");
    pods_there
        .create(
            &PostParams::default(),
            &stray_pod("theirs", "another-home-cluster"),
        )
        .await
        .expect("another home cluster's pod there");
    eventually(WAIT, "the stray pod collected", || async {
        match pods_there
            .get_opt("stray")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;

    tokio::time::sleep(Duration::from_secs(6)).await;
    let theirs = pods_there.get_opt("theirs").await.expect("get");
    assert!(
        theirs.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "another home cluster's pod was collected"
    );
    let _ = pods_there
        .delete("theirs", &DeleteParams::default().grace_period(0))
        .await;

    // A job that finishes there: Succeeded at home; its pods there are kept for their logs,
    // as at home, and its token Secret there goes; deleting the job deletes the pods.
    w.submit_to("short", &queue, gang.clone(), Some(2)).await;
    let short = w.wait_phase("short", JobPhase::Succeeded).await;
    assert_eq!(
        short.status.as_ref().and_then(|s| s.pool.as_deref()),
        Some(second.pool.as_str())
    );
    eventually(WAIT, "short's token Secret there deleted", || async {
        match second.token_of(&short).await {
            Err(e) if e.starts_with("no Secret") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(second.pods_of(&short).await.len(), 2, "kept for their logs");
    w.jobs()
        .delete("short", &DeleteParams::default())
        .await
        .expect("delete short");
    eventually(WAIT, "short's pods deleted there", || async {
        match second.pods_of(&short).await.len() {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;

    // Least privilege there: the operator's credentials read no Secret, touch no other
    // namespace and change no Node.
    let forbidden = |what: &str, r: Result<(), kube::Error>| {
        assert!(
            matches!(&r, Err(kube::Error::Api(s)) if s.code == 403),
            "{what} with the worker's credentials must be refused: {r:?}"
        );
    };
    let secrets = Api::<Secret>::namespaced(first.creds.clone(), &first.ns);
    forbidden(
        "get a job's token Secret",
        secrets
            .get(&format!(
                "spillway-token-{}",
                job.metadata.uid.clone().unwrap_or_default()
            ))
            .await
            .map(|_| ()),
    );
    forbidden(
        "list Secrets",
        secrets.list(&ListParams::default()).await.map(|_| ()),
    );
    forbidden(
        "list Secrets of kube-system",
        Api::<Secret>::namespaced(first.creds.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    );
    forbidden(
        "list the pods of another namespace",
        Api::<Pod>::namespaced(first.creds.clone(), &second.ns)
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    );
    forbidden(
        "create a pod in default",
        Api::<Pod>::namespaced(first.creds.clone(), "default")
            .create(&PostParams::default(), &stray)
            .await
            .map(|_| ()),
    );
    forbidden(
        "patch a Node",
        Api::<Node>::all(first.creds.clone())
            .patch(
                &first.nodes[0],
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await
            .map(|_| ()),
    );

    // Deleting the job deletes its pods there.
    w.jobs()
        .delete("gang", &DeleteParams::default())
        .await
        .expect("delete gang");
    eventually(WAIT, "gang's pods deleted there", || async {
        match first.pods_of(&job).await.len() {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
    op.stop().await.expect("clean stop");
    first.remove(&w).await;
    second.remove(&w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_in_another_cluster_outlives_its_api_server_going_away_and_an_operator_killed_mid_dispatch()
 {
    let _turn = serial().await;
    let w = World::new("op-remote-fail").await;
    let mut dc = Worker::install(&w, "dc", 1.0, 3, 8).await;
    let queue = burst_queue(&w, &[&dc.pool]).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    wait_pool_ready(&w, &dc.pool, ("True", "Valid")).await;

    // Killed at the instant after its pods are created there, before the job's status says
    // so (the operator's status writes held, then nothing sent after the creates): a
    // successor started while that cluster's API server is away cannot see the pod, and must
    // place the gang nowhere, though home GPUs are free now; once the cluster answers, it finds
    // the pod and completes the gang, never twice.
    op.stop().await.expect("clean stop");
    let crash = Crash::new(vec![ActionKind::ApplyStatus], ActionKind::CreateRemotePod).times(2);
    let mut settings = test_settings("op-remote-fail");
    settings.crash = Some(crash.clone());
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    w.submit_to(
        "gang",
        &queue,
        json!({"gpusPerReplica": 8, "replicas": 2}),
        None,
    )
    .await;
    let job = w.job("gang").await;
    tokio::time::timeout(WAIT, crash.fired.notified())
        .await
        .expect("the gang's pods created there");
    op.kill();
    let before: BTreeSet<String> = eventually(WAIT, "the pods there", || async {
        let pods = dc.pods_of(&job).await;
        if pods.len() < 2 {
            Err(format!("{} of 2", pods.len()))
        } else {
            Ok(pods.iter().filter_map(|p| p.metadata.uid.clone()).collect())
        }
    })
    .await;
    assert_eq!(
        w.job("gang").await.status.and_then(|s| s.phase),
        None,
        "its status never said where it went"
    );
    let home = w.nodes(2, 8, None).await;
    let restart = dc.cluster.restart_apiserver(Duration::from_secs(25));
    let successor = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let op = RunningOperator::start(w.client.clone(), None)
            .await
            .expect("a successor while the other cluster is away");
        let d = eventually(WAIT, "the gang held", || async {
            let j = w.job("gang").await;
            match j.status.and_then(|s| s.decision) {
                Some(d) if d.reason.as_deref() == Some("ClusterUnseen") => Ok(d),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(
            w.pods_of("gang").await.is_empty(),
            "placed at home meanwhile"
        );
        (op, d)
    };
    let (restarted, (op, held)) = tokio::join!(restart, successor);
    restarted.expect("the other API server back");
    assert!(held.message.unwrap_or_default().contains(&dc.pool));
    let pods = dc.wait_running(&job, 2).await;
    let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(
        before, uids,
        "what was created before the kill is kept, not made again"
    );
    let j = w.wait_phase("gang", JobPhase::Running).await;
    assert_eq!(
        j.status.as_ref().and_then(|s| s.pool.as_deref()),
        Some(dc.pool.as_str()),
        "{}",
        serde_json::to_string(&j.status).unwrap_or_default(),
    );
    assert!(w.pods_of("gang").await.is_empty(), "never at home");
    for n in &home {
        let _ = w.kubelet.remove(n).await;
    }
    // The successor sees the other cluster: a node added there shows in the pool's status.
    dc.add_node(8).await;
    eventually(
        WAIT,
        "the successor to count the new node there",
        || async {
            let p = Api::<ComputePool>::all(w.client.clone())
                .get(&dc.pool)
                .await
                .map_err(|e| e.to_string())?;
            match p.status.and_then(|s| s.nodes).map(|n| n.total) {
                Some(4) => Ok(()),
                other => Err(format!("{other:?} nodes")),
            }
        },
    )
    .await;

    // The other API server goes away for longer than a watch notices, then comes back: the
    // pool is Ready=False meanwhile, the job stays Running with the same pods, and nothing new
    // is sent there.
    let restart = dc.cluster.restart_apiserver(Duration::from_secs(25));
    let watch = async {
        let m = wait_pool_ready(&w, &dc.pool, ("False", "Unreachable")).await;
        w.submit_to("while-away", &queue, json!({"gpusPerReplica": 8}), None)
            .await;
        let j = w.job("gang").await;
        assert_eq!(
            j.status.as_ref().and_then(|s| s.phase),
            Some(JobPhase::Running),
            "kept while unreachable: {:?}",
            j.status
        );
        m
    };
    let (restarted, message) = tokio::join!(restart, watch);
    restarted.expect("the other API server back");
    assert!(
        message.contains("2m"),
        "names when jobs are lost: {message}"
    );
    let away = w.job("while-away").await;
    assert_ne!(
        away.status
            .as_ref()
            .and_then(|s| s.decision.as_ref())
            .and_then(|d| d.outcome.as_deref()),
        Some("StartRemote"),
        "nothing is sent to an unreachable cluster"
    );
    wait_pool_ready(&w, &dc.pool, ("True", "Valid")).await;
    let after = dc.wait_running(&job, 2).await;
    let after: BTreeSet<String> = after
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(after, uids, "the same pods, not new ones");
    let j = w.wait_phase("gang", JobPhase::Running).await;
    assert_eq!(j.status.as_ref().and_then(|s| s.restarts).unwrap_or(0), 0);
    // Back, it takes the next job.
    let while_away = w.wait_phase("while-away", JobPhase::Running).await;
    dc.wait_running(&while_away, 1).await;

    // An operator that starts while the other API server is away has never seen its jobs
    // there: it keeps them as their status says (ConnectionFailed meanwhile), and finds the
    // same pods once it answers.
    op.kill();
    let restart = dc.cluster.restart_apiserver(Duration::from_secs(25));
    let start = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let op = RunningOperator::start(w.client.clone(), None)
            .await
            .expect("a successor while the other cluster is away");
        wait_pool_ready(&w, &dc.pool, ("False", "ConnectionFailed")).await;
        op
    };
    let (restarted, op) = tokio::join!(restart, start);
    restarted.expect("the other API server back");
    wait_pool_ready(&w, &dc.pool, ("True", "Valid")).await;
    let again: BTreeSet<String> = dc
        .wait_running(&job, 2)
        .await
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(again, uids, "the same pods, not new ones");
    let j = w.wait_phase("gang", JobPhase::Running).await;
    assert_eq!(j.status.as_ref().and_then(|s| s.restarts).unwrap_or(0), 0);
    op.stop().await.expect("clean stop");
    dc.remove(&w).await;
}
