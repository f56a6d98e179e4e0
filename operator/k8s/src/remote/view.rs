//! The home view of another cluster's nodes and pods, and the other way round: what the turn
//! lays over the home caches so that the world, the core and a job's lifecycle read a remote
//! job like any other, and what a pod built at home becomes when it is created there.
//!
//! - A remote node is seen as `POOL/NODE` (a `/` is never in a Kubernetes node name, so it
//!   cannot be mistaken for a home node), labelled with its pool. While its cluster does not
//!   answer it is seen unschedulable (no new job goes there); once that has lasted the pool's
//!   `lostAfter`, it is not seen at all: its jobs are lost with it, as with a lost node.
//! - A cluster this operator has not listed yet (it started while that API server was away)
//!   is an unseen pool of [`Inputs::unseen_pools`] until it lists or its `lostAfter` has
//!   passed since the first failure: its jobs are kept as their status says.
//! - A remote pod (labelled with its GpuJob's uid and home namespace) is seen in the job's
//!   home namespace, owned by the job, on its `POOL/NODE`, and annotated with where it really
//!   is ([`origin`]); one whose uid no GpuJob has is garbage.
//! - Pure: unit tests give it literal objects.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use spillway_api::GpuJob;
use spillway_core::Time;

use super::{RemoteCluster, RemoteState};
use crate::hashing::HashMap;
use crate::labels::{self, node_name};
use crate::world::Inputs;

/// This (home) cluster's id, on everything the operator makes in other clusters: the uid of
/// its `kube-system` Namespace, the same for every replica and for the cluster's whole life.
/// `None` until the namespaces cache holds it.
pub fn home_cluster_id(inputs: &Inputs) -> Option<String> {
    inputs
        .namespaces
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some("kube-system"))
        .and_then(|n| n.metadata.uid.clone())
}

/// The name of a replica's pod in another cluster: the job's name (shortened to fit), the first
/// eight characters of the job's uid (so jobs of the same name in two home namespaces, or two
/// home clusters, never share a name there), the attempt and the replica.
pub fn remote_pod_name(job: &str, uid: &str, attempt: u32, replica: u32) -> String {
    let tail = format!("-{}-{attempt}-{replica}", uid.get(..8).unwrap_or(uid));
    let room = 253usize.saturating_sub(tail.len());
    let mut head = job.get(..room.min(job.len())).unwrap_or(job).to_string();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    format!("{head}{tail}")
}

/// The name of a workload's copy in another cluster: the job's name (shortened so that the
/// Job controller's label of the copy's name on its pods fits 63 characters), the first eight
/// characters of the job's uid, and the attempt.
pub fn remote_copy_name(job: &str, uid: &str, attempt: u32) -> String {
    let tail = format!("-{}-{attempt}", uid.get(..8).unwrap_or(uid));
    let room = 63usize.saturating_sub(tail.len());
    let mut head = job.get(..room.min(job.len())).unwrap_or(job).to_string();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    format!("{head}{tail}")
}

/// The Secret that holds one job's identity token in another cluster (one Secret per job, so
/// no pod there can mount another job's token), under [`REMOTE_TOKEN_KEY`].
pub fn remote_token_secret(job_uid: &str) -> String {
    format!("spillway-token-{job_uid}")
}

/// The key of the token in [`remote_token_secret`].
pub const REMOTE_TOKEN_KEY: &str = "token";

/// Where the home view of a remote pod is: its cluster pool and its namespace there.
pub fn origin(pod: &Pod) -> Option<(String, String)> {
    let a = pod.metadata.annotations.as_ref()?;
    Some((
        a.get(labels::CLUSTER_ANNOTATION)?.clone(),
        a.get(labels::REMOTE_NAMESPACE_ANNOTATION)?.clone(),
    ))
}

/// The home view of node `node` of cluster pool `pool`.
pub fn home_node(pool: &str, node: &Node, schedulable: bool) -> Node {
    let mut n = node.clone();
    n.metadata.name = Some(node_name(pool, &node.name_any()));
    n.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(labels::POOL_LABEL.into(), pool.into());
    if !schedulable {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    }
    n
}

