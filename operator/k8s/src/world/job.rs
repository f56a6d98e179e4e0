//! One GpuJob's view and its job for the core, from the job, the pods labelled with it and the
//! facts of the cluster it reads (its queue, its namespace, the nodes its pods sit on). What
//! it read of the clock is told ([`ClockUse`]), so that a view can be kept across turns
//! ([`super::memo`]) for as long as it stays true.

use crate::hashing::HashMap;

use super::*;

/// What one view read of the clock.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct ClockUse {
    /// `now` itself went into it (a time the objects do not carry, a failure or success
    /// being timed): it holds for this turn only.
    pub now: bool,
    /// It changes when the clock reaches this (a running job's `maxRuntime`).
    pub until: Option<Time>,
}

/// The turn's clock, and what one view read of it.
pub(super) struct Clock {
    pub at: Time,
    pub used: ClockUse,
}

impl ClockUse {
    /// Whether the view still holds at `now`, as far as the clock goes.
    pub fn holds_at(&self, now: Time) -> bool {
        !self.now && self.until.is_none_or(|u| now < u)
    }
}

/// The cluster's facts one turn's views are derived from.
pub(super) struct Facts<'a> {
    pub inputs: &'a Inputs,
    pub assumed: &'a HashMap<String, Assumed>,
    pub attempt_floor: &'a HashMap<String, u32>,
    pub namespaces: HashMap<&'a str, &'a Arc<Namespace>>,
    pub queues: HashMap<&'a str, &'a Arc<GpuQueue>>,
    /// Every node by name: its place in `Inputs::nodes`, whether its `Ready` condition is
    /// true, and the valid pool it belongs to.
    pub nodes: HashMap<&'a str, NodeFact<'a>>,
    /// The valid pools, as the core sees them.
    pub pools: &'a [core::Pool],
    pub now: Time,
}

/// What a view reads of one node, and where the node is in `Inputs::nodes`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct NodeFact<'a> {
    pub at: usize,
    pub ready: bool,
    pub pool: Option<&'a String>,
}

/// What a view reads of a pod's node: `None` when the pod names no node; else whether the node
/// exists, is Ready, and its pool.
pub(super) type Seen<'a> = Option<(bool, bool, Option<&'a String>)>;

/// What a view reads of a node its pod names, from the node's facts (none: it does not exist).
pub(super) fn seen_of<'a>(fact: Option<&NodeFact<'a>>) -> (bool, bool, Option<&'a String>) {
    fact.map_or((false, false, None), |f| (true, f.ready, f.pool))
}

/// A job's view, its job for the core (when the core sees it), and what they read.
pub(super) struct Derived {
    pub view: JobView,
    pub core: Option<core::Job>,
    pub clock: ClockUse,
    /// It read the cloud needs (it waits, so a need of its attempt makes it provisioning).
    pub reads_needs: bool,
}

