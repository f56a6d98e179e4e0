//! The executor's effects in the operator: each action as Kubernetes API and cloud calls.
//!
//! Every call is preceded by a fence check, so a replica that stopped leading sends nothing
//! more. Outcomes that mean the work is done count as success: a pod that already exists
//! (created before a restart), a pod, node or job already gone.

mod remote;

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_core::{self as core};
use tokio::sync::Notify;

use crate::actions::{Action, LaunchOrder, Note, SecretApply, StatusKind, StatusPatch};
use crate::cloud::Cloud;
use crate::error::Error;
use crate::executor::{Effects, Fence};
use crate::metrics::Metrics;
use crate::remote::Remotes;
use crate::{bootstrap, labels};

/// Where Events about cluster-scoped objects go.
pub const CLUSTER_EVENTS_NAMESPACE: &str = "kube-system";

/// Effects on the cluster and the cloud.
pub struct KubeEffects {
    client: Client,
    /// This replica's name in Events.
    instance: String,
    recorder: Recorder,
    cloud: Option<Arc<Cloud>>,
    metrics: Arc<Metrics>,
    /// Notified when a launch ends, so the loop turns at once.
    changed: Arc<Notify>,
    /// The connections to the other clusters of cluster pools.
    remotes: Remotes,
}

impl KubeEffects {
    pub fn new(
        client: Client,
        instance: &str,
        cloud: Option<Arc<Cloud>>,
        metrics: Arc<Metrics>,
        changed: Arc<Notify>,
        remotes: Remotes,
    ) -> KubeEffects {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: labels::CONTROLLER.into(),
                instance: Some(instance.to_string()),
            },
        );
        KubeEffects {
            client,
            instance: instance.to_string(),
            recorder,
            cloud,
            metrics,
            changed,
            remotes,
        }
    }

    /// The client of cluster pool `pool`'s other cluster.
    fn remote(&self, pool: &str) -> Result<Client, Error> {
        self.remotes
            .client(pool)
            .ok_or_else(|| Error::Remote(format!("no connection to cluster pool {pool:?}")))
    }

    /// Records an API write's result; `done` outcomes count as ok.
    fn wrote<T>(
        &self,
        kind: &'static str,
        r: Result<T, kube::Error>,
        done: &[u16],
    ) -> Result<(), Error> {
        let r = match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if done.contains(&s.code) => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        };
        self.metrics.api_write(kind, r.is_ok());
        r
    }

    async fn create_pod(&self, client: &Client, pod: &Pod, fence: &Fence) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(
            client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let params = PostParams {
            field_manager: Some(labels::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        fence.check()?;
        match api.create(&params, pod).await {
            // Already there: created before a restart; the caches will show it.
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                self.metrics.api_write("pod", true);
                Ok(())
            }
            r => self.wrote("pod", r, &[]),
        }
    }

    /// Deletes a pod if it is still the one with `uid`, with `grace_seconds` to stop (the
    /// pod's own grace period when `None`).
    async fn delete_pod(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        uid: &str,
        grace_seconds: Option<i64>,
        fence: &Fence,
    ) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            grace_period_seconds: grace_seconds.map(|g| g.clamp(0, u32::MAX as i64) as u32),
            ..DeleteParams::background()
        };
        fence.check()?;
        // 404: gone already; 409: a new pod of the same name (not ours to delete).
        let r = api.delete(name, &params).await;
        self.wrote("pod-delete", r, &[404, 409])
    }

    async fn apply_status(&self, p: &StatusPatch, fence: &Fence) -> Result<(), Error> {
        let params = PatchParams::apply(labels::FIELD_MANAGER).force();
        let patch = Patch::Apply(&p.body);
        // Dynamic objects: the answer is not read as the kind's type, so the status of an
        // object that cannot be read as its type can still be written.
        let resource = match p.kind {
            StatusKind::GpuJob => ApiResource::erase::<GpuJob>(&()),
            StatusKind::GpuQueue => ApiResource::erase::<GpuQueue>(&()),
            StatusKind::ComputePool => ApiResource::erase::<ComputePool>(&()),
            StatusKind::Dataset => ApiResource::erase::<Dataset>(&()),
            StatusKind::BurstPolicy => ApiResource::erase::<BurstPolicy>(&()),
        };
        let api: Api<DynamicObject> = match &p.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        fence.check()?;
        let r = api.patch_status(&p.name, &params, &patch).await;
        // The object was deleted meanwhile: nothing to write.
        self.wrote("status", r, &[404])
    }

    async fn publish(&self, n: &Note, fence: &Fence) -> Result<(), Error> {
        if n.regarding.namespace.is_none() {
            return self.publish_cluster_scoped(n, fence).await;
        }
        let ev = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.clone(),
            note: Some(truncate(&n.note, 1000)),
            action: n.action.clone(),
            secondary: None,
        };
        fence.check()?;
        let r = self.recorder.publish(&ev, &n.regarding).await;
        self.wrote("event", r, &[])
    }

    /// An Event about a cluster-scoped object (a GpuQueue, ComputePool, Dataset or
    /// BurstPolicy) goes to `kube-system`, named by the operator (kube's recorder would put it
    /// in `default`), where `kubectl events -n kube-system` and the docs look for it.
    async fn publish_cluster_scoped(&self, n: &Note, fence: &Fence) -> Result<(), Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        );
        // Named like kube's recorder names Events (`object.unique`); API servers before 1.22
        // refuse a `generateName` ending in a dot.
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "{}.{unique:x}",
            n.regarding.name.as_deref().unwrap_or("object")
        );
        let ev = K8sEvent {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                namespace: Some(CLUSTER_EVENTS_NAMESPACE.into()),
                ..Default::default()
            },
            action: Some(n.action.clone()),
            reason: Some(n.reason.clone()),
            note: Some(truncate(&n.note, 1000)),
            type_: Some(if n.warning { "Warning" } else { "Normal" }.into()),
            regarding: Some(n.regarding.clone()),
            event_time: Some(now),
            reporting_controller: Some(labels::CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), CLUSTER_EVENTS_NAMESPACE);
        fence.check()?;
        let r = api.create(&PostParams::default(), &ev).await;
        self.wrote("event", r, &[])
    }

    async fn apply_secret(
        &self,
        client: &Client,
        secret: &SecretApply,
        fence: &Fence,
    ) -> Result<(), Error> {
        let api: Api<Secret> = Api::namespaced(client.clone(), secret.namespace());
        let mut body = (*secret.0).clone();
        body.metadata.managed_fields = None;
        let value = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": body.metadata, "type": body.type_, "data": body.data,
        });
        fence.check()?;
        let r = api
            .patch(
                secret.name(),
                &PatchParams::apply(labels::FIELD_MANAGER).force(),
                &Patch::Apply(&value),
            )
            .await;
        self.wrote("secret", r, &[])
    }

    /// A ledger (spend, indicators), by server-side apply of its data (the chart creates the
    /// ConfigMap; the operator only patches it).
    async fn record_ledger(&self, cm: &ConfigMap, fence: &Fence) -> Result<(), Error> {
        let namespace = cm.metadata.namespace.as_deref().unwrap_or_default();
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let value = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": cm.data,
        });
        fence.check()?;
        let r = api
            .patch(
                name,
                &PatchParams::apply(labels::FIELD_MANAGER).force(),
                &Patch::Apply(&value),
            )
            .await;
        self.wrote("configmap", r, &[])
    }

    /// A launch, as the `spillway.provision` span of the job's trace (the EC2 calls are its
    /// children).
    async fn launch(&self, order: &LaunchOrder, fence: &Fence) -> Result<(), Error> {
        use tracing::Instrument;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let l = &order.launch;
        let span = tracing::info_span!(
            "spillway.provision",
            otel.status_code = tracing::field::Empty,
            spillway.job = %l.job,
            spillway.need = %l.need,
            spillway.pool = %l.offering.pool,
            spillway.offering.instance_type = %l.offering.instance_type,
            spillway.offering.capacity_type = %l.offering.capacity_type.as_str(),
            spillway.offering.zone = %l.offering.zone,
            spillway.count = l.count,
            error.type = tracing::field::Empty,
        );
        let (trace, _) = crate::telemetry::of_job(&order.job);
        let _ = span.set_parent(crate::otel::context_of(&trace));
        let r = self
            .launch_in_span(order, fence)
            .instrument(span.clone())
            .await;
        if let Err(e) = &r {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.category().as_str());
        }
        r
    }

    async fn launch_in_span(&self, order: &LaunchOrder, fence: &Fence) -> Result<(), Error> {
        let Some(cloud) = &self.cloud else {
            return Ok(());
        };
        let l = &order.launch;
        tracing::info!(job = %l.job, need = %l.need, instance_type = %l.offering.instance_type,
            capacity = %l.offering.capacity_type.as_str(), count = l.count, "launching");
        // No instance without the finalizer that releases it when the job is deleted. A launch
        // is not retried by the executor, so a conflict with our own status writes is retried
        // here (each attempt reads the job afresh).
        let ns = order.job.namespace().unwrap_or_default();
        let mut attempt = 0;
        loop {
            match set_finalizer(&self.client, &ns, &order.job.name_any(), true, fence).await {
                Ok(()) => break,
                Err(e) if e.status_code() == Some(409) && attempt < 5 => {
                    attempt += 1;
                }
                Err(e) => {
                    self.metrics.api_write("finalizer", false);
                    return Err(e);
                }
            }
        }
        self.metrics.api_write("finalizer", true);
        let user_data = join_material(&self.client, cloud, &order.pool, l, fence).await?;
        fence.check()?;
        let r = cloud.launch(&order.pool, l, user_data, &self.changed).await;
        self.metrics.cloud_call("launch", r.is_ok());
        let list = r?;
        let ids: Vec<&str> = list.iter().map(|i| i.id.as_str()).collect();
        let group = list.first().map_or("", |i| i.placement_group.as_str());
        tracing::info!(job = %l.job, need = %l.need, instances = ?ids, placement_group = group, "launched");
        Ok(())
    }

    async fn cordon(&self, node: &str, fence: &Fence) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cordon = serde_json::json!({"spec": {"unschedulable": true}});
        fence.check()?;
        let r = nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&cordon))
            .await;
        self.wrote("node-cordon", r, &[404])
    }

    /// Cordons and taints a node warned of by the interruption queue, with its annotations:
    /// read afresh, written over its version (a conflict is read and written again).
    async fn mark_node(
        &self,
        node: &str,
        value: &str,
        annotations: &std::collections::BTreeMap<String, String>,
        fence: &Fence,
    ) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut last = None;
        for _ in 0..3 {
            fence.check()?;
            let Some(n) = nodes.get_opt(node).await? else {
                return Ok(());
            };
            let patch = crate::interruptions::mark_patch(&n, value, annotations);
            let Some(patch) = patch else {
                return Ok(());
            };
            fence.check()?;
            match nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 409 => last = Some(kube::Error::Api(e)),
                r => return self.wrote("node-mark", r, &[404]),
            }
        }
        match last {
            Some(e) => self.wrote("node-mark", Err::<(), _>(e), &[]),
            None => Ok(()),
        }
    }

    async fn delete_node(&self, node: &str, fence: &Fence) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        fence.check()?;
        let r = nodes.delete(node, &DeleteParams::default()).await;
        self.wrote("node-delete", r, &[404])
    }

    async fn terminate(
        &self,
        instance: &str,
        node: Option<&str>,
        why: &str,
        fence: &Fence,
    ) -> Result<(), Error> {
        let Some(cloud) = &self.cloud else {
            return Ok(());
        };
        // Only instances the poller listed are retired, so their region is known; an unknown
        // one waits for the next listing rather than being asked of region "".
        let Some(region) = cloud.region_of(instance) else {
            return Err(Error::Cloud(spillway_cloud::CloudError::Other(format!(
                "instance {instance} is not listed yet"
            ))));
        };
        tracing::info!(instance, node, why, "terminating");
        fence.check()?;
        let r = cloud.terminate(&region, &[instance.to_string()]).await;
        self.metrics.cloud_call("terminate", r.is_ok());
        r?;
        if let Some(n) = node {
            self.delete_node(n, fence).await?;
        }
        Ok(())
    }
}

