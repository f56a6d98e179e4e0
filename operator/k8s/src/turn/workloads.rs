//! The workloads' part of a turn ([`crate::workloads`]): the GpuJob that stands for each
//! labelled workload made and kept in step with it (the workload's end mirrored on it); a
//! workload that runs without its GpuJob's placement suspended (held: it was created without
//! the admission webhook, or its job was requeued, preempted or moved); a start of such a
//! GpuJob carried out by running the workload with the placement written into it.

use std::sync::Arc;

use crate::hashing::{HashMap, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::core::DynamicObject;
use spillway_api::ComputePool;
use spillway_api::job::JobPhase;
use spillway_core as core;

use super::State;
use crate::actions::{Action, WorkloadPatch};
use crate::workloads::{self as wl, WorkloadKind};
use crate::world::{self, Inputs, JobView, Lifecycle};

/// What the loop remembers of the workloads between turns.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// This turn's labelled workloads by `namespace/Kind/name`.
    index: HashMap<String, Arc<DynamicObject>>,
    /// The workloads indexed, in the caches' order.
    indexed: Vec<Arc<DynamicObject>>,
    /// Whether this turn's workloads are other ones than the last turn's, not only the same
    /// ones changed (what is kept by workload is pruned of the workloads gone only then).
    others: bool,
    /// The GpuJob last applied for each job id, until the cache shows it.
    sent: HashMap<String, Print>,
    /// The GpuJob each workload (by uid) stands as, or why it cannot, as of the workload
    /// version read: made again only when the workload changes.
    made: HashMap<String, (String, Result<Arc<spillway_api::GpuJob>, String>)>,
    /// What was last found of each workload in step with its GpuJob, by the address of the
    /// workload object (kept in the entry, so the address is not reused while it is there):
    /// while the caches hand out the very same objects, the GpuJob is not made and compared
    /// again, nor the workload's JSON read.
    in_step: HashMap<usize, InStep>,
    /// The names of the last turn's pools that are other clusters (whether a job's pool is
    /// another cluster's decides whether its workload is placed here; the pools' status,
    /// written as jobs start and end, decides nothing of it).
    cluster_pools: Vec<String>,
    /// The workload version (by uid) a suspension was last asked for.
    suspended: HashMap<String, String>,
    /// The last warning told about each workload (by uid).
    warned: HashMap<String, String>,
    /// The version of each gated pod (by `namespace/name`) a pin was last asked for.
    pinned: HashMap<String, String>,
}

struct InStep {
    workload: Arc<DynamicObject>,
    kind: &'static dyn WorkloadKind,
    job: Arc<spillway_api::GpuJob>,
    /// The job's id (`namespace/name`), as the views are keyed.
    id: Arc<str>,
    /// The end mirrored on the job.
    mirrored: Option<String>,
    /// The view with which the workload was last found to need no hold nor run, and what the
    /// loop had assumed for its job then: while both are the same, the pools that are other
    /// clusters too, and the job was not moved on this turn, it needs none again.
    quiet: Option<(Arc<JobView>, Option<world::Assumed>)>,
}

impl std::fmt::Debug for InStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InStep")
            .field("workload", &self.workload.metadata.uid)
            .field("kind", &self.kind.kind())
            .field("id", &self.id)
            .field("mirrored", &self.mirrored)
            .field("quiet", &self.quiet.as_ref().map(|(v, a)| (&v.id, a)))
            .finish()
    }
}

/// Whether the operator manages workloads in `namespace`: outside `--job-namespaces` a
/// workload's GpuJob is made (and says it is Invalid there), but the workload is not touched:
/// the operator may not patch it.
fn managed(inputs: &Inputs, namespace: &str) -> bool {
    (inputs.job_namespaces.as_ref()).is_none_or(|m| m.contains(namespace))
}

fn key(namespace: &str, kind: &str, name: &str) -> String {
    format!("{namespace}/{kind}/{name}")
}

/// A workload's key in the index (`namespace/Kind/name`).
fn index_key(w: &DynamicObject) -> Option<String> {
    let (Some(t), Some(ns), Some(name)) = (
        w.types.as_ref(),
        w.metadata.namespace.as_deref(),
        w.metadata.name.as_deref(),
    ) else {
        return None;
    };
    Some(key(ns, &t.kind, name))
}