/// The home view of a pod of cluster pool `pool`, when it is one of Spillway's (labelled with
/// its job, the job's uid and home namespace).
pub fn home_pod(pool: &str, pod: &Pod) -> Option<Pod> {
    let l = pod.metadata.labels.as_ref()?;
    let uid = l.get(labels::JOB_UID_LABEL)?.clone();
    let namespace = l.get(labels::JOB_NAMESPACE_LABEL)?.clone();
    let job = l.get(labels::JOB_LABEL)?.clone();
    let mut p = pod.clone();
    let there = p.metadata.namespace.replace(namespace).unwrap_or_default();
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: GpuJob::api_version(&()).into_owned(),
        kind: GpuJob::kind(&()).into_owned(),
        name: job,
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    let a = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
    a.insert(labels::CLUSTER_ANNOTATION.into(), pool.into());
    a.insert(labels::REMOTE_NAMESPACE_ANNOTATION.into(), there);
    if let Some(n) = a.get_mut(labels::NODE_ANNOTATION) {
        *n = node_name(pool, n);
    }
    if let Some(n) = p.spec.as_mut().and_then(|s| s.node_name.as_mut()) {
        *n = node_name(pool, n);
    }
    Some(p)
}

/// A replica's pod built at home (on the remote node's own name) as it is created in the
/// other cluster's `namespace`, by the home cluster `home`:
/// - named by [`remote_pod_name`] (unique per home job there);
/// - no owner reference (the GpuJob is not there, and that cluster's garbage collector would
///   delete a pod whose owner it cannot find), and the job's uid, home namespace and the home
///   cluster's id as labels instead;
/// - no ServiceAccount token of that cluster (`automountServiceAccountToken: false`) and its
///   namespace's `default` ServiceAccount: the job holds no credential there.
pub fn remote_pod(mut pod: Pod, job: &GpuJob, namespace: &str, home: &str) -> Pod {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let l = pod.labels().clone();
    let number = |k: &str| l.get(k).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    pod.metadata.name = Some(remote_pod_name(
        &job.name_any(),
        &uid,
        number(labels::ATTEMPT_LABEL),
        number(labels::REPLICA_LABEL),
    ));
    pod.metadata.namespace = Some(namespace.into());
    pod.metadata.owner_references = None;
    let l = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    l.insert(labels::JOB_UID_LABEL.into(), uid);
    l.insert(
        labels::JOB_NAMESPACE_LABEL.into(),
        job.namespace().unwrap_or_default(),
    );
    l.insert(labels::HOME_CLUSTER_LABEL.into(), home.into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.service_account_name = None;
        spec.service_account = None;
        spec.automount_service_account_token = Some(false);
    }
    pod
}

/// What the overlay found besides the nodes and pods it laid over the inputs.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// Each cluster pool's connection, by pool.
    pub states: BTreeMap<String, RemoteState>,
    /// Nodes seen per pool (all of them, schedulable or not), and their GPUs.
    pub capacity: BTreeMap<String, (u32, u32)>,
    /// Pods this cluster made in other clusters whose GpuJob is gone (by uid), with their pool
    /// and namespace there.
    pub orphans: Vec<(String, String, Arc<Pod>)>,
    /// This cluster's id ([`home_cluster_id`]), once known.
    pub home: Option<String>,
    /// This cluster's copies of workloads in the pools' clusters whose GpuJob exists.
    pub copies: Vec<RemoteCopy>,
    /// Copies whose GpuJob is gone, or left in a place a pool no longer uses.
    pub orphan_copies: Vec<RemoteCopy>,
    /// The cluster pools that take no copy of a workload, and why.
    pub refuses_copies: BTreeMap<String, String>,
    /// The cluster pools whose copies are not known yet ([`RemoteCluster::jobs_known`]).
    pub copies_unseen: std::collections::BTreeSet<String>,
}

