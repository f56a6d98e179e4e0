//! The views of the last build, kept with what each was derived from, so that a job nothing of
//! which changed is not derived again: its GpuJob and pods are the very objects the caches
//! held then (a watch cache hands out the same `Arc` until the object changes), its queue and
//! namespace read the same (whom the queue admits, the namespace's labels: not the queue's
//! status, which the loop writes whenever a job of it starts or ends), the nodes its pods sit
//! on have the same presence, readiness and pool, what the loop assumed and finished for it is
//! the same, and the clock has not passed what it read. A view that read the cloud needs is
//! derived again when they changed; every view when the pools changed.
//!
//! Kept views are shared (`Arc`): the build hands out the kept one, not a copy. While the
//! memo can tell which jobs may have changed, a build looks only at those (`memo/quick.rs`).
//! `tests/memo.rs` builds random histories both ways and requires the same result at every
//! step.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::job::{ClockUse, Derived, Facts, Seen};
use super::*;

mod quick;
pub(super) use quick::{Entries, Tally};

/// The views kept from one build to the next; see the module documentation.
#[derive(Debug, Default)]
pub struct Memo {
    jobs: HashMap<String, Kept>,
    /// The kept views by id, in id order: what a build hands out, changed only where a view
    /// was derived or a job left.
    views: Arc<BTreeMap<Arc<str>, Arc<JobView>>>,
    /// Moves on whenever an id joins or leaves `views`.
    ids_version: u64,
    /// The queues and namespaces of the last build, in address order (held, so that no other
    /// object can take an address while it is compared), and whether this build's are the
    /// very same: then every kept view's queue and namespace are too.
    queues: Vec<Arc<GpuQueue>>,
    namespaces: Vec<Arc<Namespace>>,
    same_queues: bool,
    same_namespaces: bool,
    /// The pools, unseen cluster pools and needs of the last build.
    pools: Vec<core::Pool>,
    unseen_pools: crate::hashing::HashSet<String>,
    needs: HashMap<String, String>,
    needs_changed: bool,
    build: u64,
    /// Jobs whose core job changed, arrived or left since the changes were last taken.
    changed: Vec<String>,
    /// Views derived and views kept since the counts were last taken.
    derived: usize,
    kept: usize,
    /// How many jobs the last build looked at.
    visited: usize,
    /// Whether this build's queues and namespaces are the last build's or read as them, by
    /// name (`queue_alike`, `namespace_alike`).
    alike_queues: bool,
    alike_namespaces: bool,
    /// When kept views stop holding (`ClockUse::until`), earliest first; an entry may be
    /// stale (its view derived again since), which only costs a look.
    until: BinaryHeap<Reverse<(Time, Box<str>)>>,
    /// Jobs whose view read `now` (derived at every build), in this build and the last.
    volatile: Vec<Box<str>>,
    last_volatile: Vec<Box<str>>,
    /// What the last build saw, for a build that looks only at what changed since
    /// (`quick.rs`).
    entries: Entries,
}

#[derive(Debug)]
pub(super) struct Kept {
    key: Key,
    pub view: Arc<JobView>,
    pub core: Option<core::Job>,
    clock: ClockUse,
    reads_needs: bool,
    build: u64,
}

/// What a view was derived from.
#[derive(Debug)]
struct Key {
    job: Arc<GpuJob>,
    pods: Vec<Arc<Pod>>,
    /// Of each pod's node: present, Ready, its pool.
    nodes: Vec<Option<(bool, bool, Option<String>)>>,
    floor: Option<u32>,
    assumed: Option<Assumed>,
    finished: bool,
    queue: Option<Arc<GpuQueue>>,
    namespace: Option<Arc<Namespace>>,
}

