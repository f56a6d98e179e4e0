//! The private nodes' free GPUs over time, for conservative backfilling.
//!
//! Each private node's free GPUs are a step function of time, starting at the cycle's `now`
//! with the GPUs free now and rising where running work is expected to end. Waiting jobs are
//! planned in queue order: each gets the earliest start at which its whole gang fits for its
//! whole estimated runtime, and that interval is taken from the profile, so a job planned later
//! can never delay one planned earlier. With exact runtime estimates a planned start is a
//! promise (the job starts then or sooner); with rough ones it is a forecast that the next
//! cycle revises.
//!
//! The work of one cycle is bounded ([`Profile::budget_left`]): past it, jobs are not planned
//! and wait as they would without estimates.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

use crate::{Duration, Job, Node, Packing, Time};

/// Node-interval evaluations one cycle may spend on planning.
const WORK_BUDGET: u64 = 200_000;

/// Free GPUs of one node: `steps[k].1` from `steps[k].0` until the next step (the last one
/// lasts forever). Times are milliseconds; `steps[0].0` is the cycle's now.
#[derive(Clone, Debug)]
struct Steps(Vec<(i64, u32)>);

impl Steps {
    /// Index of the step in force at `t` (t >= steps[0].0).
    fn at(&self, t: i64) -> usize {
        self.0.partition_point(|&(s, _)| s <= t).saturating_sub(1)
    }

    /// Makes `t` a step boundary; returns its index.
    fn split(&mut self, t: i64) -> usize {
        let k = self.at(t);
        if self.0[k].0 == t {
            return k;
        }
        let free = self.0[k].1;
        self.0.insert(k + 1, (t, free));
        k + 1
    }

    /// Least free GPUs over `[from, to)` (`to` = None: forever).
    fn min_free(&self, from: i64, to: Option<i64>) -> u32 {
        self.min_free_from(self.at(from), to)
    }

    /// Least free GPUs from the step `k` in force at the interval's start until `to`.
    fn min_free_from(&self, mut k: usize, to: Option<i64>) -> u32 {
        let mut least = u32::MAX;
        while k < self.0.len() && to.is_none_or(|to| self.0[k].0 < to) {
            least = least.min(self.0[k].1);
            k += 1;
        }
        least
    }

    /// [`Steps::split`], adding `t` to `times` (when given) if it made a new step.
    fn split_noting(&mut self, t: i64, times: Option<&mut StepTimes>) -> usize {
        let before = self.0.len();
        let k = self.split(t);
        if let Some(times) = times
            && self.0.len() > before
            && let Err(at) = times.0.binary_search(&t)
        {
            times.0.insert(at, t);
        }
        k
    }

    /// Takes `gpus` over `[from, to)` (`to` = None: forever); new step times go to `times`.
    fn sub(&mut self, from: i64, to: Option<i64>, gpus: u32, mut times: Option<&mut StepTimes>) {
        let first = self.split_noting(from, times.as_deref_mut());
        let last = match to {
            Some(to) => self.split_noting(to, times),
            None => self.0.len(),
        };
        for step in &mut self.0[first..last] {
            step.1 = step.1.saturating_sub(gpus);
        }
    }
}

/// The profile of the private nodes of one cycle.
#[derive(Clone, Default)]
pub(crate) struct Profile {
    now: i64,
    /// Per node (index into the snapshot's nodes); `None` for nodes that are not private and
    /// schedulable.
    nodes: Vec<Option<Steps>>,
    capacity: Vec<u32>,
    packing: Packing,
    work: u64,
    /// The releases grouped by node while building: buffers kept for the next build.
    ends: Vec<usize>,
    grouped: Vec<(i64, u32)>,
    /// Empty step lists left from the profile this one was built in, for the next build.
    lists: Vec<Vec<(i64, u32)>>,
    /// A search's working lists, kept from one search to the next (and one build to the next).
    bufs: SearchBuffers,
    /// The private nodes' step times after now, once a search of one replica asked for them
    /// (see [`single`]); kept up to date as slots are taken.
    times: StepTimes,
    times_ready: bool,
    /// How many nodes are private and schedulable.
    private: usize,
}

