//! The life of a GpuJob that stands for a workload (`spec.workloadRef`): its workload's
//! controller makes and replaces its pods, so a failed pod is that controller's to retry, and
//! the job has finished when the workload says so (mirrored on the GpuJob,
//! [`crate::workloads::FINISHED_ANNOTATION`]).

use super::*;
use crate::world::job::Clock;

fn time_of(at: Option<&str>, clock: &mut Clock) -> Time {
    at.and_then(|t| {
        serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(
            serde_json::Value::String(t.to_string()),
        )
        .ok()
    })
    .map(|t| millis(&t))
    .unwrap_or_else(|| {
        clock.used.now = true;
        clock.at
    })
}

/// Whether `status` (a workload job's, as the caches show it) is the one written for the run
/// `a` assumed: of its attempt, and running in its pool on its nodes (in any order), or ended.
/// Until the caches show it, the run's nodes, pool and start come from the assumption: read
/// from an older status they would be written over the run's, then back again when the run's
/// showed, at every watch round trip of a lagging cache.
pub fn shows_run(status: Option<&spillway_api::GpuJobStatus>, a: &Assumed) -> bool {
    status.is_some_and(|s| {
        s.restarts.unwrap_or(0).max(0) as u32 == a.attempt
            && match s.phase {
                Some(JobPhase::Succeeded | JobPhase::Failed) => true,
                Some(JobPhase::Running) => {
                    s.pool.as_ref() == Some(&a.pool) && same_nodes(&s.nodes, &a.nodes)
                }
                _ => false,
            }
    })
}

/// Whether `a` and `b` name the same nodes as often, in any order.
fn same_nodes(a: &[String], b: &[String]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// The job's life, from the workload's mirrored end, its pods and what the controller assumed.
pub(super) fn lifecycle(
    job: &GpuJob,
    attempt: u32,
    replicas: u32,
    pods: &[&Arc<Pod>],
    assumed: Option<&Assumed>,
    pool_of: &dyn Fn(&str) -> Option<String>,
    clock: &mut Clock,
) -> Lifecycle {
    let status = job.status.as_ref();
    if let Some(end) = crate::workloads::finished_of(job) {
        let at = time_of(end.at.as_deref(), clock);
        return if end.succeeded() {
            Lifecycle::Succeeded { at }
        } else {
            Lifecycle::Failed {
                at,
                reason: "WorkloadFailed",
                message: format!("Its workload failed: {}", end.message),
            }
        };
    }
    let this_attempt = status.and_then(|s| s.restarts).unwrap_or(0).max(0) as u32 == attempt;
    // A run assumed starts when the assumption says, unless its status is shown (written by
    // an earlier leader, say).
    let started = match assumed {
        Some(a) if !shows_run(status, a) => None,
        _ => status.and_then(|s| s.started_at.as_ref()),
    };
    let known_start = started.map(millis).or(assumed.map(|a| a.at)).or_else(|| {
        pods.iter()
            .filter_map(|p| p.metadata.creation_timestamp.as_ref())
            .map(millis)
            .min()
    });
    // Not started until its controller made a pod from the placement: a run that did not
    // land (refused, or the workload suspended again) leaves it waiting to be placed again,
    // whatever its status says.
    if pods.is_empty() && assumed.is_none() {
        return Lifecycle::Pending;
    }
    let started_at = known_start.unwrap_or_else(|| {
        clock.used.now = true;
        clock.at
    });
    if let Some(max) = job
        .spec
        .max_runtime
        .as_deref()
        .and_then(|m| core::Duration::parse(m).ok())
    {
        let ends = started_at + max;
        if ends > clock.at {
            clock.used.until = Some(ends);
        } else {
            clock.used.now = true;
            return Lifecycle::Failed {
                at: clock.at,
                reason: "MaxRuntimeExceeded",
                message: format!("The job ran past its maxRuntime of {max} and was stopped."),
            };
        }
    }
    // Its replicas' nodes: those its live pods are on, then the ones the start chose (assumed,
    // else written in its status) and no live pod is on (the pods' controller binds them to
    // the chosen nodes in any order; a pod not made or not bound yet keeps its node), then
    // those of pods that finished. A replica whose pod finished while others run keeps its
    // chosen node: a Job with more completions than parallelism makes it a new pod there.
    let mut live: Vec<&Arc<Pod>> = (pods.iter().copied())
        .filter(|p| pod_phase(p) != "Failed")
        .collect();
    live.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut nodes: Vec<String> = (live.iter())
        .filter(|p| pod_active(p))
        .filter_map(|p| pod_node(p))
        .collect();
    let said = assumed
        .map(|a| &a.nodes)
        .or_else(|| status.filter(|_| this_attempt).map(|s| &s.nodes));
    let mut chosen = said.cloned().unwrap_or_default();
    for n in &nodes {
        if let Some(at) = chosen.iter().position(|c| c == n) {
            chosen.remove(at);
        }
    }
    let finished = (live.iter())
        .filter(|p| !pod_active(p))
        .filter_map(|p| pod_node(p));
    for n in chosen.into_iter().chain(finished) {
        if nodes.len() >= replicas as usize {
            break;
        }
        nodes.push(n);
    }
    nodes.truncate(replicas as usize);
    // Said in the order the start said them, when they are the same nodes: pods bound in
    // another order change nothing.
    if let Some(said) = said
        && same_nodes(said, &nodes)
    {
        nodes.clone_from(said);
    }
    let active: Vec<&&Arc<Pod>> = live.iter().filter(|p| pod_active(p)).collect();
    let all_running =
        live.len() >= replicas as usize && active.iter().all(|p| pod_phase(p) == "Running");
    Lifecycle::Running {
        pool: assumed
            .map(|a| a.pool.clone())
            .or_else(|| nodes.first().and_then(|n| pool_of(n)))
            .or_else(|| status.and_then(|s| s.pool.clone())),
        started_at,
        all_running,
        nodes,
    }
}
