//! Workloads in other clusters (MultiKueue's way): a start of a workload's GpuJob on a cluster
//! pool creates a copy of the workload there, running on the chosen nodes with the job's
//! identity and telemetry, while the workload at home stays suspended. The copy's pods are seen
//! as the job's (the remote overlay), its end is mirrored on the GpuJob
//! ([`State::copy_finished`]), and a copy whose job moved on, stopped or is gone is deleted with
//! its pods. Only kinds that implement [`crate::workloads::WorkloadKind::copy`] are dispatched
//! (batch Jobs); a pool whose Jobs the operator cannot watch takes none.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use spillway_api::{ComputePool, GpuQueue};
use spillway_core as core;

use super::State;
use crate::actions::Action;
use crate::hashing::{HashMap, HashSet};
use crate::remote::view::{self as remote, RemoteCopy};
use crate::workloads::{self as wl, WorkloadKind};
use crate::world::{self, JobView, Lifecycle};
use crate::{labels, pods};

impl State {
    /// Marks the cluster pools that take no copy of a workload (their Jobs cannot be watched)
    /// in the snapshot, for the core.
    pub(super) fn mark_refusing_pools(&self, built: &mut world::Built) {
        for p in &mut built.snapshot.pools {
            p.refuses_copies = self.remote.refuses_copies.get(&p.name).cloned();
        }
    }

    /// Carries out a start of `view`, a job standing for a workload, on cluster pool `pool`:
    /// creates the workload's copy there. Returns false (and the start is dropped) when it
    /// cannot.
    pub(super) fn dispatch_workload(
        &mut self,
        view: &JobView,
        start: &core::Start,
        pool: &ComputePool,
        queues: &HashMap<String, Arc<GpuQueue>>,
        snapshot: &core::Snapshot,
    ) -> bool {
        let (Some((w, kind)), Some(cluster), Some(home)) = (
            self.workload_of(view),
            pool.spec.cluster.as_ref(),
            self.remote.home.clone(),
        ) else {
            tracing::warn!(job = %view.id, "the workload, its pool or this cluster's id is not known yet; deciding again");
            self.assumed.remove(&view.id);
            return false;
        };
        let uid = view.job.metadata.uid.clone().unwrap_or_default();
        if !kind.ready_to_run(&w) {
            // The workload runs at home, or is being suspended: placed again once it is held.
            tracing::debug!(job = %view.id, "the workload is not held yet; deciding again");
            self.assumed.remove(&view.id);
            return false;
        }
        // Remote nodes are seen as POOL/NODE; the copy names them as that cluster does.
        let nodes: Vec<String> = (start.nodes.iter())
            .map(|n| {
                labels::split_node(n)
                    .map_or(n.as_str(), |(_, n)| n)
                    .to_string()
            })
            .collect();
        let placement = wl::Placement {
            job: &view.job,
            attempt: view.attempt,
            pool: Some(pool),
            nodes: &nodes,
        };
        let mut tags = placement.pod_labels();
        tags.insert(
            labels::JOB_NAMESPACE_LABEL.into(),
            view.job.namespace().unwrap_or_default(),
        );
        tags.insert(labels::HOME_CLUSTER_LABEL.into(), home);
        let extras = self.pod_extras(view, Some(pool), queues);
        let first = start.nodes.first().map(String::as_str).unwrap_or_default();
        let at = super::jobs::placement_of(start, first, Some(pool), snapshot);
        let mut kept = std::collections::BTreeSet::new();
        let copy = kind.copy(&w, &mut |pod| {
            (pod.metadata.labels.get_or_insert_with(BTreeMap::new)).extend(tags.clone());
            let spec = pod.spec.get_or_insert_with(Default::default);
            pods::pin_to_nodes(spec, &nodes);
            pods::tolerate_pool(spec, pool);
            // No credential of that cluster: its namespace's default ServiceAccount, no token.
            spec.service_account_name = None;
            spec.service_account = None;
            spec.automount_service_account_token = Some(false);
            kept.extend(extras.add_to(pod, &view.job, &at));
        });
        let copy = copy.and_then(|v| {
            serde_json::from_value::<Job>(v).map_err(|e| format!("the copy is not a Job: {e}"))
        });
        let mut copy = match copy {
            Ok(c) => c,
            Err(why) => {
                tracing::warn!(job = %view.id, error = %why, "cannot copy the workload to another cluster; deciding again");
                self.assumed.remove(&view.id);
                return false;
            }
        };
        let name = remote::remote_copy_name(&view.job.name_any(), &uid, view.attempt);
        copy.metadata.name = Some(name.clone());
        copy.metadata.namespace = Some(cluster.namespace.clone());
        copy.metadata.labels = Some(tags);
        copy.metadata.annotations = Some(BTreeMap::from([
            (
                labels::WORKLOAD_ANNOTATION.to_string(),
                format!(
                    "{}/{}/{}",
                    view.job.namespace().unwrap_or_default(),
                    kind.kind(),
                    w.name_any()
                ),
            ),
            (wl::NODES_ANNOTATION.to_string(), nodes.join(",")),
        ]));
        let mut note = format!(
            "Copied to cluster pool {} as {} {}/{name}, on {}: it runs there, and this {} stays suspended here (its GpuJob {} shows the copy's progress and end).",
            start.pool,
            kind.kind(),
            cluster.namespace,
            nodes.join(", "),
            kind.kind(),
            view.job.name_any()
        );
        if !kept.is_empty() {
            let kept: Vec<String> = kept.into_iter().collect();
            note.push_str(&format!(
                " The pod template's own settings were kept where Spillway's identity would have gone: {}.",
                kept.join("; ")
            ));
        }
        self.publish(
            super::workloads::reference(&w),
            false,
            "Dispatched",
            "Start",
            note,
        );
        self.emit(Action::CreateRemoteCopy {
            pool: start.pool.clone(),
            job: view.id.to_string(),
            copy: Box::new(copy),
        });
        true
    }