/// Distinct moments, in time order, at which some private node's free GPUs change after now.
#[derive(Clone, Default)]
struct StepTimes(Vec<i64>);

/// The lists one search works in: eligible nodes, the moments' heap, rooms, nodes that rose.
#[derive(Clone, Default)]
struct SearchBuffers {
    eligible: Vec<Cursor>,
    heap: Vec<Reverse<(i64, u32, u32)>>,
    rooms: Vec<(u32, usize)>,
    rose: Vec<u32>,
}

/// Where and when a gang fits.
pub(crate) struct Slot {
    pub at: Time,
    /// One node per replica.
    pub nodes: Vec<usize>,
}

impl Profile {
    /// `free(i)` GPUs free now on node `i` if `private[i]`; `releases` are (time, node, GPUs)
    /// of running work expected to end. Work expected to have ended already is expected to end
    /// a second from now (it is overdue, not gone).
    ///
    /// Built in the buffers of `spare` (an earlier cycle's profile, whose contents are
    /// dropped; `None`: new ones): the same profile either way, without allocating what
    /// `spare` already holds.
    pub fn new_in(
        spare: Option<Profile>,
        now: Time,
        nodes: &[Node],
        private: &[bool],
        free: impl Fn(usize) -> u32,
        releases: &[(Time, usize, u32)],
        packing: Packing,
    ) -> Profile {
        let now = now.as_millis();
        let Profile {
            mut capacity,
            nodes: mut steps_of,
            mut ends,
            mut grouped,
            mut lists,
            bufs,
            times,
            ..
        } = spare.unwrap_or_default();
        // The step lists of the spare's nodes, emptied, for this profile's nodes.
        lists.extend(steps_of.drain(..).flatten().map(|Steps(mut v)| {
            v.clear();
            v
        }));
        capacity.clear();
        capacity.extend(nodes.iter().map(|n| n.gpus));
        ends.clear();
        grouped.clear();
        // The releases grouped by node (a counting sort: after it, node `i`'s are
        // `grouped[ends[i - 1]..ends[i]]`), each node's then put in time order. A node's free
        // GPUs from a moment on are its GPUs free now plus all it gets back by then, at most
        // its capacity: adding one release at a time with the cap applied each time gives the
        // same (the cap only cuts what is above it), so each step is a running sum.
        if !releases.is_empty() {
            // Filled rather than zero-allocated: `calloc` costs more than writing a few zeros.
            ends.resize(nodes.len(), 0usize);
            for &(_, n, _) in releases {
                ends[n] += 1;
            }
            let mut start = 0;
            for e in &mut ends {
                (*e, start) = (start, start + *e);
            }
            grouped.resize(releases.len(), (0i64, 0u32));
            for &(t, n, gpus) in releases {
                grouped[ends[n]] = (t.as_millis().max(now + 1000), gpus);
                ends[n] += 1;
            }
        }
        steps_of.extend((0..nodes.len()).map(|i| {
            private[i].then(|| {
                // Without releases `ends` is empty and every node gets none.
                let start = if i == 0 {
                    0
                } else {
                    ends.get(i - 1).copied().unwrap_or(0)
                };
                let end = ends.get(i).copied().unwrap_or(0);
                let mine = &mut grouped[start..end];
                mine.sort_unstable_by_key(|&(t, _)| t);
                let mut steps = lists.pop().unwrap_or_default();
                steps.reserve(mine.len() + 1);
                let mut gpus = free(i);
                steps.push((now, gpus));
                for &(t, back) in mine.iter() {
                    gpus = (gpus + back).min(capacity[i]);
                    match steps.last_mut() {
                        Some(last) if last.0 == t => last.1 = gpus,
                        _ => steps.push((t, gpus)),
                    }
                }
                Steps(steps)
            })
        }));
        let private = steps_of.iter().flatten().count();
        Profile {
            now,
            nodes: steps_of,
            capacity,
            packing,
            work: 0,
            ends,
            grouped,
            lists,
            bufs,
            times,
            times_ready: false,
            private,
        }
    }

