//! A build that looks only at what changed since the last one. The jobs it derives again (or
//! finds unchanged, through [`Memo::view`]) are those the caches hand out as new objects, those
//! whose labelled pods are new, replaced or gone, those whose entries in what the loop
//! assumed, moved on or finished changed, and those whose views stop holding on the clock
//! (a view that read `now`, or a `maxRuntime` reached). Every other job keeps its view
//! without being visited: it is the object it was, with the same pods, on nodes that read the
//! same.
//!
//! It is taken only when nothing that many views read changed (the pools, the cloud needs, the
//! nodes' presence, readiness, pool and order, the queues and namespaces as far as views read
//! them), when the objects kept are in the order they were (a view's pods are in the caches'
//! order), and when at most about an eighth of the objects are new. Otherwise the build
//! visits every job and records what it saw for the next one. `tests/memo.rs` requires the
//! same result either way, and the turn-level property test the same turns.

use std::hash::BuildHasher;

use super::*;
use crate::hashing::HashSet;

/// What the last build saw: each pod and each job in the caches' order, the nodes, what the
/// loop assumed, moved on and finished, and the views that take GPUs beyond their pods.
#[derive(Debug, Default)]
pub(in crate::world) struct Entries {
    /// The entries are the last build's (a build recorded them).
    ready: bool,
    pods: Vec<Option<PodEntry>>,
    jobs: Vec<Option<JobEntry>>,
    nodes: Vec<NodeEntry>,
    assumed: HashMap<String, Assumed>,
    floor: HashMap<String, u32>,
    finished: HashSet<String>,
    /// Jobs whose view takes or gives back GPUs beyond its pods (`job::add_usage`).
    contributors: Vec<Box<str>>,
    /// Hashes job ids, so that a pass over the entries compares strings only on a match.
    hasher: foldhash::fast::RandomState,
}

/// One pod as a build saw it; holding it keeps its address from being another object's.
#[derive(Debug)]
struct PodEntry {
    pod: Arc<Pod>,
    /// The job it is labelled with (`namespace/name`), and that id's hash.
    job: Option<(u64, Box<str>)>,
    /// Its node's place in `Inputs::nodes`, when it names a node that exists.
    node_at: Option<u32>,
    /// GPUs it holds (none once it finished).
    gpus: u32,
    deleting: bool,
}

#[derive(Debug)]
struct JobEntry {
    job: Arc<GpuJob>,
    id: Box<str>,
    hash: u64,
}

/// A node's name and what views read of it: its place, readiness and pool.
type NodeEntry = (Option<Box<str>>, Option<(usize, bool, Option<Box<str>>)>);

/// GPUs taken and given back per node beyond what the pods in the caches count for.
#[derive(Default)]
pub(in crate::world) struct Tally {
    pub used_more: HashMap<String, u32>,
    pub releasing_more: HashMap<String, u32>,
}

/// An object that was not in the last build (or is a new copy of one).
const NEW: u32 = u32::MAX;

/// The jobs to look at, by id, with their ids' hashes for a quick pass over the entries.
#[derive(Default)]
struct Dirty {
    ids: HashSet<Box<str>>,
    hashes: HashSet<u64>,
}

impl Dirty {
    fn add(&mut self, hash: u64, id: &str) {
        self.hashes.insert(hash);
        if !self.ids.contains(id) {
            self.ids.insert(id.into());
        }
    }

    fn has(&self, hash: u64, id: &str) -> bool {
        self.hashes.contains(&hash) && self.ids.contains(id)
    }
}

