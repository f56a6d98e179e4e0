//! The cluster pools' part of a turn: their `Ready` condition from their connection, and the
//! garbage there (Spillway's pods whose GpuJob is gone). Their nodes and pods were laid over
//! the home ones at the start of the turn ([`crate::remote::view::overlay`]); starts, pod
//! deletions and tokens go there through the remote action kinds (`turn/jobs.rs`,
//! `turn/identity.rs`).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use spillway_api::{ComputePool, GpuQueue};
use spillway_core::{self as core, Time};

use super::State;
use crate::actions::Action;
use crate::clock::k8s_time;
use crate::hashing::HashMap;
use crate::remote::cluster::RemoteState;
use crate::status;
use crate::world::{self, Inputs, Lifecycle};

impl State {
    /// Why a valid cluster pool is not `Ready`, when it is not: (reason, message).
    pub(super) fn remote_problem(
        &self,
        pool: &ComputePool,
        invalid: bool,
    ) -> Option<(&'static str, String)> {
        let spec = pool.spec.cluster.as_ref().filter(|_| !invalid)?;
        let lost_after = spec.lost_after();
        let name = pool.name_any();
        match self.remote.states.get(&name) {
            Some(RemoteState::Connected) => None,
            None | Some(RemoteState::Connecting { error: None, .. }) => Some((
                "Connecting",
                format!(
                    "Connecting to the other cluster with the kubeconfig in Secret {}/{}; no job is sent there until it answers.",
                    spec.kubeconfig_secret_ref.namespace, spec.kubeconfig_secret_ref.name
                ),
            )),
            Some(RemoteState::Connecting { error: Some(e), .. }) => Some((
                "ConnectionFailed",
                format!(
                    "Cannot connect to the other cluster: {e}. No job is sent there until it answers."
                ),
            )),
            Some(RemoteState::Unreachable { since, error }) => Some((
                "Unreachable",
                match lost_after {
                    Some(l) => format!(
                        "The other cluster's API server has not answered since {} ({error}). No new job is sent there; its running jobs are kept as last seen until {} (lostAfter {}), then declared lost and requeued.",
                        k8s_time(*since).0,
                        k8s_time(*since + l).0,
                        spec.lost_after
                    ),
                    None => format!(
                        "The other cluster's API server has not answered since {} ({error}). No new job is sent there; its running jobs are kept as last seen until it answers (lostAfter never).",
                        k8s_time(*since).0,
                    ),
                },
            )),
        }
    }

    /// Sets `Ready=False` with `reason`, with a Warning Event when the reason changes.
    pub(super) fn not_ready(
        &mut self,
        pool: &ComputePool,
        conditions: &mut Vec<Condition>,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        let before = conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status == "False", c.reason.clone()));
        status::set_condition(
            conditions,
            "Ready",
            false,
            reason,
            message,
            pool.metadata.generation,
            now,
        );
        if before != Some((true, reason.to_string())) {
            self.publish(
                pool.object_ref(&()),
                true,
                reason,
                "Connect",
                message.into(),
            );
        }
    }

    /// Holds back the starts and launches of this cycle for pending jobs whose queue may use a
    /// cluster pool this operator has not seen yet (it started while that cluster was away, or
    /// has not listed it yet): an operator stopped right after creating a job's pods there, and
    /// before writing its status, left pods this one cannot see. Such a job waits (reason
    /// `ClusterUnseen`) until the cluster is listed (its pods are then found and the job runs on
    /// as started) or its `lostAfter` has passed (it is then lost with that cluster, as a job
    /// running there would be). Returns when to look again.
    pub(super) fn hold_for_unseen_clusters(
        &mut self,
        plan: &mut core::Plan,
        built: &world::Built,
        queues: &HashMap<String, Arc<GpuQueue>>,
        inputs: &Inputs,
        now: Time,
    ) -> Option<Time> {
        let copies_unseen = &self.remote.copies_unseen;
        if inputs.unseen_pools.is_empty() && copies_unseen.is_empty() {
            return None;
        }
        let unseen_for = |job: &str| -> Option<String> {
            let view = built.jobs.get(job)?;
            if view.lifecycle != Lifecycle::Pending {
                return None;
            }
            let burst = queues
                .get(&view.job.spec.queue)
                .and_then(|q| q.spec.burst.as_ref())
                .filter(|b| b.enabled)?;
            // A workload's copy may be in a cluster whose Jobs are not listed yet.
            let copies = (copies_unseen.iter()).filter(|_| view.job.spec.workload_ref.is_some());
            let mut unseen: Vec<&String> = (inputs.unseen_pools.iter())
                .chain(copies)
                .filter(|p| burst.pools.is_empty() || burst.pools.contains(p))
                .collect();
            unseen.sort();
            unseen.first().map(|p| (*p).clone())
        };
        let mut held = std::collections::BTreeMap::new();
        for job in plan
            .starts
            .iter()
            .map(|s| &s.job)
            .chain(plan.launches.iter().map(|l| &l.job))
        {
            if let Some(pool) = unseen_for(job) {
                held.insert(job.clone(), format!(
                    "Cluster pool {pool}, which its queue may use, has not been seen since the operator started: pods of this job may already run there. It is placed nowhere until that cluster answers, or until the pool's lostAfter has passed."
                ));
            }
        }
        if held.is_empty() {
            return None;
        }
        self.hold_starts(plan, &held, core::Reason::ClusterUnseen);
        tracing::info!(
            jobs = held.len(),
            "jobs held until the cluster pools their queues may use are seen"
        );
        Some(now + core::Duration::from_secs(5))
    }

    /// Deletes what this cluster made in other clusters for GpuJobs that are gone (deleted, or
    /// deleted and made again under the same name: another uid): their pods and token Secrets.
    pub(super) fn collect_remote_garbage(&mut self) {
        let orphans = std::mem::take(&mut self.remote.orphans);
        let mut secrets = std::collections::BTreeSet::new();
        for (pool, namespace, pod) in &orphans {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            if let Some(job_uid) = pod.labels().get(crate::labels::JOB_UID_LABEL) {
                let name = crate::remote::view::remote_token_secret(job_uid);
                secrets.insert((pool.clone(), namespace.clone(), name));
            }
            if pod.metadata.deletion_timestamp.is_some() || !self.deleting.insert(uid.clone()) {
                continue;
            }
            tracing::info!(pool = %pool, pod = %format!("{namespace}/{}", pod.name_any()), "deleting a pod in another cluster whose GpuJob is gone");
            self.emit(Action::DeleteRemotePod {
                pool: pool.clone(),
                namespace: namespace.clone(),
                name: pod.name_any(),
                uid,
                grace_seconds: None,
            });
        }
        for (pool, namespace, name) in secrets {
            if self.deleting.insert(format!("{pool}/{namespace}/{name}")) {
                self.emit(Action::DeleteRemoteSecret {
                    pool,
                    namespace,
                    name,
                });
            }
        }
        self.remote.orphans = orphans;
    }
}