    /// The key of step `j` of node `i` (see [`key`]), if it has one.
    fn step_key(&self, i: usize, j: usize) -> Option<i64> {
        let steps = &self.nodes[i].as_ref()?.0;
        let (t, free) = *steps.get(j)?;
        Some(key(t, free > steps[j - 1].1))
    }

    pub fn budget_left(&self) -> bool {
        self.work < WORK_BUDGET
    }

    /// The earliest slot for `job` over `runtime` (None: it never ends), among the nodes
    /// `accepts` allows; the nodes at that time by the profile's packing. `None` if it never fits, or
    /// the cycle's planning budget ran out first.
    pub fn earliest(
        &mut self,
        job: &Job,
        runtime: Option<Duration>,
        accepts: impl Fn(usize) -> bool,
    ) -> Option<Slot> {
        self.search(job, runtime, accepts, false)
    }

    /// A slot starting now, if there is one (costs one pass over the nodes).
    pub fn now_slot(
        &mut self,
        job: &Job,
        runtime: Option<Duration>,
        accepts: impl Fn(usize) -> bool,
    ) -> Option<Slot> {
        self.search(job, runtime, accepts, true)
    }

    fn search(
        &mut self,
        job: &Job,
        runtime: Option<Duration>,
        accepts: impl Fn(usize) -> bool,
        only_now: bool,
    ) -> Option<Slot> {
        let mut bufs = std::mem::take(&mut self.bufs);
        let slot = self.search_in(&mut bufs, job, runtime, accepts, only_now);
        self.bufs = bufs;
        slot
    }

    fn search_in(
        &mut self,
        bufs: &mut SearchBuffers,
        job: &Job,
        runtime: Option<Duration>,
        accepts: impl Fn(usize) -> bool,
        only_now: bool,
    ) -> Option<Slot> {
        let g = job.gpus_per_replica;
        if g == 0 {
            return None;
        }
        self.work += self.nodes.len() as u64;
        let SearchBuffers {
            eligible,
            heap,
            rooms,
            rose,
        } = bufs;
        eligible.clear();
        eligible.extend(
            (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_some() && self.capacity[i] >= g && accepts(i))
                .map(|i| Cursor {
                    node: i,
                    at: 0,
                    end: 0,
                    room: u32::MAX,
                }),
        );
        let count = eligible.len() as u64;
        let len = runtime.map(|d| d.as_millis().min(i64::MAX as u64 / 4) as i64);
        if job.replicas == 1 && eligible.len() == self.private {
            return self.search_single(eligible, g, len, only_now);
        }
        // Candidate starts: now, and every moment some eligible node's free GPUs rise. A gang
        // that fits from a moment where none rises fits from the candidate before it as well
        // (every node has at least as many GPUs free just before, and the earlier interval
        // ends sooner), so the earliest slot is always at such a moment and the others are
        // passed over. They still count against the planning budget, as they did when every
        // step was tried, so plans do not change with this shortcut.
        // The candidates come in time order from a merge of the nodes' steps (most searches
        // end within the first few, so the steps are not all sorted up front).
        let mut moments = Moments::new_in(std::mem::take(heap), self, eligible, only_now);
        let replicas = u64::from(job.replicas);
        // `rose`: the nodes whose free GPUs rise at the candidate.
        // Slots over the nodes' kept rooms: exact after every node was evaluated, then moved
        // only by the nodes that rose since. A node with no rise since its room was found has
        // at most that room now (it only lost GPUs meanwhile, and the interval reaches no
        // sooner), so this bounds the slots from above and a candidate below it is passed over
        // without evaluating every node.
        let mut bound: Option<u64> = None;
        let mut found = None;
        while let Some((t, rises)) = moments.next(self, eligible, rose) {
            if !only_now && !self.budget_left() {
                break;
            }
            self.work += count;
            if !rises {
                continue;
            }
            let to = len.map(|l| t.saturating_add(l.max(1)));
            if let Some(b) = bound.as_mut() {
                for &e in rose.iter() {
                    let c = &mut eligible[e as usize];
                    let Some(steps) = self.nodes[c.node].as_ref() else {
                        continue;
                    };
                    *b -= u64::from(c.room / g);
                    *b += u64::from(c.room_at(&steps.0, t, to) / g);
                }
                if *b < replicas {
                    continue;
                }
            }
            rooms.clear();
            let mut slots = 0u64;
            for c in eligible.iter_mut() {
                let Some(steps) = self.nodes[c.node].as_ref() else {
                    continue;
                };
                let room = c.room_at(&steps.0, t, to);
                slots += u64::from(room / g);
                if room >= g {
                    rooms.push((room, c.node));
                }
            }
            bound = Some(slots);
            if slots < replicas {
                continue;
            }
            match self.packing {
                Packing::BestFit => rooms.sort_unstable(),
                Packing::FirstFit => rooms.sort_unstable_by_key(|&(_, i)| i),
            }
            let mut nodes = Vec::with_capacity(job.replicas as usize);
            for &(room, i) in rooms.iter() {
                let k = (room / g).min(job.replicas - nodes.len() as u32);
                nodes.extend(std::iter::repeat_n(i, k as usize));
                if nodes.len() as u32 == job.replicas {
                    break;
                }
            }
            found = Some(Slot {
                at: Time::from_millis(t),
                nodes,
            });
            break;
        }
        *heap = moments.heap.into_vec();
        found
    }