pub(super) fn reference(w: &DynamicObject) -> ObjectReference {
    let t = w.types.clone().unwrap_or_default();
    let (name, uid) = wl::kind_of(w).map_or_else(
        || (w.name_any(), w.metadata.uid.clone().unwrap_or_default()),
        |k| k.regarding(w),
    );
    ObjectReference {
        api_version: Some(t.api_version),
        kind: Some(t.kind),
        name: Some(name),
        namespace: w.metadata.namespace.clone(),
        uid: Some(uid),
        resource_version: None,
        field_path: None,
    }
}

/// What of a GpuJob its workload decides: its spec, the workload's end and portability (the
/// annotations), and its owners' uids.
type Print = (spillway_api::GpuJobSpec, [Option<String>; 2], Vec<String>);

/// The annotations of a GpuJob its workload decides.
fn decided(job: &spillway_api::GpuJob) -> [Option<String>; 2] {
    let a = job.annotations();
    [
        a.get(wl::FINISHED_ANNOTATION).cloned(),
        a.get(spillway_api::job::PORTABILITY_ANNOTATION).cloned(),
    ]
}

fn owner_uids(job: &spillway_api::GpuJob) -> Vec<String> {
    let mut uids: Vec<String> = job
        .owner_references()
        .iter()
        .map(|o| o.uid.clone())
        .collect();
    uids.sort_unstable();
    uids
}

fn fingerprint(job: &spillway_api::GpuJob) -> Print {
    (job.spec.clone(), decided(job), owner_uids(job))
}

/// Whether `job` is what `print` says.
fn matches(job: &spillway_api::GpuJob, print: &Print) -> bool {
    job.spec == print.0 && decided(job) == print.1 && owner_uids(job) == print.2
}

impl State {
    /// Indexes this turn's workloads (a start looks its workload up). When they are the
    /// workloads of the last turn in the same order, some of them changed (most turns of a busy
    /// cluster: the Job controller wrote a Job's status), only those are indexed again.
    pub(super) fn index_workloads(&mut self, inputs: &Inputs) {
        let k = &mut self.workloads;
        let now = &inputs.workloads;
        let same_ones = k.indexed.len() == now.len()
            && (k.indexed.iter().zip(now)).all(|(a, b)| {
                Arc::ptr_eq(a, b) || (a.metadata.uid.is_some() && a.metadata.uid == b.metadata.uid)
            });
        if same_ones {
            k.others = false;
            for (a, b) in k.indexed.iter_mut().zip(now) {
                if Arc::ptr_eq(a, b) {
                    continue;
                }
                // What was found of the object it replaces goes with it.
                k.in_step.remove(&(Arc::as_ptr(a) as usize));
                if let Some(key) = index_key(b) {
                    k.index.insert(key, b.clone());
                }
                *a = b.clone();
            }
            return;
        }
        k.others = true;
        k.indexed.clone_from(now);
        k.index.clear();
        for w in now {
            if let Some(key) = index_key(w) {
                k.index.insert(key, w.clone());
            }
        }
    }

    /// Whether the job stands for a batch Job here that has ended: the Job controller then
    /// told its end in an Event on the Job (`Completed`, or why it failed), which the job's
    /// own end Event would only repeat. (A Job run as a copy elsewhere stays suspended here:
    /// its end is told on its GpuJob.)
    pub(super) fn end_told_by_job_controller(&self, view: &JobView) -> bool {
        let Some(r) = view.job.spec.workload_ref.as_ref() else {
            return false;
        };
        // Its end is the workload's (not, say, its maxRuntime, which stops it first).
        let own_end = matches!(
            view.lifecycle,
            Lifecycle::Succeeded { .. }
                | Lifecycle::Failed {
                    reason: "WorkloadFailed",
                    ..
                }
        );
        if !own_end || (r.api_version.as_str(), r.kind.as_str()) != ("batch/v1", "Job") {
            return false;
        }
        let ns = view.job.metadata.namespace.as_deref().unwrap_or_default();
        (self.workloads.index.get(&key(ns, &r.kind, &r.name)))
            .and_then(|w| Some(wl::kind_of(w)?.finished(w).is_some()))
            .unwrap_or(false)
    }

    /// The end to mirror on the GpuJob of workload `w` (its view `v`), as its annotation says
    /// it: once mirrored it stays (the copy may go), and a copy in another cluster that
    /// finished ends the job as the workload's own end would. None once the workload itself
    /// says it finished (its GpuJob is made with that end).
    fn mirrored_end(
        &self,
        kind: &dyn WorkloadKind,
        w: &DynamicObject,
        v: &JobView,
    ) -> Option<String> {
        if kind.finished(w).is_some() {
            return None;
        }
        let kept = v.job.annotations().get(wl::FINISHED_ANNOTATION).cloned();
        kept.or_else(|| {
            let f = self.copy_finished(v)?;
            Some(serde_json::to_string(&f).unwrap_or_default())
        })
    }

