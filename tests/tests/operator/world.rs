//! Each test's world: a namespace, a queue, a private pool and a fake kubelet.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::operator::{
    RunningOperator, eventually, local_webhook, mutating_configuration, test_settings,
};
use spillway_tests::workload::{self, WAIT};

pub async fn setup() -> (&'static TestCluster, Client) {
    TestCluster::with_crds().await
}

/// A test's own world: a namespace, a queue named after it, a private pool selecting nodes
/// labelled with it, and a fake kubelet.
pub struct World {
    pub client: Client,
    pub ns: String,
    pub queue: String,
    pub pool: String,
    pub kubelet: FakeKubelet,
}

impl World {
    /// The chart's mutating webhooks of `which` (`hold`, `hold-pod`, `inject`), calling an
    /// operator started here (instance `instance`) on loopback, for this namespace only.
    /// Returns the operator and the configuration's name (the test deletes it when done).
    pub async fn operator_with_mutating_webhooks(
        &self,
        which: &[&str],
        instance: &str,
    ) -> (RunningOperator, String) {
        let port = spillway_tests::free_port().expect("port");
        let name = format!("spillway-{}", self.ns);
        let configuration = mutating_configuration(&name, port, &self.ns, which);
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .expect("create the configuration");
        let webhook = local_webhook(&self.ns, port, &name);
        let op = RunningOperator::start_full(
            self.client.clone(),
            None,
            test_settings(instance),
            Some(webhook),
        )
        .await
        .expect("operator");
        (op, name)
    }

    pub async fn new(prefix: &str) -> World {
        let (cluster, client) = setup().await;
        // Private GPUs are shared by every queue: earlier tests' nodes (whose fake kubelets
        // are gone) would take this test's jobs, and their pending jobs would compete.
        spillway_tests::operator::clean_up_earlier_tests(&client, &["op-"]).await;
        let ns = cluster.namespace(&client, prefix).await.expect("namespace");
        let world = World {
            kubelet: FakeKubelet::start(client.clone()),
            queue: ns.clone(),
            pool: format!("{ns}-pool"),
            client,
            ns,
        };
        world.create_pool(&world.pool.clone()).await;
        world.create_queue(&world.queue.clone(), json!({})).await;
        world
    }

    pub async fn create_queue(&self, name: &str, spec: serde_json::Value) {
        let q: GpuQueue = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("queue JSON");
        Api::<GpuQueue>::all(self.client.clone())
            .create(&PostParams::default(), &q)
            .await
            .expect("create queue");
    }

    pub async fn create_pool(&self, name: &str) {
        let p: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": name},
            "spec": {"private": {"nodeSelector": {"spillway.test/pool": name}, "gpuCostPerHour": 1.5}},
        }))
        .expect("pool JSON");
        Api::<ComputePool>::all(self.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .expect("create pool");
    }

    /// Registers `count` nodes of `gpus` GPUs in the test's pool; returns their names.
    pub async fn nodes(&self, count: usize, gpus: u32, model: Option<&str>) -> Vec<String> {
        let mut names = Vec::new();
        for _ in 0..count {
            let name = spillway_tests::unique_name(&format!("{}-n", self.ns));
            let mut node = FakeNode::gpu(&name, gpus).label("spillway.test/pool", &self.pool);
            if let Some(m) = model {
                node = node.model(m);
            }
            self.kubelet.register(node).await.expect("register node");
            names.push(name);
        }
        names
    }

    pub fn jobs(&self) -> Api<GpuJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Submits a job to the test's queue; `extra` is merged into the spec; `run_seconds`
    /// makes its pods finish (else they run until deleted).
    pub async fn submit(&self, name: &str, extra: serde_json::Value, run_seconds: Option<u32>) {
        self.submit_to(name, &self.queue.clone(), extra, run_seconds)
            .await;
    }

    pub async fn submit_to(
        &self,
        name: &str,
        queue: &str,
        extra: serde_json::Value,
        run_seconds: Option<u32>,
    ) {
        workload::submit(&self.jobs(), name, queue, extra, run_seconds).await;
    }

    pub async fn job(&self, name: &str) -> GpuJob {
        self.jobs().get(name).await.expect("get job")
    }

    pub async fn pods_of(&self, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("spillway.io/job={job}")))
            .await
            .expect("list pods")
            .items
    }

    pub async fn wait_phase(&self, name: &str, phase: JobPhase) -> GpuJob {
        workload::wait_phase(&self.jobs(), name, phase).await
    }

    /// Waits until every pod of the job is bound and Running.
    pub async fn wait_pods_running(&self, name: &str, replicas: usize) -> Vec<Pod> {
        eventually(WAIT, &format!("pods of {name} to run"), || async {
            let pods = self.pods_of(name).await;
            let running = pods
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
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

    /// The API server's table for `kubectl get gpujobs` (server-side printing).
    pub async fn table(&self) -> (Vec<String>, Vec<Vec<serde_json::Value>>) {
        let req = http::Request::get(format!(
            "/apis/spillway.io/v1alpha1/namespaces/{}/gpujobs",
            self.ns
        ))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("request");
        let table: serde_json::Value = self.client.request(req).await.expect("table");
        let columns = table["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_string())
            .collect();
        let rows = table["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["cells"].as_array().cloned().unwrap_or_default())
            .collect();
        (columns, rows)
    }
}

pub fn condition(job: &GpuJob, type_: &str) -> Option<(String, String, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}
