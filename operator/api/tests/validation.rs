//! Each validation rule, with the field path it reports.

use serde_json::{Value, json};
use spillway_api::validate::{self, FieldErrors};
use spillway_api::{BurstPolicySpec, ComputePoolSpec, DatasetSpec, GpuJobSpec, GpuQueueSpec};

fn merged(mut base: Value, overrides: Value) -> Value {
    if let (Some(b), Some(o)) = (base.as_object_mut(), overrides.as_object()) {
        for (k, v) in o {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

fn job(overrides: Value) -> GpuJobSpec {
    let base = json!({
        "queue": "research",
        "gpusPerReplica": 8,
        "template": {"spec": {"containers": [{"name": "train", "image": "pytorch:2"}]}},
    });
    serde_json::from_value(merged(base, overrides)).expect("job spec JSON")
}

fn queue(overrides: Value) -> GpuQueueSpec {
    serde_json::from_value(merged(json!({}), overrides)).expect("queue spec JSON")
}

fn pool(spec: Value) -> ComputePoolSpec {
    serde_json::from_value(spec).expect("pool spec JSON")
}

fn dataset(spec: Value) -> DatasetSpec {
    serde_json::from_value(spec).expect("dataset spec JSON")
}

fn policy(spec: Value) -> BurstPolicySpec {
    serde_json::from_value(spec).expect("policy spec JSON")
}

/// The (path, message) pairs of a failed validation.
fn errors(result: Result<(), FieldErrors>) -> Vec<(String, String)> {
    match result {
        Ok(()) => Vec::new(),
        Err(e) => e.0.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// Asserts exactly one error, at `path`, whose message contains `needle`.
#[track_caller]
fn assert_one(result: Result<(), FieldErrors>, path: &str, needle: &str) {
    let errs = errors(result);
    assert_eq!(errs.len(), 1, "expected one error at {path}, got {errs:?}");
    assert_eq!(errs[0].0, path, "{errs:?}");
    assert!(
        errs[0].1.contains(needle),
        "message {:?} should mention {needle:?}",
        errs[0].1
    );
}

#[test]
fn a_minimal_job_is_valid() {
    assert_eq!(errors(validate::gpu_job(&job(json!({})))), vec![]);
}

#[test]
fn job_rules() {
    assert_one(
        validate::gpu_job(&job(json!({"queue": "Research Team"}))),
        "spec.queue",
        "not a valid name",
    );
    assert_one(
        validate::gpu_job(&job(json!({"replicas": 0}))),
        "spec.replicas",
        "between 1 and 1024, got 0",
    );
    assert_one(
        validate::gpu_job(&job(json!({"replicas": 90000}))),
        "spec.replicas",
        "between 1 and 1024, got 90000",
    );
    assert_one(
        validate::gpu_job(&job(json!({"gpusPerReplica": 0}))),
        "spec.gpusPerReplica",
        "between 1 and 16",
    );
    assert_one(
        validate::gpu_job(&job(json!({"gpusPerReplica": 17}))),
        "spec.gpusPerReplica",
        "between 1 and 16",
    );
    assert_one(
        validate::gpu_job(&job(json!({"gpuModels": ["H100", " "]}))),
        "spec.gpuModels[1]",
        "empty",
    );
    assert_one(
        validate::gpu_job(&job(json!({"gpuModels": ["H100", "H100"]}))),
        "spec.gpuModels[1]",
        "duplicate",
    );
    assert_one(
        validate::gpu_job(&job(json!({"datasets": ["ImageNet"]}))),
        "spec.datasets[0]",
        "not a valid name",
    );
    assert_one(
        validate::gpu_job(&job(json!({"datasets": ["a", "a"]}))),
        "spec.datasets[1]",
        "duplicate",
    );
    assert_one(
        validate::gpu_job(&job(json!({"estimatedRuntime": "90 minutes"}))),
        "spec.estimatedRuntime",
        "invalid duration",
    );
    assert_one(
        validate::gpu_job(&job(json!({"maxRuntime": "4hours"}))),
        "spec.maxRuntime",
        "unknown unit",
    );
    assert_one(
        validate::gpu_job(&job(json!({"maxRuntime": "0"}))),
        "spec.maxRuntime",
        "longer than 0",
    );
    assert_one(
        validate::gpu_job(&job(json!({"estimatedRuntime": "5h", "maxRuntime": "4h"}))),
        "spec.estimatedRuntime",
        "exceeds maxRuntime",
    );
    assert_one(
        validate::gpu_job(&job(json!({"maxHourlyCost": -1.0}))),
        "spec.maxHourlyCost",
        ">= 0",
    );
    assert_one(
        validate::gpu_job(&job(json!({"template": {}}))),
        "spec.template.spec.containers",
        "at least one container",
    );
}

#[test]
fn job_reports_every_problem_at_once() {
    let errs = errors(validate::gpu_job(&job(
        json!({"replicas": 0, "gpusPerReplica": 32, "maxRuntime": "x"}),
    )));
    let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec!["spec.replicas", "spec.gpusPerReplica", "spec.maxRuntime"]
    );
}

#[test]
fn queue_rules() {
    assert_eq!(
        errors(validate::gpu_queue(&queue(
            json!({"namespaces": ["ml"], "burst": {"enabled": true}})
        ))),
        vec![]
    );
    assert_one(
        validate::gpu_queue(&queue(
            json!({"namespaces": ["ml"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}),
        )),
        "spec.namespaceSelector",
        "not both",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"namespaces": ["ML"]}))),
        "spec.namespaces[0]",
        "not a valid name",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"privateQuota": {"gpus": -2}}))),
        "spec.privateQuota.gpus",
        ">= 0",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"weight": 0}))),
        "spec.weight",
        "at least 1",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"burst": {"maxWait": "soon"}}))),
        "spec.burst.maxWait",
        "invalid duration",
    );
    assert_one(
        validate::gpu_queue(&queue(
            json!({"burst": {"capacityTypes": ["spot", "spot"]}}),
        )),
        "spec.burst.capacityTypes[1]",
        "duplicate",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"burst": {"computeWaitFactor": -0.5}}))),
        "spec.burst.computeWaitFactor",
        ">= 0",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"budget": {"hourlyUSD": -5}}))),
        "spec.budget.hourlyUSD",
        ">= 0",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"budget": {"monthlyUSD": -5}}))),
        "spec.budget.monthlyUSD",
        ">= 0",
    );
    assert_one(
        validate::gpu_queue(&queue(
            json!({"budget": {"monthlyUSD": 100, "hourlyUSD": 101}}),
        )),
        "spec.budget.hourlyUSD",
        "within the hour",
    );
    assert_one(
        validate::gpu_queue(&queue(
            json!({"telemetry": {"otlpEndpoint": "http://collector :4317"}}),
        )),
        "spec.telemetry.otlpEndpoint",
        "URL",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"idle": {"threshold": 120}}))),
        "spec.idle.threshold",
        "between 0 and 100",
    );
    assert_one(
        validate::gpu_queue(&queue(json!({"idle": {"after": "half an hour"}}))),
        "spec.idle.after",
        "half an hour",
    );
    assert!(
        errors(validate::gpu_queue(&queue(
            json!({"idle": {"threshold": 5, "after": "30m", "action": "Suspend", "allowExempt": false}})
        )))
        .is_empty()
    );
}