    /// Each labelled workload's GpuJob made or kept in step; workloads that run unplaced held.
    pub(super) fn workloads(&mut self, built: &world::Built, inputs: &Inputs) {
        let clusters = (inputs.pools.iter())
            .filter(|p| p.spec.cluster.is_some())
            .filter_map(|p| p.metadata.name.as_deref());
        let clusters_same =
            clusters
                .clone()
                .eq(self.workloads.cluster_pools.iter().map(String::as_str));
        if !clusters_same {
            self.workloads.cluster_pools = clusters.map(str::to_string).collect();
        }
        // What is kept by workload is pruned when some workloads came or went.
        let prune = self.workloads.others || !self.remember;
        let mut live: HashSet<&str> = HashSet::default();
        // The GpuJobs of this turn's workloads: an apply sent for another is forgotten.
        let mut live_jobs: HashSet<String> = HashSet::default();
        for w in &inputs.workloads {
            if prune && let Some(uid) = w.metadata.uid.as_deref() {
                live.insert(uid);
            }
            if self.remember && self.still_in_step(w, built, inputs, clusters_same, &mut live_jobs)
            {
                continue;
            }
            let Some(kind) = wl::kind_of(w) else { continue };
            let (Some(ns), Some(name), Some(uid)) = (
                w.metadata.namespace.as_deref(),
                w.metadata.name.as_deref(),
                w.metadata.uid.as_deref(),
            ) else {
                continue;
            };
            let managed = managed(inputs, ns);
            let id = format!("{ns}/{}", wl::gpu_job_name(kind.kind(), name));
            if self.workloads.sent.contains_key(&id) {
                live_jobs.insert(id.clone());
            }
            if w.metadata.deletion_timestamp.is_some()
                || w.annotations().contains_key(wl::USER_SUSPENDED_ANNOTATION)
            {
                // Being deleted, or its user's until they lift their suspension.
                continue;
            }
            let view = built.jobs.get(id.as_str()).map(|v| &**v);
            self.workloads.in_step.remove(&(Arc::as_ptr(w) as usize));
            if view.is_none()
                && let Some(why) = kind.incomplete(w)
            {
                // Queued once it is complete.
                tracing::debug!(kind = kind.kind(), namespace = %ns, name = %name, why, "a workload not complete yet");
                continue;
            }
            if let Some(v) = view
                && !wl::stands_for(kind, &v.job, w)
            {
                self.warn_workload(
                    w,
                    "NameTaken",
                    format!(
                        "GpuJob {} exists and does not stand for this {}: the workload is held until one of them is renamed",
                        v.job.name_any(),
                        kind.kind()
                    ),
                );
                if managed {
                    self.hold(w, kind, None, inputs);
                }
                continue;
            }
            let version = w.metadata.resource_version.clone().unwrap_or_default();
            let made = match self.workloads.made.get(uid) {
                Some((v, made)) if *v == version => made.clone(),
                _ => {
                    let made = wl::gpu_job_for(kind, w).map(Arc::new);
                    (self.workloads.made).insert(uid.to_string(), (version, made.clone()));
                    made
                }
            };
            match made {
                Err(why) => {
                    self.warn_workload(
                        w,
                        "WorkloadInvalid",
                        format!("Spillway cannot queue it: {why}. It is held until it is fixed (or the {} label removed).", wl::QUEUE_LABEL),
                    );
                    if managed {
                        self.hold(w, kind, None, inputs);
                    }
                    continue;
                }
                Ok(made) => {
                    let mirrored = view.and_then(|v| self.mirrored_end(kind, w, v));
                    let mut desired = (*made).clone();
                    if let Some(f) = mirrored.clone() {
                        let a = desired
                            .metadata
                            .annotations
                            .get_or_insert_with(Default::default);
                        a.insert(wl::FINISHED_ANNOTATION.into(), f);
                    }
                    self.workloads.warned.remove(uid);
                    if let Some(v) = view {
                        let admitted = v
                            .job
                            .status
                            .as_ref()
                            .and_then(|s| s.phase)
                            .is_some_and(|p| p != JobPhase::Queued);
                        if admitted {
                            // Its queue and gang shape are fixed once admitted (the CRD's rule).
                            desired.spec.queue = v.job.spec.queue.clone();
                            desired.spec.replicas = v.job.spec.replicas;
                            desired.spec.gpus_per_replica = v.job.spec.gpus_per_replica;
                        }
                    }
                    let want = fingerprint(&desired);
                    if let Some((key, v)) = built
                        .jobs
                        .get_key_value(id.as_str())
                        .filter(|(_, v)| matches(&v.job, &want))
                    {
                        self.workloads.sent.remove(&id);
                        let in_step = InStep {
                            workload: w.clone(),
                            kind,
                            job: v.job.clone(),
                            id: key.clone(),
                            mirrored,
                            quiet: None,
                        };
                        (self.workloads.in_step).insert(Arc::as_ptr(w) as usize, in_step);
                    } else if self.workloads.sent.get(&id) != Some(&want) {
                        live_jobs.insert(id.clone());
                        self.workloads.sent.insert(id.clone(), want);
                        self.emit(Action::ApplyWorkloadJob(Box::new(desired)));
                    }
                }
            }
            if managed {
                self.hold(w, kind, view, inputs);
            }
        }
        self.pin_gated_pods(built, inputs);
        let k = &mut self.workloads;
        if prune {
            let objects: HashSet<usize> = (inputs.workloads.iter())
                .map(|w| Arc::as_ptr(w) as usize)
                .collect();
            k.suspended.retain(|u, _| live.contains(u.as_str()));
            k.made.retain(|u, _| live.contains(u.as_str()));
            k.warned.retain(|u, _| live.contains(u.as_str()));
            k.in_step.retain(|at, _| objects.contains(at));
            k.sent.retain(|id, _| live_jobs.contains(id));
        }
    }