impl Effects for KubeEffects {
    fn accept(&self, action: &Action) -> bool {
        match (action, &self.cloud) {
            (Action::Launch(l), Some(cloud)) => cloud.start_launch(&l.launch),
            (Action::Terminate { instance, .. }, Some(cloud)) => cloud.start_terminate(instance),
            (Action::DeletePlacementGroup { name, .. }, Some(cloud)) => {
                cloud.start_group_delete(name)
            }
            (
                Action::Launch(_) | Action::Terminate { .. } | Action::DeletePlacementGroup { .. },
                None,
            ) => false,
            _ => true,
        }
    }

    fn run<'a>(&'a self, action: &'a Action, fence: &'a Fence) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            match action {
                Action::CreatePod { pod, .. } => self.create_pod(&self.client, pod, fence).await,
                Action::DeletePod {
                    namespace,
                    name,
                    uid,
                } => {
                    self.delete_pod(&self.client, namespace, name, uid, None, fence)
                        .await
                }
                Action::EvictPod {
                    namespace,
                    name,
                    uid,
                    grace_seconds,
                } => {
                    let grace = Some(*grace_seconds);
                    self.delete_pod(&self.client, namespace, name, uid, grace, fence)
                        .await
                }
                Action::CreateRemotePod { pool, pod, .. } => {
                    self.create_remote_pod(&self.remote(pool)?, pod, fence)
                        .await
                }
                Action::DeleteRemotePod {
                    pool,
                    namespace,
                    name,
                    uid,
                    grace_seconds,
                } => {
                    let client = self.remote(pool)?;
                    self.delete_pod(&client, namespace, name, uid, *grace_seconds, fence)
                        .await
                }
                Action::CreateRemoteCopy { pool, copy, .. } => {
                    self.create_remote_copy(&self.remote(pool)?, copy, fence)
                        .await
                }
                Action::DeleteRemoteCopy {
                    pool,
                    namespace,
                    name,
                    uid,
                } => {
                    let client = self.remote(pool)?;
                    self.delete_remote_copy(&client, (namespace, name, uid), fence)
                        .await
                }
                Action::ApplyRemoteSecret { pool, secret } => {
                    self.apply_secret(&self.remote(pool)?, secret, fence).await
                }
                Action::DeleteRemoteSecret {
                    pool,
                    namespace,
                    name,
                } => {
                    let api: Api<Secret> = Api::namespaced(self.remote(pool)?, namespace);
                    fence.check()?;
                    let r = api.delete(name, &DeleteParams::default()).await;
                    self.wrote("secret-delete", r.map(|_| ()), &[404])
                }
                Action::ApplyStatus(p) => self.apply_status(p, fence).await,
                Action::Publish(n) => self.publish(n, fence).await,
                Action::Launch(order) => self.launch(order, fence).await,
                Action::Cordon { node } => self.cordon(node, fence).await,
                Action::MarkNode {
                    node,
                    value,
                    annotations,
                } => self.mark_node(node, value, annotations, fence).await,
                Action::DeleteNotice { message } => {
                    let Some(cloud) = &self.cloud else {
                        return Ok(());
                    };
                    fence.check()?;
                    let r = cloud.delete_message(message).await;
                    self.metrics.cloud_call("delete_notice", r.is_ok());
                    Ok(r?)
                }
                Action::Terminate {
                    instance,
                    node,
                    why,
                } => self.terminate(instance, node.as_deref(), why, fence).await,
                Action::DeletePlacementGroup { region, name } => {
                    let Some(cloud) = &self.cloud else {
                        return Ok(());
                    };
                    tracing::info!(group = %name, region = %region, "deleting placement group");
                    fence.check()?;
                    let r = cloud.delete_placement_group(region, name).await;
                    self.metrics.cloud_call("delete_placement_group", r.is_ok());
                    Ok(r?)
                }
                Action::DeleteNode { node, why } => {
                    tracing::info!(node = %node, why = %why, "deleting node");
                    self.delete_node(node, fence).await
                }
                Action::PatchFinalizer {
                    namespace,
                    name,
                    add,
                } => {
                    let r = set_finalizer(&self.client, namespace, name, *add, fence).await;
                    self.metrics.api_write("finalizer", r.is_ok());
                    r
                }
                Action::ApplySecret(secret) => self.apply_secret(&self.client, secret, fence).await,
                Action::RecordSpend(cm) | Action::RecordIndicators(cm) => {
                    self.record_ledger(cm, fence).await
                }
                Action::Span(record) => {
                    crate::otel::record(record);
                    Ok(())
                }
                Action::ApplyWorkloadJob(job) => {
                    fence.check()?;
                    let r = crate::workloads::apply_gpu_job(&self.client, job).await;
                    self.wrote("workload_job", r, &[404])
                }
                Action::PatchWorkload(p) => {
                    fence.check()?;
                    tracing::info!(kind = %p.kind, namespace = %p.namespace, name = %p.name, what = p.what, "patching a workload");
                    let r = crate::workloads::patch(&self.client, p).await;
                    self.wrote("workload", r, &[404])
                }
                Action::PinPod {
                    namespace,
                    name,
                    patch,
                    ..
                } => {
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                    fence.check()?;
                    let params = PatchParams {
                        field_manager: Some(crate::labels::FIELD_MANAGER.into()),
                        ..PatchParams::default()
                    };
                    let r = api.patch(name, &params, &Patch::Merge(patch)).await;
                    if let Err(kube::Error::Api(e)) = &r
                        && e.code == 422
                    {
                        tracing::warn!(namespace = %namespace, pod = %name, error = %e.message, "the API server refuses to pin this gated pod (its own required node affinity cannot be narrowed to the placement's nodes); it stays gated");
                    }
                    // Gone, or changed since it was read (the next turn reads it again); refused
                    // as invalid (asking again would be refused again).
                    self.wrote("pod_pin", r, &[404, 409, 422])
                }
                Action::Annotate {
                    namespace,
                    name,
                    key,
                    value,
                } => {
                    let api: Api<GpuJob> = Api::namespaced(self.client.clone(), namespace);
                    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
                    fence.check()?;
                    let r = api
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                    // A job deleted meanwhile needs nothing.
                    self.wrote("annotation", r, &[404])
                }
            }
        })
    }

    fn abandon(&self, action: &Action) {
        match (action, &self.cloud) {
            (Action::Launch(l), Some(cloud)) => cloud.cancel_launch(&l.launch.need),
            (Action::Terminate { instance, .. }, Some(cloud)) => cloud.cancel_terminate(instance),
            (Action::DeletePlacementGroup { name, .. }, Some(cloud)) => {
                cloud.cancel_group_delete(name)
            }
            _ => {}
        }
    }
}

