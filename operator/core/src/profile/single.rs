//! The search for a gang of one replica that every private node may take (most jobs).
//!
//! The general search merges the eligible nodes' steps in time order and tries the moments
//! where some node's free GPUs rise. With one replica the slot is simply the earliest start
//! at which some node alone fits, and each node's earliest is found on its own steps: a node
//! that fits from a moment fits from the start of the run of steps with room enough that the
//! moment falls in (now, or a step where its free GPUs rose to enough), so only runs' starts
//! are tried. The work the merge would have counted (every eligible node at every moment up to
//! the slot) is counted from the profile's sorted step times, so the planning budget runs out
//! at the same job as it did, and plans do not change.

use super::{Cursor, Profile, Slot, StepTimes, WORK_BUDGET};
use crate::{Packing, Time};

impl Profile {
    /// [`Profile::search`] for one replica of `g` GPUs over `len` milliseconds (None: it never
    /// ends) when `eligible` is every private node: the same slot, the same work counted.
    pub(super) fn search_single(
        &mut self,
        eligible: &[Cursor],
        g: u32,
        len: Option<i64>,
        only_now: bool,
    ) -> Option<Slot> {
        let count = eligible.len() as u64;
        if count == 0 {
            return None;
        }
        // (start, room over the interval, node) of the best so far: earliest, then by packing.
        let mut best: Option<(i64, u32, usize)> = None;
        for c in eligible {
            let Some(steps) = self.nodes[c.node].as_ref() else {
                continue;
            };
            let limit = match (best, only_now) {
                (_, true) => self.now,
                (Some((t, _, _)), false) => t,
                (None, false) => i64::MAX,
            };
            let Some((t, room)) = earliest_fit(&steps.0, g, len, limit) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((bt, broom, _)) => {
                    t < bt || (t == bt && self.packing == Packing::BestFit && room < broom)
                }
            };
            if better {
                best = Some((t, room, c.node));
            }
        }
        if only_now {
            // One moment, now, tried whatever the budget.
            self.work += count;
            return best.map(|(t, _, node)| Slot {
                at: Time::from_millis(t),
                nodes: vec![node],
            });
        }
        if !self.times_ready {
            let buf = std::mem::take(&mut self.times.0);
            self.times = step_times(self, buf);
            self.times_ready = true;
        }
        // The moments the merge goes through: now, then every later step time up to the slot
        // (all of them when there is none), while the budget lasts.
        let now = self.now;
        let later = |t: i64| {
            let times = &self.times.0;
            (times.partition_point(|&s| s <= t) - times.partition_point(|&s| s <= now)) as u64
        };
        let moments = 1 + later(best.map_or(i64::MAX, |b| b.0));
        let tried = if self.work >= WORK_BUDGET {
            0
        } else {
            moments.min((WORK_BUDGET - self.work).div_ceil(count))
        };
        self.work += tried * count;
        if tried < moments {
            return None;
        }
        best.map(|(t, _, node)| Slot {
            at: Time::from_millis(t),
            nodes: vec![node],
        })
    }
}

/// The distinct times of the private nodes' steps after the first, in order (in `times`, a
/// buffer kept from an earlier profile).
fn step_times(p: &Profile, mut times: Vec<i64>) -> StepTimes {
    times.clear();
    times.extend(
        p.nodes
            .iter()
            .flatten()
            .flat_map(|s| s.0[1..].iter().map(|&(t, _)| t)),
    );
    times.sort_unstable();
    times.dedup();
    StepTimes(times)
}

/// The earliest start no later than `limit` from which `g` GPUs stay free on a node with
/// `steps` for `len` milliseconds (None: for ever), with the least free over that interval.
fn earliest_fit(steps: &[(i64, u32)], g: u32, len: Option<i64>, limit: i64) -> Option<(i64, u32)> {
    let mut j = 0;
    while j < steps.len() {
        if steps[j].1 < g {
            j += 1;
            continue;
        }
        // A run of steps with room starts here (now, or where the free GPUs rose to enough).
        let start = steps[j].0;
        if start > limit {
            return None;
        }
        let to = len.map(|l| start.saturating_add(l.max(1)));
        let mut room = u32::MAX;
        let mut k = j;
        while k < steps.len() && to.is_none_or(|to| steps[k].0 < to) && steps[k].1 >= g {
            room = room.min(steps[k].1);
            k += 1;
        }
        if k == steps.len() || to.is_some_and(|to| steps[k].0 >= to) {
            return Some((start, room));
        }
        // Step `k` has too few GPUs within the interval: the next run starts after it.
        j = k + 1;
    }
    None
}
