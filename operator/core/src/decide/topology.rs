//! Gangs with a topology wish (`Job::topology`), part of step 3: where on the private nodes a
//! gang of more than one replica fits now, by the domains of its level (a node label key of its
//! pools' `topology.levels`).
//!
//! - `required`: all replicas inside one domain. The domain chosen is the one with the fewest
//!   free GPUs that holds the whole gang (best fit), so large domains stay whole for large
//!   gangs; within it, nodes are chosen as for any gang (the cycle's packing). When no domain
//!   holds it now, the job waits with reason `TopologyUnfit`, naming the largest domain's free
//!   GPUs; when no domain could hold it even empty, no private node ever can.
//! - `preferred`: one domain when one holds the gang (best fit, as above), else the fewest
//!   domains: the roomiest first. Nodes without the level's label count as a domain each.
//!
//! A domain is a value of the level within one pool. In conservative order a gang starts in
//! the first of the domains that hold it where it delays no planned slot.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::*;
use crate::model::{Packing, TopologyWish};

/// Where a topology-bound gang fits now.
pub(super) enum TopologyFit {
    /// Where it may go, best first: for a gang that one domain holds, each domain that does
    /// (best fit first); else the fewest domains. Each: its nodes, one per replica, and the
    /// domains (values of the level) they are in.
    Fits(Vec<(Vec<usize>, Vec<String>)>),
    /// A required domain: none holds it now (the message says which is the largest).
    Unfit(String),
    /// A required domain: none could hold it even with every job gone (the message says so,
    /// and how many replicas the largest could hold).
    Never(String),
    /// Preferred: not enough free GPUs anywhere.
    NoRoom,
}

/// A domain: its pool, its value of the level (a node's name for a node in none), and whether
/// it is such a node of its own.
type Key<'n> = (&'n str, &'n str, bool);

/// One domain's free room.
#[derive(Default)]
struct Domain {
    /// Replicas its free GPUs hold now.
    slots: u32,
    free: u32,
    /// Replicas it holds with every job gone.
    capacity: u32,
    /// (room, node) of its nodes with room for a replica.
    rooms: Vec<(u32, usize)>,
}

impl<'a> Cycle<'a> {
    /// Nodes for `job` (of more than one replica, with `wish`) on free private GPUs now.
    /// Domains are those of one pool: two pools' racks of one name are two racks.
    pub(super) fn topology_fit(
        &self,
        job: &Job,
        wish: &TopologyWish,
        ignore_reservations: bool,
    ) -> TopologyFit {
        let nodes = &self.snap.nodes;
        let g = job.gpus_per_replica.max(1);
        let mut domains: BTreeMap<Key<'_>, Domain> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if !self.private.private[i] || !job.accepts_node(n) {
                continue;
            }
            // A node in no domain of the level: none for a requirement, its own for a wish.
            let key = match (n.domain(&wish.level), wish.required) {
                (Some(d), _) => (n.pool.as_str(), d, false),
                (None, true) => continue,
                (None, false) => (n.pool.as_str(), n.name.as_str(), true),
            };
            let room = if ignore_reservations {
                self.private.free[i]
            } else {
                self.private.effective(i)
            };
            let d = domains.entry(key).or_default();
            d.capacity += n.gpus / g;
            d.slots += room / g;
            d.free += room;
            if room >= g {
                d.rooms.push((room, i));
            }
        }
        let packing = self.settings.packing;
        // Best fit: the domains that hold the gang, the fewest free GPUs first.
        let mut whole: Vec<(&Key<'_>, &Domain)> = domains
            .iter()
            .filter(|(_, d)| d.slots >= job.replicas)
            .collect();
        if !whole.is_empty() {
            whole.sort_by_key(|(key, d)| (d.free, **key));
            return TopologyFit::Fits(
                whole
                    .into_iter()
                    .map(|(key, d)| {
                        let nodes = place(&d.rooms, job.replicas, g, packing);
                        (nodes, vec![key.1.to_string()])
                    })
                    .collect(),
            );
        }
        if wish.required {
            let largest = domains
                .iter()
                .filter(|(_, d)| d.capacity >= job.replicas)
                .max_by_key(|(key, d)| (d.free, Reverse(**key)));
            let level = &wish.level;
            let Some((key, d)) = largest else {
                let most = domains.values().map(|d| d.capacity).max().unwrap_or(0);
                return TopologyFit::Never(self.say(|| {
                    let held = if domains.is_empty() {
                        format!("no node of its pools is in a {level} domain")
                    } else {
                        format!("the largest holds {most} of them")
                    };
                    format!(
                        "No {level} domain could ever hold the whole gang ({} x {g} GPUs): {held}.",
                        job.replicas
                    )
                }));
            };
            let name = key.1;
            return TopologyFit::Unfit(self.say(|| {
                format!(
                    "No {level} domain has {} free GPUs for the whole gang ({} x {g}) now; the most free is {level}={name} with {} free GPUs.",
                    job.total_gpus(),
                    job.replicas,
                    d.free
                )
            }));
        }
        // The fewest domains: the roomiest first.
        let mut order: Vec<(&Key<'_>, &Domain)> = domains.iter().collect();
        order.sort_by_key(|(key, d)| (Reverse(d.slots), **key));
        let (mut left, mut chosen, mut names) = (job.replicas, Vec::new(), Vec::new());
        for (key, d) in order {
            if left == 0 || d.slots == 0 {
                break;
            }
            let k = d.slots.min(left);
            chosen.extend(place(&d.rooms, k, g, packing));
            if !key.2 {
                names.push(key.1.to_string());
            }
            left -= k;
        }
        if left > 0 {
            return TopologyFit::NoRoom;
        }
        TopologyFit::Fits(vec![(chosen, names)])
    }

    /// The domains (pool, value) of `level` a required gang could ever fit in whole, smallest
    /// first (the order a reclaim tries them in).
    pub(super) fn domains_for(&self, job: &Job, level: &str) -> Vec<(String, String)> {
        let g = job.gpus_per_replica.max(1);
        let mut capacity: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        for (i, n) in self.snap.nodes.iter().enumerate() {
            if let Some(d) = n.domain(level)
                && self.private.private[i]
                && job.accepts_node(n)
            {
                *capacity.entry((n.pool.as_str(), d)).or_default() += n.gpus / g;
            }
        }
        let mut out: Vec<(u32, (&str, &str))> = capacity
            .into_iter()
            .filter(|&(_, c)| c >= job.replicas)
            .map(|(d, c)| (c, d))
            .collect();
        out.sort();
        out.into_iter()
            .map(|(_, (pool, d))| (pool.to_string(), d.to_string()))
            .collect()
    }
}

/// `k` replicas of `g` GPUs on `rooms` (room, node): best fit takes the nodes with the least
/// room first, first fit the first nodes in inventory order.
fn place(rooms: &[(u32, usize)], k: u32, g: u32, packing: Packing) -> Vec<usize> {
    let mut rooms = rooms.to_vec();
    match packing {
        Packing::BestFit => rooms.sort_unstable(),
        Packing::FirstFit => rooms.sort_unstable_by_key(|&(_, i)| i),
    }
    let mut out = Vec::with_capacity(k as usize);
    for (room, i) in rooms {
        let n = (room / g).min(k - out.len() as u32);
        out.extend(std::iter::repeat_n(i, n as usize));
        if out.len() as u32 == k {
            break;
        }
    }
    out
}