    /// Looks at `w` as what was last found in step with its GpuJob, if it is still: the very
    /// objects of then, and nothing new mirrored, so it still stands for it and its GpuJob is
    /// as it would be made (most workloads at most turns). Only what it runs needs a look then,
    /// and not even that while nothing it depends on changed. False when it is not (or no
    /// longer) in step.
    fn still_in_step(
        &mut self,
        w: &Arc<DynamicObject>,
        built: &world::Built,
        inputs: &Inputs,
        clusters_same: bool,
        live_jobs: &mut HashSet<String>,
    ) -> bool {
        let at = Arc::as_ptr(w) as usize;
        let Some(s) = self.workloads.in_step.get(&at) else {
            return false;
        };
        let kind = s.kind;
        let Some(v) = built.jobs.get(&*s.id) else {
            return false;
        };
        // Without copies in other clusters, the end mirrored is the workload's or the job's
        // own, the same objects' as then.
        if !Arc::ptr_eq(&s.workload, w)
            || !Arc::ptr_eq(&s.job, &v.job)
            || !(self.remote.copies.is_empty() || s.mirrored == self.mirrored_end(kind, w, v))
        {
            return false;
        }
        let id = s.id.clone();
        if self.workloads.sent.contains_key(&*id) {
            live_jobs.insert(id.to_string());
        }
        let moved = self.moved_on(v);
        // A job's assumption is part of what its view was derived from; compared all the same.
        let quiet = clusters_same
            && !moved
            && s.quiet.as_ref().is_some_and(|(qv, qa)| {
                Arc::ptr_eq(qv, v) && self.assumed.get(&*id) == qa.as_ref()
            });
        let ns = w.metadata.namespace.as_deref().unwrap_or_default();
        if managed(inputs, ns) && !quiet {
            let needs_none = self.hold(w, kind, Some(&**v), inputs);
            let assumed = self.assumed.get(&*id).cloned();
            if let Some(s) = self.workloads.in_step.get_mut(&at) {
                s.quiet = (needs_none && !moved).then(|| (v.clone(), assumed));
            }
        }
        true
    }