impl Facts<'_> {
    /// What a view reads of `pod`'s node.
    pub fn seen(&self, pod: &Pod) -> Seen<'_> {
        pod_node_name(pod).map(|n| seen_of(self.nodes.get(n)))
    }

    fn dead_node(&self, p: &Pod) -> bool {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        node.is_some_and(|n| !self.nodes.get(n).is_some_and(|f| f.ready))
    }

    /// `job`'s view; `group` holds the pods labelled with it, in the caches' order.
    pub fn derive(&self, job: &Arc<GpuJob>, id: String, group: &[&Arc<Pod>]) -> Derived {
        let now = self.now;
        let mut clock = Clock {
            at: now,
            used: ClockUse::default(),
        };
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let status = job.status.as_ref();
        let attempt = status.and_then(|s| s.restarts).unwrap_or(0).max(0) as u32;
        let attempt = attempt.max(self.attempt_floor.get(&id).copied().unwrap_or(0));
        let queued_at = status
            .and_then(|s| s.queued_at.as_ref())
            .or(job.metadata.creation_timestamp.as_ref())
            .map(millis)
            .unwrap_or_else(|| {
                clock.used.now = true;
                now
            });
        let mut pods: Vec<&Arc<Pod>> = Vec::new();
        let mut surplus: Vec<&Arc<Pod>> = Vec::new();
        // Some pod of it is still stopping.
        let mut stopping = false;
        for &pod in group {
            if !owned_by(pod, job) {
                continue;
            }
            if pod.metadata.deletion_timestamp.is_some() {
                stopping |= pod_active(pod) && !self.dead_node(pod);
                continue;
            }
            if pod_attempt(pod) == Some(attempt) {
                pods.push(pod);
            } else if pod_active(pod) {
                surplus.push(pod);
            }
        }
        let converted = convert::job(job, queued_at);
        let mut invalid = match &converted {
            Err(e) => Some(e.to_string()),
            Ok(_) => crate::pods::check(job)
                .err()
                .or_else(|| managed_problem(self.inputs.job_namespaces.as_deref(), ns))
                .or_else(|| {
                    self.queues
                        .get(job.spec.queue.as_str())
                        .and_then(|q| admission_problem(q, ns, &self.namespaces))
                }),
        };
        let replicas = job.spec.replicas.max(1) as u32;
        let pool_of = |node: &str| self.nodes.get(node).and_then(|f| f.pool).cloned();
        let assumed = self.assumed.get(&id);
        let unseen = unseen_run(job, attempt, &self.inputs.unseen_pools);
        let mut lifecycle =
            if self.inputs.finished.contains(&id) || job.metadata.deletion_timestamp.is_some() {
                Lifecycle::Done
            } else if let Some(run) = unseen.clone() {
                run
            } else {
                lifecycle(job, attempt, replicas, &pods, assumed, &pool_of, &mut clock)
            };
        // A replica whose node is gone (machine lost, spot instance reclaimed) is lost, even
        // before the pod garbage collector removes its pod; so is one placed on a node that
        // went away before the pod was bound (it can never be scheduled).
        if let Lifecycle::Running { .. } = lifecycle
            && unseen.is_none()
            && let Some(gone) = pods
                .iter()
                .filter(|p| pod_active(p))
                .filter_map(|p| pod_node_name(p))
                .find(|n| !self.nodes.contains_key(n))
        {
            let message = match crate::labels::split_node(gone) {
                Some((pool, node)) => format!(
                    "Node {node} of cluster pool {pool}, where one of its replicas runs, is gone (or its cluster has not answered for the pool's lostAfter)."
                ),
                None => format!("Node {gone} of one of its replicas is gone."),
            };
            lifecycle = Lifecycle::Broken { message };
        }
        let reads_needs = lifecycle == Lifecycle::Pending;
        if lifecycle == Lifecycle::Pending
            && let Some(pool) = self.inputs.needs.get(&format!("{id}#{attempt}"))
        {
            lifecycle = Lifecycle::Provisioning { pool: pool.clone() };
        }
        if lifecycle == Lifecycle::Pending
            && let Some(st) = status.filter(|s| s.phase == Some(JobPhase::Suspended))
            && let Some(pool) = st.pool.clone()
            && !st.nodes.is_empty()
        {
            lifecycle = Lifecycle::Suspended {
                nodes: st.nodes.clone(),
                pool,
                ready: !stopping && !surplus.iter().any(|p| pod_active(p)),
            };
        }
        match &lifecycle {
            Lifecycle::Done | Lifecycle::Failed { .. } | Lifecycle::Broken { .. } => {
                surplus.extend(pods.iter().filter(|p| pod_active(p)));
            }
            Lifecycle::Succeeded { .. }
            | Lifecycle::Pending
            | Lifecycle::Provisioning { .. }
            | Lifecycle::Running { .. }
            | Lifecycle::Suspended { .. } => {}
        }
        let queue = self.queues.get(job.spec.queue.as_str());
        if invalid.is_none() && lifecycle == Lifecycle::Pending {
            invalid = queue.and_then(|q| priority_problem(q, job));
        }
        let core = match (invalid.is_none(), converted) {
            (true, Ok(mut cj)) => {
                cj.attempt = attempt;
                let failures = crate::labels::environment_failures(job);
                if failures >= crate::labels::MAX_ENVIRONMENT_FAILURES {
                    cj.cloud_closed = Some(format!(
                        "{failures} machines launched for it joined without meeting its requirements (their nodes did not state them, or stated less; is GPU feature discovery running on the cloud nodes?): no more are launched for it until its spec changes"
                    ));
                }
                if let Some(q) = queue {
                    cj.priority = cj.priority.min(q.spec.max_priority);
                }
                let state = match &lifecycle {
                    Lifecycle::Pending => Some(JobState::Pending),
                    Lifecycle::Suspended { nodes, pool, ready } => Some(JobState::Suspended {
                        nodes: nodes.clone(),
                        pool: pool.clone(),
                        ready: *ready,
                    }),
                    Lifecycle::Provisioning { pool } => Some(JobState::Provisioning {
                        need: cj.need_key(),
                        pool: pool.clone(),
                    }),
                    Lifecycle::Running {
                        nodes,
                        pool,
                        started_at,
                        ..
                    } => {
                        let environment = pool
                            .as_ref()
                            .and_then(|p| self.pools.iter().find(|c| &c.name == p))
                            .map_or(spillway_core::Environment::Private, |p| p.environment());
                        Some(JobState::Running {
                            nodes: nodes.clone(),
                            started_at: *started_at,
                            environment,
                        })
                    }
                    _ => None,
                };
                state.map(|s| {
                    cj.state = s;
                    cj
                })
            }
            _ => None,
        };
        Derived {
            view: JobView {
                job: job.clone(),
                id,
                attempt,
                queued_at,
                pods: pods.into_iter().cloned().collect(),
                surplus_pods: surplus.into_iter().cloned().collect(),
                lifecycle,
                invalid,
                trace_stored: crate::telemetry::of_job(job).1,
            },
            core,
            clock: clock.used,
            reads_needs,
        }
    }
}

