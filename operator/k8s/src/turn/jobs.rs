//! The jobs' part of a turn: starts (assume, then create the pods), each job's status and
//! Events, the pods of finished or broken gangs, and requeueing or failing a broken gang.

use crate::hashing::{HashMap, HashMapExt, HashSet};
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJobStatus, GpuQueue};
use spillway_core::{self as core, Environment, Outcome, Time};

use super::State;
use crate::actions::{Action, StatusKind, StatusPatch};
use crate::metrics::Metrics;
use crate::remote::view as remote;
use crate::status::{self, CostRate};
use crate::world::{self, Assumed, Inputs, JobView, Lifecycle};
use crate::{pods, telemetry};

impl State {
    /// Assumes each start of the plan at once and asks for its pods.
    pub(super) fn starts(
        &mut self,
        plan: &core::Plan,
        built: &mut world::Built,
        pools: &HashMap<String, Arc<ComputePool>>,
        queues: &HashMap<String, Arc<GpuQueue>>,
        metrics: &Metrics,
        now: Time,
    ) {
        for start in &plan.starts {
            let Some(view) = Arc::make_mut(&mut built.jobs).get_mut(start.job.as_str()) else {
                continue;
            };
            // This turn's copy: the view kept for the next build stays as derived.
            let view = Arc::make_mut(view);
            self.assumed.insert(
                start.job.clone(),
                Assumed {
                    attempt: view.attempt,
                    pool: start.pool.clone(),
                    environment: start.environment,
                    nodes: start.nodes.clone(),
                    at: now,
                },
            );
            let was = std::mem::replace(
                &mut view.lifecycle,
                Lifecycle::Running {
                    nodes: start.nodes.clone(),
                    pool: Some(start.pool.clone()),
                    started_at: now,
                    all_running: false,
                },
            );
            let pool = pools.get(&start.pool).cloned();
            if view.job.spec.workload_ref.is_some() {
                // Its workload's controller makes the pods, from the placement written into it
                // (at home) or into its copy (in another cluster); never while a copy of it
                // elsewhere is still there.
                let ran = !self.copies_in_the_way(view)
                    && match pool.as_deref().filter(|p| p.spec.cluster.is_some()) {
                        Some(p) => self.dispatch_workload(view, start, p, queues, &built.snapshot),
                        None => self.run_workload(view, start, pool.as_deref()),
                    };
                if ran {
                    metrics.job_waited(
                        &view.job.spec.queue,
                        now.since(view.queued_at).as_secs_f64(),
                    );
                    self.wait_observed.insert(view.id.clone());
                } else {
                    // Not started: its status and the hold of its workload see it as it was.
                    self.assumed.remove(&start.job);
                    view.lifecycle = was;
                }
                continue;
            }
            self.started_again(&start.job);
            let cluster = pool.as_ref().and_then(|p| p.spec.cluster.as_ref());
            let home = self.remote.home.clone();
            if cluster.is_some() && home.is_none() {
                // Nothing is made in another cluster without this cluster's id on it (what
                // carries none could not be told from another home cluster's).
                tracing::warn!(job = %start.job, "kube-system's uid (this cluster's id) is not known yet; the job is placed again next turn");
                self.assumed.remove(&start.job);
                view.lifecycle = was;
                continue;
            }
            let extras = self.pod_extras(view, pool.as_deref(), queues);
            let mut kept = std::collections::BTreeSet::new();
            for (r, node) in start.nodes.iter().enumerate() {
                // A remote node is seen as POOL/NODE; the pod there names it as that cluster does.
                let node_there = match cluster {
                    Some(_) => crate::labels::split_node(node).map_or(node.as_str(), |(_, n)| n),
                    None => node,
                };
                let mut pod = pods::replica_pod(
                    &view.job,
                    view.attempt,
                    r as u32,
                    node_there,
                    pool.as_deref(),
                );
                let placement = placement_of(start, node, pool.as_deref(), &built.snapshot);
                kept.extend(extras.add_to(&mut pod, &view.job, &placement));
                self.out.push(match cluster {
                    Some(c) => Action::CreateRemotePod {
                        pool: start.pool.clone(),
                        job: start.job.clone(),
                        pod: Box::new(remote::remote_pod(
                            pod,
                            &view.job,
                            &c.namespace,
                            home.as_deref().unwrap_or_default(),
                        )),
                    },
                    None => Action::CreatePod {
                        job: start.job.clone(),
                        pod: Box::new(pod),
                    },
                });
            }
            if !kept.is_empty() {
                let list: Vec<String> = kept.into_iter().collect();
                self.publish(
                    view.job.object_ref(&()),
                    true,
                    "IdentityNotInjected",
                    "Start",
                    format!(
                        "The pod template's own settings were kept where Spillway's identity would have gone: {}. The workload may not find its token.",
                        list.join("; ")
                    ),
                );
            }
            metrics.job_waited(
                &view.job.spec.queue,
                now.since(view.queued_at).as_secs_f64(),
            );
            self.wait_observed.insert(view.id.clone());
        }
    }