    /// Suspends `w` if it runs (unfinished, not suspended) without its job's placement: the
    /// job (`view`) not started, or started at another attempt than the workload's template
    /// says, or moved on this turn. Completes a run of its job that landed in part. True when
    /// it needs neither, by `w`, `view`, what was assumed for the job and which pools are other
    /// clusters alone.
    fn hold(
        &mut self,
        w: &DynamicObject,
        kind: &dyn WorkloadKind,
        view: Option<&JobView>,
        inputs: &Inputs,
    ) -> bool {
        if kind.finished(w).is_some() {
            return true;
        }
        // Placed at home: a job placed in another cluster runs as a copy there, and the
        // workload here stays held.
        let home = |pool: Option<&String>| {
            pool.is_none_or(|p| {
                !(inputs.pools.iter())
                    .any(|q| q.metadata.name.as_ref() == Some(p) && q.spec.cluster.is_some())
            })
        };
        let placed = view.filter(|v| !self.moved_on(v)).is_some_and(|v| {
            let uid = v.job.metadata.uid.as_deref().unwrap_or_default();
            let at_home = match (self.assumed.get(&v.id), &v.lifecycle) {
                (Some(a), _) => home(Some(&a.pool)),
                (None, Lifecycle::Running { pool, .. }) => home(pool.as_ref()),
                _ => false,
            };
            kind.placed_attempt(w, uid) == Some(v.attempt) && at_home
        });
        // A run that landed in part (some pods of a group; a TrainJob's placement written but
        // its suspension not lifted yet) is written again for the rest, on the job's nodes.
        let partly = placed && kind.partly_run(w);
        if !partly && (placed || kind.suspended(w)) {
            return true;
        }
        let uid = w.metadata.uid.clone().unwrap_or_default();
        let version = w.metadata.resource_version.clone().unwrap_or_default();
        if self.workloads.suspended.get(&uid) == Some(&version) {
            return false;
        }
        if partly {
            let running = view.and_then(|v| match &v.lifecycle {
                Lifecycle::Running { pool, nodes, .. } if !nodes.is_empty() => {
                    Some((v, pool, nodes))
                }
                _ => None,
            });
            let Some((v, pool, nodes)) = running else {
                return false;
            };
            let pool = (pool.as_ref()).and_then(|p| {
                (inputs.pools.iter()).find(|q| q.metadata.name.as_deref() == Some(p.as_str()))
            });
            let placement = wl::Placement {
                job: &v.job,
                attempt: v.attempt,
                pool: pool.map(|p| &**p),
                nodes,
            };
            if let Ok(writes) = kind.run(w, &placement) {
                self.workloads.suspended.insert(uid, version);
                tracing::info!(kind = kind.kind(), namespace = ?w.metadata.namespace, name = ?w.metadata.name, "completing a run that landed in part");
                self.write_workload(w, kind, "run", writes, Some(&v.id));
            }
            return false;
        }
        self.workloads.suspended.insert(uid, version);
        tracing::info!(kind = kind.kind(), namespace = ?w.metadata.namespace, name = ?w.metadata.name, "suspending a workload that runs without Spillway's placement");
        self.write_workload(w, kind, "suspend", kind.suspend(w), None);
        false
    }

    /// Emits `writes` of workload `w` (`what` it does, for logs; the job whose start it is).
    fn write_workload(
        &mut self,
        w: &DynamicObject,
        kind: &dyn WorkloadKind,
        what: &'static str,
        writes: Vec<wl::Write>,
        job: Option<&String>,
    ) {
        let namespace = w.metadata.namespace.clone().unwrap_or_default();
        for write in writes {
            self.emit(match write {
                wl::Write::Patch { name, patch } => {
                    Action::PatchWorkload(Box::new(WorkloadPatch {
                        api_version: wl::api_version_of(kind),
                        kind: kind.kind().into(),
                        namespace: namespace.clone(),
                        name: w.name_any(),
                        object: name,
                        what,
                        patch,
                        job: job.cloned(),
                    }))
                }
                wl::Write::Delete {
                    name,
                    uid,
                    grace_seconds,
                } => Action::EvictPod {
                    namespace: namespace.clone(),
                    name,
                    uid,
                    grace_seconds,
                },
            });
        }
    }

    fn warn_workload(&mut self, w: &DynamicObject, reason: &str, message: String) {
        let uid = w.metadata.uid.clone().unwrap_or_default();
        if self.workloads.warned.get(&uid) == Some(&message) {
            return;
        }
        self.workloads.warned.insert(uid, message.clone());
        self.publish(reference(w), true, reason, "Queue", message);
    }

    /// The workload `view` stands for, and its kind, from this turn's index.
    pub(super) fn workload_of(
        &self,
        view: &JobView,
    ) -> Option<(Arc<DynamicObject>, &'static dyn WorkloadKind)> {
        let r = view.job.spec.workload_ref.as_ref()?;
        let ns = view.job.metadata.namespace.as_deref().unwrap_or_default();
        (self
            .workloads
            .index
            .get(&key(ns, &r.kind, &r.name))
            .cloned())
        .zip(wl::by_kind(&r.api_version, &r.kind))
    }