    /// Keeps a job with a live copy of its current attempt running on it, for the restarts
    /// and lags the views cannot see through: an operator restarted between creating a copy
    /// and seeing its pods, or a copy whose pods are being replaced there, would otherwise
    /// find the job pending and place it a second time. A copy showing no pod (by the pods
    /// seen and by its own count of active ones) is taken for the job's start, timed from when
    /// it last showed one, so after the assume timeout it is given up: deleted, and the job
    /// placed again once it is gone. A copy of a later attempt than the job's status says (its
    /// status not written yet) raises the job's attempt to it.
    pub(super) fn assume_copies(&mut self, inputs: &world::Inputs, now: core::Time) {
        if self.remote.copies.is_empty() {
            self.copy_waits.clear();
            return;
        }
        // (job uid, attempt, pool) of the live pods seen.
        let with_pods: HashSet<(&str, &str, &str)> = (inputs.pods.iter())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let l = p.labels();
                Some((
                    l.get(labels::JOB_UID_LABEL)?.as_str(),
                    l.get(labels::ATTEMPT_LABEL)?.as_str(),
                    l.get(labels::POOL_LABEL)?.as_str(),
                ))
            })
            .collect();
        let jobs: HashMap<&str, &Arc<spillway_api::GpuJob>> = (inputs.jobs.iter())
            .filter_map(|j| Some((j.metadata.uid.as_deref()?, j)))
            .collect();
        let mut waits = std::mem::take(&mut self.copy_waits);
        let mut kept = HashMap::default();
        for c in &self.remote.copies {
            let (Some(job), Some(attempt)) = (jobs.get(c.job_uid.as_str()), c.attempt) else {
                continue;
            };
            if c.object.metadata.deletion_timestamp.is_some()
                || finished(c).is_some()
                || wl::finished_of(job).is_some()
            {
                continue;
            }
            let id = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
            let restarts = job.status.as_ref().and_then(|s| s.restarts).unwrap_or(0);
            let floor = self.attempt_floor.get(&id).copied().unwrap_or(0);
            let current = (restarts.max(0) as u32).max(floor);
            if attempt > current {
                self.attempt_floor.insert(id.clone(), attempt);
            } else if attempt < current {
                continue;
            }
            let active = (c.object.status.as_ref()).is_some_and(|s| s.active.unwrap_or(0) > 0);
            let key = (c.job_uid.as_str(), attempt.to_string(), c.pool.as_str());
            if active || with_pods.contains(&(key.0, key.1.as_str(), key.2)) {
                continue;
            }
            let since = waits.remove(&c.uid).unwrap_or(now);
            kept.insert(c.uid.clone(), since);
            let nodes: Vec<String> = (c.object.annotations().get(wl::NODES_ANNOTATION))
                .map(|v| wl::annotated_nodes(v))
                .unwrap_or_default()
                .iter()
                .map(|n| labels::node_name(&c.pool, n))
                .collect();
            if self.assumed.contains_key(&id) || nodes.is_empty() {
                continue;
            }
            tracing::info!(job = %id, pool = %c.pool, "a copy of the job there shows no pod; taking it for the job's start");
            self.assumed.insert(
                id,
                world::Assumed {
                    attempt,
                    pool: c.pool.clone(),
                    environment: core::Environment::Remote,
                    nodes,
                    at: since,
                },
            );
        }
        self.copy_waits = kept;
    }

    /// Whether copies of `view`'s job are in the way of starting it anywhere: one not finished
    /// (deleted now; the start waits until it is gone, its pods with it), one being deleted, or
    /// one of its current attempt that finished (its end is mirrored instead).
    pub(super) fn copies_in_the_way(&mut self, view: &JobView) -> bool {
        let Some(uid) = view.job.metadata.uid.as_deref() else {
            return false;
        };
        let mut blocked = false;
        let mut delete = Vec::new();
        for c in self.remote.copies.iter().filter(|c| c.job_uid == uid) {
            let done = finished(c).is_some();
            if done && c.attempt != Some(view.attempt) {
                continue;
            }
            blocked = true;
            if !done && c.object.metadata.deletion_timestamp.is_none() {
                delete.push(c.clone());
            }
        }
        for c in delete {
            self.delete_copy(
                c,
                "a copy of the job there does not run it; deleting it before placing the job again",
            );
        }
        blocked
    }

    /// How the copy of `view`'s current attempt finished, once it has.
    pub(super) fn copy_finished(&self, view: &JobView) -> Option<wl::Finished> {
        let uid = view.job.metadata.uid.as_deref()?;
        let c = (self.remote.copies.iter())
            .find(|c| c.job_uid == uid && c.attempt == Some(view.attempt))?;
        finished(c)
    }

    /// Deletes the copies whose GpuJob is gone, and those its job no longer runs: it moved
    /// on to another attempt or place, or stopped (failed, preempted, requeued) before the
    /// copy finished. A finished copy is kept, for its logs, until its GpuJob is deleted.
    pub(super) fn keep_copies(&mut self, built: &world::Built) {
        if self.remote.copies.is_empty() && self.remote.orphan_copies.is_empty() {
            return;
        }
        let by_uid: HashMap<&str, &JobView> = (built.jobs.values())
            .filter_map(|v| Some((v.job.metadata.uid.as_deref()?, &**v)))
            .collect();
        let mut gone: Vec<RemoteCopy> = self.remote.orphan_copies.clone();
        for c in &self.remote.copies {
            let Some(v) = by_uid.get(c.job_uid.as_str()) else {
                continue;
            };
            let runs_here = |pool: Option<&String>| pool.map(String::as_str) == Some(&c.pool);
            let current = c.attempt == Some(v.attempt) && !self.moved_on(v);
            let running = match &v.lifecycle {
                Lifecycle::Running { pool, .. } => runs_here(pool.as_ref()),
                _ => false,
            } || self.assumed.get(&v.id).is_some_and(|a| a.pool == c.pool);
            if !(current && (running || finished(c).is_some())) {
                gone.push(c.clone());
            }
        }
        for c in gone {
            if c.object.metadata.deletion_timestamp.is_none() {
                self.delete_copy(
                    c,
                    "deleting a workload's copy in another cluster that its job no longer runs",
                );
            }
        }
    }
}

impl State {
    /// Asks for copy `c`'s deletion once (logged with `why`) until the cache shows it going.
    fn delete_copy(&mut self, c: RemoteCopy, why: &str) {
        if !self.deleting.insert(c.uid.clone()) {
            return;
        }
        tracing::info!(pool = %c.pool, copy = %format!("{}/{}", c.namespace, c.name), "{why}");
        self.emit(Action::DeleteRemoteCopy {
            pool: c.pool,
            namespace: c.namespace,
            name: c.name,
            uid: c.uid,
        });
    }
}

/// How a copy finished, as its kind reads it, once it has.
fn finished(c: &RemoteCopy) -> Option<wl::Finished> {
    let object = serde_json::to_value(&*c.object).ok()?;
    let object: kube::core::DynamicObject = serde_json::from_value(object).ok()?;
    wl::BatchJob.finished(&object)
}
