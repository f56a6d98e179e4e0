//! What a job's pods get besides their template: its identity token and its telemetry settings,
//! the same for the pods Spillway makes at home or in another cluster and for the pod template
//! of a workload's copy in another cluster.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use spillway_api::{ComputePool, GpuJob, GpuQueue};

use super::State;
use crate::hashing::HashMap;
use crate::remote::view as remote;
use crate::world::JobView;
use crate::{pods, telemetry};

/// A job's identity and telemetry, for each of its pods.
pub(super) struct PodExtras {
    identity: Option<pods::PodIdentity>,
    endpoint: Option<String>,
    traceparent: String,
}

impl State {
    /// The extras of `view`'s pods in `pool` (a cluster pool's pods read the job's own token
    /// Secret there).
    pub(super) fn pod_extras(
        &self,
        view: &JobView,
        pool: Option<&ComputePool>,
        queues: &HashMap<String, Arc<GpuQueue>>,
    ) -> PodExtras {
        let uid = view.job.metadata.uid.clone().unwrap_or_default();
        let identity = self.pod_identity(view, queues).map(|id| {
            match pool.and_then(|p| p.spec.cluster.as_ref()) {
                Some(_) => pods::PodIdentity {
                    secret: remote::remote_token_secret(&uid),
                    key: remote::REMOTE_TOKEN_KEY.into(),
                    ..id
                },
                None => id,
            }
        });
        let endpoint = pool
            .and_then(|p| p.spec.telemetry.as_ref())
            .and_then(|t| t.otlp_endpoint.clone())
            .or_else(|| {
                queues
                    .get(&view.job.spec.queue)
                    .and_then(|q| q.spec.telemetry.as_ref())
                    .and_then(|t| t.otlp_endpoint.clone())
            })
            .or_else(|| self.settings.pod_otlp_endpoint.clone());
        PodExtras {
            identity,
            endpoint,
            traceparent: telemetry::of_job(&view.job).0.header(),
        }
    }
}

impl PodExtras {
    /// Adds them to `pod` of `job`, placed as `placement` says; returns the template's own
    /// settings kept where the identity would have gone.
    pub(super) fn add_to(
        &self,
        pod: &mut Pod,
        job: &GpuJob,
        placement: &telemetry::Placement,
    ) -> BTreeSet<String> {
        let mut kept = BTreeSet::new();
        if let Some(id) = &self.identity {
            kept.extend(pods::inject_identity(pod, id));
        }
        telemetry::inject(
            pod,
            &telemetry::PodTelemetry {
                service_name: job.name_any(),
                endpoint: self.endpoint.clone(),
                traceparent: self.traceparent.clone(),
                attributes: telemetry::attributes(job, placement),
            },
        );
        kept
    }
}