/// For each object of `now`, its place among the last build's entries (the same object, by
/// address), or [`NEW`]; `None` when the objects kept are not in the order they were.
fn places<T, E>(
    now: &[Arc<T>],
    last: &[Option<E>],
    object: impl Fn(&E) -> &Arc<T>,
) -> Option<Vec<u32>> {
    let addr = |e: &Option<E>| e.as_ref().map(|e| Arc::as_ptr(object(e)) as usize);
    let mut index: Option<HashMap<usize, u32>> = None;
    let mut out = Vec::with_capacity(now.len());
    // Places below this are taken by objects earlier in `now`.
    let mut next = 0;
    for (i, o) in now.iter().enumerate() {
        let a = Arc::as_ptr(o) as usize;
        let place = if last.get(i).and_then(addr) == Some(a) {
            Some(i as u32)
        } else {
            let index = index.get_or_insert_with(|| {
                (last.iter().enumerate())
                    .filter_map(|(p, e)| Some((addr(e)?, p as u32)))
                    .collect()
            });
            index.get(&a).copied()
        };
        match place {
            Some(p) if p < next => return None,
            Some(p) => {
                next = p + 1;
                out.push(p);
            }
            None => out.push(NEW),
        }
    }
    Some(out)
}

/// The names of `now`'s entries that differ from `last`'s, either way.
fn differ<'a, V: PartialEq>(
    last: &'a HashMap<String, V>,
    now: &'a HashMap<String, V>,
) -> impl Iterator<Item = &'a String> {
    let changed = now.iter().filter(|(k, v)| last.get(*k) != Some(v));
    let gone = last.keys().filter(|k| !now.contains_key(*k));
    changed.map(|(k, _)| k).chain(gone)
}

fn node_entry(facts: &Facts<'_>, node: &Node) -> NodeEntry {
    let name = node.metadata.name.as_deref();
    let fact = name.and_then(|n| facts.nodes.get(n));
    (
        name.map(Into::into),
        fact.map(|f| (f.at, f.ready, f.pool.map(|p| p.as_str().into()))),
    )
}

