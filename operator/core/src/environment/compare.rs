//! Comparing environments: a joined node against what its pool promised (a mismatch fails the
//! launch), and a pool against the private side (drift, shown before it breaks a run).

use std::collections::BTreeSet;
use std::fmt;

use super::{Facts, MEMORY_SHARE_PERCENT, Version, gib_text};
use crate::GpuModel;

/// A fact of a node that falls short of what its pool promised.
#[derive(Clone, Debug, PartialEq)]
pub struct Shortfall {
    /// `driver`, `CUDA`, `GPU` or `GPU memory`.
    pub what: &'static str,
    pub promised: String,
    pub found: String,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} where {} was promised",
            self.what, self.found, self.promised
        )
    }
}

/// Where a node's facts (`found`) fall short of its pool's promise: a driver or CUDA version
/// below the promised one, another GPU model than the instance type's, less memory per GPU.
/// Only facts known on both sides count: a node that does not state a fact (no GPU feature
/// discovery there) contradicts nothing, and a newer driver than promised meets everything
/// the promise did.
pub fn shortfalls(found: &Facts, promised: &Facts) -> Vec<Shortfall> {
    let mut out = Vec::new();
    let versions = [
        ("driver", found.driver, promised.driver),
        ("CUDA", found.cuda, promised.cuda),
    ];
    for (what, found, promised) in versions {
        if let (Some(f), Some(p)) = (found, promised)
            && !f.at_least(&p)
        {
            out.push(Shortfall {
                what,
                promised: p.to_string(),
                found: f.to_string(),
            });
        }
    }
    if let (Some(f), Some(p)) = (&found.product, &promised.product)
        && GpuModel::normalize(f) != GpuModel::normalize(p)
    {
        out.push(Shortfall {
            what: "GPU",
            promised: p.clone(),
            found: f.clone(),
        });
    }
    if let (Some(f), Some(p)) = (found.gpu_memory_mib, promised.gpu_memory_mib)
        && f * 100 < p * MEMORY_SHARE_PERCENT
    {
        out.push(Shortfall {
            what: "GPU memory",
            promised: format!("{} GiB", gib_text(p)),
            found: format!("{} GiB", gib_text(f)),
        });
    }
    out
}

/// What a set of places (a pool's nodes, or its image's promise) provides, by the keys drift
/// is judged on: the driver's branch (its major version) and the CUDA version (major.minor).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provided {
    pub driver_branches: BTreeSet<u32>,
    pub cuda: BTreeSet<(u32, u32)>,
}

impl Provided {
    pub fn of<'a>(facts: impl IntoIterator<Item = &'a Facts>) -> Provided {
        let mut p = Provided::default();
        for f in facts {
            if let Some(d) = f.driver {
                p.driver_branches.insert(d.major);
            }
            if let Some(c) = f.cuda {
                p.cuda.insert((c.major, c.minor));
            }
        }
        p
    }

    pub fn is_empty(&self) -> bool {
        self.driver_branches.is_empty() && self.cuda.is_empty()
    }
}

/// One way a pool differs from the private side.
#[derive(Clone, Debug, PartialEq)]
pub struct Drift {
    /// `driver` (branch) or `CUDA`.
    pub what: &'static str,
    /// The pool's values, as read (`550`, `12.4`).
    pub here: Vec<String>,
    /// The private side's values.
    pub private: Vec<String>,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let branch = if self.what == "driver" { " branch" } else { "" };
        write!(
            f,
            "{}{branch} {} here, {} on private nodes",
            self.what,
            self.here.join(", "),
            self.private.join(", ")
        )
    }
}

/// Where a pool's environment differs from the private side's: the driver branches or CUDA
/// versions known on both sides are not the same sets. A fact unknown on either side is not
/// compared (the condition says so instead).
pub fn drift(here: &Provided, private: &Provided) -> Vec<Drift> {
    let mut out = Vec::new();
    if !here.driver_branches.is_empty()
        && !private.driver_branches.is_empty()
        && here.driver_branches != private.driver_branches
    {
        let text = |s: &BTreeSet<u32>| s.iter().map(u32::to_string).collect();
        out.push(Drift {
            what: "driver",
            here: text(&here.driver_branches),
            private: text(&private.driver_branches),
        });
    }
    if !here.cuda.is_empty() && !private.cuda.is_empty() && here.cuda != private.cuda {
        let text = |s: &BTreeSet<(u32, u32)>| s.iter().map(|(a, b)| format!("{a}.{b}")).collect();
        out.push(Drift {
            what: "CUDA",
            here: text(&here.cuda),
            private: text(&private.cuda),
        });
    }
    out
}

/// A version as a user reads it, or `-` when unknown.
pub fn version_text(v: Option<Version>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(driver: &str, cuda: &str, product: &str, mib: u64) -> Facts {
        Facts {
            driver: driver.parse().ok(),
            cuda: cuda.parse().ok(),
            product: (!product.is_empty()).then(|| product.to_string()),
            gpu_memory_mib: (mib > 0).then_some(mib),
        }
    }

    #[test]
    fn a_node_falls_short_only_below_the_promise() {
        let promised = facts("550.54", "12.4", "A100-80GB", 81_920);
        let same = facts("550.54.15", "12.4", "NVIDIA-A100-SXM4-80GB", 81_559);
        assert!(shortfalls(&same, &promised).is_empty());
        let newer = facts("560.35.3", "12.6", "NVIDIA-A100-SXM4-80GB", 81_559);
        assert!(shortfalls(&newer, &promised).is_empty());
        // GPU feature discovery not running: nothing to contradict.
        assert!(shortfalls(&Facts::default(), &promised).is_empty());
        let old = facts("535.104.05", "12.2", "NVIDIA-A100-SXM4-40GB", 40_960);
        let s = shortfalls(&old, &promised);
        assert_eq!(
            s.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "driver 535.104.05 where 550.54 was promised",
                "CUDA 12.2 where 12.4 was promised",
                "GPU NVIDIA-A100-SXM4-40GB where A100-80GB was promised",
                "GPU memory 40 GiB where 80 GiB was promised",
            ]
        );
    }

    #[test]
    fn drift_compares_branches_and_cuda_known_on_both_sides() {
        let private = Provided::of(&[
            facts("535.104.5", "12.2", "", 0),
            facts("535.129", "12.2", "", 0),
        ]);
        let cloud = Provided::of(&[facts("550.54", "12.4", "", 0)]);
        let d = drift(&cloud, &private);
        assert_eq!(
            d.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "driver branch 550 here, 535 on private nodes",
                "CUDA 12.4 here, 12.2 on private nodes"
            ]
        );
        // The same branch and CUDA: no drift, whatever the patch levels.
        let same = Provided::of(&[facts("535.183", "12.2", "", 0)]);
        assert!(drift(&same, &private).is_empty());
        // Unknown on one side: not compared.
        assert!(drift(&Provided::default(), &private).is_empty());
        let driver_only = Provided::of(&[facts("550.54", "", "", 0)]);
        assert_eq!(drift(&driver_only, &private).len(), 1);
    }
}
