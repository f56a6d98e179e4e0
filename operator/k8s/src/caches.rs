//! The watch caches (kube-runtime reflectors) and what one turn reads from them.
//!
//! Spillway's own kinds are read through `DeserializeGuard`, so one object that does not fit
//! its type cannot stop a watch: it is kept aside as [`Unreadable`] and reported on.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, Node, Pod, PodSpec, PodStatus, ResourceRequirements, Secret,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{DeserializeGuard, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::workloads::WorkloadKind;
use crate::world::{Inputs, Unreadable};

/// The watch caches, shared by the loop and the readiness check.
#[derive(Clone)]
pub struct Caches {
    pub jobs: Store<DeserializeGuard<GpuJob>>,
    pub queues: Store<DeserializeGuard<GpuQueue>>,
    pub pools: Store<DeserializeGuard<ComputePool>>,
    pub datasets: Store<DeserializeGuard<Dataset>>,
    pub policies: Store<DeserializeGuard<BurstPolicy>>,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub namespaces: Store<Namespace>,
    /// The identity issuer's keys Secret (a watch on that one Secret of the operator's
    /// namespace; no other Secret is read).
    pub keys: Option<Store<Secret>>,
    /// The spend ledger ConfigMap (a watch on that one ConfigMap of the operator's namespace).
    pub spend: Option<Store<ConfigMap>>,
    /// The indicator ledger ConfigMap (likewise).
    pub indicators: Option<Store<ConfigMap>>,
    /// The labelled workloads of each kind Spillway manages (`--integrations`): only those
    /// carrying `spillway.io/queue` are listed and watched.
    pub workloads: Vec<Store<DynamicObject>>,
    /// Whether labelled plain pods are managed (integration `pod`): their groups are read
    /// from the pods cache.
    pub pod_groups: bool,
}

/// A watch on the workloads of `kind` labelled with a queue.
fn spawn_workloads(
    client: &Client,
    kind: &'static dyn WorkloadKind,
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<DynamicObject> {
    let resource = crate::workloads::api_resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let writer = reflector::store::Writer::new(resource);
    let reader = writer.as_reader();
    let config = watcher::Config::default().labels(crate::workloads::QUEUE_LABEL);
    let stream = watcher(api, config)
        .default_backoff()
        .modify(move |o: &mut DynamicObject| {
            o.metadata.managed_fields = None;
            // A list's items carry no apiVersion and kind: the watch's kind is theirs.
            o.types = Some(kube::core::TypeMeta {
                api_version: crate::workloads::api_version_of(kind),
                kind: kind.kind().to_string(),
            });
        })
        .reflect(writer);
    tasks.push(tokio::spawn(drain(
        stream,
        move || changed.notify_one(),
        kind.kind().to_string(),
    )));
    reader
}

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: Arc<Notify>,
    strip: fn(&mut K),
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer);
    tasks.push(tokio::spawn(drain(
        stream,
        move || changed.notify_one(),
        K::kind(&()).into_owned(),
    )));
    reader
}

/// Tells the loop (`on_change`) after every change the store shows: an object applied or
/// deleted, or a list done. A list (at start, and again whenever a watch cannot resume, as
/// after an API-server restart) reaches the store only at its `InitDone`, when the reflector
/// swaps it in. Waking the loop on its objects (`InitApply`, as `touched_objects` does) and
/// not on `InitDone` let a turn read the store before the swap and nothing wake the loop
/// after it: found by the API-server-restart chaos test, where pods that finished while the
/// server was away stayed Running in the cache until the resync.
async fn drain<S, K>(stream: S, on_change: impl Fn(), kind: String)
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                on_change()
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(e) => tracing::warn!(kind = %kind, error = %e, "watch error (retrying)"),
        }
    }
}

