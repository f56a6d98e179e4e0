//! Bursting to EC2 end to end: moto's EC2 server, the real API server and scheduler, the fake
//! kubelet, and the harness booting a Node for each instance.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceStateName};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_aws::Ec2Provider;
use spillway_cloud::{CallPolicy, CloudProvider};
use spillway_k8s::cloud::{CloudConfig, DEFAULT_CATALOG, ProviderFactory};
use spillway_tests::cluster::TestCluster;
use spillway_tests::faults::FaultProxy;
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::MotoServer;
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::workload::{self, WAIT};

struct World {
    client: Client,
    ec2: aws_sdk_ec2::Client,
    ns: String,
    queue: String,
    aws_pool: String,
    cluster_tag: String,
    kubelet: Arc<FakeKubelet>,
    ami: String,
    api_server: String,
    ca_pem: String,
}

async fn create<K>(api: Api<K>, obj: serde_json::Value)
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

impl World {
    /// A queue that may burst after `max_wait`, a private pool of one busy 1-GPU node, and an
    /// AWS pool of g6.xlarge (L4) and g5.8xlarge (A10G), on-demand, idle timeout 3 s.
    async fn new(prefix: &str, queue_extra: serde_json::Value) -> World {
        let cluster = TestCluster::shared().await;
        let client = cluster.client().await.expect("client");
        cluster
            .install_crds(&client, &spillway_api::crds())
            .await
            .expect("crds");
        let moto = MotoServer::shared().await;
        let ec2 = moto.ec2_client().await;
        let ami = ec2
            .describe_images()
            .send()
            .await
            .expect("images")
            .images()
            .iter()
            .find_map(|i| i.image_id().map(str::to_string))
            .expect("an AMI");
        spillway_tests::operator::clean_up_earlier_tests(&client, &["aws-"]).await;
        let ns = cluster.namespace(&client, prefix).await.expect("namespace");
        let kubelet = Arc::new(FakeKubelet::start(client.clone()));
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

    fn cloud(&self) -> CloudConfig {
        self.cloud_with(self.ec2.clone())
    }

    fn cloud_with(&self, ec2: aws_sdk_ec2::Client) -> CloudConfig {
        let moto_ec2 = ec2;
        let factory: ProviderFactory = Arc::new(move |_region: String| {
            let ec2 = moto_ec2.clone();
            Box::pin(async move {
                let policy = CallPolicy {
                    timeout: Duration::from_secs(10),
                    throttle_retries: 3,
                    backoff_base: Duration::from_millis(100),
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
        }
    }

    async fn operator(&self) -> RunningOperator {
        self.operator_with(self.cloud()).await
    }

    /// An operator whose EC2 calls go through `proxy` (the SDK's standard retries: 3 attempts).
    async fn operator_via(&self, proxy: &FaultProxy) -> RunningOperator {
        let moto = MotoServer::shared().await;
        let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config(Some(&proxy.endpoint)).await);
        self.operator_with(self.cloud_with(ec2)).await
    }

    /// An operator with this cloud configuration.
    async fn operator_with(&self, cloud: CloudConfig) -> RunningOperator {
        let mut settings = test_settings("aws-test");
        settings.cloud = Some(cloud);
        RunningOperator::start_with(self.client.clone(), None, settings)
            .await
            .expect("operator")
    }

    fn jobs(&self) -> Api<GpuJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn submit(&self, name: &str, extra: serde_json::Value, run_seconds: Option<u32>) {
        workload::submit(&self.jobs(), name, &self.queue, extra, run_seconds).await;
    }

    /// The harness's booting machines for this test's instances: a Node `delay` after each
    /// instance appears (never, with `None`).
    fn boot_machines(&self, delay: Option<Duration>) -> BootingMachines {
        BootingMachines::start(
            self.ec2.clone(),
            self.kubelet.clone(),
            self.cluster_tag.clone(),
            delay,
        )
    }

    /// Fills the one private GPU with a job, so the next ones must wait (and burst).
    async fn fill_private_gpu(&self) {
        self.submit("blocker", json!({}), None).await;
        self.wait_phase("blocker", JobPhase::Running).await;
    }

    /// Waits until `name` runs again after one restart.
    async fn wait_restarted(&self, name: &str) -> GpuJob {
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

    async fn wait_phase(&self, name: &str, phase: JobPhase) -> GpuJob {
        workload::wait_phase(&self.jobs(), name, phase).await
    }

    /// (id, type, state) of the instances tagged for this test's cluster.
    async fn instances(&self) -> Vec<(String, String, String, String)> {
        let out = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:spillway.io/cluster")
                    .values(&self.cluster_tag)
                    .build(),
            )
            .send()
            .await
            .expect("describe");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|i| {
                let need = i
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some("spillway.io/need"))
                    .and_then(|t| t.value())
                    .unwrap_or_default()
                    .to_string();
                (
                    i.instance_id().unwrap_or_default().to_string(),
                    i.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    i.state()
                        .and_then(|s| s.name())
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    need,
                )
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_past_max_wait_bursts_to_the_cheapest_instance_and_scales_down() {
    let _turn = serial().await;
    let w = World::new("aws-burst", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("burst", json!({}), Some(3)).await;

    let job = w.wait_phase("burst", JobPhase::Running).await;
    let st = job.status.clone().unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Cloud),
        "{st:?}"
    );
    assert_eq!(st.pool.as_deref(), Some(w.aws_pool.as_str()));
    let instances = w.instances().await;
    assert_eq!(
        instances.len(),
        1,
        "one instance for the need: {instances:?}"
    );
    let (id, itype, _, need) = instances[0].clone();
    assert_eq!(
        itype, "g6.xlarge",
        "the cheapest fitting type (L4 at $0.80/h vs A10G at $2.45/h)"
    );
    assert_eq!(need, format!("{}/burst#0", w.ns));
    assert_eq!(st.nodes, vec![id.clone()], "its pod runs on the new node");
    // The machine got user data that joins it with a bootstrap token made for the launch,
    // and the token is deleted once the node has joined.
    let attr = w
        .ec2
        .describe_instance_attribute()
        .instance_id(&id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    let user_data = decode_base64(attr.user_data().and_then(|u| u.value()).unwrap_or_default());
    assert!(
        user_data.contains(&format!("server: '{}'", w.api_server)),
        "{user_data}"
    );
    assert!(
        user_data.contains(&format!("spillway.io/pool={}", w.aws_pool)),
        "{user_data}"
    );
    let token_id = user_data
        .split("token: '")
        .nth(1)
        .and_then(|t| t.split('.').next())
        .expect("a token in the user data")
        .to_string();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(w.client.clone(), "kube-system");
    eventually(
        WAIT,
        "the bootstrap token to be deleted after the join",
        || async {
            match secrets
                .get_opt(&format!("bootstrap-token-{token_id}"))
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err("still there".into()),
            }
        },
    )
    .await;
    // Spend: the queue's rate and the pool's instances in status, the counter in metrics.
    eventually(WAIT, "queue and pool spend", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let p = Api::<ComputePool>::all(w.client.clone())
            .get(&w.aws_pool)
            .await
            .map_err(|e| e.to_string())?;
        let rate = q.status.and_then(|s| s.spend).map(|s| s.hourly_usd);
        let pool = p.status.map(|s| (s.instances, s.hourly_usd));
        if rate == Some(0.8048) && pool == Some((Some(1), Some(0.8048))) {
            Ok(())
        } else {
            Err(format!("{rate:?} {pool:?}"))
        }
    })
    .await;

    // It completes; the node goes idle and is terminated after the pool's idleTimeout (3 s).
    let done = w.wait_phase("burst", JobPhase::Succeeded).await;
    assert!(
        done.status
            .and_then(|s| s.cost)
            .map(|c| c.accrued_usd)
            .unwrap_or(0.0)
            > 0.0
    );
    eventually(WAIT, "the idle instance to be terminated", || async {
        let list = w.instances().await;
        match list.iter().find(|i| i.0 == id) {
            Some((_, _, state, _)) if state == "terminated" || state == "shutting-down" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually(WAIT, "its node to be deleted", || async {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(w.client.clone());
        match nodes.get_opt(&id).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    let (_, metrics) = op.get("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("spillway_cloud_calls_total{call=\"launch\",result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spillway_api_writes_total{kind=\"node-cordon\",result=\"ok\"} 1"),
        "the node was cordoned before its instance went: {metrics}"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_data_never_launches_and_orphans_are_collected() {
    let _turn = serial().await;
    let w = World::new("aws-restricted", json!({"maxWait": "1s"})).await;
    let dataset = format!("{}-patients", w.ns);
    create(
        Api::<Dataset>::all(w.client.clone()),
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
            "metadata": {"name": dataset},
            "spec": {"classification": "Restricted", "locations": [{"environment": "private"}]},
        }),
    )
    .await;
    // An orphan: tagged for this cluster, wanted by no need. And an instance that is not
    // Spillway's at all.
    let run = |tags: Vec<(&str, String)>| {
        let mut spec = aws_sdk_ec2::types::TagSpecification::builder()
            .resource_type(aws_sdk_ec2::types::ResourceType::Instance);
        for (k, v) in tags {
            spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build());
        }
        w.ec2
            .run_instances()
            .image_id(&w.ami)
            .instance_type(aws_sdk_ec2::types::InstanceType::G6Xlarge)
            .min_count(1)
            .max_count(1)
            .tag_specifications(spec.build())
            .send()
    };
    let orphan = run(vec![
        ("spillway.io/cluster", w.cluster_tag.clone()),
        ("spillway.io/need", format!("{}/gone#0", w.ns)),
        ("spillway.io/job", format!("{}/gone", w.ns)),
        ("spillway.io/pool", w.aws_pool.clone()),
    ])
    .await
    .expect("orphan")
    .instances()[0]
        .instance_id()
        .unwrap_or_default()
        .to_string();
    let foreign = run(vec![("team", "web".to_string())])
        .await
        .expect("foreign")
        .instances()[0]
        .instance_id()
        .unwrap_or_default()
        .to_string();

    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("sensitive", json!({"datasets": [dataset]}), None)
        .await;
    let job = eventually(WAIT, "the RestrictedData decision", || async {
        let j = w.jobs().get("sensitive").await.map_err(|e| e.to_string())?;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        match d.as_ref().and_then(|d| d.reason.as_deref()) {
            Some("RestrictedData") => Ok(j),
            _ => Err(format!("{d:?}")),
        }
    })
    .await;
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));

    // The orphan goes once past its grace period (5 s); the foreign instance stays.
    eventually(WAIT, "the orphan to be terminated", || async {
        let list = w.instances().await;
        match list.iter().find(|i| i.0 == orphan) {
            Some((_, _, state, _)) if state == "terminated" || state == "shutting-down" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Well past maxWait: still no instance for the Restricted job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mine: Vec<_> = w
        .instances()
        .await
        .into_iter()
        .filter(|i| i.3.contains("sensitive"))
        .collect();
    assert!(mine.is_empty(), "a Restricted job launched {mine:?}");
    let foreign_state = w
        .ec2
        .describe_instances()
        .instance_ids(&foreign)
        .send()
        .await
        .expect("describe")
        .reservations()[0]
        .instances()[0]
        .state()
        .and_then(|s| s.name())
        .cloned();
    assert_eq!(
        foreign_state,
        Some(InstanceStateName::Running),
        "never touch others' instances"
    );
    let list = w.jobs().list(&ListParams::default()).await.expect("jobs");
    assert_eq!(list.items.len(), 2);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_budget_is_below_one_instance_never_launches() {
    let _turn = serial().await;
    let w = World::new("aws-budget", json!({"budget": {"hourlyUSD": 0.5}})).await;
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("thrifty", json!({}), None).await;
    eventually(WAIT, "the BudgetExhausted decision", || async {
        let j = w.jobs().get("thrifty").await.map_err(|e| e.to_string())?;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        match d.as_ref().and_then(|d| d.reason.as_deref()) {
            Some("BudgetExhausted") => Ok(()),
            _ => Err(format!("{d:?}")),
        }
    })
    .await;
    eventually(WAIT, "the queue's BudgetExhausted condition", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let c = q
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "BudgetExhausted");
        match &c {
            Some(c) if c.status == "True" && c.message.starts_with("1 job(s) wait") => Ok(()),
            _ => Err(format!("{c:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        w.instances().await.is_empty(),
        "no instance within a $0.50/h budget"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_run_instances_the_restarted_operator_uses_the_same_instance() {
    let _turn = serial().await;
    let w = World::new("aws-restart", json!({})).await;
    // Machines take 6 s to boot, so the operator dies while the instance is pending.
    let _machines = w.boot_machines(Some(Duration::from_secs(6)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("survivor", json!({}), None).await;
    eventually(WAIT, "an instance for the need", || async {
        let n = w.instances().await.len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    op.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let op = w.operator().await;
    let job = w.wait_phase("survivor", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(
        instances.len(),
        1,
        "exactly one instance for the need: {instances:?}"
    );
    assert_eq!(
        job.status.unwrap_or_default().nodes,
        vec![instances[0].0.clone()]
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_terminated_behind_our_back_requeues_or_fails_its_job() {
    let _turn = serial().await;
    let w = World::new("aws-lost", json!({})).await;
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("fragile", json!({}), None).await;
    w.submit("sturdy", json!({"restartable": true}), None).await;
    let fragile = w.wait_phase("fragile", JobPhase::Running).await;
    let sturdy = w.wait_phase("sturdy", JobPhase::Running).await;
    let node_of = |j: &GpuJob| j.status.clone().unwrap_or_default().nodes[0].clone();
    for id in [node_of(&fragile), node_of(&sturdy)] {
        w.ec2
            .terminate_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("terminate behind the operator's back");
    }
    let failed = w.wait_phase("fragile", JobPhase::Failed).await;
    let cond = failed
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .expect("Failed condition");
    assert_eq!(cond.reason, "ReplicaLost", "{cond:?}");
    // The restartable one is requeued and runs again, on a new instance.
    let again = w.wait_restarted("sturdy").await;
    assert_ne!(node_of(&again), node_of(&sturdy));
    drop(machines);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_spot_instance_is_remembered_and_its_job_requeued() {
    let _turn = serial().await;
    let w = World::new("aws-spot", json!({"capacityTypes": ["spot"]})).await;
    let pools: Api<ComputePool> = Api::all(w.client.clone());
    pools
        .patch(
            &w.aws_pool,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"aws": {"capacityTypes": ["spot"]}}})),
        )
        .await
        .expect("spot-only pool");
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("checkpointing", json!({"restartable": true}), None)
        .await;
    let first = w.wait_phase("checkpointing", JobPhase::Running).await;
    let node = first.status.clone().unwrap_or_default().nodes[0].clone();
    let spot = w
        .ec2
        .describe_instances()
        .instance_ids(&node)
        .send()
        .await
        .expect("describe the spot instance");
    let lifecycle = spot
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find_map(|i| i.instance_lifecycle().map(|l| l.as_str().to_string()));
    assert_eq!(
        lifecycle.as_deref(),
        Some("spot"),
        "launched on the spot market"
    );
    // EC2 reclaims it (here: terminated behind the operator's back).
    w.ec2
        .terminate_instances()
        .instance_ids(&node)
        .send()
        .await
        .expect("reclaim");
    let again = eventually(WAIT, "the job to run again", || async {
        let j = w
            .jobs()
            .get("checkpointing")
            .await
            .map_err(|e| e.to_string())?;
        let st = j.status.clone().unwrap_or_default();
        if st.restarts == Some(1) && st.phase == Some(JobPhase::Running) {
            Ok(j)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    assert_ne!(again.status.unwrap_or_default().nodes[0], node);
    let series = format!(
        "spillway_spot_interruptions_total{{pool=\"{}\",instance_type=\"g6.xlarge\"}} 1",
        w.aws_pool
    );
    eventually(WAIT, "the interruption in metrics", || async {
        let (_, metrics) = op.get("/metrics").await.map_err(|e| e.to_string())?;
        if metrics.contains(&series) {
            Ok(())
        } else {
            Err(metrics)
        }
    })
    .await;
    drop(machines);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_on_the_cheapest_offering_launches_the_next_one() {
    let _turn = serial().await;
    let w = World::new("aws-capacity", json!({})).await;
    let moto = MotoServer::shared().await;
    let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
    // More failures than the SDK's attempts (3): the operator sees the error.
    proxy.fail(
        "RunInstances",
        Some("InstanceType=g6.xlarge"),
        500,
        "InsufficientInstanceCapacity",
        10,
    );
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator_via(&proxy).await;
    w.fill_private_gpu().await;
    w.submit("flexible", json!({}), None).await;
    let job = w.wait_phase("flexible", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0].1, "g5.8xlarge", "the next cheapest offering");
    assert_eq!(
        job.status.unwrap_or_default().nodes,
        vec![instances[0].0.clone()]
    );
    let (calls, failed) = proxy.calls("RunInstances");
    assert!(
        failed >= 3 && calls == failed + 1,
        "{calls} RunInstances, {failed} failed"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "a LaunchFailed Warning Event", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("LaunchFailed")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("InsufficientInstanceCapacity"))
        });
        if found {
            Ok(())
        } else {
            Err(format!(
                "{:?}",
                list.items
                    .iter()
                    .map(|e| e.reason.clone())
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_storm_backs_off_and_launches_once() {
    let _turn = serial().await;
    let w = World::new("aws-throttle", json!({})).await;
    let moto = MotoServer::shared().await;
    let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
    proxy.fail("RunInstances", None, 400, "RequestLimitExceeded", 5);
    proxy.fail("DescribeInstances", None, 400, "RequestLimitExceeded", 5);
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator_via(&proxy).await;
    w.fill_private_gpu().await;
    w.submit("patient", json!({}), None).await;
    w.wait_phase("patient", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "no duplicate launch: {instances:?}");
    let (calls, failed) = proxy.calls("RunInstances");
    assert_eq!(
        (calls, failed),
        (6, 5),
        "five throttled attempts, then one that went through"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_provisioning_job_releases_its_instances_first() {
    let _turn = serial().await;
    let w = World::new("aws-delete", json!({})).await;
    // Machines never boot, and garbage collection waits long: only the finalizer can act.
    let op = w
        .operator_with(CloudConfig {
            gc_grace: Duration::from_secs(600),
            ..w.cloud()
        })
        .await;
    w.fill_private_gpu().await;
    w.submit("doomed", json!({}), None).await;
    let job = w.wait_phase("doomed", JobPhase::Provisioning).await;
    eventually(WAIT, "the instance and the finalizer", || async {
        let j = w.jobs().get("doomed").await.map_err(|e| e.to_string())?;
        let fin = j.metadata.finalizers.clone().unwrap_or_default();
        let n = w.instances().await.len();
        if n == 1 && fin.contains(&"spillway.io/cloud-resources".to_string()) {
            Ok(())
        } else {
            Err(format!("{n} instances, finalizers {fin:?}"))
        }
    })
    .await;
    assert_eq!(
        job.status.and_then(|s| s.environment),
        Some(spillway_api::Environment::Cloud)
    );
    w.jobs()
        .delete("doomed", &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    eventually(
        WAIT,
        "the instance to be terminated and the job gone",
        || async {
            let list = w.instances().await;
            let terminated = list
                .iter()
                .all(|i| i.2 == "terminated" || i.2 == "shutting-down");
            let gone = w
                .jobs()
                .get_opt("doomed")
                .await
                .map_err(|e| e.to_string())?
                .is_none();
            if terminated && gone {
                Ok(())
            } else {
                Err(format!("{list:?}, job gone: {gone}"))
            }
        },
    )
    .await;
    op.stop().await.expect("clean stop");
}

fn decode_base64(text: &str) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_never_joins_is_replaced() {
    let _turn = serial().await;
    let w = World::new("aws-join", json!({})).await;
    // No machine ever boots; the join timeout is 4 s.
    let op = w
        .operator_with(CloudConfig {
            join_timeout: Duration::from_secs(4),
            ..w.cloud()
        })
        .await;
    w.fill_private_gpu().await;
    w.submit("stuck", json!({}), None).await;
    let first = eventually(WAIT, "a first instance", || async {
        let list = w.instances().await;
        list.first()
            .map(|i| i.0.clone())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    // It is terminated after the join timeout and the need is planned again, under attempt 1.
    eventually(
        WAIT,
        "a replacement for the instance that never joined",
        || async {
            let list = w.instances().await;
            let old_gone = list
                .iter()
                .any(|i| i.0 == first && (i.2 == "terminated" || i.2 == "shutting-down"));
            let replacement = list
                .iter()
                .any(|i| i.3 == format!("{}/stuck#1", w.ns) && i.2 != "terminated");
            if old_gone && replacement {
                Ok(())
            } else {
                Err(format!("{list:?}"))
            }
        },
    )
    .await;
    let job = w.jobs().get("stuck").await.expect("job");
    let st = job.status.unwrap_or_default();
    assert_eq!(st.restarts, Some(1), "{st:?}");
    assert_eq!(st.phase, Some(JobPhase::Provisioning), "{st:?}");
    op.stop().await.expect("clean stop");
}