fn aws(overrides: Value) -> Value {
    json!({"aws": merged(json!({"region": "us-east-1", "amiId": "ami-0abc", "instanceTypes": ["g5.xlarge"]}), overrides)})
}

#[test]
fn pool_rules() {
    assert_eq!(
        errors(validate::compute_pool(&pool(aws(json!({}))))),
        vec![]
    );
    assert_eq!(
        errors(validate::compute_pool(&pool(
            json!({"private": {"nodeSelector": {"gpu": "yes"}}})
        ))),
        vec![]
    );
    let both = json!({"private": {"nodeSelector": {"gpu": "yes"}}, "aws": aws(json!({}))["aws"]});
    assert_one(
        validate::compute_pool(&pool(both)),
        "spec",
        "exactly one of private, aws and cluster",
    );
    assert_one(
        validate::compute_pool(&pool(json!({}))),
        "spec",
        "exactly one of private, aws and cluster",
    );
    let cluster = |overrides: Value| {
        json!({"cluster": merged(json!({
            "kubeconfigSecretRef": {"name": "dc2", "namespace": "spillway-system"},
            "namespace": "gpu-jobs",
            "gpuCostPerHour": 0.0,
        }), overrides)})
    };
    assert_eq!(
        errors(validate::compute_pool(&pool(cluster(json!({}))))),
        vec![]
    );
    assert_one(
        validate::compute_pool(&pool(cluster(json!({"namespace": "Gpu.Jobs"})))),
        "spec.cluster.namespace",
        "not a valid name",
    );
    assert_one(
        validate::compute_pool(&pool(cluster(json!({"namespace": "gpu.jobs"})))),
        "spec.cluster.namespace",
        "not a namespace name",
    );
    assert_one(
        validate::compute_pool(&pool(cluster(json!({"gpuCostPerHour": -1.0})))),
        "spec.cluster.gpuCostPerHour",
        "at least 0",
    );
    assert_one(
        validate::compute_pool(&pool(cluster(
            json!({"kubeconfigSecretRef": {"name": " ", "namespace": "spillway-system"}}),
        ))),
        "spec.cluster.kubeconfigSecretRef.name",
        "must not be empty",
    );
    assert_one(
        validate::compute_pool(&pool(json!({"private": {}}))),
        "spec.private.nodeSelector",
        "every node",
    );
    assert_one(
        validate::compute_pool(&pool(
            json!({"private": {"nodeSelector": {"a": "b"}, "gpuCostPerHour": -1}}),
        )),
        "spec.private.gpuCostPerHour",
        ">= 0",
    );
    assert_one(
        validate::compute_pool(&pool(aws(json!({"region": ""})))),
        "spec.aws.region",
        "empty",
    );
    let no_image = json!({"aws": {"region": "us-east-1", "instanceTypes": ["g5.xlarge"]}});
    assert_one(
        validate::compute_pool(&pool(no_image)),
        "spec.aws",
        "amiId or launchTemplate",
    );
    assert_one(
        validate::compute_pool(&pool(aws(json!({"amiId": "ubuntu"})))),
        "spec.aws.amiId",
        "not an AMI id",
    );
    let lt = json!({"aws": {"region": "us-east-1", "instanceTypes": ["g5.xlarge"], "launchTemplate": {"id": "lt-1", "name": "gpu"}}});
    assert_one(
        validate::compute_pool(&pool(lt)),
        "spec.aws.launchTemplate",
        "exactly one of id and name",
    );
    assert_one(
        validate::compute_pool(&pool(aws(json!({"instanceTypes": []})))),
        "spec.aws.instanceTypes",
        "at least one",
    );
    assert_one(
        validate::compute_pool(&pool(aws(json!({"instanceTypes": ["p4d"]})))),
        "spec.aws.instanceTypes[0]",
        "not an EC2 instance type",
    );
    assert_one(
        validate::compute_pool(&pool(aws(
            json!({"instanceTypes": ["g5.xlarge", "g5.xlarge"]}),
        ))),
        "spec.aws.instanceTypes[1]",
        "duplicate",
    );
    assert_one(
        validate::compute_pool(&pool(aws(
            json!({"capacityTypes": ["on-demand", "on-demand"]}),
        ))),
        "spec.aws.capacityTypes[1]",
        "duplicate",
    );
    assert_one(
        validate::compute_pool(&pool(aws(json!({"interruptionQueue": "spillway-notices"})))),
        "spec.aws.interruptionQueue",
        "not an SQS queue URL",
    );
    assert_one(
        validate::compute_pool(&pool(aws(
            json!({"rebalance": "Replace", "rebalanceDeadline": "soon"}),
        ))),
        "spec.aws.rebalanceDeadline",
        "soon",
    );
    assert!(
        errors(validate::compute_pool(&pool(aws(json!({
            "interruptionQueue": "https://sqs.us-east-1.amazonaws.com/123456789012/spillway",
            "ownsInterruptionQueue": true, "rebalance": "Replace", "rebalanceDeadline": "10m"
        })))))
        .is_empty()
    );
    let mut limits = aws(json!({}));
    limits["limits"] = json!({"maxNodes": -1});
    assert_one(
        validate::compute_pool(&pool(limits)),
        "spec.limits.maxNodes",
        ">= 0",
    );
    let mut idle = aws(json!({}));
    idle["idleTimeout"] = json!("ten minutes");
    assert_one(
        validate::compute_pool(&pool(idle)),
        "spec.idleTimeout",
        "invalid duration",
    );
    let mut taint = aws(json!({}));
    taint["nodeTaints"] = json!([{"key": "gpu", "effect": "NoWay"}]);
    assert_one(
        validate::compute_pool(&pool(taint)),
        "spec.nodeTaints[0].effect",
        "NoSchedule",
    );
    let mut otlp = aws(json!({}));
    otlp["telemetry"] = json!({"otlpEndpoint": "collector:4317"});
    assert_one(
        validate::compute_pool(&pool(otlp)),
        "spec.telemetry.otlpEndpoint",
        "http://",
    );
}