/// Whether `b` is `a`, or reads the same as far as `alike` looks: the parts of an object a view
/// reads.
fn same<T>(a: &Option<Arc<T>>, b: Option<&Arc<T>>, alike: impl Fn(&T, &T) -> bool) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || alike(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Whether `now` holds the very objects of `last`; `last` becomes `now`'s, in address order.
fn same_objects<T>(last: &mut Vec<Arc<T>>, now: &[Arc<T>]) -> bool {
    let mut now = now.to_vec();
    now.sort_by_key(|o| Arc::as_ptr(o) as usize);
    let same = last.len() == now.len() && last.iter().zip(&now).all(|(a, b)| Arc::ptr_eq(a, b));
    *last = now;
    same
}

/// Whether `now` holds, by name, objects that read as `last`'s (`alike`), the same number.
fn all_alike<T: kube::Resource>(
    last: &[Arc<T>],
    now: &[Arc<T>],
    alike: fn(&T, &T) -> bool,
) -> bool {
    if last.len() != now.len() {
        return false;
    }
    let by_name: HashMap<&str, &Arc<T>> = (last.iter())
        .filter_map(|o| Some((o.meta().name.as_deref()?, o)))
        .collect();
    now.iter().all(|o| {
        let name = o.meta().name.as_deref().unwrap_or_default();
        by_name
            .get(name)
            .is_some_and(|l| Arc::ptr_eq(l, o) || alike(l, o))
    })
}

/// What a view reads of its queue: whom it admits and up to which priority
/// (`admission_problem`). Its status (written
/// by the loop whenever a job of it starts or ends) and its other fields are not read.
fn queue_alike(a: &GpuQueue, b: &GpuQueue) -> bool {
    a.spec.namespaces == b.spec.namespaces
        && a.spec.namespace_selector == b.spec.namespace_selector
        && a.spec.max_priority == b.spec.max_priority
}

/// What a view reads of its namespace: its labels (a queue's `namespaceSelector`).
fn namespace_alike(a: &Namespace, b: &Namespace) -> bool {
    a.metadata.labels == b.metadata.labels
}

impl Facts<'_> {
    fn key(&self, job: &Arc<GpuJob>, id: &str, group: &[&Arc<Pod>], seen: &[Seen]) -> Key {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        Key {
            job: job.clone(),
            pods: group.iter().map(|&p| p.clone()).collect(),
            nodes: (seen.iter())
                .map(|s| s.map(|(a, b, c)| (a, b, c.cloned())))
                .collect(),
            floor: self.attempt_floor.get(id).copied(),
            assumed: self.assumed.get(id).cloned(),
            finished: self.inputs.finished.contains(id),
            queue: self.queues.get(job.spec.queue.as_str()).map(|&q| q.clone()),
            namespace: self.namespaces.get(ns).map(|&n| n.clone()),
        }
    }

    /// Whether `key` is what `job` would be derived from now.
    /// `same_queues` and `same_namespaces` say that this build's queues and namespaces are
    /// the very objects of the last one (so also those of every kept key).
    fn unchanged(
        &self,
        key: &Key,
        job: &Arc<GpuJob>,
        id: &str,
        group: &[&Arc<Pod>],
        seen: &[Seen],
        (same_queues, same_namespaces): (bool, bool),
    ) -> bool {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        Arc::ptr_eq(&key.job, job)
            && key.pods.len() == group.len()
            && key.pods.iter().zip(group).all(|(a, b)| Arc::ptr_eq(a, b))
            && key.nodes.iter().zip(seen).all(|(k, now)| match (k, *now) {
                (None, None) => true,
                (Some((a, b, c)), Some((x, y, z))) => a == &x && b == &y && c.as_ref() == z,
                _ => false,
            })
            && key.floor == self.attempt_floor.get(id).copied()
            && key.assumed.as_ref() == self.assumed.get(id)
            && key.finished == self.inputs.finished.contains(id)
            && (same_queues
                || same(
                    &key.queue,
                    self.queues.get(job.spec.queue.as_str()).copied(),
                    queue_alike,
                ))
            && (same_namespaces
                || same(
                    &key.namespace,
                    self.namespaces.get(ns).copied(),
                    namespace_alike,
                ))
    }

    /// Points `key` at the queue and namespace objects of this build, once they were found to
    /// read the same: the next build compares by identity again. Those that are the very
    /// objects of the last build (`same_queues`, `same_namespaces`) are the key's already.
    fn refresh(&self, key: &mut Key, job: &GpuJob, (same_queues, same_namespaces): (bool, bool)) {
        if !same_queues
            && let (Some(k), Some(&now)) =
                (&mut key.queue, self.queues.get(job.spec.queue.as_str()))
            && !Arc::ptr_eq(k, now)
        {
            *k = now.clone();
        }
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        if !same_namespaces
            && let (Some(k), Some(&now)) = (&mut key.namespace, self.namespaces.get(ns))
            && !Arc::ptr_eq(k, now)
        {
            *k = now.clone();
        }
    }
}

impl Memo {
    /// Starts a build: forgets what a change of the pools (or of which are unseen) or the
    /// needs can make wrong.
    pub(super) fn begin(
        &mut self,
        pools: &[core::Pool],
        needs: &HashMap<String, String>,
        inputs: &Inputs,
    ) {
        self.build += 1;
        self.alike_queues = all_alike(&self.queues, &inputs.queues, queue_alike);
        self.alike_namespaces = all_alike(&self.namespaces, &inputs.namespaces, namespace_alike);
        self.same_queues = same_objects(&mut self.queues, &inputs.queues);
        self.same_namespaces = same_objects(&mut self.namespaces, &inputs.namespaces);
        self.last_volatile = std::mem::take(&mut self.volatile);
        if self.pools != pools || self.unseen_pools != inputs.unseen_pools {
            // Every view is derived again; their core jobs are compared with none.
            self.changed.extend(self.jobs.drain().map(|(id, _)| id));
            Arc::make_mut(&mut self.views).clear();
            self.ids_version += 1;
            self.pools = pools.to_vec();
            self.unseen_pools.clone_from(&inputs.unseen_pools);
            self.until.clear();
            self.entries = Entries::default();
        }
        self.needs_changed = self.needs != *needs;
        if self.needs_changed {
            self.needs.clone_from(needs);
        }
    }

