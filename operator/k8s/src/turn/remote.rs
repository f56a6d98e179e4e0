//! The cluster pools' part of a turn: their `Ready` condition from their connection, and the
//! garbage there (Spillway's pods whose GpuJob is gone). Their nodes and pods were laid over
//! the home ones at the start of the turn ([`crate::remote::view::overlay`]); starts, pod
//! deletions and tokens go there through the remote action kinds (`turn/jobs.rs`,
//! `turn/identity.rs`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use spillway_api::ComputePool;
use spillway_core::{Duration, Time};

use super::State;
use crate::actions::Action;
use crate::clock::k8s_time;
use crate::remote::cluster::RemoteState;
use crate::status;

impl State {
    /// Why a valid cluster pool is not `Ready`, when it is not: (reason, message).
    pub(super) fn remote_problem(
        &self,
        pool: &ComputePool,
        invalid: bool,
    ) -> Option<(&'static str, String)> {
        let spec = pool.spec.cluster.as_ref().filter(|_| !invalid)?;
        let lost_after = Duration::parse(&spec.lost_after).unwrap_or(Duration::from_secs(600));
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
            Some(RemoteState::Unreachable { since, error }) => {
                let lost = *since + lost_after;
                Some((
                    "Unreachable",
                    format!(
                        "The other cluster's API server has not answered since {} ({error}). No new job is sent there; its running jobs are kept as last seen until {} (lostAfter {}), then declared lost and requeued.",
                        k8s_time(*since).0,
                        k8s_time(lost).0,
                        spec.lost_after
                    ),
                ))
            }
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