impl Entries {
    fn pod(&self, pod: &Arc<Pod>, node_at: Option<usize>) -> PodEntry {
        let job = (pod.metadata.labels.as_ref())
            .and_then(|l| l.get(labels::JOB_LABEL))
            .map(|j| {
                let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                let id: Box<str> = format!("{ns}/{j}").into();
                (self.hasher.hash_one(&*id), id)
            });
        PodEntry {
            pod: pod.clone(),
            job,
            node_at: node_at.map(|a| a as u32),
            gpus: if pod_active(pod) { pod_gpus(pod) } else { 0 },
            deleting: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    fn job(&self, job: &Arc<GpuJob>, id: &str) -> JobEntry {
        JobEntry {
            job: job.clone(),
            id: id.into(),
            hash: self.hasher.hash_one(id),
        }
    }

    /// Whether the nodes read as the last build's, in the same order.
    fn same_nodes(&self, facts: &Facts<'_>) -> bool {
        let nodes = &facts.inputs.nodes;
        nodes.len() == self.nodes.len()
            && nodes.iter().zip(&self.nodes).all(|(n, (name, fact))| {
                let now = n.metadata.name.as_deref();
                now == name.as_deref()
                    && match (now.and_then(|n| facts.nodes.get(n)), fact) {
                        (Some(f), Some((at, ready, pool))) => {
                            f.at == *at
                                && f.ready == *ready
                                && f.pool.map(String::as_str) == pool.as_deref()
                        }
                        (None, None) => true,
                        _ => false,
                    }
            })
    }

    /// GPUs in use per node (by place), and of those, GPUs being given back.
    pub(in crate::world) fn pod_usage(&self, nodes: usize) -> (Vec<u32>, Vec<u32>) {
        let mut used = vec![0; nodes];
        let mut releasing = vec![0; nodes];
        for e in self.pods.iter().flatten() {
            if let Some(at) = e.node_at {
                used[at as usize] += e.gpus;
                if e.deleting {
                    releasing[at as usize] += e.gpus;
                }
            }
        }
        (used, releasing)
    }
}

impl Memo {
    /// The last build's entries.
    pub(in crate::world) fn entries(&self) -> &Entries {
        &self.entries
    }

    /// Starts recording a build that visits every job.
    pub(in crate::world) fn record_start(&mut self, inputs: &Inputs) {
        let e = &mut self.entries;
        e.ready = false;
        e.pods = Vec::with_capacity(inputs.pods.len());
        e.jobs = Vec::with_capacity(inputs.jobs.len());
        e.contributors.clear();
    }

    /// Records a pod of the build, and its node's place when it names a node that exists.
    pub(in crate::world) fn record_pod(&mut self, pod: &Arc<Pod>, node_at: Option<usize>) {
        let entry = self.entries.pod(pod, node_at);
        self.entries.pods.push(Some(entry));
    }

    /// Records a job of the build, and whether its view takes GPUs beyond its pods.
    pub(in crate::world) fn record_job(&mut self, job: &Arc<GpuJob>, id: &str, contributes: bool) {
        let entry = self.entries.job(job, id);
        self.entries.jobs.push(Some(entry));
        if contributes {
            self.entries.contributors.push(id.into());
        }
    }

    /// Ends recording: the nodes and the loop's state as this build saw them.
    pub(in crate::world) fn record_end(&mut self, facts: &Facts<'_>) {
        let e = &mut self.entries;
        e.nodes = (facts.inputs.nodes.iter())
            .map(|n| node_entry(facts, n))
            .collect();
        e.assumed.clone_from(facts.assumed);
        e.floor.clone_from(facts.attempt_floor);
        e.finished.clone_from(&facts.inputs.finished);
        e.ready = true;
        self.visited = facts.inputs.jobs.len();
    }

    /// The build that looks only at what changed (see the module documentation), adding the
    /// GPUs views take beyond their pods to `tally`; `None`, with nothing done, when it cannot
    /// be taken.
    pub(in crate::world) fn quick(&mut self, facts: &Facts<'_>, tally: &mut Tally) -> Option<()> {
        let inputs = facts.inputs;
        let e = &self.entries;
        if !e.ready
            || self.needs_changed
            || !self.alike_queues
            || !self.alike_namespaces
            || !e.same_nodes(facts)
        {
            return None;
        }
        let pod_places = places(&inputs.pods, &e.pods, |p| &p.pod)?;
        let job_places = places(&inputs.jobs, &e.jobs, |j| &j.job)?;
        let new = (pod_places.iter().chain(&job_places))
            .filter(|&&p| p == NEW)
            .count();
        if new > 64 + (inputs.pods.len() + inputs.jobs.len()) / 8 {
            return None;
        }

        let mut dirty = Dirty::default();
        let hasher = e.hasher.clone();
        let add = |dirty: &mut Dirty, id: &str| dirty.add(hasher.hash_one(id), id);
        // Pods: a new one's job, and the job of one gone (or replaced by a new copy).
        let mut last = std::mem::take(&mut self.entries.pods);
        let mut pods = Vec::with_capacity(inputs.pods.len());
        for (pod, &place) in inputs.pods.iter().zip(&pod_places) {
            let entry = match place {
                NEW => {
                    let node = pod_node_name(pod).and_then(|n| facts.nodes.get(n));
                    let entry = self.entries.pod(pod, node.map(|f| f.at));
                    if let Some((h, id)) = &entry.job {
                        dirty.add(*h, id);
                    }
                    Some(entry)
                }
                p => last[p as usize].take(),
            };
            pods.push(entry);
        }
        for (h, id) in last.into_iter().flatten().filter_map(|e| e.job) {
            dirty.add(h, &id);
        }
        // Jobs: a new one (or a new copy), and forgetting those gone.
        let mut last = std::mem::take(&mut self.entries.jobs);
        let mut jobs = Vec::with_capacity(inputs.jobs.len());
        let mut fresh: HashSet<Box<str>> = HashSet::default();
        for (job, &place) in inputs.jobs.iter().zip(&job_places) {
            let entry = match place {
                NEW => {
                    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
                    let name = job.metadata.name.as_deref().unwrap_or_default();
                    let entry = self.entries.job(job, &format!("{ns}/{name}"));
                    dirty.add(entry.hash, &entry.id);
                    fresh.insert(entry.id.clone());
                    Some(entry)
                }
                p => last[p as usize].take(),
            };
            jobs.push(entry);
        }
        // Forgotten after the views, as a build that visits every job does.
        let gone: Vec<Box<str>> = (last.into_iter().flatten())
            .filter(|gone| !fresh.contains(&gone.id))
            .map(|gone| gone.id)
            .collect();
        // What the loop assumed, moved on and finished; the clock.
        let e = &mut self.entries;
        for id in differ(&e.assumed, facts.assumed).chain(differ(&e.floor, facts.attempt_floor)) {
            add(&mut dirty, id);
        }
        let finished = &inputs.finished;
        for id in (finished.iter().filter(|f| !e.finished.contains(*f)))
            .chain(e.finished.iter().filter(|f| !finished.contains(*f)))
        {
            add(&mut dirty, id);
        }
        if e.assumed != *facts.assumed {
            e.assumed.clone_from(facts.assumed);
        }
        if e.floor != *facts.attempt_floor {
            e.floor.clone_from(facts.attempt_floor);
        }
        if e.finished != *finished {
            e.finished.clone_from(finished);
        }
        while let Some(Reverse((at, _))) = self.until.peek()
            && *at <= facts.now
        {
            let Some(Reverse((_, id))) = self.until.pop() else {
                break;
            };
            add(&mut dirty, &id);
        }
        for id in std::mem::take(&mut self.last_volatile) {
            add(&mut dirty, &id);
        }

        // The jobs to look at, in the caches' order, and the pods labelled with each.
        let mut todo: Vec<usize> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::default();
        if !dirty.ids.is_empty() {
            for (at, j) in jobs.iter().enumerate() {
                let j = j.as_ref().expect("every entry of this build is set");
                if dirty.has(j.hash, &j.id) {
                    slot.insert(&j.id, todo.len());
                    todo.push(at);
                }
            }
        }
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); todo.len()];
        if !todo.is_empty() {
            for (at, p) in pods.iter().enumerate() {
                if let Some(Some((h, id))) = p.as_ref().map(|p| &p.job)
                    && dirty.hashes.contains(h)
                    && let Some(&k) = slot.get(&**id)
                {
                    groups[k].push(at);
                }
            }
        }
        drop(slot);
        let mut group: Vec<&Arc<Pod>> = Vec::new();
        let mut seen: Vec<Seen> = Vec::new();
        for (&at, members) in todo.iter().zip(&groups) {
            group.clear();
            seen.clear();
            for &p in members {
                group.push(&inputs.pods[p]);
                seen.push(facts.seen(&inputs.pods[p]));
            }
            let id = &jobs[at].as_ref().expect("set").id;
            self.view(facts, &inputs.jobs[at], id, &group, &seen);
        }
        for id in gone {
            self.remove(&id);
        }
        self.kept += inputs.jobs.len() - todo.len();
        self.visited = todo.len();

        // GPUs beyond the pods: the views that took some, and those derived again.
        let mut contributors = std::mem::take(&mut self.entries.contributors);
        contributors.extend(
            todo.iter()
                .map(|&at| jobs[at].as_ref().expect("set").id.clone()),
        );
        contributors.sort_unstable();
        contributors.dedup();
        contributors.retain(|id| {
            self.views.get(&**id).is_some_and(|view| {
                job::add_usage(
                    view,
                    facts.assumed.get(&**id),
                    &mut tally.used_more,
                    &mut tally.releasing_more,
                )
            })
        });
        let e = &mut self.entries;
        e.contributors = contributors;
        e.pods = pods;
        e.jobs = jobs;
        self.trim_until();
        Some(())
    }
}
