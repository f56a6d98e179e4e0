//! The runtime estimates a replay hands to the core (a job's `estimatedRuntime`).
//!
//! Traces such as openb carry none; `--runtime-estimates` supplies them from the real runtime:
//! exactly (what Starburst's simulator assumes), not at all, or with a seeded log-normal error
//! (`noisy:SIGMA`: the estimate is the runtime times `exp(SIGMA * z)`, `z` standard normal, so
//! half the estimates are too long and half too short; SIGMA 0.5 puts two thirds of them
//! within a factor of 1.65 of the truth). Each job's error depends only on the seed and its
//! position in the trace, so every strategy sees the same estimates.

use std::fmt;

use crate::seeded::mix;
use crate::trace::TraceJob;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Estimates {
    /// As the trace says (`estimated_runtime_s`; none for openb).
    #[default]
    Trace,
    /// The job's real runtime.
    Exact,
    /// No estimate for any job.
    Absent,
    /// The real runtime with a log-normal error of this sigma.
    Noisy(f64),
}

impl std::str::FromStr for Estimates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "trace" => Ok(Estimates::Trace),
            "exact" => Ok(Estimates::Exact),
            "none" => Ok(Estimates::Absent),
            other => match other.strip_prefix("noisy:") {
                Some(sigma) => sigma
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Estimates::Noisy)
                    .ok_or_else(|| {
                        format!("noisy:{sigma}: expected a sigma >= 0, such as noisy:0.5")
                    }),
                None => Err(format!(
                    "unknown runtime estimates {other:?} (use trace, exact, none or noisy:SIGMA)"
                )),
            },
        }
    }
}

impl fmt::Display for Estimates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Estimates::Trace => f.write_str("trace"),
            Estimates::Exact => f.write_str("exact"),
            Estimates::Absent => f.write_str("none"),
            Estimates::Noisy(s) => write!(f, "noisy:{s}"),
        }
    }
}

impl Estimates {
    /// The estimate, in seconds, of trace job `index`.
    pub fn of(&self, job: &TraceJob, index: usize, seed: u64) -> Option<f64> {
        match *self {
            Estimates::Trace => job.estimated_runtime_s,
            Estimates::Exact => Some(job.runtime_s),
            Estimates::Absent => None,
            Estimates::Noisy(sigma) => {
                let z = standard_normal(seed, index as u64);
                Some((job.runtime_s * (sigma * z).exp()).max(1.0))
            }
        }
    }
}

/// A standard normal draw that depends only on `(seed, index)` (Box-Muller).
fn standard_normal(seed: u64, index: u64) -> f64 {
    let a = mix(seed ^ mix(index.wrapping_mul(2)));
    let b = mix(seed ^ mix(index.wrapping_mul(2) + 1));
    let u1 = ((a >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(runtime: f64) -> TraceJob {
        TraceJob {
            id: "j".into(),
            arrival_s: 0.0,
            runtime_s: runtime,
            gpus: 1,
            replicas: 1,
            estimated_runtime_s: Some(7.0),
            gpu_models: Vec::new(),
            queue: None,
            priority: 0,
            restartable: false,
            datasets: Vec::new(),
            requirements: Default::default(),
            censored: false,
            kind: None,
            gpu_percent: None,
            namespace: None,
        }
    }

    #[test]
    fn parses_and_prints() {
        for s in ["trace", "exact", "none", "noisy:0.5"] {
            assert_eq!(s.parse::<Estimates>().unwrap().to_string(), s);
        }
        assert!("noisy:-1".parse::<Estimates>().is_err());
        assert!("noisy:x".parse::<Estimates>().is_err());
        assert!(
            "sometimes"
                .parse::<Estimates>()
                .unwrap_err()
                .contains("noisy:SIGMA")
        );
    }

    #[test]
    fn each_kind_gives_its_estimate() {
        let j = job(3600.0);
        assert_eq!(Estimates::Trace.of(&j, 0, 1), Some(7.0));
        assert_eq!(Estimates::Exact.of(&j, 0, 1), Some(3600.0));
        assert_eq!(Estimates::Absent.of(&j, 0, 1), None);
        assert_eq!(Estimates::Noisy(0.0).of(&j, 0, 1), Some(3600.0));
    }

    #[test]
    fn noise_is_seeded_log_normal() {
        let j = job(1000.0);
        let e = Estimates::Noisy(0.5);
        assert_eq!(
            e.of(&j, 5, 9),
            e.of(&j, 5, 9),
            "same seed and job, same estimate"
        );
        assert_ne!(e.of(&j, 5, 9), e.of(&j, 5, 10));
        // log(estimate / runtime) over many jobs: mean near 0, standard deviation near sigma.
        let logs: Vec<f64> = (0..20_000)
            .map(|i| (e.of(&j, i, 3).unwrap() / 1000.0).ln())
            .collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((sd - 0.5).abs() < 0.02, "sd {sd}");
    }
}
