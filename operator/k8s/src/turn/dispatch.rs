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
use crate::hashing::HashMap;
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
        copy.metadata.annotations = Some(BTreeMap::from([(
            labels::WORKLOAD_ANNOTATION.to_string(),
            format!(
                "{}/{}/{}",
                view.job.namespace().unwrap_or_default(),
                kind.kind(),
                w.name_any()
            ),
        )]));
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
            if c.object.metadata.deletion_timestamp.is_some()
                || !self.deleting.insert(c.uid.clone())
            {
                continue;
            }
            tracing::info!(pool = %c.pool, copy = %format!("{}/{}", c.namespace, c.name), "deleting a workload's copy in another cluster that its job no longer runs");
            self.emit(Action::DeleteRemoteCopy {
                pool: c.pool,
                namespace: c.namespace,
                name: c.name,
                uid: c.uid,
            });
        }
    }
}

/// How a copy finished, as its kind reads it, once it has.
fn finished(c: &RemoteCopy) -> Option<wl::Finished> {
    let object = serde_json::to_value(&*c.object).ok()?;
    let object: kube::core::DynamicObject = serde_json::from_value(object).ok()?;
    wl::BatchJob.finished(&object)
}
