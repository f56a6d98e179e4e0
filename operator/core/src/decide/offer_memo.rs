//! What cycles find out about the offerings, kept from one cycle to the next of the same
//! [`crate::Tracked`] snapshot while its offerings, pools and queues stay the same.
//!
//! Per gang shape, the offerings whose instances hold one replica; per shape, queue and spot
//! eligibility, the GPU-hour price a priced wait budget is worked out from. Under the priced
//! default every waiting job's budget asks for that price at every cycle; found again at each
//! one they were a sixth of the 1,000,000-job replay. `Tracked` gives each state of its
//! offerings, pools and queues a number of its own ([`next_generation`]); a cycle on another
//! number (or on a snapshot not tracked) starts from nothing. A price depends on the clock only
//! through the offerings' `unavailable_until`, so it is kept with the span of time in which
//! none of those it looked at changes side.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::OfferingShape;
use crate::Time;

/// A number no other state of a tracked snapshot's offerings, pools and queues has had.
pub(crate) fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct OfferingMemo {
    /// The generation these were found on; 0: none (nothing is kept).
    generation: u64,
    /// Per shape, the offerings (indexes in snapshot order) that hold one replica.
    pub(super) shapes: Vec<(OfferingShape, Arc<[usize]>)>,
    prices: Vec<Price>,
}

/// A GPU-hour price for `key`, valid from `from` until before `until` (milliseconds).
struct Price {
    key: PriceKey,
    price: Option<f64>,
    from: i64,
    until: i64,
}

/// (address of the shape's offering list, address of the queue, may use spot).
pub(super) type PriceKey = (usize, usize, bool);

impl OfferingMemo {
    /// Ready for a cycle on `generation` (`None`: a snapshot not tracked): what was found on
    /// another generation is dropped.
    pub(super) fn begin(&mut self, generation: Option<u64>) {
        let generation = generation.unwrap_or(0);
        if generation == 0 || generation != self.generation {
            self.shapes.clear();
            self.prices.clear();
            self.generation = generation;
        }
    }

    /// The price kept for `key` if it holds at `now`.
    pub(super) fn price(&self, key: PriceKey, now: Time) -> Option<Option<f64>> {
        let now = now.as_millis();
        self.prices
            .iter()
            .find(|p| p.key == key && p.from <= now && now < p.until)
            .map(|p| p.price)
    }

    /// Keeps `price` for `key`, valid over `[from, until)` (it replaces one that no longer
    /// holds).
    pub(super) fn keep_price(&mut self, key: PriceKey, price: Option<f64>, from: i64, until: i64) {
        let entry = Price {
            key,
            price,
            from,
            until,
        };
        match self.prices.iter_mut().find(|p| p.key == key) {
            Some(p) => *p = entry,
            None => self.prices.push(entry),
        }
    }
}
