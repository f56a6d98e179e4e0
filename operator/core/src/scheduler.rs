//! [`Scheduler`]: the decision core kept across cycles.
//!
//! [`decide`] is a pure function of a whole snapshot. A caller that runs it again and again
//! (an operator turning at every event) mostly hands it the same world: nothing arrived, nothing
//! finished, no threshold passed. A `Scheduler` owns the snapshot, takes what changed as
//! [`Change`]s (or finds them itself, object by object, in a whole world handed over:
//! [`Scheduler::sync`]), and runs a cycle only when its outcome can differ from the last one:
//!
//! - it decides again when a change arrived, when the last plan asked for actions (their
//!   effects come back as changes; until they do, deciding again repeats them), or when the
//!   clock reaches the last plan's [`Plan::stable_until`]: its `next_wake`, or an earlier
//!   moment that changes an outcome without a wake-up (a planned start coming within a cloud
//!   node's boot time, a running private job nearing its expected end, a cooldown ending).
//!   With rules that read the clock (`waited`, `now`), the EASY-backfilling order, or a
//!   running job past its estimate (its expected end moves with the clock) it decides every
//!   time;
//! - its plan carries only changes: every start, launch and termination, and the decisions
//!   whose outcome, reason, rule or offering differ from the job's current ones
//!   ([`Scheduler::current`]).
//!
//! `decide` on the full snapshot stays the reference: `tests/scheduler.rs` feeds random
//! histories to both (as changes, and as whole worlds with their jobs reordered at every step)
//! and requires the same actions and the same decision changes at every step.

use std::collections::BTreeMap;

use crate::decide::FastMap as HashMap;

use crate::decide::{Scratch, decide_with};
use crate::model::{Dataset, Instance, Node, Offering, Pool, Queue, Settings};
use crate::{Decision, Job, OfferingChoice, Outcome, Plan, Policy, Reason, Snapshot, Time};

/// Everything of a snapshot but its jobs, nodes, instances and offerings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub settings: Settings,
    pub queues: Vec<Queue>,
    pub pools: Vec<Pool>,
    pub datasets: Vec<Dataset>,
    pub invalid_queues: BTreeMap<String, String>,
    pub invalid_datasets: BTreeMap<String, String>,
}

/// One thing that changed since the last cycle. Changes that leave the world as it was
/// (an object sent again unchanged) cost nothing at the next cycle.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A job arrived or changed (its state, its spec).
    Job(Job),
    /// A job is gone (finished, deleted), by id.
    JobGone(String),
    /// A node joined or changed.
    Node(Node),
    /// A node is gone, by name.
    NodeGone(String),
    /// An instance was launched or changed.
    Instance(Instance),
    /// An instance is gone, by id.
    InstanceGone(String),
    /// The cloud offerings as they are now (prices, cooldowns, interruption counts).
    Offerings(Vec<Offering>),
    /// Queues, pools, datasets and settings as they are now.
    Config(Box<Config>),
}

/// What the last full cycle leaves for the next one.
#[derive(Clone, Debug)]
struct Last {
    at: Time,
    /// Whether it planned starts, launches or terminations.
    acted: bool,
    /// Deciding before this time gives the same outcomes (`Plan::stable_until`).
    until: Option<Time>,
    next_wake: Option<Time>,
}

/// The decision core kept across cycles; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Scheduler {
    snap: Snapshot,
    jobs: HashMap<String, usize>,
    nodes: HashMap<String, usize>,
    instances: HashMap<String, usize>,
    changed: bool,
    /// Each job's current outcome, reason, rule and offering.
    current: HashMap<String, Current>,
    last: Option<Last>,
    cycles: u64,
    skipped: u64,
    /// The cycles' working buffers, kept from one cycle to the next.
    scratch: Scratch,
}

/// Counters of a scheduler's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Cycles asked for.
    pub cycles: u64,
    /// Of those, answered without deciding because nothing could have changed.
    pub skipped: u64,
}