#[test]
fn dataset_rules() {
    let ok = json!({"classification": "Internal", "locations": [{"environment": "aws", "region": "us-east-1"}]});
    assert_eq!(errors(validate::dataset(&dataset(ok))), vec![]);
    let no_region = json!({"classification": "Public", "locations": [{"environment": "private"}, {"environment": "aws"}]});
    assert_one(
        validate::dataset(&dataset(no_region)),
        "spec.locations[1].region",
        "needs a region",
    );
    assert_one(
        validate::dataset(&dataset(json!({"classification": "Public", "sizeGiB": -3}))),
        "spec.sizeGiB",
        ">= 0",
    );
    assert_one(
        validate::dataset(&dataset(
            json!({"classification": "Public", "egressUSDPerGiB": -0.1}),
        )),
        "spec.egressUSDPerGiB",
        ">= 0",
    );
}

#[test]
fn policy_rules() {
    let ok = json!({"rules": [{"name": "a", "forbid": "cloud"}, {"name": "b", "maxWait": "5m"}]});
    assert_eq!(errors(validate::burst_policy(&policy(ok))), vec![]);
    assert_one(
        validate::burst_policy(&policy(json!({"rules": [{"name": " "}]}))),
        "spec.rules[0].name",
        "empty",
    );
    assert_one(
        validate::burst_policy(&policy(json!({"rules": [{"name": "a"}, {"name": "a"}]}))),
        "spec.rules[1].name",
        "duplicate rule name",
    );
    assert_one(
        validate::burst_policy(&policy(
            json!({"rules": [{"name": "a", "forbid": "cloud", "require": "cloud"}]}),
        )),
        "spec.rules[0]",
        "forbids and requires cloud",
    );
    assert_one(
        validate::burst_policy(&policy(
            json!({"rules": [{"name": "a", "maxWait": "5 min"}]}),
        )),
        "spec.rules[0].maxWait",
        "invalid duration",
    );
    assert_one(
        validate::burst_policy(&policy(
            json!({"rules": [{"name": "a", "maxHourlyCost": -1}]}),
        )),
        "spec.rules[0].maxHourlyCost",
        ">= 0",
    );
    assert_one(
        validate::burst_policy(&policy(
            json!({"rules": [{"name": "a", "allowClassifications": ["Confidential", "Restricted"]}]}),
        )),
        "spec.rules[0].allowClassifications[1]",
        "never leaves",
    );
    let tests = json!({"tests": [
        {"name": "t", "job": {}, "expect": {}},
        {"name": "t", "job": {}, "expect": {}},
    ]});
    assert_one(
        validate::burst_policy(&policy(tests)),
        "spec.tests[1].name",
        "duplicate test name",
    );
}

