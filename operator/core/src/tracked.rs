//! [`Tracked`]: a snapshot its owner changes in place, with each job's queue and nodes
//! resolved to indexes once, not at every cycle.
//!
//! [`decide`](crate::decide) looks every job's queue up by name, and every node of every running
//! private job (their expected ends are the profile's releases), at every cycle. A caller that
//! decides cycle after cycle on a world that changes a little between them (the simulator's
//! engine, the operator's [`crate::Scheduler`]) pays for those lookups again and again: on the
//! synthetic replays they were a fifth of the time. A `Tracked` keeps, beside each job, its
//! queue's index and its nodes' indexes, found at the next cycle for the jobs added or changed
//! since the last one ([`Tracked::push_job`], [`Tracked::job_mut`]) and for every job when the
//! nodes or queues change in a way that can move an index (a node added, removed or renamed;
//! the snapshot changed whole through [`Tracked::change_whole`]).
//!
//! [`Tracked::decide`] plans exactly what `decide_with` plans on the same snapshot: the
//! indexes are the ones the cycle would have found by name (`tests/tracked.rs` applies random
//! histories to both and compares every plan).

use std::ops::{Deref, DerefMut};

use crate::decide::{FastMap, Scratch};
use crate::refs::{JobRefs, NONE};
use crate::{Instance, Job, JobState, Node, Offering, Plan, Policy, Snapshot, Time};

/// A snapshot changed in place, with its jobs' queues and nodes resolved once; see the module
/// documentation.
#[derive(Clone, Debug)]
pub struct Tracked {
    snap: Snapshot,
    /// Per job, as `snap.jobs`.
    refs: Vec<JobRefs>,
    /// Bumped whenever node or queue indexes may have moved: every job's are found again.
    epoch: u64,
    /// Every job's refs are to be found again (the epoch moved), not only `dirty`'s.
    all: bool,
    /// Positions of the jobs added or changed since the last cycle.
    dirty: Vec<usize>,
    /// Node name -> index, as a map built by inserting the nodes in order (a name given twice
    /// keeps its last node, as the cycle's own table does).
    node_pos: FastMap<String, u32>,
    queue_pos: FastMap<String, u32>,
    /// Numbers the state of the offerings, pools and queues: a new number whenever they may
    /// have changed, so that a cycle keeps what earlier cycles found about the offerings only
    /// while they have not.
    generation: u64,
}

impl Tracked {
    /// Tracks `snapshot`.
    pub fn new(snapshot: Snapshot) -> Tracked {
        let mut t = Tracked {
            refs: vec![JobRefs::default(); snapshot.jobs.len()],
            snap: snapshot,
            epoch: 1,
            all: true,
            dirty: Vec::new(),
            node_pos: FastMap::default(),
            queue_pos: FastMap::default(),
            generation: crate::decide::offer_memo::next_generation(),
        };
        t.index_names();
        t
    }

    /// The snapshot as it is now.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// Changes the snapshot whole with `f`, for what the other methods do not cover (queues,
    /// pools, settings, datasets; jobs or nodes reordered): every job's queue and nodes are
    /// found again at the next cycle.
    pub fn change_whole(&mut self, f: impl FnOnce(&mut Snapshot)) {
        f(&mut self.snap);
        self.generation = crate::decide::offer_memo::next_generation();
        self.refs.clear();
        self.refs
            .resize_with(self.snap.jobs.len(), JobRefs::default);
        self.index_names();
        self.invalidate();
    }

    /// Adds a job at the end of the job list.
    pub fn push_job(&mut self, job: Job) {
        self.dirty.push(self.snap.jobs.len());
        self.snap.jobs.push(job);
        self.refs.push(JobRefs::default());
    }

    /// Removes the job at `pos`, keeping the others' order.
    pub fn remove_job(&mut self, pos: usize) -> Job {
        self.refs.remove(pos);
        // The jobs after it move up one.
        self.dirty.retain_mut(|p| match (*p).cmp(&pos) {
            std::cmp::Ordering::Equal => false,
            std::cmp::Ordering::Greater => {
                *p -= 1;
                true
            }
            std::cmp::Ordering::Less => true,
        });
        self.snap.jobs.remove(pos)
    }

    /// Keeps only the jobs `keep` says yes to, in their order.
    pub fn retain_jobs(&mut self, keep: impl FnMut(&Job) -> bool) {
        let kept: Vec<bool> = self.snap.jobs.iter().map(keep).collect();
        let mut flags = kept.iter();
        self.refs.retain(|_| flags.next().copied().unwrap_or(true));
        let mut flags = kept.iter();
        self.snap
            .jobs
            .retain(|_| flags.next().copied().unwrap_or(true));
        // Positions moved: the changed ones are found in a pass over all.
        self.all = true;
        self.dirty.clear();
    }

    /// The job at `pos`, to change: its queue and nodes are found again at the next cycle.
    pub fn job_mut(&mut self, pos: usize) -> &mut Job {
        if self.refs[pos].epoch != 0 {
            self.refs[pos].epoch = 0;
            self.dirty.push(pos);
        }
        &mut self.snap.jobs[pos]
    }

