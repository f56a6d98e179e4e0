//! The CRDs against the real API server, and the real scheduler with the fake kubelet.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::json;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_tests::apifaults::ApiFaults;
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{EXIT_CODE, FakeKubelet, FakeNode, RUN_SECONDS};

async fn setup() -> (&'static TestCluster, Client) {
    TestCluster::with_crds().await
}

fn dynamic_api(client: &Client, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("spillway.io", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates an object from JSON and returns the API server's error message, if any.
async fn try_create(
    client: &Client,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    obj: serde_json::Value,
) -> Result<DynamicObject, String> {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object JSON");
    dynamic_api(client, kind, plural, ns)
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| e.to_string())
}

fn job_json(name: &str, spec_overrides: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "queue": "research",
        "gpusPerReplica": 8,
        "template": {"spec": {"containers": [{"name": "train", "image": "pytorch:2"}]}},
    });
    if let (Some(base), Some(extra)) = (spec.as_object_mut(), spec_overrides.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn every_kind_round_trips_through_the_api_server() {
    let (cluster, client) = setup().await;
    let ns = cluster.namespace(&client, "crd-roundtrip").await.unwrap();
    let suffix = spillway_tests::unique_name("rt");

    // GpuJob: defaults are applied by the schema.
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    let created = jobs
        .create(
            &PostParams::default(),
            &serde_json::from_value(job_json(
                "train-1",
                json!({"datasets": ["imagenet"], "estimatedRuntime": "90m"}),
            ))
            .unwrap(),
        )
        .await
        .expect("valid GpuJob accepted");
    let back = jobs.get("train-1").await.unwrap();
    assert_eq!(back.spec, created.spec);
    assert_eq!(back.spec.replicas, 1, "replicas defaults to 1");
    assert_eq!(back.spec.placement, spillway_api::Placement::Auto);
    assert_eq!(back.spec.estimated_runtime.as_deref(), Some("90m"));

    // GpuQueue
    let queues: Api<GpuQueue> = Api::all(client.clone());
    let q: GpuQueue = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
        "metadata": {"name": format!("q-{suffix}")},
        "spec": {"namespaces": [ns], "privateQuota": {"gpus": 16}, "weight": 3,
                 "burst": {"enabled": true, "capacityTypes": ["spot", "on-demand"]},
                 "budget": {"monthlyUSD": 5000, "hourlyUSD": 40}},
    }))
    .unwrap();
    queues
        .create(&PostParams::default(), &q)
        .await
        .expect("valid GpuQueue");
    let back = queues.get(&format!("q-{suffix}")).await.unwrap();
    let burst = back.spec.burst.expect("burst kept");
    assert_eq!(burst.max_wait, "15m", "maxWait defaults to 15m");
    assert_eq!(back.spec.budget.and_then(|b| b.hourly_usd), Some(40.0));

    // ComputePool, both flavours.
    let pools: Api<ComputePool> = Api::all(client.clone());
    for spec in [
        json!({"private": {"nodeSelector": {"gpu": "yes"}, "gpuCostPerHour": 1.2}}),
        json!({"aws": {"region": "us-east-1", "amiId": "ami-12345678", "instanceTypes": ["p4d.24xlarge"],
                       "capacityTypes": ["spot"]}, "limits": {"maxNodes": 4, "maxHourlyUSD": 200}}),
    ] {
        let name = format!("pool-{}", spillway_tests::unique_name("p"));
        let p: ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        pools
            .create(&PostParams::default(), &p)
            .await
            .expect("valid ComputePool");
        let back = pools.get(&name).await.unwrap();
        assert_eq!(back.spec.idle_timeout, "10m", "idleTimeout defaults to 10m");
        assert_eq!(back.spec.private, p.spec.private);
        assert_eq!(back.spec.aws, p.spec.aws);
    }

    // Dataset
    let datasets: Api<Dataset> = Api::all(client.clone());
    let d: Dataset = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
        "metadata": {"name": format!("ds-{suffix}")},
        "spec": {"classification": "Confidential", "sizeGiB": 500, "egressUSDPerGiB": 0.09,
                 "locations": [{"environment": "private", "uri": "nfs://filer/imagenet"},
                               {"environment": "aws", "region": "us-east-1", "uri": "s3://b/imagenet"}]},
    }))
    .unwrap();
    datasets
        .create(&PostParams::default(), &d)
        .await
        .expect("valid Dataset");
    assert_eq!(
        datasets.get(&format!("ds-{suffix}")).await.unwrap().spec,
        d.spec
    );

    // BurstPolicy
    let policies: Api<BurstPolicy> = Api::all(client.clone());
    let bp: BurstPolicy = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
        "metadata": {"name": format!("bp-{suffix}")},
        "spec": {"rules": [
            {"name": "restricted-stays", "when": "job.datasets.exists(d, d.classification == 'Restricted')", "forbid": "cloud"},
            {"name": "urgent", "when": "job.priority >= 100", "maxWait": "2m"},
        ], "tests": [{"name": "urgent bursts early", "job": {"queue": "q", "gpusPerReplica": 1, "priority": 100},
                      "situation": {"waited": "3m"}, "expect": {"environment": "cloud", "rule": "urgent"}}]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &bp)
        .await
        .expect("valid BurstPolicy");
    let back = policies.get(&format!("bp-{suffix}")).await.unwrap();
    assert_eq!(back.spec, bp.spec);
}

