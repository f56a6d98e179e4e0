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

    /// Takes `gpus` over `[from, to)` (`to` = None: forever).
    fn sub(&mut self, from: i64, to: Option<i64>, gpus: u32) {
        let first = self.split(from);
        let last = match to {
            Some(to) => self.split(to),
            None => self.0.len(),
        };
        for step in &mut self.0[first..last] {
            step.1 = step.1.saturating_sub(gpus);
        }
    }
}

/// The profile of the private nodes of one cycle.
#[derive(Clone)]
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
    #[cfg(test)]
    pub fn new(
        now: Time,
        nodes: &[Node],
        private: &[bool],
        free: impl Fn(usize) -> u32,
        releases: &[(Time, usize, u32)],
        packing: Packing,
    ) -> Profile {
        Profile::new_in(None, now, nodes, private, free, releases, packing)
    }

    /// [`Profile::new`], built in the buffers of `spare` (an earlier cycle's profile, whose
    /// contents are dropped): the same profile, without allocating what `spare` already holds.
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
        let (mut capacity, mut steps_of, mut ends, mut grouped, mut lists) = match spare {
            Some(p) => (p.capacity, p.nodes, p.ends, p.grouped, p.lists),
            None => Default::default(),
        };
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
        Profile {
            now,
            nodes: steps_of,
            capacity,
            packing,
            work: 0,
            ends,
            grouped,
            lists,
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
        let g = job.gpus_per_replica;
        if g == 0 {
            return None;
        }
        self.work += self.nodes.len() as u64;
        let mut eligible: Vec<Cursor> = Vec::with_capacity(self.nodes.len());
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
        // Candidate starts: now, and every moment some eligible node's free GPUs rise. A gang
        // that fits from a moment where none rises fits from the candidate before it as well
        // (every node has at least as many GPUs free just before, and the earlier interval
        // ends sooner), so the earliest slot is always at such a moment and the others are
        // passed over. They still count against the planning budget, as they did when every
        // step was tried, so plans do not change with this shortcut.
        // The candidates come in time order from a merge of the nodes' steps (most searches
        // end within the first few, so the steps are not all sorted up front).
        let mut moments = Moments::new(self, &eligible, only_now);
        let len = runtime.map(|d| d.as_millis().min(i64::MAX as u64 / 4) as i64);
        let mut rooms: Vec<(u32, usize)> = Vec::with_capacity(eligible.len());
        let replicas = u64::from(job.replicas);
        // The nodes whose free GPUs rise at the candidate.
        let mut rose: Vec<u32> = Vec::new();
        // Slots over the nodes' kept rooms: exact after every node was evaluated, then moved
        // only by the nodes that rose since. A node with no rise since its room was found has
        // at most that room now (it only lost GPUs meanwhile, and the interval reaches no
        // sooner), so this bounds the slots from above and a candidate below it is passed over
        // without evaluating every node.
        let mut bound: Option<u64> = None;
        while let Some((t, rises)) = moments.next(self, &eligible, &mut rose) {
            if !only_now && !self.budget_left() {
                return None;
            }
            self.work += count;
            if !rises {
                continue;
            }
            let to = len.map(|l| t.saturating_add(l.max(1)));
            if let Some(b) = bound.as_mut() {
                for &e in &rose {
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
            for c in &mut eligible {
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
            for &(room, i) in &rooms {
                let k = (room / g).min(job.replicas - nodes.len() as u32);
                nodes.extend(std::iter::repeat_n(i, k as usize));
                if nodes.len() as u32 == job.replicas {
                    break;
                }
            }
            return Some(Slot {
                at: Time::from_millis(t),
                nodes,
            });
        }
        None
    }

    /// Whether `nodes` (one per replica) keep room for `job` from now for `runtime`.
    pub fn holds_now(&mut self, job: &Job, nodes: &[usize], runtime: Option<Duration>) -> bool {
        let to = runtime.map(|d| self.now.saturating_add((d.as_millis() as i64).max(1)));
        if let &[n] = nodes {
            // One replica (most gangs): no list to sort.
            self.work += 1;
            return self.nodes[n]
                .as_ref()
                .is_some_and(|s| s.min_free(self.now, to) >= job.gpus_per_replica);
        }
        let mut sorted = nodes.to_vec();
        sorted.sort_unstable();
        sorted.chunk_by(|a, b| a == b).all(|same| {
            self.work += 1;
            let need = job.gpus_per_replica * same.len() as u32;
            self.nodes[same[0]]
                .as_ref()
                .is_some_and(|s| s.min_free(self.now, to) >= need)
        })
    }

    /// Holds `gpus` of node `i` from now on (for a job that starts there once other GPUs of
    /// the node are given back).
    pub fn hold(&mut self, i: usize, gpus: u32) {
        let now = self.now;
        if let Some(steps) = self.nodes[i].as_mut() {
            steps.sub(now, None, gpus);
        }
    }

    /// Takes the slot's GPUs from `slot.at` for `runtime` (None: forever).
    pub fn take(&mut self, job: &Job, slot: &Slot, runtime: Option<Duration>) {
        let from = slot.at.as_millis();
        let to = runtime.map(|d| from.saturating_add((d.as_millis() as i64).max(1)));
        for &i in &slot.nodes {
            if let Some(steps) = self.nodes[i].as_mut() {
                steps.sub(from, to, job.gpus_per_replica);
            }
        }
    }
}

/// One eligible node during a search: the step in force at the candidate, and the least free
/// GPUs over the candidate's interval (`room`, over the steps `at..end`).
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
    fn new(p: &Profile, eligible: &[Cursor], only_now: bool) -> Moments {
        let mut heap = Vec::with_capacity(if only_now { 1 } else { eligible.len() + 1 });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: u32) -> Node {
        Node {
            name: name.into(),
            pool: "p".into(),
            gpu_model: None,
            gpus,
            free_gpus: gpus,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
        }
    }

    fn job(gpus: u32, replicas: u32) -> Job {
        let mut j = Job::new("j", "q", gpus, Time::from_millis(0));
        j.replicas = replicas;
        j
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn plans_in_order_without_delaying_earlier_plans() {
        // Two 8-GPU nodes: n0 has 4 free until t=100 s, n1 is full until t=50 s.
        let nodes = [node("n0", 8), node("n1", 8)];
        let releases = [
            (Time::from_millis(100_000), 0, 4),
            (Time::from_millis(50_000), 1, 8),
        ];
        let mut p = Profile::new(
            Time::from_millis(0),
            &nodes,
            &[true, true],
            |i| [4, 0][i],
            &releases,
            Packing::BestFit,
        );
        // An 8-GPU job fits first on n1 at 50 s.
        let big = job(8, 1);
        let slot = p.earliest(&big, secs(200), |_| true).unwrap();
        assert_eq!((slot.at.as_millis(), slot.nodes.clone()), (50_000, vec![1]));
        p.take(&big, &slot, secs(200));
        // A 4-GPU job for 30 s fits now on n0.
        let small = job(4, 1);
        let slot = p.earliest(&small, secs(30), |_| true).unwrap();
        assert_eq!((slot.at.as_millis(), slot.nodes.clone()), (0, vec![0]));
        p.take(&small, &slot, secs(30));
        // Another 8-GPU job: n1 is taken until 250 s, n0 is whole from 100 s.
        let slot = p.earliest(&big, secs(10), |_| true).unwrap();
        assert_eq!(
            (slot.at.as_millis(), slot.nodes.clone()),
            (100_000, vec![0])
        );
        // A 2 x 8 gang must wait for both: 250 s.
        let gang = job(8, 2);
        let slot = p.earliest(&gang, secs(10), |_| true).unwrap();
        assert_eq!(slot.at.as_millis(), 250_000);
        assert_eq!(slot.nodes.len(), 2);
        // A job that never ends fits only where nothing is reserved later: n0 keeps 4 GPUs
        // free from 30 s on.
        let forever = p.earliest(&job(4, 1), None, |_| true).unwrap();
        assert_eq!(
            (forever.at.as_millis(), forever.nodes.clone()),
            (30_000, vec![0])
        );
        assert_eq!(
            p.earliest(&job(8, 1), None, |_| true)
                .unwrap()
                .at
                .as_millis(),
            100_000
        );
    }

    #[test]
    fn a_job_longer_than_a_gap_waits_for_a_gap_long_enough() {
        let nodes = [node("n0", 8)];
        let mut p = Profile::new(
            Time::from_millis(0),
            &nodes,
            &[true],
            |_| 8,
            &[],
            Packing::BestFit,
        );
        // Reserved from 60 s for 100 s.
        let blocker = job(8, 1);
        let slot = Slot {
            at: Time::from_millis(60_000),
            nodes: vec![0],
        };
        p.take(&blocker, &slot, secs(100));
        let short = job(8, 1);
        assert_eq!(
            p.earliest(&short, secs(60), |_| true)
                .unwrap()
                .at
                .as_millis(),
            0
        );
        assert_eq!(
            p.earliest(&short, secs(61), |_| true)
                .unwrap()
                .at
                .as_millis(),
            160_000
        );
        assert!(p.earliest(&job(16, 1), secs(1), |_| true).is_none());
        assert!(p.earliest(&short, secs(1), |_| false).is_none());
    }

    #[test]
    fn overdue_work_is_expected_a_second_from_now() {
        let nodes = [node("n0", 8)];
        let releases = [(Time::from_millis(-5_000), 0, 8)];
        let mut p = Profile::new(
            Time::from_millis(0),
            &nodes,
            &[true],
            |_| 0,
            &releases,
            Packing::BestFit,
        );
        let slot = p.earliest(&job(8, 1), secs(10), |_| true).unwrap();
        assert_eq!(slot.at.as_millis(), 1_000);
    }

    /// The search as first written: every step of every eligible node tried in time order,
    /// each node's step found by binary search. Returns the slot and the work it counted.
    fn every_step(
        p: &Profile,
        job: &Job,
        runtime: Option<Duration>,
        accepts: impl Fn(usize) -> bool,
    ) -> (Option<(i64, Vec<usize>)>, u64) {
        let g = job.gpus_per_replica;
        let mut work = p.work + p.nodes.len() as u64;
        let eligible: Vec<usize> = (0..p.nodes.len())
            .filter(|&i| p.nodes[i].is_some() && p.capacity[i] >= g && accepts(i))
            .collect();
        let mut times: Vec<i64> = eligible
            .iter()
            .filter_map(|&i| p.nodes[i].as_ref())
            .flat_map(|s| s.0.iter().map(|&(t, _)| t))
            .collect();
        times.sort_unstable();
        times.dedup();
        let len = runtime.map(|d| d.as_millis() as i64);
        for t in times {
            if work >= WORK_BUDGET {
                return (None, work);
            }
            let to = len.map(|l| t + l.max(1));
            let mut rooms = Vec::new();
            let mut slots = 0;
            for &i in &eligible {
                work += 1;
                let room = p.nodes[i].as_ref().unwrap().min_free(t, to);
                if room >= g {
                    slots += room / g;
                    rooms.push((room, i));
                }
            }
            if slots >= job.replicas {
                match p.packing {
                    Packing::BestFit => rooms.sort_unstable(),
                    Packing::FirstFit => rooms.sort_unstable_by_key(|&(_, i)| i),
                }
                let mut nodes = Vec::new();
                for (room, i) in rooms {
                    let k = (room / g).min(job.replicas - nodes.len() as u32);
                    nodes.extend(std::iter::repeat_n(i, k as usize));
                    if nodes.len() as u32 == job.replicas {
                        break;
                    }
                }
                return (Some((t, nodes)), work);
            }
        }
        (None, work)
    }

    /// The profile as first built: one release at a time, each raising the node's free GPUs
    /// from its moment on, capped at the node's capacity.
    fn release_by_release(
        now: i64,
        caps: &[u32],
        free: &[u32],
        releases: &[(Time, usize, u32)],
    ) -> Vec<Vec<(i64, u32)>> {
        let mut nodes: Vec<Steps> = free.iter().map(|&f| Steps(vec![(now, f)])).collect();
        for &(t, n, gpus) in releases {
            let steps = &mut nodes[n];
            let first = steps.split(t.as_millis().max(now + 1000));
            for step in &mut steps.0[first..] {
                step.1 = (step.1 + gpus).min(caps[n]);
            }
        }
        nodes.into_iter().map(|s| s.0).collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Built at once from the releases grouped by node, the profile is the one built a
        /// release at a time (same times, one step per distinct moment, same free GPUs), also
        /// when built in the buffers of another profile.
        #[test]
        fn the_profile_built_at_once_is_the_one_built_release_by_release(
            caps in proptest::collection::vec((0u32..=8, 0u32..=8), 1..6),
            releases in proptest::collection::vec((0usize..6, -3i64..20, 0u32..=8), 0..24),
            now in -2i64..3,
            spare_from in 0usize..6,
            spare_private in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
        ) {
            let nodes: Vec<Node> = caps.iter().enumerate().map(|(i, &(c, _))| node(&format!("n{i}"), c)).collect();
            let cap: Vec<u32> = caps.iter().map(|&(c, _)| c).collect();
            let free: Vec<u32> = caps.iter().map(|&(_, f)| f).collect();
            // Moments a whole number of seconds apart, some overdue, some equal.
            let releases: Vec<(Time, usize, u32)> = releases
                .iter()
                .map(|&(n, t, g)| (Time::from_millis(t * 1000), n % nodes.len(), g))
                .collect();
            let private = vec![true; nodes.len()];
            let now = Time::from_millis(now * 1000);
            let p = Profile::new(now, &nodes, &private, |i| free[i], &releases, Packing::BestFit);
            let got: Vec<Vec<(i64, u32)>> = p.nodes.iter().map(|s| s.as_ref().unwrap().0.clone()).collect();
            proptest::prop_assert_eq!(&got, &release_by_release(now.as_millis(), &cap, &free, &releases));
            // Built again in the buffers of a profile of other nodes (some not private, so
            // with fewer or more step lists), the profile is the same.
            let others = &nodes[spare_from % nodes.len()..];
            let spare = Profile::new(now, others, &spare_private[..others.len()], |i| free[i], &[], Packing::BestFit);
            let q = Profile::new_in(Some(spare), now, &nodes, &private, |i| free[i], &releases, Packing::BestFit);
            let again: Vec<Vec<(i64, u32)>> = q.nodes.iter().map(|s| s.as_ref().unwrap().0.clone()).collect();
            proptest::prop_assert_eq!(again, got);
            proptest::prop_assert_eq!(&q.capacity, &cap);
        }

        /// Passing over the moments where no node's free GPUs rise finds the same slots, and
        /// counts the same work against the budget, as trying every step.
        #[test]
        fn the_search_finds_what_trying_every_step_finds(
            caps in proptest::collection::vec((1u32..=8, 0u32..=8), 1..5),
            releases in proptest::collection::vec((0usize..5, 1u64..400, 1u32..=8), 0..8),
            plans in proptest::collection::vec((1u32..=8, 1u32..=3, proptest::option::of(1u64..300)), 1..12),
            near_budget in proptest::prelude::any::<bool>(),
            short in 0u64..600,
            first_fit in proptest::prelude::any::<bool>(),
            refused in proptest::collection::vec(proptest::prelude::any::<bool>(), 5),
        ) {
            let nodes: Vec<Node> = caps.iter().enumerate().map(|(i, &(c, _))| node(&format!("n{i}"), c)).collect();
            let free: Vec<u32> = caps.iter().map(|&(c, f)| f.min(c)).collect();
            let releases: Vec<(Time, usize, u32)> = releases
                .iter()
                .map(|&(n, t, g)| (Time::from_millis(t as i64 * 1000), n % nodes.len(), g))
                .collect();
            let private = vec![true; nodes.len()];
            let packing = if first_fit { Packing::FirstFit } else { Packing::BestFit };
            let mut p = Profile::new(Time::from_millis(0), &nodes, &private, |i| free[i], &releases, packing);
            // Some nodes do not take some jobs (their GPU model): the odd-sized gangs here.
            let refused = &refused;
            let accepts = |g: u32| move |i: usize| g.is_multiple_of(2) || !refused[i];
            // Some histories start near the end of the cycle's budget.
            if near_budget {
                p.work = WORK_BUDGET - short;
            }
            for &(g, replicas, runtime) in &plans {
                let j = job(g, replicas);
                let runtime = runtime.map(Duration::from_secs);
                let (want, work) = every_step(&p, &j, runtime, accepts(g));
                let got = p.earliest(&j, runtime, accepts(g));
                proptest::prop_assert_eq!(got.as_ref().map(|s| (s.at.as_millis(), s.nodes.clone())), want);
                proptest::prop_assert_eq!(p.work, work);
                if let Some(slot) = got {
                    p.take(&j, &slot, runtime);
                }
            }
        }
    }
}