    /// The index of the node named `name`.
    pub fn node_position(&self, name: &str) -> Option<usize> {
        self.node_pos.get(name).map(|&i| i as usize)
    }

    /// Adds a node at the end of the node list.
    pub fn push_node(&mut self, node: Node) {
        self.node_pos
            .insert(node.name.clone(), self.snap.nodes.len() as u32);
        self.snap.nodes.push(node);
        // A running job's node of that name is found now.
        self.invalidate();
    }

    /// Removes the node at `pos`; the last node takes its place.
    pub fn swap_remove_node(&mut self, pos: usize) -> Node {
        let node = self.snap.nodes.swap_remove(pos);
        self.index_nodes();
        self.invalidate();
        node
    }

    /// Removes the node at `pos`, keeping the others' order.
    pub fn remove_node(&mut self, pos: usize) -> Node {
        let node = self.snap.nodes.remove(pos);
        self.index_nodes();
        self.invalidate();
        node
    }

    /// The node at `pos`, to change. Renaming it is noticed when the guard is dropped.
    pub fn node_mut(&mut self, pos: usize) -> NodeMut<'_> {
        NodeMut { tracked: self, pos }
    }

    /// The instances, to change (the cycle looks theirs up by name every time).
    pub fn instances_mut(&mut self) -> &mut Vec<Instance> {
        &mut self.snap.instances
    }

    /// Makes the offerings `offerings`; false when they already were (what the cycles found out
    /// about them is then kept).
    pub fn set_offerings(&mut self, offerings: &[Offering]) -> bool {
        if self.snap.offerings == offerings {
            return false;
        }
        let held = self.offerings_mut();
        held.clear();
        held.extend_from_slice(offerings);
        true
    }

    /// The offerings, to change. What the cycles found out about the offerings is found again
    /// at the next one: ask for them only to change them ([`Tracked::set_offerings`] asks only
    /// when they differ).
    pub fn offerings_mut(&mut self) -> &mut Vec<Offering> {
        self.generation = crate::decide::offer_memo::next_generation();
        &mut self.snap.offerings
    }

    /// One cycle on the snapshot as it is now: the plan
    /// [`decide_with`](crate::decide_with) gives on [`Tracked::snapshot`].
    pub fn decide(&mut self, policy: &dyn Policy, now: Time, scratch: &mut Scratch) -> Plan {
        self.refresh();
        crate::decide::decide_resolved(
            &self.snap,
            &self.refs,
            self.generation,
            policy,
            now,
            scratch,
        )
    }

    /// Every job's queue and nodes to be found again.
    fn invalidate(&mut self) {
        self.epoch += 1;
        self.all = true;
        self.dirty.clear();
    }

    fn index_nodes(&mut self) {
        self.node_pos.clear();
        for (i, n) in self.snap.nodes.iter().enumerate() {
            self.node_pos.insert(n.name.clone(), i as u32);
        }
    }

    fn index_names(&mut self) {
        self.index_nodes();
        self.queue_pos.clear();
        for (i, q) in self.snap.queues.iter().enumerate() {
            self.queue_pos.insert(q.name.clone(), i as u32);
        }
    }

    /// Finds the queue and nodes of every job whose refs are stale: the ones added or changed
    /// since the last cycle, or all of them when an index may have moved.
    fn refresh(&mut self) {
        let epoch = self.epoch;
        if self.all {
            for p in 0..self.refs.len() {
                if self.refs[p].epoch != epoch {
                    self.resolve(p);
                }
            }
            self.all = false;
        } else {
            for k in 0..self.dirty.len() {
                self.resolve(self.dirty[k]);
            }
        }
        self.dirty.clear();
    }

    /// Finds job `p`'s queue and nodes.
    fn resolve(&mut self, p: usize) {
        let job = &self.snap.jobs[p];
        let refs = &mut self.refs[p];
        refs.epoch = self.epoch;
        refs.queue = self
            .queue_pos
            .get(job.queue.as_str())
            .copied()
            .unwrap_or(NONE);
        refs.more.clear();
        refs.first = NONE;
        if let JobState::Running { nodes, .. } = &job.state {
            let mut found = nodes
                .iter()
                .map(|n| self.node_pos.get(n.as_str()).copied().unwrap_or(NONE));
            refs.first = found.next().unwrap_or(NONE);
            refs.more.extend(found);
        }
    }
}

/// An empty snapshot.
impl Default for Tracked {
    fn default() -> Tracked {
        Tracked::new(Snapshot::default())
    }
}

/// A node being changed in place ([`Tracked::node_mut`]); a new name is noticed on drop.
pub struct NodeMut<'a> {
    tracked: &'a mut Tracked,
    pos: usize,
}

impl Deref for NodeMut<'_> {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.tracked.snap.nodes[self.pos]
    }
}

impl DerefMut for NodeMut<'_> {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.tracked.snap.nodes[self.pos]
    }
}

impl Drop for NodeMut<'_> {
    fn drop(&mut self) {
        let t = &mut *self.tracked;
        let name = t.snap.nodes[self.pos].name.as_str();
        if t.node_pos.get(name) != Some(&(self.pos as u32)) {
            t.index_nodes();
            t.invalidate();
        }
    }
}