/// A copy of a workload this cluster made in another (a batch Job labelled like the pods).
#[derive(Clone, Debug)]
pub struct RemoteCopy {
    /// The pool (or retiring place) its deletion goes through.
    pub pool: String,
    /// Its namespace and name there, and its uid.
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Its GpuJob's uid and the attempt it runs.
    pub job_uid: String,
    pub attempt: Option<u32>,
    pub object: Arc<k8s_openapi::api::batch::v1::Job>,
}

impl RemoteCopy {
    fn of(pool: &str, job: &Arc<k8s_openapi::api::batch::v1::Job>) -> Option<RemoteCopy> {
        let l = job.metadata.labels.as_ref()?;
        Some(RemoteCopy {
            pool: pool.to_string(),
            namespace: job.namespace().unwrap_or_default(),
            name: job.name_any(),
            uid: job.metadata.uid.clone()?,
            job_uid: l.get(labels::JOB_UID_LABEL)?.clone(),
            attempt: l.get(labels::ATTEMPT_LABEL).and_then(|a| a.parse().ok()),
            object: job.clone(),
        })
    }
}

/// Whether an object there, labelled `l`, was made by this cluster (`home`) for pool `pool`:
/// another home cluster's is neither seen nor collected; one from before the id label existed
/// is this cluster's when one of its jobs has its uid (`known`).
fn ours(l: &BTreeMap<String, String>, pool: &str, home: &Option<String>, known: bool) -> bool {
    l.get(labels::POOL_LABEL).map(String::as_str) == Some(pool)
        && match (l.get(labels::HOME_CLUSTER_LABEL), home) {
            (Some(theirs), Some(home)) => theirs == home,
            (Some(_), None) => false,
            (None, _) => known,
        }
}

/// Whether `pod` is run by one of `copies` (its controller is a Job among them): its copy's
/// deletion takes it, so it is not collected on its own.
fn run_by_copy(pod: &Pod, copies: &[Arc<k8s_openapi::api::batch::v1::Job>]) -> bool {
    pod.owner_references().iter().any(|o| {
        o.controller == Some(true)
            && o.kind == "Job"
            && copies
                .iter()
                .any(|j| j.metadata.uid.as_deref() == Some(&o.uid))
    })
}

/// The home views made at the last turn, by what they were made from, so that an unchanged
/// remote object is handed out as the same copy (the jobs' views are kept across turns by
/// the identity of what they were derived from).
#[derive(Debug, Default)]
pub struct Translations {
    nodes: HashMap<(String, String, bool), Arc<Node>>,
    pods: HashMap<(String, String), Arc<Pod>>,
}

fn version_key<K: Resource>(o: &K) -> String {
    format!(
        "{}#{}",
        o.meta().uid.as_deref().unwrap_or_default(),
        o.meta().resource_version.as_deref().unwrap_or_default()
    )
}