impl Scheduler {
    /// A scheduler starting from `snapshot` (job ids, node names and instance ids unique).
    pub fn new(snapshot: Snapshot) -> Scheduler {
        let mut s = Scheduler {
            snap: snapshot,
            changed: true,
            ..Scheduler::default()
        };
        s.reindex();
        s
    }

    fn reindex(&mut self) {
        self.jobs = position(&self.snap.jobs, |j| &j.id);
        self.nodes = position(&self.snap.nodes, |n| &n.name);
        self.instances = position(&self.snap.instances, |i| &i.id);
    }

    /// The world as the scheduler sees it.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The job's current outcome, reason and rule: those of the last decision that changed
    /// them.
    pub fn current(&self, job: &str) -> Option<(Outcome, Reason, Option<&str>)> {
        self.current
            .get(job)
            .map(|(o, r, rule, _)| (*o, *r, rule.as_deref()))
    }

    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            cycles: self.cycles,
            skipped: self.skipped,
        }
    }

    /// Takes one change. Jobs keep their order of arrival in the snapshot (a job that
    /// changes keeps its place; a plan lists its decisions in the jobs' order, though what it
    /// decides does not depend on it); so a removal shifts the objects after it (linear in
    /// their number), an addition or a change does not.
    pub fn apply(&mut self, change: Change) {
        let changed = match change {
            Change::Job(job) => upsert(&mut self.snap.jobs, &mut self.jobs, job, |j| &j.id),
            Change::JobGone(id) => {
                self.current.remove(&id);
                remove(&mut self.snap.jobs, &mut self.jobs, &id, |j| &j.id)
            }
            Change::Node(node) => upsert(&mut self.snap.nodes, &mut self.nodes, node, |n| &n.name),
            Change::NodeGone(name) => {
                remove(&mut self.snap.nodes, &mut self.nodes, &name, |n| &n.name)
            }
            Change::Instance(i) => {
                upsert(&mut self.snap.instances, &mut self.instances, i, |i| &i.id)
            }
            Change::InstanceGone(id) => {
                remove(&mut self.snap.instances, &mut self.instances, &id, |i| {
                    &i.id
                })
            }
            Change::Offerings(o) => replace(&mut self.snap.offerings, o),
            Change::Config(c) => {
                let Config {
                    settings,
                    queues,
                    pools,
                    datasets,
                    invalid_queues,
                    invalid_datasets,
                } = *c;
                let s = &mut self.snap;
                // Every one of them, not the first that differs.
                [
                    replace(&mut s.settings, settings),
                    replace(&mut s.queues, queues),
                    replace(&mut s.pools, pools),
                    replace(&mut s.datasets, datasets),
                    replace(&mut s.invalid_queues, invalid_queues),
                    replace(&mut s.invalid_datasets, invalid_datasets),
                ]
                .contains(&true)
            }
        };
        self.changed |= changed;
    }

    /// Takes the world as it is now, whole, and applies what differs from the world it holds,
    /// object by object, as [`Change`]s would: a caller that rebuilds its snapshot anyway (the
    /// operator, from its caches, at every turn) hands it over, and only the jobs, nodes and
    /// instances that changed, arrived or are gone are copied. Returns how many objects
    /// changed (0: the next cycle may be skipped).
    ///
    /// Jobs keep the scheduler's order, as with [`Scheduler::apply`] (a job that changes keeps
    /// its place, a new one comes last): `decide` does not depend on the order of the jobs
    /// (`tests/scheduler.rs` checks it on random worlds with the jobs shuffled), and the
    /// order the caller built them in (the watch cache's) carries no meaning. Nodes and
    /// instances take the caller's order whenever their names differ from the ones held, as
    /// first-fit packing places replicas in the nodes' order.
    pub fn sync(&mut self, snapshot: &Snapshot) -> usize {
        // Every field, so that one added to `Snapshot` cannot be left out here.
        let Snapshot {
            settings,
            jobs,
            queues,
            pools,
            nodes,
            offerings,
            datasets,
            instances,
            invalid_queues,
            invalid_datasets,
        } = snapshot;
        let mut changed = sync_jobs(self, jobs);
        changed += sync_ordered(&mut self.snap.nodes, &mut self.nodes, nodes, |n| &n.name);
        changed += sync_ordered(
            &mut self.snap.instances,
            &mut self.instances,
            instances,
            |i| &i.id,
        );
        let s = &mut self.snap;
        changed += [
            copy_if_changed(&mut s.settings, settings),
            copy_if_changed(&mut s.queues, queues),
            copy_if_changed(&mut s.pools, pools),
            copy_if_changed(&mut s.offerings, offerings),
            copy_if_changed(&mut s.datasets, datasets),
            copy_if_changed(&mut s.invalid_queues, invalid_queues),
            copy_if_changed(&mut s.invalid_datasets, invalid_datasets),
        ]
        .into_iter()
        .filter(|&c| c)
        .count();
        self.changed |= changed > 0;
        changed
    }

    /// Forgets what `job` was last told, so that the next cycle decides and reports it again
    /// (the caller lost what it did with it, for example a status write that failed).
    pub fn refresh(&mut self, job: &str) {
        self.current.remove(job);
        self.changed = true;
    }

    /// Decides in full at the next cycle: something the scheduler cannot see changed (the
    /// policy rules).
    pub fn invalidate(&mut self) {
        self.changed = true;
    }

    /// One cycle at `now`: the actions to take and the decisions that changed. Its
    /// `next_wake` is the last full cycle's.
    pub fn cycle(&mut self, policy: &dyn Policy, now: Time) -> Plan {
        self.cycles += 1;
        if let Some(last) = &self.last
            && !self.changed
            && !last.acted
            && now >= last.at
            && last.until.is_none_or(|u| now < u)
        {
            self.skipped += 1;
            return Plan {
                next_wake: last.next_wake,
                ..Plan::default()
            };
        }
        let mut plan = decide_with(&self.snap, policy, now, &mut self.scratch);
        self.last = Some(Last {
            at: now,
            acted: !(plan.starts.is_empty()
                && plan.launches.is_empty()
                && plan.terminations.is_empty()
                && plan.preemptions.is_empty()
                && plan.moves.is_empty()),
            until: plan.holds_until(&self.snap, now),
            next_wake: plan.next_wake,
        });
        self.changed = false;
        plan.decisions
            .retain(|d| match self.current.get_mut(&d.job) {
                Some(c) if same(c, d) => false,
                Some(c) => {
                    *c = key(d);
                    true
                }
                None => {
                    self.current.insert(d.job.clone(), key(d));
                    true
                }
            });
        plan
    }
}