    /// Each job's status, Events and cleanup; returns when to turn again at the latest.
    pub(super) fn jobs(
        &mut self,
        plan: &core::Plan,
        built: &world::Built,
        inputs: &Inputs,
        pools: &HashMap<String, Arc<ComputePool>>,
        metrics: &Metrics,
        now: Time,
    ) -> Option<Time> {
        let mut wake: Option<Time> = plan.next_wake;
        let decisions: HashMap<&str, &core::Decision> =
            plan.decisions.iter().map(|d| (d.job.as_str(), d)).collect();
        // The instance behind each cloud node (the first listed, when two claim one node).
        let mut on_node: HashMap<&str, &core::Instance> = HashMap::new();
        for i in &built.snapshot.instances {
            if let Some(n) = i.node.as_deref() {
                on_node.entry(n).or_insert(i);
            }
        }
        let groups = super::placement::groups_by_need(built);
        let mut last_pool: Option<(&str, Option<&Arc<ComputePool>>)> = None;
        for view in built.jobs.values() {
            // A workload's pods are its controller's to delete (it is suspended when they must go).
            if view.job.spec.workload_ref.is_none() {
                for pod in &view.surplus_pods {
                    self.delete_pod(pod);
                }
            }
            self.keep_trace_context(view);
            if self.moved_on(view) {
                // Requeued or suspended this turn: its status is written; the view is stale.
                continue;
            }
            if let Lifecycle::Broken { message } = &view.lifecycle {
                self.broken(view, message, now);
                continue;
            }
            if let Lifecycle::Running { started_at, .. } = &view.lifecycle
                && let Some(max) = view
                    .job
                    .spec
                    .max_runtime
                    .as_deref()
                    .and_then(|m| core::Duration::parse(m).ok())
            {
                let at = *started_at + max;
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
            let pool_name = match &view.lifecycle {
                Lifecycle::Running { pool, .. } => pool.as_ref(),
                _ => view.job.status.as_ref().and_then(|s| s.pool.as_ref()),
            };
            // Jobs of one pool come in runs: the last pool found is compared first.
            let pool_spec = pool_name.and_then(|p| match last_pool {
                Some((name, spec)) if name == p.as_str() => spec,
                _ => {
                    let spec = pools.get(p);
                    last_pool = Some((p.as_str(), spec));
                    spec
                }
            });
            let environment = pool_spec.map(|p| {
                if p.spec.aws.is_some() {
                    Environment::Cloud
                } else if p.spec.cluster.is_some() {
                    Environment::Remote
                } else {
                    Environment::Private
                }
            });
            // A job's GPUs at their pool's price (private or another cluster's).
            let private_rate = pool_spec
                .and_then(|p| match (&p.spec.private, &p.spec.cluster) {
                    (Some(p), _) => p.gpu_cost_per_hour,
                    (None, Some(c)) => Some(c.gpu_cost_per_hour),
                    _ => None,
                })
                .map(|c| {
                    c * view.job.spec.replicas.max(1) as f64
                        * view.job.spec.gpus_per_replica.max(1) as f64
                })
                .unwrap_or(0.0);
            let rate = CostRate {
                hourly_usd: cloud_job_rate(view, &on_node).unwrap_or(0.0) + private_rate,
            };
            let decision = decisions.get(view.id.as_str()).copied();
            if self.remember
                && decision.is_none()
                && self.quiet.get(view).is_some_and(|q| {
                    q.environment == environment && q.hourly_usd == rate.hourly_usd
                })
            {
                // Worked out from the same view, rate and status last turn: nothing to write.
                continue;
            }
            let launched = launched_for(view, &on_node);
            let placed = Placed {
                environment,
                rate,
                launched,
                domain: crate::topology::job_domain(view, &built.snapshot.nodes),
                group: super::placement::group_of(view, &on_node, &groups),
            };
            self.write_job_status(view, decision, placed, metrics, now);
        }
        // What the loop keeps by job is kept only for jobs that exist. Every key was a job's id
        // when it was put in, so while no job left (the same ids as at the last pruning, which
        // kept views tell) there is nothing to prune.
        let ids = self.remember.then(|| self.views.ids_version());
        if ids.is_none() || ids != self.pruned_at {
            let live: HashSet<&str> = built.jobs.keys().map(|k| &**k).collect();
            self.written.jobs.retain(|k, _| live.contains(k.as_str()));
            self.quiet.retain(|k| live.contains(k));
            self.annotated.retain(|k| live.contains(k.as_str()));
            self.attempt_floor.retain(|k, _| live.contains(k.as_str()));
            self.unseen_pods.retain(|k, _| live.contains(k.as_str()));
            self.wait_observed.retain(|k| live.contains(k.as_str()));
            (self.indicators.seen).retain(|k, _| live.contains(k.as_str()));
            self.pruned_at = ids;
        }
        if !self.deleting.is_empty() {
            let copies = (self.remote.copies.iter())
                .chain(&self.remote.orphan_copies)
                .filter(|c| c.object.metadata.deletion_timestamp.is_none())
                .map(|c| c.uid.as_str());
            let active_uids: HashSet<&str> = inputs
                .pods
                .iter()
                .chain(self.remote.orphans.iter().map(|(_, _, p)| p))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.uid.as_deref())
                .chain(copies)
                .collect();
            self.deleting.retain(|u| active_uids.contains(u.as_str()));
        }
        wake
    }