fn strip_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Of a pod that is not Spillway's, the cache keeps only what the turn reads of it: its
/// name, uid, version and deletion, its node, its phase, and the GPUs its containers ask for
/// (their names and `nvidia.com/gpu` limits and requests). Spillway's own pods (labelled with
/// their job, or owned by a GpuJob) are kept whole but for `managedFields`. In a cluster of
/// 50,000 ordinary pods this is most of the operator's memory (docs/performance.md).
pub fn strip_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    let ours = p
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(crate::labels::JOB_LABEL))
        || p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crate::labels::NODE_ANNOTATION))
        || p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "GpuJob" && o.api_version.starts_with("spillway.io/"))
        || crate::workloads::pod_group::opted_in(p);
    if ours {
        return;
    }
    let meta = std::mem::take(&mut p.metadata);
    p.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    };
    fn gpus_only(c: Container) -> Option<Container> {
        let keep = |m: Option<BTreeMap<String, Quantity>>| {
            m.and_then(|m| m.get(crate::labels::GPU_RESOURCE).cloned())
                .map(|q| BTreeMap::from([(crate::labels::GPU_RESOURCE.to_string(), q)]))
        };
        let r = c.resources?;
        let resources = ResourceRequirements {
            limits: keep(r.limits),
            requests: keep(r.requests),
            ..ResourceRequirements::default()
        };
        (resources.limits.is_some() || resources.requests.is_some()).then(|| Container {
            name: c.name,
            resources: Some(resources),
            ..Container::default()
        })
    }
    if let Some(spec) = p.spec.take() {
        let init: Vec<Container> = (spec.init_containers.into_iter().flatten())
            .filter_map(gpus_only)
            .collect();
        p.spec = Some(PodSpec {
            node_name: spec.node_name,
            containers: spec.containers.into_iter().filter_map(gpus_only).collect(),
            init_containers: (!init.is_empty()).then_some(init),
            ..PodSpec::default()
        });
    }
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        ..PodStatus::default()
    });
}

fn strip_guard<K: Resource>(o: &mut DeserializeGuard<K>) {
    if let Ok(k) = o.0.as_mut() {
        k.meta_mut().managed_fields = None;
    }
}

/// A watch on the one object `namespace/name` (RBAC may grant it by name: the list and watch
/// select it with `metadata.name`).
fn one_named<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    changed: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    spawn_reflector(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        changed.clone(),
        strip_meta,
        tasks,
    )
}