/// What makes a decision a change: its outcome, reason, rule and offering (its sentence and
/// estimates move with the clock and are not changes).
type Current = (Outcome, Reason, Option<String>, Option<Box<OfferingChoice>>);

fn key(d: &Decision) -> Current {
    (d.outcome, d.reason, d.rule.clone(), d.offering.clone())
}

fn same(c: &Current, d: &Decision) -> bool {
    c.0 == d.outcome && c.1 == d.reason && c.2 == d.rule && c.3 == d.offering
}

fn position<T>(items: &[T], key: impl Fn(&T) -> &String) -> HashMap<String, usize> {
    items
        .iter()
        .enumerate()
        .map(|(i, x)| (key(x).clone(), i))
        .collect()
}

fn replace<T: PartialEq>(slot: &mut T, value: T) -> bool {
    if *slot == value {
        false
    } else {
        *slot = value;
        true
    }
}

fn upsert<T: PartialEq>(
    items: &mut Vec<T>,
    index: &mut HashMap<String, usize>,
    item: T,
    key: impl Fn(&T) -> &String,
) -> bool {
    match index.get(key(&item)) {
        Some(&i) => replace(&mut items[i], item),
        None => {
            index.insert(key(&item).clone(), items.len());
            items.push(item);
            true
        }
    }
}