    /// Writes the job's trace context on it, once, unless it carries one already. Not on a
    /// labelled workload's job: its context is the one derived from its uid, which every
    /// replica derives alike, and the write would be one more per job.
    fn keep_trace_context(&mut self, view: &JobView) {
        if matches!(view.lifecycle, Lifecycle::Done)
            || view.job.metadata.deletion_timestamp.is_some()
            || view.job.spec.workload_ref.is_some()
        {
            return;
        }
        if view.trace_stored {
            if !self.annotated.is_empty() {
                self.annotated.remove(&view.id);
            }
            return;
        }
        if self.annotated.contains(&view.id) {
            return;
        }
        self.annotated.insert(view.id.clone());
        let (trace, _) = telemetry::of_job(&view.job);
        self.emit(Action::Annotate {
            namespace: view.job.namespace().unwrap_or_default(),
            name: view.job.name_any(),
            key: telemetry::TRACEPARENT_ANNOTATION.into(),
            value: trace.header(),
        });
    }

    fn delete_pod(&mut self, pod: &k8s_openapi::api::core::v1::Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if !self.deleting.insert(uid.clone()) {
            return;
        }
        self.emit(match remote::origin(pod) {
            Some((pool, namespace)) => Action::DeleteRemotePod {
                pool,
                namespace,
                name: pod.name_any(),
                uid,
                grace_seconds: None,
            },
            None => Action::DeletePod {
                namespace: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                uid,
            },
        });
    }

    /// Whether this turn already moved the job to a later attempt than `view` shows (it was
    /// requeued, preempted or suspended): the view is stale and must not be acted on again.
    pub(super) fn moved_on(&self, view: &JobView) -> bool {
        self.attempt_floor
            .get(&view.id)
            .is_some_and(|a| *a > view.attempt)
    }

    /// Moves the job to its next attempt (its current pods become surplus); returns it.
    pub(super) fn next_attempt(&mut self, view: &JobView) -> u32 {
        let next = view.attempt + 1;
        self.attempt_floor.insert(view.id.clone(), next);
        if let Some(a) = self.assumed.remove(&view.id)
            && view.job.spec.workload_ref.is_none()
            && a.attempt == view.attempt
        {
            // Its start's pods not shown yet may still land: the next attempt waits for them.
            let seen: Vec<u32> = view
                .pods
                .iter()
                .filter_map(|p| world::pod_replica(p))
                .collect();
            self.leave_unseen(&view.id, &a, |r| seen.contains(&r), None);
        }
        next
    }