/// Adds or removes the cloud finalizer of a GpuJob. It reads the job afresh and writes with its
/// `resourceVersion`, so a concurrent change (our own status writes included) makes it fail
/// with a conflict instead of losing a finalizer; the executor then retries, reading again.
/// A job that is gone needs nothing.
async fn set_finalizer(
    client: &Client,
    namespace: &str,
    name: &str,
    add: bool,
    fence: &Fence,
) -> Result<(), Error> {
    let api: Api<GpuJob> = Api::namespaced(client.clone(), namespace);
    fence.check()?;
    let Some(current) = api.get_opt(name).await? else {
        return if add {
            Err(crate::error::api_error(
                404,
                "NotFound",
                &format!("GpuJob {namespace}/{name} is gone"),
            ))
        } else {
            Ok(())
        };
    };
    let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
    let has = finalizers.iter().any(|f| f == labels::CLOUD_FINALIZER);
    if has == add {
        return Ok(());
    }
    if add {
        finalizers.push(labels::CLOUD_FINALIZER.to_string());
    } else {
        finalizers.retain(|f| f != labels::CLOUD_FINALIZER);
    }
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": current.metadata.resource_version,
    }});
    fence.check()?;
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 && !add => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// A bootstrap token for the launch (a Secret expiring at the join timeout) and the rendered
/// user data, when the pool gets user data and the join address is known.
async fn join_material(
    client: &Client,
    cloud: &Cloud,
    pool: &ComputePool,
    launch: &core::Launch,
    fence: &Fence,
) -> Result<Option<String>, Error> {
    let Some(join) = &cloud.config.join else {
        return Ok(None);
    };
    if !bootstrap::needs_token(pool) {
        return Ok(None);
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let expires =
        crate::clock::now() + core::Duration::from_secs(cloud.config.join_timeout.as_secs());
    let token = loop {
        let token = bootstrap::Token::generate().map_err(|e| Error::Token(e.to_string()))?;
        let secret = bootstrap::token_secret(&token, &launch.need, expires);
        fence.check()?;
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => break token,
            // A token id already taken: draw another.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(Error::Kube(e)),
        }
    };
    Ok(bootstrap::user_data(
        pool,
        join,
        &token,
        &cloud.config.cluster,
        &cloud.gpu_model(&launch.offering.instance_type),
    ))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
