//! Spot reliability: the interruptions each spot offering suffered recently.
//!
//! The operator records an interruption when a spot instance it did not terminate goes away;
//! the simulator when its cloud reclaims one. Both then set
//! [`Offering::recent_interruptions`] from the same memory, so a policy can steer away from
//! offerings that keep being reclaimed (`offering.recentInterruptions` in `offeringFilter`).

use std::collections::{HashMap, VecDeque};

use crate::{Duration, Offering, Time};

/// How long an interruption is remembered.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Interruptions per pool and instance type, each with its zone and time.
#[derive(Clone, Debug, Default)]
pub struct SpotHistory {
    events: HashMap<String, HashMap<String, VecDeque<(String, Time)>>>,
}

impl SpotHistory {
    /// Remembers that a spot instance of `pool`/`instance_type` in `zone` was interrupted.
    pub fn record(&mut self, pool: &str, instance_type: &str, zone: &str, at: Time) {
        let q = self
            .events
            .entry(pool.to_string())
            .or_default()
            .entry(instance_type.to_string())
            .or_default();
        q.push_back((zone.to_string(), at));
        // Bound the memory even if `forget` is never called.
        while q.len() > 1024 {
            q.pop_front();
        }
    }

    /// Drops what is older than the window.
    pub fn forget(&mut self, now: Time) {
        for types in self.events.values_mut() {
            for q in types.values_mut() {
                while q.front().is_some_and(|(_, t)| now.since(*t) > WINDOW) {
                    q.pop_front();
                }
            }
            types.retain(|_, q| !q.is_empty());
        }
        self.events.retain(|_, types| !types.is_empty());
    }

    /// Interruptions of this offering within the window before `now`. An offering pinned to a
    /// zone counts that zone's; an unpinned one (its zone is not a zone of its region, as
    /// catalog zone ids are not) counts every zone's.
    pub fn count(&self, o: &Offering, now: Time) -> u32 {
        let Some(q) = self
            .events
            .get(&o.pool)
            .and_then(|types| types.get(&o.instance_type))
        else {
            return 0;
        };
        let pinned = !o.region.is_empty() && o.zone.starts_with(&o.region);
        q.iter()
            .filter(|(zone, t)| now.since(*t) <= WINDOW && (!pinned || *zone == o.zone))
            .count() as u32
    }

    /// Sets `recent_interruptions` on the spot offerings.
    pub fn apply(&self, offerings: &mut [Offering], now: Time) {
        for o in offerings {
            if o.capacity_type == crate::CapacityType::Spot {
                o.recent_interruptions = self.count(o, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CapacityType, GpuModel};

    fn offering(zone: &str, capacity_type: CapacityType) -> Offering {
        Offering {
            facts: Default::default(),
            pool: "aws".into(),
            instance_type: "g5.xlarge".into(),
            gpu_model: GpuModel::normalize("A10G"),
            gpus: 1,
            capacity_type,
            region: "us-east-1".into(),
            zone: zone.into(),
            hourly_price: 0.4,
            unavailable_until: None,
            gpu_memory_gib: 24.0,
            recent_interruptions: 0,
            efa: Default::default(),
            environment: crate::Environment::Cloud,
        }
    }

    #[test]
    fn counts_per_zone_when_pinned_and_all_zones_when_not() {
        let mut h = SpotHistory::default();
        let t0 = Time::from_millis(1_000_000_000);
        h.record("aws", "g5.xlarge", "us-east-1a", t0);
        h.record("aws", "g5.xlarge", "us-east-1b", t0);
        h.record("aws", "g6.xlarge", "us-east-1a", t0);
        let now = t0 + Duration::from_secs(60);
        assert_eq!(h.count(&offering("us-east-1a", CapacityType::Spot), now), 1);
        assert_eq!(h.count(&offering("use1-az1", CapacityType::Spot), now), 2);
        let mut offers = vec![
            offering("us-east-1b", CapacityType::Spot),
            offering("us-east-1b", CapacityType::OnDemand),
        ];
        h.apply(&mut offers, now);
        assert_eq!(offers[0].recent_interruptions, 1);
        assert_eq!(
            offers[1].recent_interruptions, 0,
            "on-demand is not counted"
        );
    }

    #[test]
    fn forgets_after_the_window() {
        let mut h = SpotHistory::default();
        let t0 = Time::from_millis(1_000_000_000);
        h.record("aws", "g5.xlarge", "us-east-1a", t0);
        let later = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(
            h.count(&offering("us-east-1a", CapacityType::Spot), later),
            0
        );
        let o = offering("us-east-1a", CapacityType::Spot);
        assert_eq!(h.count(&o, t0), 1);
        h.forget(later);
        assert_eq!(
            h.count(&o, t0),
            0,
            "forgotten, even when asked as of earlier"
        );
    }
}