#[test]
fn requirements_and_image_environments_are_checked() {
    let ok = json!({"requirements": {"minDriverVersion": "550.54.15", "minCudaVersion": "12.4",
        "gpuProducts": ["*A100*"], "minGpuMemoryGiB": 80}});
    assert_eq!(errors(validate::gpu_job(&job(ok))), vec![]);
    assert_one(
        validate::gpu_job(&job(json!({"requirements": {"minCudaVersion": "12.x"}}))),
        "spec.requirements.minCudaVersion",
        "\"12.x\" is not a version",
    );
    assert_one(
        validate::gpu_job(&job(
            json!({"requirements": {"gpuProducts": ["*A100*", "*A100*"]}}),
        )),
        "spec.requirements.gpuProducts[1]",
        "duplicate value",
    );
    assert_one(
        validate::gpu_job(&job(json!({"requirements": {"minGpuMemoryGiB": 0}}))),
        "spec.requirements.minGpuMemoryGiB",
        "between 1 and 4096, got 0",
    );
    assert_one(
        validate::compute_pool(&pool(aws(
            json!({"environment": {"driverVersion": "550.54", "cudaVersion": "twelve"}}),
        ))),
        "spec.aws.environment.cudaVersion",
        "is not a version",
    );
    let converted = spillway_api::convert::job(
        &spillway_api::GpuJob::new(
            "a",
            job(json!({"requirements": {"minDriverVersion": "550.54", "gpuProducts": ["*H100*"]}})),
        ),
        spillway_core::Time::from_millis(0),
    )
    .unwrap();
    assert_eq!(
        converted.requirements.min_driver.map(|v| v.to_string()),
        Some("550.54".into())
    );
    assert_eq!(converted.requirements.gpu_products, ["*H100*"]);
}

