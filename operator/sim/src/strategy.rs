//! Strategies to compare on the same input. `spillway` is the product's own behaviour; the
//! others are baselines. `never-burst`, `no-wait` and `constant-wait` keep strict arrival
//! order per queue (no backfilling) and no runtime awareness, as the simple schedulers they
//! stand for; `starburst` is Starburst's published simulator (below).

use std::fmt;

use spillway_core::{Duration, Packing, QueueOrder, Settings, Snapshot, WaitMode};

/// Starburst's tuned compute-wait coefficient (its artifact's `linear_cost-0.076`): seconds of
/// waiting per GPU-second of work.
pub const STARBURST_FACTOR: f64 = 0.076;

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
    /// Starburst (Luo et al., USENIX ATC'24) as its public simulator runs it: a job may wait
    /// `factor` x GPUs x runtime, then bursts; the queue is scanned in arrival order and every
    /// job that fits starts ("loop" scheduling, no reservations); first-fit or best-fit
    /// packing; the job's real runtime known in advance unless `--runtime-estimates` says
    /// otherwise.
    Starburst { factor: f64, packing: Packing },
}

impl Strategy {
    /// Starburst with its tuned factor and its default (first-fit) packing.
    pub fn starburst() -> Strategy {
        Strategy::Starburst {
            factor: STARBURST_FACTOR,
            packing: Packing::FirstFit,
        }
    }
}

/// `starburst[:FACTOR]` or `starburst-best-fit[:FACTOR]`.
fn parse_starburst(s: &str) -> Option<Result<Strategy, String>> {
    let (packing, rest) = if let Some(rest) = s.strip_prefix("starburst-best-fit") {
        (Packing::BestFit, rest)
    } else {
        (Packing::FirstFit, s.strip_prefix("starburst")?)
    };
    let factor = match rest {
        "" => Ok(STARBURST_FACTOR),
        r => r
            .strip_prefix(':')
            .and_then(|f| f.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| {
                format!(
                    "{s}: expected starburst[:FACTOR] with FACTOR >= 0, such as starburst:0.076"
                )
            }),
    };
    Some(factor.map(|factor| Strategy::Starburst { factor, packing }))
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "spillway" => Ok(Strategy::Spillway),
            "never-burst" => Ok(Strategy::NeverBurst),
            "no-wait" => Ok(Strategy::NoWait),
            other if other.starts_with("starburst") => match parse_starburst(other) {
                Some(r) => r,
                None => Err(format!("unknown strategy {other:?}")),
            },
            other => match other.strip_prefix("constant-wait:") {
                Some(secs) => secs
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(|s| Strategy::ConstantWait(Duration::from_millis((s * 1000.0) as u64)))
                    .ok_or_else(|| format!("constant-wait:{secs}: expected a number of seconds, such as constant-wait:900")),
                None => Err(format!(
                    "unknown strategy {other:?} (use spillway, never-burst, no-wait, constant-wait:SECONDS, starburst[:FACTOR] or starburst-best-fit[:FACTOR])"
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
            Strategy::Starburst { factor, packing } => {
                f.write_str("starburst")?;
                if *packing == Packing::BestFit {
                    f.write_str("-best-fit")?;
                }
                if *factor != STARBURST_FACTOR {
                    write!(f, ":{factor}")?;
                }
                Ok(())
            }
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
        snap.settings.wait_decisions = false;
        if *self == Strategy::Spillway {
            return false;
        }
        snap.settings = Settings {
            order: QueueOrder::Strict,
            runtime_aware: false,
            ..snap.settings.clone()
        };
        if let Strategy::Starburst { packing, .. } = self {
            snap.settings.order = QueueOrder::Greedy;
            snap.settings.packing = *packing;
        }
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
                Strategy::Starburst { factor, .. } => {
                    q.burst.enabled = true;
                    q.burst.wait_mode = WaitMode::ComputeWait;
                    q.burst.compute_wait_factor = *factor;
                }
            }
        }
        matches!(self, Strategy::Starburst { .. })
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
            parse_list(&["starburst,starburst-best-fit:0.2".into()]).unwrap(),
            vec![
                Strategy::starburst(),
                Strategy::Starburst {
                    factor: 0.2,
                    packing: Packing::BestFit
                }
            ]
        );
        assert_eq!(Strategy::starburst().to_string(), "starburst");
        assert_eq!(
            "starburst-best-fit:0.2"
                .parse::<Strategy>()
                .unwrap()
                .to_string(),
            "starburst-best-fit:0.2"
        );
        assert!(parse_list(&["starburst:-1".into()]).is_err());
        assert!(parse_list(&["starburstx".into()]).is_err());
        assert_eq!(
            Strategy::ConstantWait(Duration::from_secs(600)).to_string(),
            "constant-wait:600"
        );
    }
}
