//! The wall clock, as the core's time: the one place the operator reads it (the turn, the
//! cloud bookkeeping and the effects all take `now` from here).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time as K8sTime};
use spillway_core::Time;

/// Wall-clock now, as the core's time.
pub fn now() -> Time {
    Time::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}

/// The core's time as a Kubernetes time.
pub fn k8s_time(t: Time) -> K8sTime {
    K8sTime(
        k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// A Kubernetes time as the core's.
pub fn core_time(t: &K8sTime) -> Time {
    Time::from_millis(t.0.as_millisecond())
}

/// A Kubernetes micro-time as the core's (milliseconds kept).
pub fn core_micro_time(t: &MicroTime) -> Time {
    Time::from_millis(t.0.as_millisecond())
}

/// The core's time as a Kubernetes micro-time (to the millisecond).
pub fn micro_time(t: Time) -> MicroTime {
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The core's time in RFC 3339, to the millisecond.
pub fn rfc3339(t: Time) -> String {
    micro_time(t).0.to_string()
}

/// An RFC 3339 time as the core's; `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<Time> {
    let ts: k8s_openapi::jiff::Timestamp = s.trim().parse().ok()?;
    Some(Time::from_millis(ts.as_millisecond()))
}