impl Caches {
    /// Starts one watch per kind; `changed` is notified on every change. The watch tasks are
    /// returned for the caller to stop.
    /// `keys` names the identity issuer's Secret (namespace, name), when there is one;
    /// `ledgers` the spend and the indicator ledger ConfigMaps.
    pub fn start(
        client: &Client,
        changed: Arc<Notify>,
        keys: Option<(&str, &str)>,
        ledgers: [Option<(&str, &str)>; 2],
        integrations: &[&'static dyn WorkloadKind],
    ) -> (Caches, Vec<JoinHandle<()>>) {
        let [spend, indicators] = ledgers;
        let c = &changed;
        let all = watcher::Config::default;
        let mut t = Vec::new();
        let caches = Caches {
            jobs: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            queues: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            pools: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            datasets: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            policies: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_guard,
                &mut t,
            ),
            nodes: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_meta,
                &mut t,
            ),
            pods: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_pod,
                &mut t,
            ),
            namespaces: spawn_reflector(
                Api::all(client.clone()),
                all(),
                c.clone(),
                strip_meta,
                &mut t,
            ),
            keys: keys.map(|(ns, name)| one_named(client, ns, name, c, &mut t)),
            spend: spend.map(|(ns, name)| one_named(client, ns, name, c, &mut t)),
            indicators: indicators.map(|(ns, name)| one_named(client, ns, name, c, &mut t)),
            workloads: (integrations.iter())
                .filter(|k| k.integration() != crate::workloads::PodGroup.integration())
                .map(|k| spawn_workloads(client, *k, c.clone(), &mut t))
                .collect(),
            pod_groups: (integrations.iter())
                .any(|k| k.integration() == crate::workloads::PodGroup.integration()),
        };
        (caches, t)
    }

    /// Waits until every cache has listed once.
    pub async fn ready(&self) -> Result<(), Error> {
        let e = |e: reflector::store::WriterDropped| Error::Caches(e.to_string());
        self.jobs.wait_until_ready().await.map_err(e)?;
        self.queues.wait_until_ready().await.map_err(e)?;
        self.pools.wait_until_ready().await.map_err(e)?;
        self.datasets.wait_until_ready().await.map_err(e)?;
        self.policies.wait_until_ready().await.map_err(e)?;
        self.nodes.wait_until_ready().await.map_err(e)?;
        self.pods.wait_until_ready().await.map_err(e)?;
        self.namespaces.wait_until_ready().await.map_err(e)?;
        if let Some(keys) = &self.keys {
            keys.wait_until_ready().await.map_err(e)?;
        }
        for ledger in [&self.spend, &self.indicators].into_iter().flatten() {
            ledger.wait_until_ready().await.map_err(e)?;
        }
        for w in &self.workloads {
            w.wait_until_ready().await.map_err(e)?;
        }
        Ok(())
    }

    /// The cloud pools that can be read (the cloud poller lists their regions).
    pub fn pools(&self) -> Vec<Arc<ComputePool>> {
        readable(&self.pools, "ComputePool", &mut Vec::new())
    }

    /// What the caches hold, for one turn. `copies` keeps the previous turn's copy of each
    /// unchanged GpuJob and GpuQueue (by uid and resourceVersion): a turn does not deep-copy
    /// every job and its pod template, and a job's view kept from the last turn
    /// ([`crate::world::Memo`]) finds the very objects it was derived from.
    pub fn inputs(&self, copies: &mut Copies) -> Inputs {
        let mut unreadable = Vec::new();
        let jobs = readable_kept(&self.jobs, "GpuJob", &mut copies.jobs, &mut unreadable);
        let queues = readable_kept(
            &self.queues,
            "GpuQueue",
            &mut copies.queues,
            &mut unreadable,
        );
        let pods = self.pods.state();
        let mut workloads: Vec<_> = self.workloads.iter().flat_map(|w| w.state()).collect();
        if self.pod_groups {
            let groups = crate::workloads::pod_group::groups_kept(&pods, &mut copies.groups);
            workloads.extend(groups);
        }
        Inputs {
            jobs,
            queues,
            pools: readable(&self.pools, "ComputePool", &mut unreadable),
            datasets: readable(&self.datasets, "Dataset", &mut unreadable),
            policies: readable(&self.policies, "BurstPolicy", &mut unreadable),
            nodes: self.nodes.state(),
            pods,
            namespaces: self.namespaces.state(),
            identity_keys: self.keys.as_ref().and_then(|k| k.state().first().cloned()),
            spend_record: self.spend.as_ref().and_then(|k| k.state().first().cloned()),
            indicator_record: (self.indicators.as_ref()).and_then(|k| k.state().first().cloned()),
            workloads,
            unreadable,
            ..Inputs::default()
        }
    }
}

/// The readable copies of the last turn's GpuJobs and GpuQueues, by uid and resourceVersion, and
/// its pod groups.
#[derive(Debug, Default)]
pub struct Copies {
    jobs: HashMap<(String, String), Arc<GpuJob>>,
    queues: HashMap<(String, String), Arc<GpuQueue>>,
    /// Pod groups by uid ([`crate::workloads::pod_group::groups_kept`]).
    groups: crate::hashing::HashMap<String, Arc<DynamicObject>>,
}

fn unreadable_of<K>(kind: &'static str, g: &DeserializeGuard<K>) -> Option<Unreadable> {
    let bad = g.0.as_ref().err()?;
    Some(Unreadable {
        kind,
        namespace: bad.metadata.namespace.clone(),
        name: bad.metadata.name.clone()?,
        uid: bad.metadata.uid.clone(),
        generation: bad.metadata.generation,
        error: bad.error.to_string(),
    })
}

fn readable<K: Clone>(
    store: &Store<DeserializeGuard<K>>,
    kind: &'static str,
    unreadable: &mut Vec<Unreadable>,
) -> Vec<Arc<K>>
where
    DeserializeGuard<K>: Resource<DynamicType = ()>,
{
    let mut out = Vec::new();
    for g in store.state() {
        match &g.0 {
            Ok(k) => out.push(Arc::new(k.clone())),
            Err(_) => unreadable.extend(unreadable_of(kind, &g)),
        }
    }
    out
}