    /// `job`'s view: the kept one when nothing it was derived from changed. `group` holds the
    /// pods labelled with it, `seen` what each one's node is.
    pub(super) fn view(
        &mut self,
        facts: &Facts<'_>,
        job: &Arc<GpuJob>,
        id: &str,
        group: &[&Arc<Pod>],
        seen: &[Seen],
    ) -> Arc<JobView> {
        if let Some(k) = self.jobs.get_mut(id)
            && k.clock.holds_at(facts.now)
            && !(k.reads_needs && self.needs_changed)
            && facts.unchanged(
                &k.key,
                job,
                id,
                group,
                seen,
                (self.same_queues, self.same_namespaces),
            )
        {
            self.kept += 1;
            facts.refresh(&mut k.key, job, (self.same_queues, self.same_namespaces));
            k.build = self.build;
            return k.view.clone();
        }
        self.derived += 1;
        let key = facts.key(job, id, group, seen);
        let Derived {
            view,
            core,
            clock,
            reads_needs,
        } = facts.derive(job, id.to_string(), group);
        if self.jobs.get(id).map(|k| &k.core) != Some(&core) {
            self.changed.push(id.to_string());
        }
        if clock.now {
            self.volatile.push(id.into());
        }
        if let Some(until) = clock.until {
            self.until.push(Reverse((until, id.into())));
        }
        let view = Arc::new(view);
        let views = Arc::make_mut(&mut self.views);
        match views.get_mut(id) {
            Some(v) => *v = view.clone(),
            None => {
                views.insert(Arc::from(id), view.clone());
                self.ids_version += 1;
            }
        }
        let kept = Kept {
            key,
            view,
            core,
            clock,
            reads_needs,
            build: self.build,
        };
        let view = kept.view.clone();
        match self.jobs.get_mut(id) {
            Some(k) => *k = kept,
            None => {
                self.jobs.insert(id.to_string(), kept);
            }
        }
        view
    }

    /// How many views were derived and how many kept since the last call.
    pub fn take_counts(&mut self) -> (usize, usize) {
        (
            std::mem::take(&mut self.derived),
            std::mem::take(&mut self.kept),
        )
    }

    /// Ends a build: forgets the jobs it did not see.
    pub(super) fn end(&mut self) {
        let build = self.build;
        let changed = &mut self.changed;
        let views = &mut self.views;
        let ids_version = &mut self.ids_version;
        self.jobs.retain(|id, k| {
            let seen = k.build == build;
            if !seen {
                Arc::make_mut(views).remove(id.as_str());
                *ids_version += 1;
                if k.core.is_some() {
                    changed.push(id.clone());
                }
            }
            seen
        });
        self.trim_until();
    }

    /// Forgets job `id`, gone from the caches.
    fn remove(&mut self, id: &str) {
        if let Some(k) = self.jobs.remove(id) {
            Arc::make_mut(&mut self.views).remove(id);
            self.ids_version += 1;
            if k.core.is_some() {
                self.changed.push(id.to_string());
            }
        }
    }

    /// Keeps the clock's queue from growing with stale entries: rebuilt from the kept views
    /// when it holds more than twice as many.
    fn trim_until(&mut self) {
        if self.until.len() > 2 * self.jobs.len() + 64 {
            self.until = (self.jobs.iter())
                .filter_map(|(id, k)| Some(Reverse((k.clock.until?, id.as_str().into()))))
                .collect();
        }
    }

    /// How many jobs the last build looked at: every one, or only those whose view may have
    /// changed (`quick.rs`).
    pub fn visited(&self) -> usize {
        self.visited
    }

    /// A number that changes whenever a job's id joins or leaves the views (and only then).
    pub fn ids_version(&self) -> u64 {
        self.ids_version
    }

    /// The views of the last build by id, in id order.
    pub(super) fn views(&self) -> &Arc<BTreeMap<Arc<str>, Arc<JobView>>> {
        &self.views
    }

    /// The core jobs that changed, arrived or left since the last call, as changes for the
    /// scheduler ([`core::Scheduler::apply`]), each job once, in the order they changed.
    pub fn take_job_changes(&mut self) -> Vec<core::Change> {
        let mut seen = <crate::hashing::HashSet<_> as crate::hashing::HashSetExt>::new();
        std::mem::take(&mut self.changed)
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .map(|id| match self.jobs.get(&id).and_then(|k| k.core.clone()) {
                Some(job) => core::Change::Job(Box::new(job)),
                None => core::Change::JobGone(id),
            })
            .collect()
    }

    /// The core jobs of the last build, in no particular order.
    pub fn core_jobs(&self) -> impl Iterator<Item = &core::Job> {
        self.jobs.values().filter_map(|k| k.core.as_ref())
    }
}