/// Lays the nodes and pods of `inputs.remote` over the home ones (see the module
/// documentation). Clusters whose pool is not a readable cluster pool are left out.
pub fn overlay(inputs: &mut Inputs, kept: &mut Translations, now: Time) -> Overlay {
    let mut out = Overlay {
        home: home_cluster_id(inputs),
        ..Overlay::default()
    };
    let mut next = Translations::default();
    // The jobs whose pods there are theirs: every GpuJob, finished ones too (their pods are
    // kept for their logs, as at home, until the job is deleted), and those the operator
    // cannot read (their pods are not garbage: the job still exists). Without other clusters,
    // nothing to look up.
    let uids: HashSet<&str> = if inputs.remote.is_empty() {
        HashSet::new()
    } else {
        (inputs.jobs.iter())
            .filter_map(|j| j.metadata.uid.as_deref())
            .chain(
                (inputs.unreadable.iter())
                    .filter(|u| u.kind == "GpuJob")
                    .filter_map(|u| u.uid.as_deref()),
            )
            .collect()
    };
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    // A cluster pool with no connection yet (this operator has only just started) is unseen
    // too; the loop below takes those that have one out.
    let mut unseen: crate::hashing::HashSet<String> = inputs
        .pools
        .iter()
        .filter(|p| p.spec.cluster.is_some())
        .filter_map(|p| p.metadata.name.clone())
        .filter(|p| !inputs.remote.iter().any(|r| &r.pool == p))
        .collect();
    for cluster in &inputs.remote {
        // A place the pool no longer uses: what this cluster made there for the pool is
        // deleted through that place's own connection (its key), once it answers.
        if cluster.retiring {
            if cluster.state == RemoteState::Connected {
                let pool = cluster.pool_name();
                for j in &cluster.jobs {
                    if ours(j.labels(), pool, &out.home, true)
                        && let Some(c) = RemoteCopy::of(&cluster.pool, j)
                    {
                        out.orphan_copies.push(c);
                    }
                }
                for p in &cluster.pods {
                    if ours(p.labels(), pool, &out.home, true) && !run_by_copy(p, &cluster.jobs) {
                        out.orphans.push((
                            cluster.pool.clone(),
                            p.namespace().unwrap_or_default(),
                            p.clone(),
                        ));
                    }
                }
            }
            continue;
        }
        let RemoteCluster {
            pool,
            state,
            nodes: there,
            pods: theirs,
            jobs: copies,
            jobs_problem,
            ..
        } = cluster;
        let Some(spec) = inputs
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pool))
            .and_then(|p| p.spec.cluster.as_ref())
        else {
            continue;
        };
        out.states.insert(pool.clone(), state.clone());
        let lost_after = spec.lost_after();
        let lost = matches!(state, RemoteState::Unreachable { since, .. }
            if lost_after.is_some_and(|l| now.since(*since) >= l));
        if let RemoteState::Connecting { since, .. } = state
            && since.is_none_or(|s| lost_after.is_none_or(|l| now.since(s) < l))
        {
            unseen.insert(pool.clone());
        }
        let schedulable = *state == RemoteState::Connected;
        if !lost {
            let cap = out.capacity.entry(pool.clone()).or_default();
            for n in there {
                cap.0 += 1;
                cap.1 += crate::world::node_gpus(n);
                let key = (pool.clone(), version_key(&**n), schedulable);
                let home = kept
                    .nodes
                    .remove(&key)
                    .unwrap_or_else(|| Arc::new(home_node(pool, n, schedulable)));
                next.nodes.insert(key, home.clone());
                nodes.push(home);
            }
        }
        // Not listed yet: its pods (a list may be done before the nodes') are not seen until
        // both are, or a pod would be on a node not seen yet, and its job taken for lost.
        if unseen.contains(pool) {
            continue;
        }
        if let Some(why) = jobs_problem {
            out.refuses_copies.insert(pool.clone(), why.clone());
        }
        if !cluster.jobs_known {
            out.copies_unseen.insert(pool.clone());
        }
        for j in copies {
            let uid = j.labels().get(labels::JOB_UID_LABEL);
            let known = uid.is_some_and(|u| uids.contains(u.as_str()));
            if !ours(j.labels(), pool, &out.home, known) {
                continue;
            }
            if let Some(c) = RemoteCopy::of(pool, j) {
                if known {
                    out.copies.push(c);
                } else {
                    out.orphan_copies.push(c);
                }
            }
        }
        for p in theirs {
            let l = p.labels();
            // Another pool's pods (two pools may share a namespace there) are that pool's.
            let uid = l.get(labels::JOB_UID_LABEL);
            let known = uid.is_some_and(|u| uids.contains(u.as_str()));
            if !ours(l, pool, &out.home, known) {
                continue;
            }
            if !known {
                if run_by_copy(p, copies) {
                    continue;
                }
                out.orphans
                    .push((pool.clone(), p.namespace().unwrap_or_default(), p.clone()));
                continue;
            }
            let key = (pool.clone(), version_key(&**p));
            let home = match kept.pods.remove(&key) {
                Some(h) => h,
                None => match home_pod(pool, p) {
                    Some(h) => Arc::new(h),
                    None => continue,
                },
            };
            next.pods.insert(key, home.clone());
            pods.push(home);
        }
    }
    inputs.nodes.extend(nodes);
    inputs.pods.extend(pods);
    inputs.unseen_pools = unseen;
    *kept = next;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use spillway_api::job::JobPhase;
    use spillway_core::Duration;

    /// This cluster's id in these tests: its kube-system's uid.
    const HOME: &str = "home-cluster-uid";

    fn remote_pod_there(uid: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "train-0-0", "namespace": "spillway-jobs", "uid": "p1",
                    "resourceVersion": "7",
                    "labels": {"spillway.io/job": "train", "spillway.io/job-uid": uid,
                        "spillway.io/job-namespace": "research", "spillway.io/attempt": "0",
                        "spillway.io/replica": "0", "spillway.io/pool": "dc2",
                        "spillway.io/home-cluster": HOME},
                    "annotations": {"spillway.io/node": "gpu-1"}},
                "spec": {"nodeName": "gpu-1", "containers": [{"name": "main"}]},
                "status": {"phase": "Running"},
            }))
            .expect("pod"),
        )
    }

    fn node_there(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": "n1", "resourceVersion": "3"},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }))
            .expect("node"),
        )
    }

    fn inputs(state: RemoteState) -> Inputs {
        let pool: spillway_api::ComputePool = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": "dc2"},
            "spec": {"cluster": {"kubeconfigSecretRef": {"name": "k", "namespace": "spillway"},
                "namespace": "spillway-jobs", "gpuCostPerHour": 1.0, "lostAfter": "5m"}},
        }))
        .expect("pool");
        let job: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "train", "namespace": "research", "uid": "job-uid"},
            "spec": {"queue": "q", "gpusPerReplica": 1, "template": {"spec": {"containers": [{"name": "main"}]}}},
        }))
        .expect("job");
        let kube_system: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": "kube-system", "uid": HOME}}))
                .expect("namespace");
        Inputs {
            pools: vec![Arc::new(pool)],
            jobs: vec![Arc::new(job)],
            namespaces: vec![Arc::new(kube_system)],
            remote: vec![RemoteCluster {
                pool: "dc2".into(),
                state,
                nodes: vec![node_there("gpu-1")],
                pods: vec![remote_pod_there("job-uid"), {
                    let mut p = (*remote_pod_there("gone-uid")).clone();
                    p.metadata.name = Some("old-0-0".into());
                    Arc::new(p)
                }],
                jobs: Vec::new(),
                jobs_problem: None,
                jobs_known: true,
                retiring: false,
            }],
            ..Inputs::default()
        }
    }

    #[test]
    fn a_remote_pod_is_seen_at_home_owned_by_its_job_on_its_pool_node() {
        let mut i = inputs(RemoteState::Connected);
        let o = overlay(&mut i, &mut Translations::default(), Time::from_millis(0));
        assert_eq!(i.nodes.len(), 1);
        assert_eq!(i.nodes[0].name_any(), "dc2/gpu-1");
        assert_eq!(i.nodes[0].labels()[labels::POOL_LABEL], "dc2");
        assert!(
            i.nodes[0]
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .is_none()
        );
        assert_eq!(i.pods.len(), 1, "the orphan is not laid over");
        let p = &i.pods[0];
        assert_eq!(p.namespace().as_deref(), Some("research"));
        assert_eq!(p.owner_references()[0].uid, "job-uid");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("dc2/gpu-1")
        );
        assert_eq!(p.annotations()[labels::NODE_ANNOTATION], "dc2/gpu-1");
        assert_eq!(
            origin(p),
            Some(("dc2".to_string(), "spillway-jobs".to_string()))
        );
        assert_eq!(o.orphans.len(), 1);
        assert_eq!(o.orphans[0].2.name_any(), "old-0-0");
        assert_eq!(o.capacity["dc2"], (1, 8));
    }

    #[test]
    fn the_pods_there_of_a_finished_job_are_kept_for_their_logs_until_it_is_deleted() {
        let mut i = inputs(RemoteState::Connected);
        let mut job = (*i.jobs[0]).clone();
        job.status = Some(spillway_api::job::GpuJobStatus {
            phase: Some(JobPhase::Succeeded),
            ..Default::default()
        });
        i.jobs = vec![Arc::new(job)];
        let o = overlay(&mut i, &mut Translations::default(), Time::from_millis(0));
        assert_eq!(
            i.pods.len(),
            1,
            "laid over like a home pod of a finished job"
        );
        let names: Vec<String> = o.orphans.iter().map(|o| o.2.name_any()).collect();
        assert_eq!(names, ["old-0-0"]);
    }

    #[test]
    fn what_another_home_cluster_or_another_pool_made_there_is_neither_seen_nor_collected() {
        let mut i = inputs(RemoteState::Connected);
        let relabel = |p: &Arc<Pod>, key: &str, value: &str| {
            let mut p = (**p).clone();
            p.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(key.into(), value.into());
            Arc::new(p)
        };
        let pods = i.remote[0].pods.clone();
        i.remote[0].pods = vec![
            // Another home cluster's pods sharing the namespace: one of a job uid that is
            // ours too (uids are unique; this is to show the label decides), one unknown.
            relabel(&pods[0], labels::HOME_CLUSTER_LABEL, "another-cluster"),
            relabel(&pods[1], labels::HOME_CLUSTER_LABEL, "another-cluster"),
            // Another pool on the same namespace made this one.
            relabel(&pods[1], labels::POOL_LABEL, "dc3"),
        ];
        let o = overlay(&mut i, &mut Translations::default(), Time::from_millis(0));
        assert!(i.pods.is_empty(), "{:?}", i.pods);
        assert!(o.orphans.is_empty(), "{:?}", o.orphans);
    }

    #[test]
    fn the_pods_of_a_job_the_operator_cannot_read_are_not_garbage() {
        let mut i = inputs(RemoteState::Connected);
        i.unreadable.push(crate::world::Unreadable {
            kind: "GpuJob",
            namespace: Some("research".into()),
            name: "old".into(),
            uid: Some("gone-uid".into()),
            generation: Some(1),
            error: "spec: unknown field".into(),
        });
        let o = overlay(&mut i, &mut Translations::default(), Time::from_millis(0));
        assert!(o.orphans.is_empty(), "{:?}", o.orphans);
    }

    #[test]
    fn a_pod_from_before_the_home_label_is_ours_only_when_one_of_our_jobs_has_its_uid() {
        let mut i = inputs(RemoteState::Connected);
        let unlabel = |p: &Arc<Pod>| {
            let mut p = (**p).clone();
            if let Some(l) = p.metadata.labels.as_mut() {
                l.remove(labels::HOME_CLUSTER_LABEL);
            }
            Arc::new(p)
        };
        let pods = i.remote[0].pods.clone();
        i.remote[0].pods = pods.iter().map(unlabel).collect();
        let o = overlay(&mut i, &mut Translations::default(), Time::from_millis(0));
        assert_eq!(i.pods.len(), 1, "the known job's pod is adopted");
        assert!(o.orphans.is_empty(), "an unknown one is left alone");
    }

    #[test]
    fn an_unreachable_cluster_is_unschedulable_then_lost_after_its_lost_after() {
        let since = Time::from_millis(1_000);
        let state = RemoteState::Unreachable {
            since,
            error: "connection refused".into(),
        };
        let mut i = inputs(state.clone());
        overlay(
            &mut i,
            &mut Translations::default(),
            since + Duration::from_secs(60),
        );
        assert_eq!(i.nodes.len(), 1);
        assert_eq!(
            i.nodes[0].spec.as_ref().and_then(|s| s.unschedulable),
            Some(true)
        );
        assert_eq!(i.pods.len(), 1, "its pods are kept as last seen");
        let mut i = inputs(state);
        overlay(
            &mut i,
            &mut Translations::default(),
            since + Duration::from_secs(300),
        );
        assert!(i.nodes.is_empty(), "past lostAfter its nodes are gone");
        assert_eq!(i.pods.len(), 1);
    }

    #[test]
    fn with_lost_after_never_an_unreachable_clusters_jobs_are_kept_however_long() {
        let since = Time::from_millis(1_000);
        let mut i = inputs(RemoteState::Unreachable {
            since,
            error: "connection refused".into(),
        });
        let mut pool = (*i.pools[0]).clone();
        pool.spec.cluster.as_mut().unwrap().lost_after = "never".into();
        assert_eq!(
            spillway_api::validate::compute_pool(&pool.spec).map_err(|e| e.to_string()),
            Ok(())
        );
        i.pools = vec![Arc::new(pool)];
        overlay(
            &mut i,
            &mut Translations::default(),
            since + Duration::from_secs(30 * 86_400),
        );
        assert_eq!(i.nodes.len(), 1, "kept, unschedulable, after a month");
        assert_eq!(i.pods.len(), 1);
    }

    #[test]
    fn an_unchanged_remote_object_is_handed_out_as_the_same_copy() {
        let mut kept = Translations::default();
        let mut a = inputs(RemoteState::Connected);
        overlay(&mut a, &mut kept, Time::from_millis(0));
        let mut b = inputs(RemoteState::Connected);
        overlay(&mut b, &mut kept, Time::from_millis(0));
        assert!(Arc::ptr_eq(&a.pods[0], &b.pods[0]));
        assert!(Arc::ptr_eq(&a.nodes[0], &b.nodes[0]));
    }

    #[test]
    fn remote_pod_names_are_unique_per_home_job_and_fit() {
        let a = remote_pod_name("train", "0f3a9c1e-1111-2222", 0, 0);
        let b = remote_pod_name("train", "7d2e44b0-3333-4444", 0, 0);
        assert_eq!(a, "train-0f3a9c1e-0-0");
        assert_ne!(a, b, "train in two namespaces");
        let long = "j".repeat(253);
        let n = remote_pod_name(&long, "0f3a9c1e-1111", 999, 64);
        assert!(n.len() <= 253, "{}", n.len());
        assert!(n.ends_with("-0f3a9c1e-999-64"));
    }

    #[test]
    fn a_pod_created_there_has_no_owner_and_carries_its_job() {
        let job: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "train", "namespace": "research", "uid": "job-uid"},
            "spec": {"queue": "q", "gpusPerReplica": 1, "template": {"spec": {"containers": [{"name": "main"}]}}},
        }))
        .expect("job");
        let mut template = job.clone();
        template
            .spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .service_account_name = Some("default".into());
        let home = crate::pods::replica_pod(&template, 0, 1, "gpu-1", None);
        let there = remote_pod(home, &job, "spillway-jobs", HOME);
        assert_eq!(there.namespace().as_deref(), Some("spillway-jobs"));
        assert_eq!(there.name_any(), "train-job-uid-0-1");
        assert!(there.metadata.owner_references.is_none());
        assert_eq!(there.labels()[labels::JOB_UID_LABEL], "job-uid");
        assert_eq!(there.labels()[labels::JOB_NAMESPACE_LABEL], "research");
        assert_eq!(there.labels()[labels::HOME_CLUSTER_LABEL], HOME);
        // No credential of that cluster: its namespace's default account, no token mounted.
        let spec = there.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name, None);
        assert_eq!(spec.automount_service_account_token, Some(false));
        // Seen back at home, it is the job's pod on the pool's node.
        let back = home_pod("dc2", &there).expect("ours");
        assert_eq!(back.owner_references()[0].uid, "job-uid");
        assert_eq!(back.annotations()[labels::NODE_ANNOTATION], "dc2/gpu-1");
    }
}
