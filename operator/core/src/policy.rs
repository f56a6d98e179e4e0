//! The seam between the core and burst policies.
//!
//! `spillway-policy` implements [`Policy`] with CEL rules; the core only sees the effects. With
//! [`NoPolicy`] the queue and pool settings alone decide.

use crate::model::{Dataset, Job, Offering, Queue, WaitMode};
use crate::{CapacityType, Classification, Duration, Environment, Time};

/// What a queue looks like to a rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueState {
    pub pending_jobs: u32,
    pub running_jobs: u32,
    pub private_gpus_in_use: u32,
    pub cloud_gpus_in_use: u32,
    /// GPUs its jobs use in other clusters (`cluster` pools).
    pub remote_gpus_in_use: u32,
    /// Current cloud and remote spend rate, USD per hour.
    pub hourly_usd: f64,
    pub spent_this_month_usd: f64,
}

/// The situation a job is judged in.
#[derive(Clone, Debug)]
pub struct PolicyContext<'a> {
    pub job: &'a Job,
    pub queue: &'a Queue,
    pub queue_state: &'a QueueState,
    /// The job's datasets that exist.
    pub datasets: Vec<&'a Dataset>,
    pub waited: Duration,
    pub now: Time,
}

/// A value set by a rule, with the rule's name (`policy/rule`).
#[derive(Clone, Debug, PartialEq)]
pub struct Ruled<T> {
    pub value: T,
    pub rule: String,
}

/// The combined effects of the rules that matched one job. `None` or empty means no rule
/// said anything, and the queue and pool settings apply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub forbid: Vec<Ruled<Environment>>,
    pub require: Option<Ruled<Environment>>,
    pub max_wait: Option<Ruled<Duration>>,
    pub wait_mode: Option<Ruled<(WaitMode, Option<f64>)>>,
    pub max_hourly_cost: Option<Ruled<f64>>,
    pub capacity_types: Option<Ruled<Vec<CapacityType>>>,
    /// Allowed instance types, as glob patterns (`*`), one list per rule: an offering must
    /// match every list.
    pub instance_types: Vec<Ruled<Vec<String>>>,
    pub regions: Option<Ruled<Vec<String>>>,
    pub allowed_classifications: Vec<Ruled<Classification>>,
    /// Whether a restartable job running in the cloud may move home (first rule wins; `None`:
    /// when cheaper).
    pub repatriate: Option<Ruled<Repatriate>>,
}

/// Whether a restartable cloud job moves back to private GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Repatriate {
    /// Never: once in the cloud, it finishes there.
    Never,
    /// When enough private GPUs are free and finishing there is cheaper, restart included.
    #[default]
    WhenCheaper,
}

impl Effects {
    pub fn forbids(&self, env: Environment) -> Option<&str> {
        self.forbid
            .iter()
            .find(|r| r.value == env)
            .map(|r| r.rule.as_str())
    }
}

/// Burst policies as the core sees them.
pub trait Policy {
    /// The effects of the rules that match `ctx`.
    fn effects(&self, ctx: &PolicyContext<'_>) -> Effects;

    /// `Err(rule)` when a rule's offering filter excludes `offering` for this job.
    fn offering_allowed(&self, ctx: &PolicyContext<'_>, offering: &Offering) -> Result<(), String> {
        let _ = (ctx, offering);
        Ok(())
    }

    /// Whether any rule filters offerings (lets the core skip per-offering calls).
    fn filters_offerings(&self) -> bool {
        false
    }

    /// Whether there are no rules at all (lets the core skip building contexts).
    fn is_empty(&self) -> bool {
        false
    }

    /// Whether some rule reads the clock (`waited`, `now`), so that its effects can change
    /// with nothing but time passing. [`crate::Scheduler`] decides at every cycle then.
    fn reads_clock(&self) -> bool {
        true
    }
}

/// No policies: queue and pool settings alone decide.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPolicy;

impl Policy for NoPolicy {
    fn effects(&self, _ctx: &PolicyContext<'_>) -> Effects {
        Effects::default()
    }

    fn is_empty(&self) -> bool {
        true
    }

    fn reads_clock(&self) -> bool {
        false
    }
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("p4d.*", "p4d.24xlarge"));
        assert!(glob_match("*", "g5.xlarge"));
        assert!(glob_match("g5.*xlarge", "g5.12xlarge"));
        assert!(!glob_match("p4d.*", "p5.48xlarge"));
        assert!(glob_match("g5.xlarge", "g5.xlarge"));
        assert!(!glob_match("g5.xlarge", "g5.2xlarge"));
    }
}