    /// Carries out a start of `view`, a job standing for a workload: runs the workload with
    /// the placement. Returns false (and the start is dropped) when it cannot.
    pub(super) fn run_workload(
        &mut self,
        view: &JobView,
        start: &core::Start,
        pool: Option<&ComputePool>,
    ) -> bool {
        let Some((w, kind)) = self.workload_of(view) else {
            tracing::warn!(job = %view.id, "the workload of a start is not in the cache; deciding again");
            self.assumed.remove(&view.id);
            return false;
        };
        if !kind.ready_to_run(&w) {
            // Still running, or being suspended: placed again once its controller is done.
            tracing::debug!(job = %view.id, "the workload is not ready to run yet; deciding again");
            self.assumed.remove(&view.id);
            return false;
        }
        let placement = wl::Placement {
            job: &view.job,
            attempt: view.attempt,
            pool,
            nodes: &start.nodes,
        };
        match kind.run(&w, &placement) {
            Ok(writes) => {
                // A later hold of this version is a new decision, not this one repeated.
                self.workloads
                    .suspended
                    .remove(w.metadata.uid.as_deref().unwrap_or_default());
                self.write_workload(&w, kind, "run", writes, Some(&view.id));
                true
            }
            Err(why) => {
                tracing::warn!(job = %view.id, error = %why, "cannot run the workload; deciding again");
                self.assumed.remove(&view.id);
                false
            }
        }
    }
}

impl State {
    /// Pins the pods of running workload jobs that are still held by the placement gate (made
    /// while the admission webhook was not called: it was down and fails open) to their
    /// placement's nodes, lifting the gate.
    fn pin_gated_pods(&mut self, built: &world::Built, inputs: &Inputs) {
        let mut seen: HashSet<String> = HashSet::default();
        for v in built.jobs.values() {
            // Only a job running at this attempt (not preempted, requeued or moved this turn),
            // in a namespace the operator may write in.
            let ns = v.job.metadata.namespace.as_deref().unwrap_or_default();
            if v.job.spec.workload_ref.is_none()
                || self.moved_on(v)
                || !matches!(v.lifecycle, Lifecycle::Running { .. })
                || (inputs.job_namespaces.as_ref()).is_some_and(|m| !m.contains(ns))
            {
                continue;
            }
            for pod in &v.pods {
                // Most pods carry no gate: looked at without a copy.
                let gated = (pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()))
                    .is_some_and(|g| g.iter().any(|g| g.name == wl::PLACEMENT_GATE));
                if !gated {
                    continue;
                }
                let mut pinned = (**pod).clone();
                if !wl::pin_gated_pod(&mut pinned) {
                    continue;
                }
                let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                let id = format!("{ns}/{name}");
                let version = pod.metadata.resource_version.clone().unwrap_or_default();
                seen.insert(id.clone());
                if self.workloads.pinned.get(&id) == Some(&version) {
                    continue;
                }
                self.workloads.pinned.insert(id, version.clone());
                let spec = pinned.spec.unwrap_or_default();
                tracing::info!(job = %v.id, pod = %name, "pinning a workload's pod made without the admission webhook to its placement");
                self.emit(Action::PinPod {
                    namespace: ns,
                    name,
                    resource_version: version.clone(),
                    patch: serde_json::json!({
                        "metadata": {"resourceVersion": version},
                        "spec": {
                            "schedulingGates": spec.scheduling_gates.unwrap_or_default(),
                            "affinity": spec.affinity,
                        },
                    }),
                });
            }
        }
        self.workloads.pinned.retain(|id, _| seen.contains(id));
    }

    /// After a failed pin: asked again at the next turn.
    pub(super) fn forget_pin(&mut self, namespace: &str, name: &str) {
        self.workloads.pinned.remove(&format!("{namespace}/{name}"));
    }

    /// After a failed patch: a hold of that workload is asked again at the next turn.
    pub(super) fn forget_workload_patch(&mut self, p: &WorkloadPatch) {
        let ns = p.namespace.as_str();
        if let Some(uid) = (self.workloads.index.get(&key(ns, &p.kind, &p.name)))
            .and_then(|w| w.metadata.uid.clone())
        {
            self.workloads.suspended.remove(&uid);
        }
    }

    /// After a failed apply: the GpuJob is applied again at the next turn.
    pub(super) fn forget_workload_job(&mut self, job: &spillway_api::GpuJob) {
        let id = format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or_default(),
            job.metadata.name.as_deref().unwrap_or_default()
        );
        self.workloads.sent.remove(&id);
    }
}
