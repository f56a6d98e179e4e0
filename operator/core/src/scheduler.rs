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

use crate::Tracked;
use crate::decide::Scratch;
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
    Job(Box<Job>),
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
    /// The world, with its jobs' queues and nodes found once ([`Tracked`]).
    snap: Tracked,
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
            snap: Tracked::new(snapshot),
            changed: true,
            ..Scheduler::default()
        };
        s.reindex();
        s
    }

    fn reindex(&mut self) {
        let snap = self.snap.snapshot();
        self.jobs = position(&snap.jobs, |j| &j.id);
        self.nodes = position(&snap.nodes, |n| &n.name);
        self.instances = position(&snap.instances, |i| &i.id);
    }

    /// The world as the scheduler sees it.
    pub fn snapshot(&self) -> &Snapshot {
        self.snap.snapshot()
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
            Change::Job(job) => match self.jobs.get(&job.id) {
                Some(&i) if self.snap.snapshot().jobs[i] == *job => false,
                Some(&i) => {
                    *self.snap.job_mut(i) = *job;
                    true
                }
                None => {
                    self.jobs
                        .insert(job.id.clone(), self.snap.snapshot().jobs.len());
                    self.snap.push_job(*job);
                    true
                }
            },
            Change::JobGone(id) => {
                self.current.remove(&id);
                match self.jobs.remove(&id) {
                    Some(i) => {
                        self.snap.remove_job(i);
                        shift_after(&mut self.jobs, &self.snap.snapshot().jobs[i..], |j| &j.id);
                        true
                    }
                    None => false,
                }
            }
            Change::Node(node) => match self.nodes.get(&node.name) {
                Some(&i) if self.snap.snapshot().nodes[i] == node => false,
                Some(&i) => {
                    *self.snap.node_mut(i) = node;
                    true
                }
                None => {
                    self.nodes
                        .insert(node.name.clone(), self.snap.snapshot().nodes.len());
                    self.snap.push_node(node);
                    true
                }
            },
            Change::NodeGone(name) => match self.nodes.remove(&name) {
                Some(i) => {
                    self.snap.remove_node(i);
                    shift_after(&mut self.nodes, &self.snap.snapshot().nodes[i..], |n| {
                        &n.name
                    });
                    true
                }
                None => false,
            },
            Change::Instance(i) => {
                upsert(self.snap.instances_mut(), &mut self.instances, i, |i| &i.id)
            }
            Change::InstanceGone(id) => {
                remove(self.snap.instances_mut(), &mut self.instances, &id, |i| {
                    &i.id
                })
            }
            Change::Offerings(o) => self.snap.set_offerings(&o),
            Change::Config(c) => {
                let Config {
                    settings,
                    queues,
                    pools,
                    datasets,
                    invalid_queues,
                    invalid_datasets,
                } = *c;
                let held = self.snap.snapshot();
                let differs = held.settings != settings
                    || held.queues != queues
                    || held.pools != pools
                    || held.datasets != datasets
                    || held.invalid_queues != invalid_queues
                    || held.invalid_datasets != invalid_datasets;
                if differs {
                    self.snap.change_whole(|s| {
                        s.settings = settings;
                        s.queues = queues;
                        s.pools = pools;
                        s.datasets = datasets;
                        s.invalid_queues = invalid_queues;
                        s.invalid_datasets = invalid_datasets;
                    });
                }
                differs
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
        let changed = sync_jobs(self, &snapshot.jobs);
        self.changed |= changed > 0;
        changed + self.sync_world(snapshot)
    }

    /// [`Scheduler::sync`] of everything but the jobs, which the caller hands over as
    /// [`Change`]s of the jobs that changed (the operator, which keeps each job's view from
    /// one turn to the next while nothing of it changed): `snapshot.jobs` is not read.
    pub fn sync_world(&mut self, snapshot: &Snapshot) -> usize {
        // Every field, so that one added to `Snapshot` cannot be left out here.
        let Snapshot {
            settings,
            jobs: _,
            queues,
            pools,
            nodes,
            offerings,
            datasets,
            instances,
            invalid_queues,
            invalid_datasets,
        } = snapshot;
        let mut changed =
            match diff_ordered(&self.snap.snapshot().nodes, &self.nodes, nodes, |n| &n.name) {
                Diff::InPlace(at) => {
                    for &i in &at {
                        self.snap.node_mut(i).clone_from(&nodes[i]);
                    }
                    at.len()
                }
                Diff::Whole(count) => {
                    self.snap.change_whole(|s| s.nodes = nodes.clone());
                    self.nodes = position(nodes, |n| &n.name);
                    count
                }
            };
        let held = self.snap.instances_mut();
        changed += match diff_ordered(held, &self.instances, instances, |i| &i.id) {
            Diff::InPlace(at) => {
                for &i in &at {
                    held[i].clone_from(&instances[i]);
                }
                at.len()
            }
            Diff::Whole(count) => {
                held.clone_from(instances);
                self.instances = position(instances, |i| &i.id);
                count
            }
        };
        changed += usize::from(self.snap.set_offerings(offerings));
        let held = self.snap.snapshot();
        let config = [
            held.settings != *settings,
            held.queues != *queues,
            held.pools != *pools,
            held.datasets != *datasets,
            held.invalid_queues != *invalid_queues,
            held.invalid_datasets != *invalid_datasets,
        ]
        .into_iter()
        .filter(|&c| c)
        .count();
        if config > 0 {
            // Queues' indexes may move: the jobs' are found again (rare: a policy edit).
            self.snap.change_whole(|s| {
                s.settings.clone_from(settings);
                s.queues.clone_from(queues);
                s.pools.clone_from(pools);
                s.datasets.clone_from(datasets);
                s.invalid_queues.clone_from(invalid_queues);
                s.invalid_datasets.clone_from(invalid_datasets);
            });
        }
        changed += config;
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
        let mut plan = self.snap.decide(policy, now, &mut self.scratch);
        self.last = Some(Last {
            at: now,
            acted: !(plan.starts.is_empty()
                && plan.launches.is_empty()
                && plan.terminations.is_empty()
                && plan.preemptions.is_empty()
                && plan.moves.is_empty()),
            until: plan.holds_until(self.snap.snapshot(), now),
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
        let held_jobs = &s.snap.snapshot().jobs;
        // The caller's order mostly stays the scheduler's from one call to the next: the job
        // at the same place is tried before the index.
        let held = match held_jobs.get(at) {
            Some(h) if h.id == job.id => Some(at),
            _ => s.jobs.get(&job.id).copied(),
        };
        match held {
            Some(k) if held_jobs[k] == *job => matched += 1,
            Some(k) => {
                matched += 1;
                changed += 1;
                s.snap.job_mut(k).clone_from(job);
            }
            None => {
                changed += 1;
                s.jobs.insert(job.id.clone(), held_jobs.len());
                s.snap.push_job(job.clone());
            }
        }
    }
    // Held jobs the caller no longer has: every held one not matched above (ids are unique;
    // were one given twice, its second copy would count as matched).
    let arrived = jobs.len() - matched;
    let gone = s
        .snap
        .snapshot()
        .jobs
        .len()
        .saturating_sub(arrived + matched);
    if gone > 0 {
        let keep: std::collections::HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        s.snap.retain_jobs(|j| keep.contains(j.id.as_str()));
        s.jobs.retain(|id, _| keep.contains(id.as_str()));
        s.current.retain(|id, _| keep.contains(id.as_str()));
        for (i, j) in s.snap.snapshot().jobs.iter().enumerate() {
            if let Some(p) = s.jobs.get_mut(&j.id) {
                *p = i;
            }
        }
        changed += gone;
    }
    changed
}

/// How a list of nodes or instances handed to [`Scheduler::sync`] differs from the one held.
enum Diff {
    /// The same names in the same order: the positions whose objects changed.
    InPlace(Vec<usize>),
    /// Other names or another order: take the given list whole; how many objects changed,
    /// arrived or are gone (at least 1 when only their order changed: first fit follows it).
    Whole(usize),
}

fn diff_ordered<T: PartialEq>(
    held: &[T],
    index: &HashMap<String, usize>,
    given: &[T],
    key: impl Fn(&T) -> &String,
) -> Diff {
    if held.len() == given.len() && held.iter().zip(given).all(|(a, b)| key(a) == key(b)) {
        return Diff::InPlace(
            (held.iter().zip(given).enumerate())
                .filter(|(_, (a, b))| a != b)
                .map(|(i, _)| i)
                .collect(),
        );
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
    Diff::Whole(changed.max(1))
}

/// After a removal: the positions of the objects that came after it (`after`) move up one.
fn shift_after<T>(index: &mut HashMap<String, usize>, after: &[T], key: impl Fn(&T) -> &String) {
    for x in after {
        if let Some(p) = index.get_mut(key(x)) {
            *p -= 1;
        }
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
    shift_after(index, &items[i..], key);
    true
}
