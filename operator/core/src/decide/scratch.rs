//! The buffers of a cycle, kept by the caller from one cycle to the next.
//!
//! A cycle builds about thirty small tables (queues and pools by name, per-job queue indexes,
//! free GPUs per node, the queues' candidates, the waiting jobs); on a cluster of a few dozen
//! GPUs building and dropping them was a third of a cycle's instructions, most of it the
//! allocator's. A [`Scratch`] keeps their allocations: each cycle clears and refills them.
//! What a cycle returns (the plan) is still its own.

use super::private::{Lane, OrderKey};
use super::{Reservation, Waiting};
use crate::Time;
use crate::policy::QueueState;
use crate::profile::Profile;

/// Buffers for [`super::decide_with`], reused from one call to the next. Holds no result but
/// what [`crate::Tracked`] cycles know still holds (`offerings`): a cycle given a used scratch
/// plans exactly what one given a new scratch plans.
#[derive(Default)]
pub struct Scratch {
    pub(super) private: Vec<bool>,
    pub(super) free: Vec<u32>,
    pub(super) cloud_free: Vec<u32>,
    pub(super) cloud_claimed: Vec<bool>,
    pub(super) cloud_nodes: Vec<usize>,
    pub(super) job_queue: Vec<Option<usize>>,
    pub(super) queue_state: Vec<QueueState>,
    pub(super) pool_usage: Vec<(u32, u32, f64)>,
    pub(super) unplaced: Vec<usize>,
    pub(super) suspended: Vec<usize>,
    pub(super) releases: Vec<(Time, usize, u32)>,
    pub(super) reservations: Vec<Reservation>,
    pub(super) capacity_slots: Vec<(super::ReplicaShape, u32)>,
    /// Each queue's candidates; empty lists whose allocations are kept.
    pub(super) per_queue: Vec<Vec<OrderKey>>,
    pub(super) lanes: Vec<Lane>,
    pub(super) waiting: Vec<Waiting>,
    pub(super) queue_slots: Vec<(u64, u32)>,
    pub(super) pool_slots: Vec<(u64, u32)>,
    pub(super) node_slots: Vec<(u64, u32)>,
    /// The last profile of free private GPUs built, for its buffers.
    pub(super) profile: Option<Profile>,
    /// The last profile put off, for its buffers.
    pub(super) deferred: Option<super::conservative::Deferred>,
    /// What the last cycles found out about the offerings (kept only for the cycles of one
    /// tracked snapshot whose offerings, pools and queues have not changed since).
    pub(super) offerings: super::offer_memo::OfferingMemo,
}

impl Scratch {
    /// A scratch with nothing kept yet (the first cycle allocates what it needs).
    pub fn new() -> Scratch {
        Scratch::default()
    }
}

/// A copy holds buffers, not results: it starts empty.
impl Clone for Scratch {
    fn clone(&self) -> Scratch {
        Scratch::default()
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").finish_non_exhaustive()
    }
}

/// The buffer in `slot`, emptied, leaving an empty one behind.
pub(super) fn take<T>(slot: &mut Vec<T>) -> Vec<T> {
    let mut v = std::mem::take(slot);
    v.clear();
    v
}
