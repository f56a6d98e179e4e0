//! A job's life (queued, running, broken, finished, ...) read from its status, its pods and what
//! the controller assumed it started.

use super::*;
use crate::world::job::Clock;

/// Earliest `finishedAt` of a pod's terminated containers, else now.
fn pod_finished_at(pod: &Pod, now: Time) -> Time {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(millis)
        .max()
        .unwrap_or(now)
}

/// The job's life, from its status, its pods and what the controller assumed.
pub(super) fn lifecycle(
    job: &GpuJob,
    attempt: u32,
    replicas: u32,
    pods: &[&Arc<Pod>],
    assumed: Option<&Assumed>,
    pool_of: &dyn Fn(&str) -> Option<String>,
    clock: &mut Clock,
) -> Lifecycle {
    let now = clock.at;
    let status = job.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase),
        Some(JobPhase::Succeeded | JobPhase::Failed)
    ) {
        return Lifecycle::Done;
    }
    if job.spec.workload_ref.is_some() {
        return super::workload::lifecycle(job, attempt, replicas, pods, assumed, pool_of, clock);
    }
    let known_start = status
        .and_then(|s| s.started_at.as_ref())
        .map(millis)
        .or(assumed.map(|a| a.at))
        .or_else(|| {
            pods.iter()
                .filter_map(|p| p.metadata.creation_timestamp.as_ref())
                .map(millis)
                .min()
        });
    // Read only where it is used, so that a job that needs none does not read the clock.
    let started_at = |clock: &mut Clock| {
        known_start.unwrap_or_else(|| {
            clock.used.now = true;
            now
        })
    };
    if pods
        .iter()
        .any(|p| matches!(pod_phase(p), "Failed" | "Succeeded"))
    {
        // Timed by its pods' end, else by the clock; it is written as finished at once.
        clock.used.now = true;
    }
    if let Some(failed) = pods.iter().find(|p| pod_phase(p) == "Failed") {
        let why = failed
            .status
            .as_ref()
            .and_then(|s| s.message.clone().or(s.reason.clone()))
            .unwrap_or_else(|| "its containers exited with an error".to_string());
        return Lifecycle::Failed {
            at: pod_finished_at(failed, now),
            reason: "ReplicaFailed",
            message: format!("Replica pod {} failed: {why}", failed.name_any()),
        };
    }
    if pods.len() as u32 >= replicas && pods.iter().all(|p| pod_phase(p) == "Succeeded") {
        let at = pods
            .iter()
            .map(|p| pod_finished_at(p, now))
            .max()
            .unwrap_or(now);
        return Lifecycle::Succeeded { at };
    }
    if let Some(max) = job
        .spec
        .max_runtime
        .as_deref()
        .and_then(|m| core::Duration::parse(m).ok())
        && !pods.is_empty()
    {
        let ends = started_at(clock) + max;
        if ends > now {
            clock.used.until = Some(ends);
        } else {
            clock.used.now = true;
            return Lifecycle::Failed {
                at: now,
                reason: "MaxRuntimeExceeded",
                message: format!("The job ran past its maxRuntime of {max} and was stopped."),
            };
        }
    }
    if let Some(a) = assumed {
        // Pods on their way: the assumption holds until they are all visible.
        return Lifecycle::Running {
            nodes: a.nodes.clone(),
            pool: Some(a.pool.clone()),
            started_at: started_at(clock),
            all_running: false,
        };
    }
    if pods.is_empty() {
        // Started in this attempt (a stale status of an earlier one, the cache behind a requeue,
        // says nothing), yet no pod left: lost with their node, or deleted.
        let this_attempt = status.and_then(|s| s.restarts).unwrap_or(0).max(0) as u32 == attempt;
        if this_attempt && status.and_then(|s| s.phase) == Some(JobPhase::Running) {
            return Lifecycle::Broken {
                message: format!(
                    "None of its {replicas} replica pod(s) is left (lost with their node, or deleted)."
                ),
            };
        }
        return Lifecycle::Pending;
    }
    let mut seen = vec![false; replicas as usize];
    for p in pods {
        if let Some(r) = pod_replica(p)
            && let Some(slot) = seen.get_mut(r as usize)
        {
            *slot = true;
        }
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Lifecycle::Broken {
            message: format!(
                "Replica {missing} of {replicas} has no pod (lost with its node, deleted, or never created)."
            ),
        };
    }
    let mut nodes: Vec<(u32, String)> = pods
        .iter()
        .filter_map(|p| Some((pod_replica(p)?, pod_node(p)?)))
        .collect();
    nodes.sort();
    let nodes: Vec<String> = nodes.into_iter().map(|(_, n)| n).collect();
    let pool = nodes.first().and_then(|n| pool_of(n));
    Lifecycle::Running {
        pool,
        started_at: started_at(clock),
        all_running: pods.iter().all(|p| pod_phase(p) != "Pending"),
        nodes,
    }
}

/// Jobs per queue and phase, for metrics and queue status.
pub fn phase_of(view: &JobView) -> JobPhase {
    match &view.lifecycle {
        Lifecycle::Pending | Lifecycle::Broken { .. } => JobPhase::Queued,
        Lifecycle::Provisioning { .. } => JobPhase::Provisioning,
        Lifecycle::Suspended { .. } => JobPhase::Suspended,
        Lifecycle::Running { .. } => JobPhase::Running,
        Lifecycle::Succeeded { .. } => JobPhase::Succeeded,
        Lifecycle::Failed { .. } => JobPhase::Failed,
        Lifecycle::Done => view
            .job
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(JobPhase::Succeeded),
    }
}

/// The life of a job whose status says it runs, in this attempt, in a cluster pool this
/// operator has not seen yet ([`Inputs::unseen_pools`]): running as that status says, on the
/// nodes it names. None for any other job.
pub(super) fn unseen_run(
    job: &GpuJob,
    attempt: u32,
    unseen: &crate::hashing::HashSet<String>,
) -> Option<Lifecycle> {
    let s = job.status.as_ref()?;
    let pool = s.pool.as_ref().filter(|p| unseen.contains(*p))?;
    let this_attempt = s.restarts.unwrap_or(0).max(0) as u32 == attempt;
    if s.phase != Some(JobPhase::Running) || !this_attempt {
        return None;
    }
    Some(Lifecycle::Running {
        nodes: s.nodes.clone(),
        pool: Some(pool.clone()),
        started_at: s.started_at.as_ref().map(millis)?,
        all_running: true,
    })
}