    /// The view of job `id`, unless this turn has moved it on already.
    pub(super) fn fresh_view<'b>(&self, built: &'b world::Built, id: &str) -> Option<&'b JobView> {
        built
            .jobs
            .get(id)
            .map(|v| &**v)
            .filter(|v| !self.moved_on(v))
    }

    /// The job's status as last written by this loop, else as the cache has it.
    pub(super) fn last_status(&self, view: &JobView) -> GpuJobStatus {
        self.written
            .jobs
            .get(&view.id)
            .cloned()
            .or_else(|| view.job.status.clone())
            .unwrap_or_default()
    }

    /// Evicts the job's live pods of its current attempt, each given `grace_seconds` to stop.
    pub(super) fn evict_pods(&mut self, view: &JobView, grace_seconds: i64) {
        if view.job.spec.workload_ref.is_some() {
            // Its workload is suspended instead (`turn/workloads.rs`): its controller deletes
            // the pods without counting them as failures, as a deletion by anyone else would.
            return;
        }
        for pod in &view.pods {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            if !world::pod_active(pod) || !self.deleting.insert(uid.clone()) {
                continue;
            }
            self.emit(match remote::origin(pod) {
                Some((pool, namespace)) => Action::DeleteRemotePod {
                    pool,
                    namespace,
                    name: pod.name_any(),
                    uid,
                    grace_seconds: Some(grace_seconds),
                },
                None => Action::EvictPod {
                    namespace: pod.namespace().unwrap_or_default(),
                    name: pod.name_any(),
                    uid,
                    grace_seconds,
                },
            });
        }
    }

    pub(super) fn apply_job_status(&mut self, view: &JobView, st: &GpuJobStatus) {
        let before = self.last_status(view);
        self.observe_status(view, &before, st);
        self.quiet.remove(&view.id);
        self.written.jobs.insert(view.id.clone(), st.clone());
        self.emit(Action::ApplyStatus(StatusPatch {
            kind: StatusKind::GpuJob,
            namespace: view.job.namespace(),
            name: view.job.name_any(),
            body: status::apply_body(&view.job, st),
        }));
    }

    fn write_job_status(
        &mut self,
        view: &Arc<JobView>,
        decision: Option<&core::Decision>,
        placed: Placed,
        metrics: &Metrics,
        now: Time,
    ) {
        let Placed {
            environment,
            rate,
            launched,
            domain,
            group,
        } = placed;
        // Build on what was last written, so a write in flight is not repeated.
        let written = self.written.jobs.get(&view.id);
        if view.lifecycle == Lifecycle::Done {
            // Nothing more to write: what was written is forgotten once the cache shows it.
            if written.is_some() && view.job.status.as_ref() == written {
                self.written.jobs.remove(&view.id);
            }
            return;
        }
        let base_status = written.or(view.job.status.as_ref());
        let mut desired = status::desired(view, base_status, decision, environment, rate, now);
        match view.lifecycle {
            Lifecycle::Running { .. } => {
                desired.topology_domain = domain;
                desired.placement_group = group;
            }
            Lifecycle::Provisioning { .. } => {
                desired.topology_domain = None;
                desired.placement_group = group;
            }
            // Where it last ran stays said.
            Lifecycle::Suspended { .. } | Lifecycle::Broken { .. } => {}
            _ => {
                desired.topology_domain = None;
                desired.placement_group = None;
            }
        }
        if Some(&desired) == base_status {
            if written.is_some() && view.job.status.as_ref() == Some(&desired) {
                self.written.jobs.remove(&view.id);
            }
            // Unless the clock moves its cost, the same view, rate and status give the same
            // status at the next turn.
            let costs = rate.hourly_usd != 0.0
                || environment == Some(Environment::Cloud)
                || desired.cost.as_ref().is_some_and(|c| c.hourly_usd != 0.0);
            if !costs {
                let quiet = Quiet {
                    view: view.clone(),
                    environment,
                    hourly_usd: rate.hourly_usd,
                };
                self.quiet.insert(quiet);
            }
            return;
        }
        let before = base_status.cloned().unwrap_or_default();
        self.events_for(view, &before, &desired, metrics);
        self.spans_for(view, &before, &desired, launched, now);
        if matches!(desired.phase, Some(JobPhase::Running))
            && before.phase != Some(JobPhase::Running)
        {
            // Placed by an earlier leader or before a restart: its wait was counted there.
            self.wait_observed.insert(view.id.clone());
        }
        self.apply_job_status(view, &desired);
    }

    fn events_for(
        &mut self,
        view: &JobView,
        before: &GpuJobStatus,
        after: &GpuJobStatus,
        metrics: &Metrics,
    ) {
        let key = |s: &GpuJobStatus| {
            s.decision
                .as_ref()
                .map(|d| (d.outcome.clone(), d.reason.clone(), d.rule.clone()))
        };
        if key(before) != key(after)
            && let Some(d) = &after.decision
        {
            let outcome = d.outcome.clone().unwrap_or_default();
            let reason = d.reason.clone().unwrap_or_default();
            metrics.decision(&outcome, &reason);
            let warning = outcome == Outcome::Reject.as_str();
            self.publish(
                view.job.object_ref(&()),
                warning,
                &reason,
                &outcome,
                d.message.clone().unwrap_or_default(),
            );
        }
        if before.phase != after.phase
            && !self.end_told_by_job_controller(view)
            && let Some(phase @ (JobPhase::Succeeded | JobPhase::Failed)) = after.phase
        {
            let (reason, message) = after
                .conditions
                .iter()
                .find(|c| c.type_ == "Running")
                .map(|c| (c.reason.clone(), c.message.clone()))
                .unwrap_or_default();
            self.publish(
                view.job.object_ref(&()),
                phase == JobPhase::Failed,
                &reason,
                &format!("{phase:?}"),
                message,
            );
        }
    }

    /// A gang with replicas missing: requeue it (restartable, or never fully started) or fail
    /// it; its other pods are being deleted.
    fn broken(&mut self, view: &JobView, message: &str, now: Time) {
        if self.moved_on(view) {
            return;
        }
        let base = self.last_status(view);
        let was_running = base
            .conditions
            .iter()
            .any(|c| c.type_ == "Running" && c.status == "True");
        let mut st = base.clone();
        let generation = view.job.metadata.generation;
        if view.job.spec.restartable || !was_running {
            let next = self.next_attempt(view);
            requeued(&mut st, next);
            // The first failure since it last ran: its recovery counts from here.
            if st.interrupted_at.is_none() {
                st.interrupted_at = Some(crate::clock::k8s_time(now));
            }
            let note = format!("{message} The job is requeued (attempt {next}).");
            status::set_condition(
                &mut st.conditions,
                "Admitted",
                false,
                "Requeued",
                &note,
                generation,
                now,
            );
            status::remove_condition(&mut st.conditions, "Running");
            self.publish(view.job.object_ref(&()), false, "Requeued", "Requeue", note);
        } else {
            st.phase = Some(JobPhase::Failed);
            st.finished_at = Some(crate::clock::k8s_time(now));
            let note = format!("{message} The job is not restartable, so it failed.");
            status::set_condition(
                &mut st.conditions,
                "Running",
                false,
                "ReplicaLost",
                &note,
                generation,
                now,
            );
            status::set_condition(
                &mut st.conditions,
                "Failed",
                true,
                "ReplicaLost",
                &note,
                generation,
                now,
            );
            self.publish(
                view.job.object_ref(&()),
                true,
                "ReplicaLost",
                "Failed",
                note,
            );
        }
        self.apply_job_status(view, &st);
    }

    /// GpuJobs that cannot be read as their type: an `Invalid` condition saying why.
    pub(super) fn unreadable_job(&mut self, u: &world::Unreadable, now: Time) {
        let Some(ns) = u.namespace.clone() else {
            return;
        };
        let key = format!("GpuJob/{ns}/{}", u.name);
        let message = format!("The GpuJob cannot be read: {}", u.error);
        if self.written.unreadable.get(&key) == Some(&message) {
            return;
        }
        self.written.unreadable.insert(key, message.clone());
        let mut st = GpuJobStatus {
            phase: Some(JobPhase::Queued),
            observed_generation: u.generation,
            ..GpuJobStatus::default()
        };
        status::set_condition(
            &mut st.conditions,
            "Invalid",
            true,
            "InvalidSpec",
            &message,
            u.generation,
            now,
        );
        self.emit(Action::ApplyStatus(StatusPatch {
            kind: StatusKind::GpuJob,
            namespace: Some(ns.clone()),
            name: u.name.clone(),
            body: serde_json::json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": u.name, "namespace": ns}, "status": st,
            }),
        }));
    }
}

