//! Each AWS test's world: a queue that bursts, a busy private GPU, an AWS pool in moto.

use std::sync::Arc;
use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_aws::Ec2Provider;
use spillway_cloud::{CallPolicy, CloudProvider};
use spillway_k8s::cloud::{CloudConfig, DEFAULT_CATALOG, ProviderFactory};
use spillway_tests::cluster::TestCluster;
use spillway_tests::faults::FaultProxy;
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::{MotoServer, cluster_instances};
use spillway_tests::operator::{RunningOperator, eventually, test_settings};
use spillway_tests::workload::{self, WAIT};

pub struct World {
    pub client: Client,
    pub ec2: aws_sdk_ec2::Client,
    pub ns: String,
    pub queue: String,
    pub aws_pool: String,
    pub cluster_tag: String,
    pub kubelet: Arc<FakeKubelet>,
    pub ami: String,
    pub api_server: String,
    pub ca_pem: String,
    /// The proxy in front of moto the test's operators call EC2 through (it serves the
    /// placement groups moto lacks, and records launches).
    pub proxy: FaultProxy,
    /// An EC2 client that goes through `proxy`.
    pub proxied: aws_sdk_ec2::Client,
}

/// Requests one EC2 call of the test operator may send, its SDK retries included.
pub const CALL_ATTEMPTS: u32 = 3;