/// GPUs a view takes or gives back beyond what its pods in the caches count for: its surplus
/// pods are on their way out; pods being created for an assumed start count against their
/// nodes until visible. Whether it added any node's entry.
pub(super) fn add_usage(
    view: &JobView,
    assumed: Option<&Assumed>,
    used: &mut HashMap<String, u32>,
    releasing: &mut HashMap<String, u32>,
) -> bool {
    let mut added = false;
    for pod in view.surplus_pods.iter().filter(|p| pod_active(p)) {
        if let Some(node) = pod_node_name(pod) {
            *releasing.entry(node.to_string()).or_default() += pod_gpus(pod);
            added = true;
        }
    }
    if view.job.spec.workload_ref.is_some() {
        // A workload's pods carry no replica number and its controller binds them in any
        // order: its replicas' nodes (`Lifecycle::Running`) that no live pod of it is bound
        // to (pods not made yet, made and not scheduled, or to be made again where one
        // finished) are taken by it, the rest by its pods.
        if let Lifecycle::Running { nodes, .. } = &view.lifecycle {
            let mut bound: Vec<&str> = (view.pods.iter())
                .filter(|p| pod_active(p))
                .filter_map(|p| pod_node_name(p))
                .collect();
            for node in nodes {
                match bound.iter().position(|b| b == node) {
                    Some(at) => {
                        bound.swap_remove(at);
                    }
                    None => {
                        *used.entry(node.clone()).or_default() +=
                            view.job.spec.gpus_per_replica.max(0) as u32;
                        added = true;
                    }
                }
            }
        }
        return added;
    }
    if let (Some(a), Lifecycle::Running { .. }) = (assumed, &view.lifecycle) {
        let visible: Vec<u32> = view.pods.iter().filter_map(|p| pod_replica(p)).collect();
        for (r, node) in a.nodes.iter().enumerate() {
            if !visible.contains(&(r as u32)) {
                *used.entry(node.clone()).or_default() +=
                    view.job.spec.gpus_per_replica.max(0) as u32;
                added = true;
            }
        }
    }
    added
}