    /// Whether `nodes` (one per replica) keep room for `job` from now for `runtime`.
    pub fn holds_now(&mut self, job: &Job, nodes: &[usize], runtime: Option<Duration>) -> bool {
        let to = runtime.map(|d| self.now.saturating_add((d.as_millis() as i64).max(1)));
        let (now, steps) = (self.now, &self.nodes);
        let work = &mut self.work;
        each_node_holds(nodes, job.gpus_per_replica, |n, need| {
            *work += 1;
            steps[n]
                .as_ref()
                .is_some_and(|s| s.min_free(now, to) >= need)
        })
    }

    /// Holds `gpus` of node `i` from now on (for a job that starts there once other GPUs of
    /// the node are given back).
    pub fn hold(&mut self, i: usize, gpus: u32) {
        let now = self.now;
        let times = self.times_ready.then_some(&mut self.times);
        if let Some(steps) = self.nodes[i].as_mut() {
            steps.sub(now, None, gpus, times);
        }
    }

    /// Takes the slot's GPUs from `slot.at` for `runtime` (None: forever).
    pub fn take(&mut self, job: &Job, slot: &Slot, runtime: Option<Duration>) {
        self.take_at(slot.at, &slot.nodes, job.gpus_per_replica, runtime);
    }

    /// Takes `gpus` of each of `nodes` (one per replica) from `at` for `runtime`.
    pub fn take_at(&mut self, at: Time, nodes: &[usize], gpus: u32, runtime: Option<Duration>) {
        let from = at.as_millis();
        let to = runtime.map(|d| from.saturating_add((d.as_millis() as i64).max(1)));
        for &i in nodes {
            if let Some(steps) = self.nodes[i].as_mut() {
                let times = self.times_ready.then_some(&mut self.times);
                steps.sub(from, to, gpus, times);
            }
        }
    }

    /// Counts `work` against the planning budget (checks made before the profile was built).
    pub fn add_work(&mut self, work: u64) {
        self.work += work;
    }
}

