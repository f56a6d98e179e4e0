//! Points in time, as the core sees them: milliseconds since an epoch chosen by the caller (the
//! Unix epoch in the operator, the start of the trace in the simulator). The core never reads
//! a clock; `now` is always an argument.

use std::fmt;
use std::ops::{Add, Sub};

use crate::Duration;

/// Milliseconds since the caller's epoch.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Time(pub i64);

impl Time {
    pub const fn from_millis(ms: i64) -> Time {
        Time(ms)
    }

    pub fn from_secs_f64(s: f64) -> Time {
        Time((s * 1000.0).round() as i64)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// The time elapsed since `earlier`, or zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_millis().min(i64::MAX as u64) as i64),
        )
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_sub(d.as_millis().min(i64::MAX as u64) as i64),
        )
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:.0}s", self.as_secs_f64())
    }
}
