//! Strategies to compare on the same input. `spillway` is the product's own behaviour; the
//! others are baselines, each with strict arrival order per queue (no backfilling) and no
//! runtime awareness, as the simple schedulers they stand for.

use std::fmt;

use spillway_core::{Duration, Settings, Snapshot, WaitMode};

/// Starburst's compute-wait coefficient used by the `starburst` baseline: seconds of waiting
/// per GPU-second of work.
pub const STARBURST_FACTOR: f64 = 0.1;

#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Spillway as configured: queue settings from the manifests, backfilling, best-fit
    /// packing, runtime-aware waiting, cheapest fitting capacity.
    Spillway,
    /// Private only.
    NeverBurst,
    /// Burst as soon as a job does not fit privately.
    NoWait,
    /// Burst after a fixed wait.
    ConstantWait(Duration),
    /// Starburst (USENIX ATC'24): wait budget proportional to GPUs x runtime, FIFO, with the
    /// job's real runtime known in advance (as in Starburst's own simulator).
    Starburst,
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "spillway" => Ok(Strategy::Spillway),
            "never-burst" => Ok(Strategy::NeverBurst),
            "no-wait" => Ok(Strategy::NoWait),
            "starburst" => Ok(Strategy::Starburst),
            other => match other.strip_prefix("constant-wait:") {
                Some(secs) => secs
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(|s| Strategy::ConstantWait(Duration::from_millis((s * 1000.0) as u64)))
                    .ok_or_else(|| format!("constant-wait:{secs}: expected a number of seconds, such as constant-wait:900")),
                None => Err(format!(
                    "unknown strategy {other:?} (use spillway, never-burst, no-wait, constant-wait:SECONDS or starburst)"
                )),
            },
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Spillway => f.write_str("spillway"),
            Strategy::NeverBurst => f.write_str("never-burst"),
            Strategy::NoWait => f.write_str("no-wait"),
            Strategy::ConstantWait(d) => write!(f, "constant-wait:{}", d.as_secs()),
            Strategy::Starburst => f.write_str("starburst"),
        }
    }
}

/// Parses `--strategy` values: repeatable and comma-separated.
pub fn parse_list(values: &[String]) -> Result<Vec<Strategy>, String> {
    let mut out = Vec::new();
    for v in values {
        for part in v.split(',').filter(|p| !p.trim().is_empty()) {
            let s: Strategy = part.parse()?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

impl Strategy {
    /// Adapts queue settings and scheduler knobs; returns whether runtimes are known in advance.
    pub fn apply(&self, snap: &mut Snapshot, boot_delay: Duration) -> bool {
        snap.settings.cloud_ready_delay = boot_delay;
        snap.settings.explain = false;
        if *self == Strategy::Spillway {
            return false;
        }
        snap.settings = Settings {
            backfill: false,
            runtime_aware: false,
            ..snap.settings.clone()
        };
        for q in &mut snap.queues {
            match self {
                Strategy::Spillway => {}
                Strategy::NeverBurst => q.burst.enabled = false,
                Strategy::NoWait => {
                    q.burst.enabled = true;
                    q.burst.wait_mode = WaitMode::Fixed;
                    q.burst.max_wait = Duration::ZERO;
                }
                Strategy::ConstantWait(d) => {
                    q.burst.enabled = true;
                    q.burst.wait_mode = WaitMode::Fixed;
                    q.burst.max_wait = *d;
                }
                Strategy::Starburst => {
                    q.burst.enabled = true;
                    q.burst.wait_mode = WaitMode::ComputeWait;
                    q.burst.compute_wait_factor = STARBURST_FACTOR;
                }
            }
        }
        *self == Strategy::Starburst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists() {
        let s = parse_list(&[
            "spillway,no-wait".into(),
            "constant-wait:600".into(),
            "spillway".into(),
        ])
        .unwrap();
        assert_eq!(
            s,
            vec![
                Strategy::Spillway,
                Strategy::NoWait,
                Strategy::ConstantWait(Duration::from_secs(600))
            ]
        );
        assert!(
            parse_list(&["sometimes".into()])
                .unwrap_err()
                .contains("unknown strategy")
        );
        assert!(parse_list(&["constant-wait:x".into()]).is_err());
        assert_eq!(
            Strategy::ConstantWait(Duration::from_secs(600)).to_string(),
            "constant-wait:600"
        );
    }
}