/// Where one replica of a start runs, for its resource attributes.
pub(super) fn placement_of(
    start: &core::Start,
    node: &str,
    pool: Option<&ComputePool>,
    snapshot: &core::Snapshot,
) -> telemetry::Placement {
    let cloud = pool.and_then(|p| p.spec.aws.as_ref()).and_then(|aws| {
        let i = snapshot
            .instances
            .iter()
            .find(|i| i.node.as_deref() == Some(node))?;
        Some((aws.region.clone(), i.zone.clone(), i.id.clone()))
    });
    telemetry::Placement {
        environment: start.environment.as_str(),
        pool: start.pool.clone(),
        cloud,
        cluster: pool
            .filter(|p| p.spec.cluster.is_some())
            .map(|_| start.pool.clone()),
    }
}

/// A job whose status needed no write, with what it was worked out from: while the job's view,
/// its environment and rate stay the same (and no status of it is written), it needs none.
pub(super) struct Quiet {
    view: Arc<JobView>,
    environment: Option<Environment>,
    hourly_usd: f64,
}

/// The quiet statuses, one per job at most, found by their view's address: a turn looks every
/// job's view up without reading its id (10,000 ids read from memory were a fifth of a quiet
/// turn). An entry holds its view, so no other view can take the address while it is kept.
#[derive(Default)]
pub(super) struct QuietTable {
    by_view: HashMap<usize, Quiet>,
    by_id: HashMap<String, usize>,
}