/// [`Scheduler::sync`] for the jobs: the changed and new ones upserted, the gone ones removed
/// in one pass (their positions and current decisions dropped). Returns how many changed.
fn sync_jobs(s: &mut Scheduler, jobs: &[Job]) -> usize {
    let mut changed = 0;
    let mut matched = 0;
    for (at, job) in jobs.iter().enumerate() {
        // The caller's order mostly stays the scheduler's from one call to the next: the job
        // at the same place is tried before the index.
        let held = match s.snap.jobs.get(at) {
            Some(h) if h.id == job.id => Some(at),
            _ => s.jobs.get(&job.id).copied(),
        };
        match held {
            Some(k) if s.snap.jobs[k] == *job => matched += 1,
            Some(k) => {
                matched += 1;
                changed += 1;
                s.snap.jobs[k].clone_from(job);
            }
            None => {
                changed += 1;
                s.jobs.insert(job.id.clone(), s.snap.jobs.len());
                s.snap.jobs.push(job.clone());
            }
        }
    }
    // Held jobs the caller no longer has: every held one not matched above (ids are unique;
    // were one given twice, its second copy would count as matched).
    let arrived = jobs.len() - matched;
    let gone = s.snap.jobs.len().saturating_sub(arrived + matched);
    if gone > 0 {
        let keep: std::collections::HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        s.snap.jobs.retain(|j| keep.contains(j.id.as_str()));
        s.jobs.retain(|id, _| keep.contains(id.as_str()));
        s.current.retain(|id, _| keep.contains(id.as_str()));
        for (i, j) in s.snap.jobs.iter().enumerate() {
            if let Some(p) = s.jobs.get_mut(&j.id) {
                *p = i;
            }
        }
        changed += gone;
    }
    changed
}

/// [`Scheduler::sync`] for nodes and instances: changed objects copied in place while the
/// names are the same in the same order; otherwise the caller's list taken whole. Returns how
/// many objects changed, arrived or are gone (at least 1 when only their order changed).
fn sync_ordered<T: Clone + PartialEq>(
    held: &mut Vec<T>,
    index: &mut HashMap<String, usize>,
    given: &[T],
    key: impl Fn(&T) -> &String,
) -> usize {
    if held.len() == given.len() && held.iter().zip(given).all(|(a, b)| key(a) == key(b)) {
        let mut changed = 0;
        for (a, b) in held.iter_mut().zip(given) {
            if a != b {
                a.clone_from(b);
                changed += 1;
            }
        }
        return changed;
    }
    let mut matched = 0;
    let mut changed = 0;
    for b in given {
        match index.get(key(b)) {
            Some(&k) if held[k] == *b => matched += 1,
            Some(_) => {
                matched += 1;
                changed += 1;
            }
            None => changed += 1,
        }
    }
    changed += held.len().saturating_sub(matched);
    *held = given.to_vec();
    // The same objects in another order still change the world (first fit follows it).
    let changed = changed.max(1);
    *index = position(held, key);
    changed
}

fn copy_if_changed<T: Clone + PartialEq>(held: &mut T, given: &T) -> bool {
    if held == given {
        false
    } else {
        held.clone_from(given);
        true
    }
}

/// Removes by key, keeping the order of the rest.
fn remove<T>(
    items: &mut Vec<T>,
    index: &mut HashMap<String, usize>,
    id: &str,
    key: impl Fn(&T) -> &String,
) -> bool {
    let Some(i) = index.remove(id) else {
        return false;
    };
    items.remove(i);
    for x in &items[i..] {
        if let Some(p) = index.get_mut(key(x)) {
            *p -= 1;
        }
    }
    true
}