#[tokio::test]
async fn schema_validation_rejects_bad_objects() {
    let (cluster, client) = setup().await;
    let ns = cluster.namespace(&client, "crd-reject").await.unwrap();

    // (name, spec overrides, the field the API server must name in its refusal)
    let bad_jobs = [
        ("zero", json!({"gpusPerReplica": 0}), "spec.gpusPerReplica"),
        (
            "seventeen",
            json!({"gpusPerReplica": 17}),
            "spec.gpusPerReplica",
        ),
        ("where", json!({"placement": "Anywhere"}), "spec.placement"),
        ("dur", json!({"maxRuntime": "4 hours"}), "spec.maxRuntime"),
        ("gang", json!({"replicas": 0}), "spec.replicas"),
        // A set: the server refuses the second copy.
        (
            "twice",
            json!({"gpuModels": ["A100", "A100"]}),
            "spec.gpuModels[1]",
        ),
        ("caps", json!({"queue": "Research"}), "spec.queue"),
        ("ds", json!({"datasets": ["Patients"]}), "spec.datasets"),
        (
            "empty",
            json!({"template": {"spec": {"containers": []}}}),
            "spec.template.spec.containers",
        ),
        (
            "nospec",
            json!({"template": {"metadata": {"labels": {"a": "b"}}}}),
            "spec.template.spec",
        ),
    ];
    for (name, overrides, field) in bad_jobs {
        let err = try_create(
            &client,
            "GpuJob",
            "gpujobs",
            Some(&ns),
            job_json(name, overrides.clone()),
        )
        .await
        .expect_err(&format!("{overrides} must be rejected"));
        assert!(err.contains(field), "{overrides}: {err}");
    }
    let err = try_create(
        &client,
        "GpuJob",
        "gpujobs",
        Some(&ns),
        job_json("where2", json!({"placement": "Anywhere"})),
    )
    .await
    .expect_err("unknown placement must be rejected");
    assert!(
        err.contains("Anywhere"),
        "the refusal names the bad value: {err}"
    );

    let pool = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
               "metadata": {"name": spillway_tests::unique_name(name)}, "spec": spec})
    };
    let both = pool(
        "both",
        json!({
            "private": {"nodeSelector": {"gpu": "yes"}},
            "aws": {"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g5.xlarge"]},
        }),
    );
    let err = try_create(&client, "ComputePool", "computepools", None, both)
        .await
        .expect_err("a pool with both private and aws must be rejected");
    assert!(
        err.contains("oneOf") || err.contains("exactly one"),
        "{err}"
    );

    let neither = pool("neither", json!({"idleTimeout": "5m"}));
    let err = try_create(&client, "ComputePool", "computepools", None, neither)
        .await
        .expect_err("a pool with neither private nor aws must be rejected");
    assert!(
        err.contains("oneOf") || err.contains("exactly one"),
        "{err}"
    );

    let no_image = pool(
        "noami",
        json!({"aws": {"region": "us-east-1", "instanceTypes": ["g5.xlarge"]}}),
    );
    let err = try_create(&client, "ComputePool", "computepools", None, no_image)
        .await
        .expect_err("an aws pool with neither amiId nor launchTemplate must be rejected");
    assert!(err.contains("spec.aws"), "{err}");

    // Formats and sets the schema states (checked by every supported version).
    for (name, aws, field) in [
        (
            "type",
            json!({"instanceTypes": ["g5"]}),
            "spec.aws.instanceTypes",
        ),
        (
            "types",
            json!({"instanceTypes": ["g5.xlarge", "g5.xlarge"]}),
            "spec.aws.instanceTypes[1]",
        ),
        ("img", json!({"amiId": "img-1"}), "spec.aws.amiId"),
    ] {
        let mut spec =
            json!({"region": "us-east-1", "amiId": "ami-1", "instanceTypes": ["g5.xlarge"]});
        for (k, v) in aws.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let err = try_create(
            &client,
            "ComputePool",
            "computepools",
            None,
            pool(name, json!({"aws": spec})),
        )
        .await
        .expect_err(&format!("{aws} must be rejected"));
        assert!(err.contains(field), "{aws}: {err}");
    }
    let twice = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy",
        "metadata": {"name": spillway_tests::unique_name("twice")},
        "spec": {"rules": [{"name": "r", "forbid": "cloud"}, {"name": "r", "maxWait": "1m"}]}});
    let err = try_create(&client, "BurstPolicy", "burstpolicies", None, twice)
        .await
        .expect_err("two rules of one name must be rejected");
    assert!(err.contains("spec.rules[1]"), "{err}");
    let endpoint = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
        "metadata": {"name": spillway_tests::unique_name("otlp")},
        "spec": {"telemetry": {"otlpEndpoint": "collector:4317"}}});
    let err = try_create(&client, "GpuQueue", "gpuqueues", None, endpoint)
        .await
        .expect_err("an endpoint that is not a URL must be rejected");
    assert!(err.contains("spec.telemetry.otlpEndpoint"), "{err}");

    let bad_class = json!({"apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
        "metadata": {"name": spillway_tests::unique_name("ds")},
        "spec": {"classification": "Secret"}});
    let err = try_create(&client, "Dataset", "datasets", None, bad_class)
        .await
        .expect_err("unknown classification must be rejected");
    assert!(err.contains("spec.classification"), "{err}");
}