#[test]
fn topology_rules() {
    assert_eq!(
        errors(validate::gpu_job(&job(
            json!({"topology": {"required": "spillway.io/rack"}})
        ))),
        vec![]
    );
    assert_one(
        validate::gpu_job(&job(
            json!({"topology": {"required": "a", "preferred": "b"}}),
        )),
        "spec.topology",
        "exactly one of required and preferred",
    );
    assert_one(
        validate::gpu_job(&job(json!({"topology": {}}))),
        "spec.topology",
        "exactly one",
    );
    assert_one(
        validate::gpu_job(&job(json!({"topology": {"preferred": "rack/"}}))),
        "spec.topology.preferred",
        "not a label key",
    );
    assert_one(
        validate::gpu_job(&job(json!({"topology": {"required": "Not A/rack"}}))),
        "spec.topology.required",
        "prefix",
    );
    let private = |levels: Value| {
        pool(json!({"private": {"nodeSelector": {"pool": "a"}, "topology": {"levels": levels}}}))
    };
    assert_eq!(
        errors(validate::compute_pool(&private(json!([
            "spillway.io/block",
            "spillway.io/rack",
            "kubernetes.io/hostname"
        ])))),
        vec![]
    );
    assert_one(
        validate::compute_pool(&private(json!([]))),
        "spec.private.topology.levels",
        "1 to 8 levels",
    );
    assert_one(
        validate::compute_pool(&private(json!(["rack", "rack"]))),
        "spec.private.topology.levels[1]",
        "duplicate",
    );
    assert_one(
        validate::compute_pool(&private(json!(["-rack"]))),
        "spec.private.topology.levels[0]",
        "not a label key",
    );
}
