//! The pods of labelled workloads get what a GpuJob's pods get, as they are created: the
//! workload identity (the job's token mounted, `SPILLWAY_IDENTITY_TOKEN_FILE`, the queue's AWS
//! role) and the telemetry settings (`OTEL_*`, the job's `TRACEPARENT`). A workload's pod
//! template cannot take them (a Job's pod spec is fixed once the Job exists), so the mutating
//! webhook adds them to each pod its controller makes from the placement Spillway wrote into
//! the template: a pod labelled with a GpuJob's name and uid (`spillway.io/job`,
//! `spillway.io/job-uid`), controlled by the workload that GpuJob stands for.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use spillway_api::{ComputePool, GpuJob, GpuQueue};

use crate::{identity, labels, pods, telemetry};

/// What the operator adds to pods beyond their job, pool and queue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSettings {
    /// Workload identity is on (`--identity`): tokens are issued and mounted.
    pub identity: bool,
    /// The OTLP endpoint of pods whose pool and queue name none.
    pub otlp_endpoint: Option<String>,
}

/// What the pod webhook reads of the cluster.
pub trait PodLookup {
    fn job(&self, namespace: &str, name: &str) -> Option<Arc<GpuJob>>;
    fn queue(&self, name: &str) -> Option<Arc<GpuQueue>>;
    fn pool(&self, name: &str) -> Option<Arc<ComputePool>>;
    fn settings(&self) -> &PodSettings;
}

/// The GpuJob `pod` is one of, when it is a pod a workload's controller made from a placement
/// Spillway wrote (its labels name the job and its uid, and the workload controls it).
fn job_of(pod: &Pod, world: &dyn PodLookup) -> Option<Arc<GpuJob>> {
    let l = pod.labels();
    let (name, uid) = (l.get(labels::JOB_LABEL)?, l.get(labels::JOB_UID_LABEL)?);
    let namespace = pod.metadata.namespace.as_deref()?;
    let job = world.job(namespace, name)?;
    let workload = job.spec.workload_ref.as_ref()?;
    let kind = crate::workloads::by_kind(&workload.api_version, &workload.kind)?;
    let controlled = kind.controls_pod(pod, &workload.name);
    (job.metadata.uid.as_deref() == Some(uid.as_str()) && controlled).then_some(job)
}

