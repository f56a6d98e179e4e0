//! `explain gpujob NAME`: one decision explained from the live cluster. A labelled workload
//! (`explain job NAME`, `explain jobset/NAME`, `explain trainjob/NAME`,
//! `explain podgroup/NAME`, or `explain pod/NAME` for a pod of a group) is explained through
//! the GpuJob that stands for it.

use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue};
use spillway_k8s::world::{self, Inputs};
use spillway_policy::PolicyEngine;

use super::{ClusterArgs, Failure, client, opt};
use crate::explain::{ExplainArgs, fail, print_decision, print_rules};

/// `explain gpujob NAME`: the recorded decision, then what the core decides with the cluster
/// as it is now, with every rule evaluated.
pub fn explain_live(args: &ExplainArgs) -> ExitCode {
    let name = match args.target.as_slice() {
        [kind, name] => gpu_job_of(kind, name),
        [one] => one
            .split_once('/')
            .and_then(|(kind, name)| gpu_job_of(kind, name)),
        _ => None,
    };
    let Some(name) = name else {
        return fail(format!(
            "cannot explain {:?}: give `gpujob NAME` or `gpujob/NAME`, or a labelled workload's (`job NAME`, `jobset NAME`, `trainjob NAME`, `podgroup NAME`, `pod NAME`)",
            args.target.join(" ")
        ));
    };
    let cluster = ClusterArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let namespace = args.namespace.clone();
    super::run(|| async move { explain_job(&cluster, namespace, &name).await })
}

/// What `kind NAME` names: a GpuJob.
#[derive(Debug, PartialEq)]
enum Target {
    /// By its name: a GpuJob's own, or the one that stands for a labelled workload.
    Job(String),
    /// The one that stands for the group of pod NAME (read from the cluster).
    GroupOf(String),
}

/// The GpuJob `kind NAME` names: a GpuJob's own name, or the one that stands for a labelled
/// workload of that kind (kubectl's spellings: `job`, `jobs`, `job.batch`, `jobset`, ...; a pod
/// group by `podgroup NAME`, or by one of its pods).
fn gpu_job_of(kind: &str, name: &str) -> Option<Target> {
    let kind = kind.to_ascii_lowercase();
    match kind.as_str() {
        "gpujob" | "gpujobs" | "gj" | "gpujob.spillway.io" | "gpujobs.spillway.io" => {
            return Some(Target::Job(name.to_string()));
        }
        "podgroup" | "podgroups" | "pod-group" => {
            return Some(Target::Job(spillway_k8s::workloads::gpu_job_name(
                "Pod", name,
            )));
        }
        "pod" | "pods" | "po" => return Some(Target::GroupOf(name.to_string())),
        _ => {}
    }
    let w = spillway_k8s::workloads::kinds().iter().find(|k| {
        let singular = k.kind().to_ascii_lowercase();
        [singular.clone(), k.plural().to_string()]
            .iter()
            .any(|s| kind == *s || kind == format!("{s}.{}", k.group()))
    })?;
    Some(Target::Job(spillway_k8s::workloads::gpu_job_name(
        w.kind(),
        name,
    )))
}

async fn list_all<K>(client: &Client) -> Result<Vec<Arc<K>>, Failure>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(Arc::new)
        .collect())
}