/// Whether `holds(node, GPUs)` says yes for every distinct node of a gang placed on `nodes`
/// (one per replica, `gpus` each), asked once per node with what all its replicas need,
/// stopping at the first no.
pub(crate) fn each_node_holds(
    nodes: &[usize],
    gpus: u32,
    mut holds: impl FnMut(usize, u32) -> bool,
) -> bool {
    if let &[n] = nodes {
        // One replica (most gangs): no list to sort.
        return holds(n, gpus);
    }
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    sorted
        .chunk_by(|a, b| a == b)
        .all(|same| holds(same[0], gpus * same.len() as u32))
}

/// One eligible node during a search: the step in force at the candidate, and the least free
/// GPUs over the candidate's interval (`room`, over the steps `at..end`).
#[derive(Clone)]
struct Cursor {
    node: usize,
    at: usize,
    end: usize,
    room: u32,
}

impl Cursor {
    /// Least free GPUs over `[t, to)` (`to` = None: forever). Candidates only move later, and
    /// so do the intervals' ends: the least is kept from the last candidate and lowered by the
    /// steps the interval now reaches, unless a step of this node started since (then it is
    /// found again from the step in force).
    fn room_at(&mut self, steps: &[(i64, u32)], t: i64, to: Option<i64>) -> u32 {
        let mut moved = false;
        while self.at + 1 < steps.len() && steps[self.at + 1].0 <= t {
            self.at += 1;
            moved = true;
        }
        if moved {
            self.end = self.at;
            self.room = u32::MAX;
        }
        while self.end < steps.len() && to.is_none_or(|to| steps[self.end].0 < to) {
            self.room = self.room.min(steps[self.end].1);
            self.end += 1;
        }
        self.room
    }
}

/// The candidate moments of one search in time order, each with whether some node's free GPUs
/// rise then: now, then the steps of the eligible nodes, merged as they are needed.
struct Moments {
    /// (key, eligible node, step) of each node's next step; the node `NOW` is the moment now.
    heap: BinaryHeap<Reverse<(i64, u32, u32)>>,
}

const NOW: u32 = u32::MAX;

/// A moment as `time << 1 | passed_over`: integer order is time order with a rising step first
/// among equal times (times are milliseconds; the clamp only touches moments millions of years
/// away).
fn key(t: i64, rises: bool) -> i64 {
    (t.clamp(i64::MIN >> 1, i64::MAX >> 1) << 1) | i64::from(!rises)
}

impl Moments {
    /// The moments, merged in `heap` (a buffer kept from an earlier search; emptied here).
    fn new_in(
        heap: Vec<Reverse<(i64, u32, u32)>>,
        p: &Profile,
        eligible: &[Cursor],
        only_now: bool,
    ) -> Moments {
        let mut heap = heap;
        heap.clear();
        heap.push(Reverse((key(p.now, true), NOW, 0)));
        if !only_now {
            for (e, c) in eligible.iter().enumerate() {
                if let Some(k) = p.step_key(c.node, 1) {
                    heap.push(Reverse((k, e as u32, 1)));
                }
            }
        }
        Moments {
            heap: BinaryHeap::from(heap),
        }
    }

    /// The next moment (equal times are one moment), as (time, rises); `rose` gets the
    /// eligible nodes whose free GPUs rise then.
    fn next(
        &mut self,
        p: &Profile,
        eligible: &[Cursor],
        rose: &mut Vec<u32>,
    ) -> Option<(i64, bool)> {
        let Reverse((first, _, _)) = *self.heap.peek()?;
        let t = first >> 1;
        rose.clear();
        while let Some(mut top) = self.heap.peek_mut() {
            let Reverse((k, e, j)) = *top;
            if k >> 1 != t {
                break;
            }
            if e != NOW && k & 1 == 0 {
                rose.push(e);
            }
            let next = if e == NOW {
                None
            } else {
                p.step_key(eligible[e as usize].node, j as usize + 1)
            };
            match next {
                Some(next) => *top = Reverse((next, e, j + 1)),
                None => {
                    PeekMut::pop(top);
                }
            }
        }
        Some((t, first & 1 == 0))
    }
}

mod single;
#[cfg(test)]
mod tests;