/// `pod` with its job's identity and telemetry added, and pinned to its placement's nodes when
/// its template holds it for that ([`crate::workloads::pin_gated_pod`]); `None` when it is not
/// a workload's pod of a GpuJob (it is left as it is).
pub fn mutate(pod: &Pod, world: &dyn PodLookup) -> Option<Pod> {
    let job = job_of(pod, world)?;
    let queue = world.queue(&job.spec.queue);
    let pool_name = pod.labels().get(labels::POOL_LABEL).cloned();
    let pool = pool_name.as_deref().and_then(|p| world.pool(p));
    let mut out = pod.clone();
    crate::workloads::pin_gated_pod(&mut out);
    if world.settings().identity {
        let id = pods::PodIdentity {
            secret: identity::tokens_secret_name(&job.name_any()),
            key: job.name_any(),
            aws_role_arn: queue
                .as_ref()
                .and_then(|q| q.spec.identity.as_ref())
                .and_then(|i| i.aws_role_arn.clone()),
        };
        pods::inject_identity(&mut out, &id);
    }
    let endpoint = (pool.as_ref())
        .and_then(|p| p.spec.telemetry.as_ref())
        .and_then(|t| t.otlp_endpoint.clone())
        .or_else(|| {
            (queue.as_ref())
                .and_then(|q| q.spec.telemetry.as_ref())
                .and_then(|t| t.otlp_endpoint.clone())
        })
        .or_else(|| world.settings().otlp_endpoint.clone());
    let environment = match pool.as_ref().map(|p| &p.spec) {
        Some(s) if s.aws.is_some() => "cloud",
        Some(s) if s.cluster.is_some() => "remote",
        _ => "private",
    };
    // The node is not known as the pod is made (its placement may name several): the
    // attributes of the machine (`cloud.*`, `host.id`) are left to the collector.
    let placement = telemetry::Placement {
        environment,
        pool: pool_name.unwrap_or_default(),
        cloud: None,
        cluster: None,
    };
    let (trace, _) = telemetry::of_job(&job);
    telemetry::inject(
        &mut out,
        &telemetry::PodTelemetry {
            service_name: job.name_any(),
            endpoint,
            traceparent: trace.header(),
            attributes: telemetry::attributes(&job, &placement),
        },
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    #[derive(Default)]
    struct World {
        jobs: HashMap<(String, String), Arc<GpuJob>>,
        queues: HashMap<String, Arc<GpuQueue>>,
        pools: HashMap<String, Arc<ComputePool>>,
        settings: PodSettings,
    }

    impl PodLookup for World {
        fn job(&self, namespace: &str, name: &str) -> Option<Arc<GpuJob>> {
            self.jobs.get(&(namespace.into(), name.into())).cloned()
        }
        fn queue(&self, name: &str) -> Option<Arc<GpuQueue>> {
            self.queues.get(name).cloned()
        }
        fn pool(&self, name: &str) -> Option<Arc<ComputePool>> {
            self.pools.get(name).cloned()
        }
        fn settings(&self) -> &PodSettings {
            &self.settings
        }
    }

    fn world() -> World {
        let job: GpuJob = serde_json::from_value(json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "job-train", "namespace": "ml", "uid": "gj-uid"},
            "spec": {"queue": "research", "gpusPerReplica": 4,
                     "workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "train"}},
        }))
        .unwrap();
        let queue: GpuQueue = serde_json::from_value(json!({
            "metadata": {"name": "research"},
            "spec": {"identity": {"awsRoleArn": "arn:aws:iam::123456789012:role/research"},
                     "telemetry": {"otlpEndpoint": "http://collector.research:4317"}},
        }))
        .unwrap();
        let pool: ComputePool = serde_json::from_value(json!({
            "metadata": {"name": "burst"},
            "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["g6.xlarge"]}},
        }))
        .unwrap();
        World {
            jobs: HashMap::from([(("ml".into(), "job-train".into()), Arc::new(job))]),
            queues: HashMap::from([("research".into(), Arc::new(queue))]),
            pools: HashMap::from([("burst".into(), Arc::new(pool))]),
            settings: PodSettings {
                identity: true,
                otlp_endpoint: None,
            },
        }
    }

    fn pod(uid: &str, owner: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "train-abcde", "namespace": "ml",
                         "labels": {"spillway.io/job": "job-train", "spillway.io/job-uid": uid,
                                    "spillway.io/pool": "burst", "spillway.io/attempt": "0"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": owner,
                                              "uid": "w-uid", "controller": true}]},
            "spec": {"containers": [{"name": "main", "image": "trainer"}]},
        }))
        .unwrap()
    }

    fn env(p: &Pod) -> HashMap<String, String> {
        p.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_workloads_pod_gets_its_jobs_token_and_telemetry() {
        let w = world();
        let out = mutate(&pod("gj-uid", "train"), &w).expect("mutated");
        let vars = env(&out);
        assert_eq!(
            vars["SPILLWAY_IDENTITY_TOKEN_FILE"],
            identity::TOKEN_FILE.to_string()
        );
        assert_eq!(
            vars["AWS_ROLE_ARN"],
            "arn:aws:iam::123456789012:role/research"
        );
        assert_eq!(vars["OTEL_SERVICE_NAME"], "job-train");
        assert_eq!(
            vars["OTEL_EXPORTER_OTLP_ENDPOINT"],
            "http://collector.research:4317"
        );
        let attributes = &vars["OTEL_RESOURCE_ATTRIBUTES"];
        assert!(
            attributes.contains("spillway.environment=cloud"),
            "{attributes}"
        );
        assert!(attributes.contains("spillway.pool=burst"), "{attributes}");
        assert!(vars.contains_key("TRACEPARENT"));
        let volume = &out.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("spillway-tokens-3"));
        assert_eq!(secret.items.as_ref().unwrap()[0].key, "job-train");
    }

    #[test]
    fn a_pod_that_only_claims_a_job_is_left_alone() {
        let mut w = world();
        // Another uid, another controller: not the job's.
        assert!(mutate(&pod("other-uid", "train"), &w).is_none());
        assert!(mutate(&pod("gj-uid", "someone-else"), &w).is_none());
        // Identity off: telemetry only.
        w.settings.identity = false;
        let out = mutate(&pod("gj-uid", "train"), &w).expect("mutated");
        assert!(!env(&out).contains_key("SPILLWAY_IDENTITY_TOKEN_FILE"));
        assert!(env(&out).contains_key("OTEL_SERVICE_NAME"));
    }

    #[test]
    fn a_jobsets_gated_pod_is_pinned_to_its_nodes_and_ungated() {
        let mut w = world();
        let mut job = (*w.jobs[&("ml".to_string(), "job-train".to_string())]).clone();
        job.spec.workload_ref = Some(spillway_api::job::WorkloadRef {
            api_version: "jobset.x-k8s.io/v1alpha2".into(),
            kind: "JobSet".into(),
            name: "train".into(),
        });
        w.jobs
            .insert(("ml".into(), "job-train".into()), Arc::new(job));
        // Made by a Job of the JobSet (not by the JobSet itself), gated with its nodes.
        let mut p = pod("gj-uid", "train-workers-0");
        let labels = p.metadata.labels.as_mut().unwrap();
        labels.insert(crate::workloads::JOBSET_NAME_LABEL.into(), "train".into());
        p.metadata.annotations = Some(
            [(
                crate::workloads::NODES_ANNOTATION.to_string(),
                "gpu-b,gpu-a".to_string(),
            )]
            .into(),
        );
        p.spec.as_mut().unwrap().scheduling_gates = Some(vec![
            k8s_openapi::api::core::v1::PodSchedulingGate {
                name: crate::workloads::PLACEMENT_GATE.into(),
            },
            k8s_openapi::api::core::v1::PodSchedulingGate {
                name: "example.com/other".into(),
            },
        ]);
        let out = mutate(&p, &w).expect("mutated");
        let spec = out.spec.as_ref().unwrap();
        let gates: Vec<&str> = spec
            .scheduling_gates
            .iter()
            .flatten()
            .map(|g| g.name.as_str())
            .collect();
        assert_eq!(
            gates,
            ["example.com/other"],
            "only Spillway's gate is lifted"
        );
        let terms = &spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        let pinned: Vec<(&str, Vec<String>)> = terms
            .iter()
            .flat_map(|t| t.match_fields.iter().flatten())
            .map(|f| (f.key.as_str(), f.values.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            pinned,
            [
                ("metadata.name", vec!["gpu-a".to_string()]),
                ("metadata.name", vec!["gpu-b".to_string()])
            ]
        );
        assert!(env(&out).contains_key("OTEL_SERVICE_NAME"));
        // A pod of another JobSet claiming the job is left alone.
        let mut stranger = p.clone();
        stranger
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(crate::workloads::JOBSET_NAME_LABEL.into(), "other".into());
        assert!(mutate(&stranger, &w).is_none());
    }
}
