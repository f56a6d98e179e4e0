//! Builders of the objects a turn reads, and readers of the actions it returns.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_cloud::{
    BoxFuture, CloudError, CloudInstance, CloudProvider, InstanceState, InstanceTypeInfo,
    LaunchRequest, SpotPrice,
};
use spillway_core::{CapacityType, Time};

use crate::actions::{Action, LaunchOrder, StatusKind};
use crate::cloud::{CloudConfig, CloudView, DEFAULT_CATALOG};
use crate::metrics::Metrics;
use crate::pods;
use crate::turn::{CloudInputs, State, Turn, TurnSettings};
use crate::world::Inputs;

pub const NS: &str = "team";

/// A moment, from RFC 3339.
pub fn at(s: &str) -> Time {
    let ts: k8s_openapi::jiff::Timestamp = s.parse().expect("an RFC 3339 time");
    Time::from_millis(ts.as_millisecond())
}

/// The tests' "now".
pub fn noon() -> Time {
    at("2026-03-10T12:00:00Z")
}

pub fn minutes(m: u64) -> spillway_core::Duration {
    spillway_core::Duration::from_secs(60 * m)
}

pub fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("a valid object"))
}

/// A GpuJob builder: queue `q`, one replica of one GPU, created a minute before noon.
pub struct J(pub Value);

pub fn job(name: &str) -> J {
    J(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-03-10T11:59:00Z", "generation": 1},
        "spec": {"queue": "q", "replicas": 1, "gpusPerReplica": 1,
                 "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}},
    }))
}

impl J {
    pub fn gpus(mut self, n: u32) -> J {
        self.0["spec"]["gpusPerReplica"] = json!(n);
        self
    }
    pub fn replicas(mut self, n: u32) -> J {
        self.0["spec"]["replicas"] = json!(n);
        self
    }
    pub fn restartable(mut self) -> J {
        self.0["spec"]["restartable"] = json!(true);
        self
    }
    pub fn datasets(mut self, d: &[&str]) -> J {
        self.0["spec"]["datasets"] = json!(d);
        self
    }
    pub fn status(mut self, s: Value) -> J {
        self.0["status"] = s;
        self
    }
    pub fn build(self) -> Arc<GpuJob> {
        from(self.0)
    }
}

pub fn queue(name: &str, spec: Value) -> Arc<GpuQueue> {
    from(json!({"metadata": {"name": name, "generation": 1}, "spec": spec}))
}

pub fn queue_with_status(name: &str, spec: Value, status: Value) -> Arc<GpuQueue> {
    from(json!({"metadata": {"name": name, "generation": 1}, "spec": spec, "status": status}))
}

/// A private pool selecting nodes labelled `pool=NAME`.
pub fn private_pool(name: &str) -> Arc<ComputePool> {
    from(json!({"metadata": {"name": name, "generation": 1},
                "spec": {"private": {"nodeSelector": {"pool": name}}}}))
}

