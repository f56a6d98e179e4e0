//! Free GPUs on private nodes, indexed for best-fit lookups (step 1 builds it; the passes take
//! from it and reserve in it).

use std::collections::BTreeSet;

use crate::model::Packing;
use crate::{Job, Node};

/// Free GPUs on private nodes, indexed for best-fit lookups.
pub(super) struct PrivateIndex {
    /// Free GPUs per node (index into `snapshot.nodes`).
    pub(super) free: Vec<u32>,
    /// GPUs held back for blocked jobs' reservations, per node; empty until the first
    /// reservation of the cycle (most cycles hold none back).
    reserved: Vec<u32>,
    /// (free - reserved, node) for schedulable private nodes with some of it; `None` until the
    /// first reservation, while it is the same as `by_free`.
    by_effective: Option<BTreeSet<(u32, usize)>>,
    /// (free, node) for schedulable private nodes with some.
    by_free: BTreeSet<(u32, usize)>,
    pub(super) private: Vec<bool>,
}

impl PrivateIndex {
    /// The index of `nodes`; `private` flags the nodes of private pools, `free` is a buffer
    /// to build in (emptied here).
    pub(super) fn new(nodes: &[Node], private: Vec<bool>, free: Vec<u32>) -> PrivateIndex {
        let mut private = private;
        let mut free = free;
        free.clear();
        free.extend(nodes.iter().map(|n| n.free_gpus.min(n.gpus)));
        for (i, n) in nodes.iter().enumerate() {
            private[i] &= n.schedulable;
        }
        // Built in bulk from (free, node) of the schedulable private nodes with free GPUs.
        let by_free = (0..nodes.len())
            .filter(|&i| private[i] && free[i] > 0)
            .map(|i| (free[i], i))
            .collect();
        PrivateIndex {
            reserved: Vec::new(),
            by_effective: None,
            by_free,
            free,
            private,
        }
    }

    /// Its buffers (free GPUs per node, private flags), for the next cycle's index.
    pub(super) fn into_buffers(self) -> (Vec<u32>, Vec<bool>) {
        (self.free, self.private)
    }

    pub(super) fn effective(&self, i: usize) -> u32 {
        self.free[i].saturating_sub(self.reserved.get(i).copied().unwrap_or(0))
    }

    fn insert(&mut self, i: usize) {
        if self.free[i] > 0 {
            self.by_free.insert((self.free[i], i));
        }
        let e = self.effective(i);
        if let Some(by_effective) = self.by_effective.as_mut()
            && e > 0
        {
            by_effective.insert((e, i));
        }
    }

    fn remove(&mut self, i: usize) {
        self.by_free.remove(&(self.free[i], i));
        let e = self.effective(i);
        if let Some(by_effective) = self.by_effective.as_mut() {
            by_effective.remove(&(e, i));
        }
    }

    pub(super) fn take(&mut self, i: usize, gpus: u32) {
        self.remove(i);
        self.free[i] = self.free[i].saturating_sub(gpus);
        self.insert(i);
    }

    pub(super) fn reserve(&mut self, i: usize, gpus: u32) {
        if self.by_effective.is_none() {
            self.by_effective = Some(self.by_free.clone());
            self.reserved = vec![0; self.free.len()];
        }
        self.remove(i);
        self.reserved[i] = self.reserved[i].saturating_add(gpus);
        self.insert(i);
    }

    /// Nodes for a gang, one per replica, or `None` if the whole gang does not fit. Best fit:
    /// replicas go to the nodes with the least sufficient room first; first fit: to the
    /// first nodes in inventory order.
    pub(super) fn fit(
        &self,
        nodes: &[Node],
        job: &Job,
        ignore_reservations: bool,
        packing: Packing,
    ) -> Option<Vec<usize>> {
        let g = job.gpus_per_replica;
        if g == 0 {
            return None;
        }
        let set = match &self.by_effective {
            Some(by_effective) if !ignore_reservations => by_effective,
            _ => &self.by_free,
        };
        match set.last() {
            Some(&(largest, _)) if largest >= g => {}
            _ => return None,
        }
        let fits = set
            .range((g, 0)..)
            .filter(|&&(_, i)| job.accepts_node(&nodes[i]));
        let mut placed = Vec::with_capacity(job.replicas as usize);
        let mut take = |room: u32, i: usize| {
            let k = (room / g).min(job.replicas - placed.len() as u32);
            placed.extend(std::iter::repeat_n(i, k as usize));
            placed.len() as u32 == job.replicas
        };
        let done = match packing {
            Packing::BestFit => fits.into_iter().any(|&(room, i)| take(room, i)),
            Packing::FirstFit => {
                let mut rooms: Vec<(u32, usize)> = fits.copied().collect();
                rooms.sort_by_key(|&(_, i)| i);
                rooms.into_iter().any(|(room, i)| take(room, i))
            }
        };
        done.then_some(placed)
    }
}