/// [`readable`], handing out the last turn's copy of each object whose version is the same.
fn readable_kept<K: Clone + Resource>(
    store: &Store<DeserializeGuard<K>>,
    kind: &'static str,
    cache: &mut HashMap<(String, String), Arc<K>>,
    unreadable: &mut Vec<Unreadable>,
) -> Vec<Arc<K>>
where
    DeserializeGuard<K>: Resource<DynamicType = ()>,
{
    let mut next = HashMap::with_capacity(cache.len());
    let mut out = Vec::new();
    for g in store.state() {
        let Ok(k) = g.0.as_ref() else {
            unreadable.extend(unreadable_of(kind, &g));
            continue;
        };
        let meta = k.meta();
        let key = (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        );
        let arc = cache.remove(&key).unwrap_or_else(|| Arc::new(k.clone()));
        next.insert(key, arc.clone());
        out.push(arc);
    }
    *cache = next;
    out
}

impl Inputs {
    /// Objects read from the watch caches, per kind (readable or not).
    pub fn cached(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut n = std::collections::BTreeMap::from([
            ("GpuJob", self.jobs.len()),
            ("GpuQueue", self.queues.len()),
            ("ComputePool", self.pools.len()),
            ("Dataset", self.datasets.len()),
            ("BurstPolicy", self.policies.len()),
            ("Node", self.nodes.len()),
            ("Pod", self.pods.len()),
            ("Namespace", self.namespaces.len()),
            ("Workload", self.workloads.len()),
        ]);
        for u in &self.unreadable {
            *n.entry(u.kind).or_default() += 1;
        }
        n
    }
}

#[cfg(test)]
#[path = "caches_strip_tests.rs"]
mod strip_tests;

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures::stream;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::drain;

    fn pod(phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    /// What the store shows each time the loop is woken, for a list, a watch event, and a
    /// list again (a watch that could not resume): the last wake-up must see the last list.
    #[tokio::test]
    async fn the_loop_is_woken_once_a_list_is_in_the_store() {
        let (reader, writer) = reflector::store::<Pod>();
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("Pending"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(pod("Running"))),
            Ok(Event::Init),
            Ok(Event::InitApply(pod("Succeeded"))),
            Ok(Event::InitDone),
        ];
        let seen: Mutex<Vec<Vec<String>>> = Mutex::default();
        let look = || {
            let phases = reader
                .state()
                .iter()
                .filter_map(|p| p.status.as_ref()?.phase.clone())
                .collect();
            seen.lock().expect("seen").push(phases);
        };
        drain(stream::iter(events).reflect(writer), look, "Pod".into()).await;
        assert_eq!(
            seen.into_inner().expect("seen"),
            [vec!["Pending"], vec!["Running"], vec!["Succeeded"]]
        );
    }

    fn queue(version: &str) -> kube::core::DeserializeGuard<spillway_api::GpuQueue> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": "q", "uid": "u", "resourceVersion": version}, "spec": {},
        }))
        .expect("queue")
    }

    /// A turn gets the last turn's copy of an object whose version did not change (the views
    /// kept across turns compare objects by identity), and a new copy of one that changed.
    #[test]
    fn an_unchanged_queue_is_handed_out_as_the_same_copy() {
        let (reader, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(queue("1")));
        let mut copies = std::collections::HashMap::new();
        let mut unreadable = Vec::new();
        let mut read =
            |copies: &mut _| super::readable_kept(&reader, "GpuQueue", copies, &mut unreadable);
        let first = read(&mut copies);
        let again = read(&mut copies);
        assert!(std::sync::Arc::ptr_eq(&first[0], &again[0]));
        writer.apply_watcher_event(&Event::Apply(queue("2")));
        let changed = read(&mut copies);
        assert!(!std::sync::Arc::ptr_eq(&first[0], &changed[0]));
        assert_eq!(changed[0].metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(copies.len(), 1, "the old version's copy is dropped");
    }
}