/// An AWS pool of g6.xlarge (1 L4, 0.8048 USD/h on demand) and p4d.24xlarge.
pub fn aws_pool(name: &str, extra: Value) -> Arc<ComputePool> {
    let mut spec = json!({"aws": {"region": "us-east-1", "amiId": "ami-12345678",
                                  "instanceTypes": ["g6.xlarge", "p4d.24xlarge"],
                                  "capacityTypes": ["on-demand"]}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    from(json!({"metadata": {"name": name, "generation": 1}, "spec": spec}))
}

/// A Ready private node with `gpus` GPUs in pool `pool`.
pub fn node(name: &str, pool: &str, gpus: u32) -> Arc<Node> {
    from(json!({
        "metadata": {"name": name, "labels": {"pool": pool, "spillway.io/gpu-model": "A100-80GB"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// A Ready node of cloud pool `pool`, backed by `instance`.
pub fn cloud_node(name: &str, pool: &str, gpus: u32, instance: &str) -> Arc<Node> {
    from(json!({
        "metadata": {"name": name, "creationTimestamp": "2026-03-10T11:00:00Z",
                     "labels": {"spillway.io/pool": pool, "spillway.io/instance-id": instance,
                                "spillway.io/gpu-model": "L4"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// Replica `replica` of attempt `attempt` of `job`, bound to `node`, in `phase`.
pub fn pod(job: &GpuJob, attempt: u32, replica: u32, node: &str, phase: &str) -> Arc<Pod> {
    let mut p = pods::replica_pod(job, attempt, replica, node, None);
    p.metadata.uid = Some(format!(
        "pod-uid-{}",
        p.metadata.name.clone().unwrap_or_default()
    ));
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    p.status = Some(serde_json::from_value(json!({"phase": phase})).expect("pod status"));
    Arc::new(p)
}

pub fn dataset(name: &str, spec: Value) -> Arc<Dataset> {
    from(json!({"metadata": {"name": name, "generation": 1}, "spec": spec}))
}

pub fn policy(name: &str, rules: Value) -> Arc<BurstPolicy> {
    from(
        json!({"metadata": {"name": name, "generation": 1, "resourceVersion": "1"},
                "spec": {"rules": rules}}),
    )
}

/// A cloud provider that answers nothing: turns never call the cloud.
struct NoProvider;

fn refuse<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, CloudError>> {
    Box::pin(async { Err(CloudError::Other("no cloud in unit tests".into())) })
}

impl CloudProvider for NoProvider {
    fn instances<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        refuse()
    }
    fn instances_for_need<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        refuse()
    }
    fn launch<'a>(
        &'a self,
        _: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        refuse()
    }
    fn terminate<'a>(&'a self, _: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>> {
        refuse()
    }
    fn instance_types<'a>(
        &'a self,
        _: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceTypeInfo>, CloudError>> {
        refuse()
    }
    fn spot_prices<'a>(
        &'a self,
        _: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<SpotPrice>, CloudError>> {
        refuse()
    }
}

/// The cloud as a turn sees it: the bundled catalog, every region listed.
pub struct Cloudy {
    pub config: CloudConfig,
    pub view: CloudView,
}

pub fn cloud() -> Cloudy {
    let config = CloudConfig {
        cluster: "unit".into(),
        factory: Arc::new(|_region: String| {
            Box::pin(async { Arc::new(NoProvider) as Arc<dyn CloudProvider> })
        }),
        catalog: spillway_core::catalog::parse(DEFAULT_CATALOG).expect("bundled catalog"),
        poll: Duration::from_secs(15),
        join_timeout: Duration::from_secs(600),
        gc_grace: Duration::from_secs(120),
        capacity_cooldown: Duration::from_secs(300),
        join: None,
        notices: None,
    };
    Cloudy {
        config,
        view: CloudView {
            complete: true,
            ..CloudView::default()
        },
    }
}

impl Cloudy {
    /// Adds a running instance of `pool` for `need` (`namespace/job#attempt`).
    pub fn instance(
        &mut self,
        id: &str,
        pool: &str,
        need: &str,
        instance_type: &str,
        launched: Time,
    ) {
        let job = need.rsplit_once('#').map(|(j, _)| j).unwrap_or(need);
        self.view.instances.push(CloudInstance {
            id: id.into(),
            pool: pool.into(),
            job: job.into(),
            queue: "q".into(),
            need: need.into(),
            instance_type: instance_type.into(),
            capacity_type: CapacityType::OnDemand,
            zone: "us-east-1a".into(),
            state: InstanceState::Running,
            launched_at: launched,
            placement_group: String::new(),
        });
        self.view.regions.insert(id.into(), "us-east-1".into());
    }
}

/// A turn's state and metrics, kept across turns like the loop keeps them.
pub struct Loop {
    pub state: State,
    pub metrics: Metrics,
}

impl Loop {
    pub fn new() -> Loop {
        Loop::with(TurnSettings::default())
    }

    pub fn with(settings: TurnSettings) -> Loop {
        Loop {
            state: State::new(settings),
            metrics: Metrics::default(),
        }
    }

    pub fn turn(&mut self, inputs: &Inputs, cloud: Option<&Cloudy>, now: Time) -> Turn {
        let c = cloud.map(|c| CloudInputs {
            config: &c.config,
            view: &c.view,
        });
        self.state.turn(inputs.clone(), c, &self.metrics, now)
    }
}

/// The inputs of a cluster with queue `q` (bursting off) and private pool `onprem`.
/// This cluster's id in the tests (its kube-system's uid).
pub const HOME: &str = "home-cluster-uid";

pub fn cluster() -> Inputs {
    let kube_system =
        serde_json::from_value(json!({"metadata": {"name": "kube-system", "uid": HOME}}))
            .expect("namespace");
    Inputs {
        queues: vec![queue("q", json!({}))],
        pools: vec![private_pool("onprem")],
        namespaces: vec![Arc::new(kube_system)],
        ..Inputs::default()
    }
}

/// (job, pod name, node) of each pod created.
pub fn creates(t: &Turn) -> Vec<(String, String, String)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { job, pod } => Some((
                job.clone(),
                pod.metadata.name.clone().unwrap_or_default(),
                pod.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(crate::labels::NODE_ANNOTATION).cloned())
                    .unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

/// The status of `name` of `kind` the turn applies, if it applies one.
pub fn status_of(t: &Turn, kind: StatusKind, name: &str) -> Option<Value> {
    t.actions.iter().rev().find_map(|a| match a {
        Action::ApplyStatus(p) if p.kind == kind && p.name == name => {
            Some(p.body["status"].clone())
        }
        _ => None,
    })
}

/// A condition of a status: (status, reason, message).
pub fn condition(status: &Value, type_: &str) -> Option<(String, String, String)> {
    status["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == type_).then(|| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

/// (object name, reason, warning) of each Event.
pub fn events(t: &Turn) -> Vec<(String, String, bool)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish(n) => Some((
                n.regarding.name.clone().unwrap_or_default(),
                n.reason.clone(),
                n.warning,
            )),
            _ => None,
        })
        .collect()
}

pub fn launches(t: &Turn) -> Vec<&LaunchOrder> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(l) => Some(l.as_ref()),
            _ => None,
        })
        .collect()
}

/// Short names of the actions, in order, for readable assertions: `create_pod`, ...
pub fn kinds(t: &Turn) -> Vec<&'static str> {
    t.actions.iter().map(|a| a.kind().as_str()).collect()
}

/// A cluster pool `name` whose pods go to namespace `spillway-jobs` there, at `price` USD per
/// GPU-hour, declared lost after 10 minutes unreachable.
pub fn cluster_pool(name: &str, price: f64) -> Arc<ComputePool> {
    from(json!({"metadata": {"name": name, "generation": 1},
                "spec": {"cluster": {
                    "kubeconfigSecretRef": {"name": name, "namespace": "spillway-system"},
                    "namespace": "spillway-jobs", "gpuCostPerHour": price,
                    "lostAfter": "10m"}}}))
}

/// A node of another cluster, as that cluster names it.
pub fn remote_node(name: &str, gpus: u32) -> Arc<Node> {
    from(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1"},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// The pod a CreateRemotePod of the turn asked for, as the other cluster then shows it (bound
/// to its node, in `phase`).
pub fn seen_there(created: &Pod, phase: &str) -> Arc<Pod> {
    let mut p = created.clone();
    p.metadata.uid = Some(format!(
        "remote-uid-{}",
        p.metadata.name.clone().unwrap_or_default()
    ));
    p.metadata.resource_version = Some(phase.into());
    p.metadata.creation_timestamp = Some(crate::clock::k8s_time(noon()));
    let node = kube::ResourceExt::annotations(&p)[crate::labels::NODE_ANNOTATION].clone();
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some(node);
    }
    p.status = Some(serde_json::from_value(json!({"phase": phase})).expect("pod status"));
    Arc::new(p)
}

/// The pods the turn creates in other clusters: (pool, pod).
pub fn remote_creates(t: &Turn) -> Vec<(String, Pod)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateRemotePod { pool, pod, .. } => Some((pool.clone(), (**pod).clone())),
            _ => None,
        })
        .collect()
}

/// (pod, grace seconds) of each pod the turn evicts.
pub fn evictions(t: &Turn) -> Vec<(String, i64)> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::EvictPod {
                name,
                grace_seconds,
                ..
            } => Some((name.clone(), *grace_seconds)),
            _ => None,
        })
        .collect()
}

/// A launch of one g6.xlarge (0.8048 USD/h) for `need` of queue `q`, as the executor took it.
pub fn launch_of(need: &str) -> spillway_core::Launch {
    spillway_core::Launch {
        job: need.split_once('#').map_or(need, |(j, _)| j).into(),
        queue: "q".into(),
        need: need.into(),
        offering: spillway_core::OfferingChoice {
            pool: "aws".into(),
            instance_type: "g6.xlarge".into(),
            capacity_type: spillway_core::CapacityType::OnDemand,
            region: "us-east-1".into(),
            zone: "use1-az1".into(),
            hourly_price: 0.8048,
            gpus_per_instance: 1,
        },
        count: 1,
        together: false,
    }
}