async fn explain_job(
    cluster: &ClusterArgs,
    namespace: Option<String>,
    target: &Target,
) -> Result<(), Failure> {
    let client = client(cluster).await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let name = match target {
        Target::Job(name) => name.clone(),
        Target::GroupOf(pod) => {
            let p = Api::<Pod>::namespaced(client.clone(), &ns)
                .get_opt(pod)
                .await?
                .ok_or_else(|| {
                    Failure::Cluster(anyhow::anyhow!("pod {pod:?} not found in namespace {ns:?}"))
                })?;
            let labels = p.metadata.labels.unwrap_or_default();
            if !labels.contains_key(spillway_k8s::workloads::QUEUE_LABEL) {
                return Err(Failure::Cluster(anyhow::anyhow!(
                    "pod {pod:?} is not labelled {}: Spillway does not queue it",
                    spillway_k8s::workloads::QUEUE_LABEL
                )));
            }
            let group = (labels.get(spillway_k8s::workloads::pod_group::GROUP_LABEL))
                .map_or(pod.as_str(), String::as_str);
            spillway_k8s::workloads::gpu_job_name("Pod", group)
        }
    };
    let name = name.as_str();
    let job = Api::<GpuJob>::namespaced(client.clone(), &ns)
        .get_opt(name)
        .await?
        .ok_or_else(|| {
            Failure::Cluster(anyhow::anyhow!(
                "gpujob {name:?} not found in namespace {ns:?}"
            ))
        })?;
    let spec = &job.spec;
    let st = job.status.clone().unwrap_or_default();
    if let Some(w) = &spec.workload_ref {
        println!("Stands for: {} {ns}/{} ({})", w.kind, w.name, w.api_version);
    }
    println!(
        "GpuJob {ns}/{name}: {} x {} GPUs in queue {}, placement {:?}, priority {}",
        spec.replicas, spec.gpus_per_replica, spec.queue, spec.placement, spec.priority
    );
    println!(
        "Phase: {}   Where: {}   Pool: {}   Nodes: {}",
        opt(st.phase.map(|p| format!("{p:?}"))),
        opt(st.environment.map(|e| e.as_str().to_string())),
        opt(st.pool.clone()),
        if st.nodes.is_empty() {
            "-".into()
        } else {
            st.nodes.join(",")
        }
    );
    match &st.decision {
        Some(d) => {
            println!(
                "Recorded decision: {} ({}){}",
                opt(d.outcome.clone()),
                opt(d.reason.clone()),
                d.time
                    .as_ref()
                    .map(|t| format!(" at {}", t.0))
                    .unwrap_or_default()
            );
            if let Some(m) = &d.message {
                println!("  {m}");
            }
            if let Some(r) = &d.rule {
                println!("  Deciding rule: {r}");
            }
            if let Some(o) = &d.offering {
                println!(
                    "  Offering: {} {} in {} at ${:.2}/h",
                    o.instance_type,
                    o.capacity_type,
                    o.zone.clone().unwrap_or_default(),
                    o.hourly_price
                );
            }
        }
        None => println!("Recorded decision: none yet (is the operator running?)"),
    }
    for c in &st.conditions {
        println!(
            "Condition {}={} ({}): {}",
            c.type_, c.status, c.reason, c.message
        );
    }

    // The situation now, as the operator would see it.
    let inputs = Inputs {
        jobs: list_all::<GpuJob>(&client).await?,
        queues: list_all::<GpuQueue>(&client).await?,
        pools: list_all::<ComputePool>(&client).await?,
        datasets: list_all::<Dataset>(&client).await?,
        nodes: list_all::<Node>(&client).await?,
        pods: list_all::<Pod>(&client).await?,
        namespaces: list_all::<Namespace>(&client).await?,
        ..Inputs::default()
    };
    let policies: Vec<BurstPolicy> = list_all::<BurstPolicy>(&client)
        .await?
        .iter()
        .map(|p| (**p).clone())
        .collect();
    let engine = PolicyEngine::compile(&policies).map_err(|errors| {
        Failure::Cluster(anyhow::anyhow!(
            "the cluster's BurstPolicies do not compile:\n{}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ))
    })?;
    let now = spillway_k8s::clock::now();
    let built = world::build(
        &inputs,
        &Default::default(),
        &Default::default(),
        spillway_core::Settings::default(),
        now,
    );
    let id = format!("{ns}/{name}");
    if let Some(why) = built.jobs.get(id.as_str()).and_then(|v| v.invalid.clone()) {
        println!("Now: the job cannot run as written: {why}");
        return Ok(());
    }
    let plan = spillway_core::decide(&built.snapshot, &engine, now);
    println!();
    match plan.decision(&id) {
        Some(d) => {
            println!("If decided now:");
            print_decision(d);
        }
        None => println!("Now: no decision to make (the job is placed or finished)."),
    }
    // The rule report is for the first job of a snapshot: put this one first.
    let mut snapshot = built.snapshot.clone();
    if let Some(i) = snapshot.jobs.iter().position(|j| j.id == id) {
        let j = snapshot.jobs.remove(i);
        snapshot.jobs.insert(0, j);
        print_rules(&engine.rule_report(&snapshot, now));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Target, gpu_job_of};

    fn job(name: &str) -> Option<Target> {
        Some(Target::Job(name.into()))
    }

    #[test]
    fn a_workload_is_explained_through_the_gpu_job_that_stands_for_it() {
        assert_eq!(gpu_job_of("gpujob", "train"), job("train"));
        assert_eq!(gpu_job_of("GJ", "train"), job("train"));
        for kind in ["job", "jobs", "job.batch", "Job"] {
            assert_eq!(gpu_job_of(kind, "train"), job("job-train"), "{kind}");
        }
        for kind in ["jobset", "jobsets", "jobset.jobset.x-k8s.io"] {
            assert_eq!(gpu_job_of(kind, "train"), job("jobset-train"), "{kind}");
        }
        assert_eq!(gpu_job_of("podgroup", "train"), job("pod-train"));
        assert_eq!(
            gpu_job_of("trainjob.trainer.kubeflow.org", "tune"),
            job("trainjob-tune")
        );
        // A pod: its group, read from the cluster.
        assert_eq!(
            gpu_job_of("pod", "train-0"),
            Some(Target::GroupOf("train-0".into()))
        );
        assert_eq!(gpu_job_of("pod.v1", "train"), None);
        assert_eq!(gpu_job_of("job.apps", "train"), None);
    }
}