impl World {
    /// A queue that may burst after `max_wait`, a private pool of one busy 1-GPU node, and an
    /// AWS pool of g6.xlarge (L4) and g5.8xlarge (A10G), on-demand, idle timeout 3 s.
    pub async fn new(prefix: &str, queue_extra: serde_json::Value) -> World {
        let (cluster, client) = TestCluster::with_crds().await;
        let moto = MotoServer::shared().await;
        let ec2 = moto.ec2_client().await;
        let ami = moto.ami().await;
        spillway_tests::operator::clean_up_earlier_tests(&client, &["aws-"]).await;
        let ns = cluster.namespace(&client, prefix).await.expect("namespace");
        let kubelet = Arc::new(FakeKubelet::start(client.clone()));
        let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
        let proxied = aws_sdk_ec2::Client::new(&moto.sdk_config(Some(&proxy.endpoint)).await);
        let w = World {
            queue: ns.clone(),
            aws_pool: format!("{ns}-aws"),
            cluster_tag: ns.clone(),
            client,
            ec2,
            ns,
            kubelet,
            ami,
            api_server: cluster.server_url.clone(),
            ca_pem: std::fs::read_to_string(&cluster.ca_file).expect("CA"),
            proxy,
            proxied,
        };
        // Each test's queue bursts only to its own pool (every test's pools are in the cluster).
        let mut burst = json!({"enabled": true, "maxWait": "2s", "capacityTypes": ["on-demand"],
                               "pools": [w.aws_pool.clone()]});
        for (k, v) in queue_extra.as_object().cloned().unwrap_or_default() {
            burst[k] = v;
        }
        let mut spec = json!({"burst": burst});
        if let Some(b) = queue_extra.get("budget") {
            spec["budget"] = b.clone();
            spec["burst"].as_object_mut().map(|m| m.remove("budget"));
        }
        create(
            Api::<GpuQueue>::all(w.client.clone()),
            json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
                "metadata": {"name": w.queue}, "spec": spec,
            }),
        )
        .await;
        let private = format!("{}-private", w.ns);
        create(
            Api::<ComputePool>::all(w.client.clone()),
            json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
                "metadata": {"name": private},
                "spec": {"private": {"nodeSelector": {"spillway.test/pool": private}}},
            }),
        )
        .await;
        create(
            Api::<ComputePool>::all(w.client.clone()),
            json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
                "metadata": {"name": w.aws_pool},
                "spec": {"aws": {"region": "us-east-1", "amiId": w.ami,
                                 "instanceTypes": ["g6.xlarge", "g5.8xlarge"],
                                 "capacityTypes": ["on-demand"]},
                         "idleTimeout": "3s"},
            }),
        )
        .await;
        w.kubelet
            .register(
                FakeNode::gpu(format!("{}-private-0", w.ns), 1)
                    .label("spillway.test/pool", &private),
            )
            .await
            .expect("private node");
        w
    }

    /// The test's cloud: EC2 through the world's proxy.
    pub fn cloud(&self) -> CloudConfig {
        self.cloud_with(self.proxied.clone())
    }

    pub fn cloud_with(&self, ec2: aws_sdk_ec2::Client) -> CloudConfig {
        let moto_ec2 = ec2;
        let factory: ProviderFactory = Arc::new(move |_region: String| {
            let ec2 = moto_ec2.clone();
            Box::pin(async move {
                let policy = CallPolicy {
                    timeout: Duration::from_secs(10),
                    attempts: CALL_ATTEMPTS,
                    initial_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(2),
                };
                Arc::new(Ec2Provider::new(ec2, policy)) as Arc<dyn CloudProvider>
            })
        });
        CloudConfig {
            cluster: self.cluster_tag.clone(),
            factory,
            catalog: spillway_core::catalog::parse(DEFAULT_CATALOG).expect("catalog"),
            poll: Duration::from_millis(500),
            join_timeout: Duration::from_secs(60),
            gc_grace: Duration::from_secs(5),
            capacity_cooldown: Duration::from_secs(30),
            join: Some(spillway_k8s::bootstrap::JoinConfig {
                api_server: self.api_server.clone(),
                ca_pem: self.ca_pem.clone(),
            }),
            notices: Some(Arc::new(|_region: String| {
                Box::pin(async move {
                    let moto = MotoServer::shared().await;
                    let sqs = moto.sqs_client().await;
                    Arc::new(spillway_aws::SqsQueue::new(sqs, CallPolicy::default()))
                        as Arc<dyn spillway_cloud::notices::NoticeQueue>
                })
            })),
        }
    }

    pub async fn operator(&self) -> RunningOperator {
        self.operator_with(self.cloud()).await
    }

    /// An operator whose EC2 calls go through `proxy` (the SDK's standard retries: 3 attempts).
    pub async fn operator_via(&self, proxy: &FaultProxy) -> RunningOperator {
        let moto = MotoServer::shared().await;
        let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config(Some(&proxy.endpoint)).await);
        self.operator_with(self.cloud_with(ec2)).await
    }

    /// The spend ledger ConfigMap of this test's operators, in the test's namespace.
    pub const SPEND_LEDGER: &str = "spillway-spend";

    /// An operator that dies at `crash` ([`spillway_k8s::executor::Crash`]).
    pub async fn operator_crashing(&self, crash: spillway_k8s::executor::Crash) -> RunningOperator {
        let mut settings = test_settings("aws-test");
        settings.cloud = Some(self.cloud());
        settings.crash = Some(crash);
        RunningOperator::start_with(self.client.clone(), None, settings)
            .await
            .expect("operator")
    }

    /// An operator with this cloud configuration (its spend ledger in the test's namespace).
    pub async fn operator_with(&self, cloud: CloudConfig) -> RunningOperator {
        let mut settings = test_settings("aws-test");
        settings.cloud = Some(cloud);
        settings.spend_record = Some(spillway_k8s::spend_record::RecordRef {
            namespace: self.ns.clone(),
            name: Self::SPEND_LEDGER.into(),
        });
        RunningOperator::start_with(self.client.clone(), None, settings)
            .await
            .expect("operator")
    }

    pub fn jobs(&self) -> Api<GpuJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn submit(&self, name: &str, extra: serde_json::Value, run_seconds: Option<u32>) {
        workload::submit(&self.jobs(), name, &self.queue, extra, run_seconds).await;
    }

    /// The harness's booting machines for this test's instances: a Node `delay` after each
    /// instance appears (never, with `None`).
    pub fn boot_machines(&self, delay: Option<Duration>) -> BootingMachines {
        BootingMachines::start(
            self.ec2.clone(),
            self.kubelet.clone(),
            self.cluster_tag.clone(),
            delay,
        )
    }

    /// As [`World::boot_machines`], a machine booted from one of `images` getting that
    /// image's labels (GPU feature discovery's, for the driver the image really has).
    pub fn boot_machines_from(
        &self,
        delay: Option<Duration>,
        images: std::collections::HashMap<String, std::collections::BTreeMap<String, String>>,
    ) -> BootingMachines {
        BootingMachines::start_with_images(
            self.ec2.clone(),
            self.kubelet.clone(),
            self.cluster_tag.clone(),
            delay,
            images,
        )
    }

    /// Merges `aws` into the cloud pool's `spec.aws`.
    pub async fn patch_aws_pool(&self, aws: serde_json::Value) {
        Api::<ComputePool>::all(self.client.clone())
            .patch(
                &self.aws_pool,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"aws": aws}})),
            )
            .await
            .expect("patch the cloud pool");
    }

    /// Fills the one private GPU with a job, so the next ones must wait (and burst).
    pub async fn fill_private_gpu(&self) {
        self.submit("blocker", json!({}), None).await;
        self.wait_phase("blocker", JobPhase::Running).await;
    }

    /// Waits until `name` runs again after one restart.
    pub async fn wait_restarted(&self, name: &str) -> GpuJob {
        eventually(WAIT, &format!("{name} to run again"), || async {
            let j = self.jobs().get(name).await.map_err(|e| e.to_string())?;
            let st = j.status.clone().unwrap_or_default();
            if st.restarts == Some(1) && st.phase == Some(JobPhase::Running) {
                Ok(j)
            } else {
                Err(format!("{st:?}"))
            }
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: JobPhase) -> GpuJob {
        workload::wait_phase(&self.jobs(), name, phase).await
    }

    /// Waits for a Warning Event with `reason` in the test's namespace whose note contains
    /// `note`.
    pub async fn wait_warning(&self, reason: &str, note: &str) {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.ns);
        eventually(WAIT, &format!("a {reason} Warning Event"), || async {
            let list = events
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let found = list.items.iter().any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains(note))
            });
            if found {
                Ok(())
            } else {
                let seen: Vec<_> = list.items.iter().map(|e| (&e.reason, &e.note)).collect();
                Err(format!("{seen:?}"))
            }
        })
        .await;
    }

    /// (id, type, state, need) of the instances tagged for this test's cluster.
    /// Waits until instance `id` is terminated (or shutting down).
    pub async fn wait_terminated(&self, id: &str) {
        eventually(WAIT, "the idle instance to be terminated", || async {
            let list = self.instances().await;
            match list.iter().find(|i| i.0 == id) {
                Some((_, _, state, _)) if state == "terminated" || state == "shutting-down" => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    pub async fn instances(&self) -> Vec<(String, String, String, String)> {
        cluster_instances(&self.ec2, &self.cluster_tag)
            .await
            .expect("describe")
            .into_iter()
            .map(|i| {
                let state = i.state.as_ref().map(|s| s.as_str().to_string());
                let need = i.tag("spillway.io/need").to_string();
                (i.id, i.instance_type, state.unwrap_or_default(), need)
            })
            .collect()
    }
}

pub async fn create<K>(api: Api<K>, obj: serde_json::Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let o: K = serde_json::from_value(obj).expect("object JSON");
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
}

pub fn decode_base64(text: &str) -> String {
    const A: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.chars().filter(|c| *c != '=' && !c.is_whitespace()) {
        let Some(v) = A.find(c) else { continue };
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}