#[tokio::test]
async fn real_scheduler_binds_a_gpu_pod_to_a_fake_node() {
    let (cluster, client) = setup().await;
    let ns = cluster.namespace(&client, "sched").await.unwrap();
    let kubelet = FakeKubelet::start(client.clone());
    let small = spillway_tests::unique_name("node-small");
    let big = spillway_tests::unique_name("node-big");
    let group = spillway_tests::unique_name("grp");
    kubelet
        .register(
            FakeNode::gpu(&small, 1)
                .model("A10G")
                .label("test-group", &group),
        )
        .await
        .unwrap();
    kubelet
        .register(
            FakeNode::gpu(&big, 8)
                .model("H100")
                .label("test-group", &group),
        )
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gpu-pod", "annotations": {RUN_SECONDS: "2", EXIT_CODE: "0"}},
        "spec": {
            "nodeSelector": {"test-group": group},
            "containers": [{"name": "c", "image": "pytorch:2",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let mut seen_running = false;
    let mut last = None;
    for _ in 0..300 {
        let p = pods.get("gpu-pod").await.unwrap();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        if phase == "Running" {
            seen_running = true;
        }
        if phase == "Succeeded" {
            assert_eq!(
                node.as_deref(),
                Some(big.as_str()),
                "two GPUs only fit the 8-GPU node"
            );
            assert!(
                seen_running,
                "the fake kubelet reports Running before Succeeded"
            );
            return;
        }
        last = Some((phase, node));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "pod did not succeed in 30 s; last seen {last:?}\n{}",
        cluster.logs()
    );
}

/// The fake kubelet keeps making a pod's status writes while they fail, as a kubelet keeps
/// syncing: a pod bound while every PATCH is answered 500 (reads and watches still work, so the
/// pod is seen once and never again) still becomes Running and then Succeeded. A kubelet that
/// gave up after one failed write left such a pod Pending for good (a chaos run's API-server
/// restart did that to one replica of a gang, which then held its GPUs forever).
#[tokio::test]
async fn fake_kubelet_makes_failed_status_writes_again() {
    let (cluster, client) = setup().await;
    let ns = cluster.namespace(&client, "kubelet-retry").await.unwrap();
    let proxy = ApiFaults::start(cluster, 7).await.unwrap();
    let kubelet = FakeKubelet::start(proxy.client().await.unwrap());
    let node = spillway_tests::unique_name("node-retry");
    kubelet.register(FakeNode::gpu(&node, 1)).await.unwrap();
    proxy.misbehave_on("PATCH", 500, 100, Duration::from_secs(6));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bound", "annotations": {RUN_SECONDS: "1"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "pytorch:2"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let mut last = String::new();
    for _ in 0..300 {
        let p = pods.get("bound").await.unwrap();
        last = p.status.and_then(|s| s.phase).unwrap_or_default();
        if last == "Succeeded" {
            let (_, failed) = proxy.counts();
            assert!(failed > 0, "no status write met a fault");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the pod is {last:?} 30 s after it was bound");
}

/// The operator manages only the workload kinds this API server serves: here (no JobSet,
/// Trainer or KubeRay CRDs) batch Jobs and pods; the others are skipped, not an error, and a
/// misspelt kind is.
#[tokio::test]
async fn workload_kinds_the_server_does_not_serve_are_skipped() {
    let (_cluster, client) = setup().await;
    let all: Vec<String> = [
        "batch/job",
        "pod",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "ray.io/rayjob",
    ]
    .map(String::from)
    .to_vec();
    let served = spillway_k8s::workloads::served(&client, &all)
        .await
        .expect("discovery");
    let names: Vec<&str> = served.iter().map(|k| k.integration()).collect();
    assert_eq!(names, ["batch/job", "pod"]);
    let err = spillway_k8s::workloads::served(&client, &["batch/jobs".to_string()])
        .await
        .err()
        .expect("a misspelt kind is refused");
    assert!(
        err.to_string().contains("unknown kind \"batch/jobs\""),
        "{err}"
    );
}