fn address(view: &JobView) -> usize {
    std::ptr::from_ref(view) as usize
}

impl QuietTable {
    /// The quiet status worked out from this very view.
    fn get(&self, view: &JobView) -> Option<&Quiet> {
        self.by_view.get(&address(view))
    }

    fn insert(&mut self, quiet: Quiet) {
        let at = address(&quiet.view);
        if let Some(last) = self.by_id.insert(quiet.view.id.clone(), at)
            && last != at
        {
            self.by_view.remove(&last);
        }
        self.by_view.insert(at, quiet);
    }

    pub(super) fn remove(&mut self, id: &str) {
        if let Some(at) = self.by_id.remove(id) {
            self.by_view.remove(&at);
        }
    }

    /// Keeps the jobs `live` tells.
    fn retain(&mut self, live: impl Fn(&str) -> bool) {
        let by_view = &mut self.by_view;
        self.by_id.retain(|id, at| {
            let keep = live(id);
            if !keep {
                by_view.remove(at);
            }
            keep
        });
    }
}

/// Where a job runs and what it costs there, for its status.
struct Placed {
    environment: Option<Environment>,
    rate: CostRate,
    /// When its first cloud instance was launched (cloud jobs).
    launched: Option<Time>,
    /// `status.topologyDomain`: the domains of its topology level its replicas run in.
    domain: Option<String>,
    /// `status.placementGroup`: the cluster placement group of its instances.
    group: Option<String>,
}

/// When the first of the instances a running cloud job's replicas sit on was launched.
fn launched_for(view: &JobView, on_node: &HashMap<&str, &core::Instance>) -> Option<Time> {
    let Lifecycle::Running { nodes, .. } = &view.lifecycle else {
        return None;
    };
    nodes
        .iter()
        .filter_map(|n| on_node.get(n.as_str()))
        .map(|i| i.launched_at)
        .min()
}

/// What a cloud job costs per hour: its share of each instance it runs on.
fn cloud_job_rate(view: &JobView, on_node: &HashMap<&str, &core::Instance>) -> Option<f64> {
    let Lifecycle::Running { nodes, .. } = &view.lifecycle else {
        return None;
    };
    let per_replica = view.job.spec.gpus_per_replica.max(1) as f64;
    let mut total = 0.0;
    let mut any = false;
    for n in nodes {
        let Some(i) = on_node.get(n.as_str()) else {
            continue;
        };
        any = true;
        total += i.hourly_price * per_replica / f64::from(i.gpus.max(1));
    }
    any.then_some(total)
}

/// `st` back in its queue on attempt `next`: no placement, no start.
pub(super) fn requeued(st: &mut GpuJobStatus, next: u32) {
    st.restarts = Some(next as i32);
    st.phase = Some(JobPhase::Queued);
    st.nodes = Vec::new();
    st.pool = None;
    st.environment = None;
    st.started_at = None;
    // Its next run is measured afresh (an idle spell, and the warning of it, do not carry
    // over).
    st.utilization = None;
    if st
        .conditions
        .iter()
        .any(|c| c.type_ == "Idle" && c.status == "True" && c.reason == "IdleGPUs")
    {
        status::remove_condition(&mut st.conditions, "Idle");
    }
}
