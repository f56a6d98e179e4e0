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

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::*;
use crate::model::{Packing, TopologyWish};

/// Where a topology-bound gang fits now.
pub(super) enum TopologyFit {
    /// Its nodes, one per replica, and the domains they are in.
    Fits(Vec<usize>, Vec<String>),
    /// A required domain: none holds it now (the message says which is the largest).
    Unfit(String),
    /// A required domain: none could hold it even with every job gone.
    Never,
    /// Preferred: not enough free GPUs anywhere.
    NoRoom,
}

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
    pub(super) fn topology_fit(
        &self,
        job: &Job,
        wish: &TopologyWish,
        ignore_reservations: bool,
    ) -> TopologyFit {
        let nodes = &self.snap.nodes;
        let g = job.gpus_per_replica.max(1);
        let mut domains: BTreeMap<&str, Domain> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if !self.private.private[i] || !job.accepts_node(n) {
                continue;
            }
            // A node in no domain of the level: none for a requirement, its own for a wish.
            let key = match (n.domain(&wish.level), wish.required) {
                (Some(d), _) => d,
                (None, true) => continue,
                (None, false) => n.name.as_str(),
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
        // Best fit: the domain with the fewest free GPUs that holds the gang.
        let best = domains
            .iter()
            .filter(|(_, d)| d.slots >= job.replicas)
            .min_by_key(|(name, d)| (d.free, *name));
        if let Some((name, d)) = best {
            let nodes = place(&d.rooms, job.replicas, g, packing);
            return TopologyFit::Fits(nodes, vec![name.to_string()]);
        }
        if wish.required {
            if domains.values().all(|d| d.capacity < job.replicas) {
                return TopologyFit::Never;
            }
            let largest = domains
                .iter()
                .max_by_key(|(name, d)| (d.free, Reverse(*name)));
            let level = &wish.level;
            return TopologyFit::Unfit(self.say(|| match largest {
                Some((name, d)) => format!(
                    "No {level} domain has {} free GPUs for the whole gang ({} x {g}) now; the most free is {level}={name} with {} free GPUs.",
                    job.total_gpus(),
                    job.replicas,
                    d.free
                ),
                None => format!("No private node is in a {level} domain."),
            }));
        }
        // The fewest domains: the roomiest first.
        let mut order: Vec<(&str, &Domain)> = domains.iter().map(|(k, d)| (*k, d)).collect();
        order.sort_by_key(|(name, d)| (Reverse(d.slots), *name));
        let (mut left, mut chosen, mut names) = (job.replicas, Vec::new(), Vec::new());
        for (name, d) in order {
            if left == 0 || d.slots == 0 {
                break;
            }
            let k = d.slots.min(left);
            chosen.extend(place(&d.rooms, k, g, packing));
            names.push(name.to_string());
            left -= k;
        }
        if left > 0 {
            return TopologyFit::NoRoom;
        }
        TopologyFit::Fits(chosen, names)
    }

    /// The domains of `level` a required gang could ever fit in whole, smallest first (the
    /// order a reclaim tries them in).
    pub(super) fn domains_for(&self, job: &Job, level: &str) -> Vec<String> {
        let g = job.gpus_per_replica.max(1);
        let mut capacity: BTreeMap<&str, u32> = BTreeMap::new();
        for (i, n) in self.snap.nodes.iter().enumerate() {
            if let Some(d) = n.domain(level)
                && self.private.private[i]
                && job.accepts_node(n)
            {
                *capacity.entry(d).or_default() += n.gpus / g;
            }
        }
        let mut out: Vec<(u32, &str)> = capacity
            .into_iter()
            .filter(|&(_, c)| c >= job.replicas)
            .map(|(d, c)| (c, d))
            .collect();
        out.sort();
        out.into_iter().map(|(_, d)| d.to_string()).collect()
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
