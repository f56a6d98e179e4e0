//! The software and hardware environment GPUs come with, and what a job requires of it.
//!
//! [`Facts`] are what a node reports through the labels of NVIDIA's GPU feature discovery
//! (GFD) — the driver, the CUDA version that driver supports, the GPU product and its memory —
//! or what a cloud pool promises of the image it launches before any instance exists.
//! [`Requirements`] are a job's minimums (`GpuJob spec.requirements`). A requirement is met
//! only by a fact that is known: a node without GFD labels does not meet `minDriverVersion`.

mod compare;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub use compare::{Drift, Provided, Shortfall, drift, shortfalls, version_text};

/// GFD's labels (NVIDIA k8s-device-plugin, `docs/gpu-feature-discovery`).
pub mod labels {
    pub const DRIVER_MAJOR: &str = "nvidia.com/cuda.driver.major";
    pub const DRIVER_MINOR: &str = "nvidia.com/cuda.driver.minor";
    pub const DRIVER_REV: &str = "nvidia.com/cuda.driver.rev";
    pub const CUDA_MAJOR: &str = "nvidia.com/cuda.runtime.major";
    pub const CUDA_MINOR: &str = "nvidia.com/cuda.runtime.minor";
    pub const PRODUCT: &str = "nvidia.com/gpu.product";
    /// MiB of one GPU.
    pub const MEMORY: &str = "nvidia.com/gpu.memory";
    pub const COUNT: &str = "nvidia.com/gpu.count";
}

/// A dotted version (`550.54.15`, `12.4`); missing parts are 0, so `12.4` = `12.4.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// How many parts were written (for display: `12.4` stays `12.4`).
    parts: u8,
    /// The digits the patch was written with (for display: NVIDIA's `535.104.05` stays so).
    patch_digits: u8,
}

impl Version {
    pub fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
            parts: 3,
            patch_digits: 1,
        }
    }

    fn key(&self) -> (u32, u32, u32) {
        (self.major, self.minor, self.patch)
    }

    /// Whether this version is at least `min`.
    pub fn at_least(&self, min: &Version) -> bool {
        self.key() >= min.key()
    }
}

/// Why a version did not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{0:?} is not a version: expected one to three dot-separated numbers, like \"550.54\" or \"12.4\""
)]
pub struct ParseVersionError(pub String);

impl FromStr for Version {
    type Err = ParseVersionError;

    fn from_str(s: &str) -> Result<Version, ParseVersionError> {
        let bad = || ParseVersionError(s.to_string());
        let parts: Vec<&str> = s.trim().split('.').collect();
        if parts.is_empty() || parts.len() > 3 {
            return Err(bad());
        }
        let mut n = [0u32; 3];
        for (i, p) in parts.iter().enumerate() {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            n[i] = p.parse().map_err(|_| bad())?;
        }
        Ok(Version {
            major: n[0],
            minor: n[1],
            patch: n[2],
            parts: parts.len() as u8,
            patch_digits: parts.get(2).map_or(1, |p| p.len().min(9) as u8),
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.parts {
            1 => write!(f, "{}", self.major),
            2 => write!(f, "{}.{}", self.major, self.minor),
            _ => write!(
                f,
                "{}.{}.{:0width$}",
                self.major,
                self.minor,
                self.patch,
                width = usize::from(self.patch_digits)
            ),
        }
    }
}

/// What GPUs of a node (or of a cloud offering, as its pool promises) come with; `None`: not
/// known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    pub driver: Option<Version>,
    /// The highest CUDA version the driver supports (GFD's `cuda.runtime`).
    pub cuda: Option<Version>,
    /// The GPU product, as GFD writes it (`NVIDIA-A100-SXM4-80GB`); for a cloud offering,
    /// its instance type's GPU model (`A100-80GB`).
    pub product: Option<String>,
    /// Memory of one GPU, MiB.
    pub gpu_memory_mib: Option<u64>,
}

impl Facts {
    /// The facts GFD's labels state (labels that are missing or do not parse are unknown).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Facts {
        let num = |k: &str| labels.get(k).and_then(|v| v.trim().parse::<u32>().ok());
        // GFD writes the revision with its leading zeros ("05", kept for display); a missing
        // or empty one is 0.
        let driver = num(labels::DRIVER_MAJOR).map(|major| {
            let minor = num(labels::DRIVER_MINOR).unwrap_or(0);
            match num(labels::DRIVER_REV) {
                Some(rev) => Version {
                    patch_digits: labels
                        .get(labels::DRIVER_REV)
                        .map_or(1, |r| r.trim().len().min(9) as u8),
                    ..Version::new(major, minor, rev)
                },
                None => Version {
                    parts: 2,
                    ..Version::new(major, minor, 0)
                },
            }
        });
        let cuda = num(labels::CUDA_MAJOR).map(|major| Version {
            parts: 2,
            ..Version::new(major, num(labels::CUDA_MINOR).unwrap_or(0), 0)
        });
        Facts {
            driver,
            cuda,
            product: labels
                .get(labels::PRODUCT)
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
            gpu_memory_mib: labels
                .get(labels::MEMORY)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&m| m > 0),
        }
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Facts::default()
    }
}

/// A GPU counts as having N GiB when it reports at least this share of N GiB: what GPUs
/// report is the advertised size less what the driver and ECC keep (an "80 GB" H100 reports
/// 81,559 MiB, a "24 GB" A10G 23,028 MiB, a "16 GB" T4 15,360 MiB: 93.7 % of 24 GiB).
pub const MEMORY_SHARE_PERCENT: u64 = 93;

/// What a job requires of the GPUs it runs on (`GpuJob spec.requirements`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requirements {
    pub min_driver: Option<Version>,
    pub min_cuda: Option<Version>,
    /// Globs (`*`) on the GPU product; any one matching is enough. Empty: any.
    pub gpu_products: Vec<String>,
    pub min_gpu_memory_gib: Option<u32>,
}

/// A requirement a set of facts does not meet, with the fact.
#[derive(Clone, Debug, PartialEq)]
pub enum Unmet {
    Driver {
        min: Version,
        has: Option<Version>,
    },
    Cuda {
        min: Version,
        has: Option<Version>,
    },
    Product {
        globs: Vec<String>,
        has: Option<String>,
    },
    Memory {
        min_gib: u32,
        has_mib: Option<u64>,
    },
}

impl Unmet {
    /// The requirement's field name in `spec.requirements`.
    pub fn field(&self) -> &'static str {
        match self {
            Unmet::Driver { .. } => "minDriverVersion",
            Unmet::Cuda { .. } => "minCudaVersion",
            Unmet::Product { .. } => "gpuProducts",
            Unmet::Memory { .. } => "minGpuMemoryGiB",
        }
    }

    /// The fact, as a user reads it (`driver 535.104`, `no driver label`).
    pub fn fact(&self) -> String {
        match self {
            Unmet::Driver { has: Some(v), .. } => format!("driver {v}"),
            Unmet::Driver { has: None, .. } => "no known driver".into(),
            Unmet::Cuda { has: Some(v), .. } => format!("CUDA {v}"),
            Unmet::Cuda { has: None, .. } => "no known CUDA version".into(),
            Unmet::Product { has: Some(p), .. } => format!("GPU {p}"),
            Unmet::Product { has: None, .. } => "no known GPU product".into(),
            Unmet::Memory {
                has_mib: Some(m), ..
            } => format!("{} GiB per GPU", gib_text(*m)),
            Unmet::Memory { has_mib: None, .. } => "no known GPU memory".into(),
        }
    }

    /// The requirement, as written (`minCudaVersion 12.4`).
    pub fn wanted(&self) -> String {
        match self {
            Unmet::Driver { min, .. } | Unmet::Cuda { min, .. } => {
                format!("{} {min}", self.field())
            }
            Unmet::Product { globs, .. } => format!("{} {}", self.field(), globs.join(" or ")),
            Unmet::Memory { min_gib, .. } => format!("{} {min_gib}", self.field()),
        }
    }

    /// How close the fact comes: higher is closer (for picking the closest facts to report).
    fn closeness(&self) -> (u8, u64) {
        match self {
            Unmet::Driver { has: Some(v), .. } | Unmet::Cuda { has: Some(v), .. } => (
                1,
                u64::from(v.major) << 40 | u64::from(v.minor) << 20 | u64::from(v.patch),
            ),
            Unmet::Memory {
                has_mib: Some(m), ..
            } => (1, *m),
            Unmet::Product { has: Some(_), .. } => (1, 0),
            _ => (0, 0),
        }
    }
}

fn gib_text(mib: u64) -> String {
    let gib = mib as f64 / 1024.0;
    if (gib - gib.round()).abs() < 0.05 {
        format!("{}", gib.round() as u64)
    } else {
        format!("{gib:.1}")
    }
}

impl Requirements {
    pub fn is_empty(&self) -> bool {
        self.min_driver.is_none()
            && self.min_cuda.is_none()
            && self.gpu_products.is_empty()
            && self.min_gpu_memory_gib.is_none()
    }

    /// Whether `facts` meet every requirement.
    pub fn met_by(&self, facts: &Facts) -> bool {
        self.is_empty() || self.first_unmet(facts).is_none()
    }

    /// The first requirement `facts` do not meet (in the order driver, CUDA, product, memory).
    pub fn first_unmet(&self, facts: &Facts) -> Option<Unmet> {
        if let Some(min) = self.min_driver
            && !facts.driver.is_some_and(|v| v.at_least(&min))
        {
            return Some(Unmet::Driver {
                min,
                has: facts.driver,
            });
        }
        if let Some(min) = self.min_cuda
            && !facts.cuda.is_some_and(|v| v.at_least(&min))
        {
            return Some(Unmet::Cuda {
                min,
                has: facts.cuda,
            });
        }
        if !self.gpu_products.is_empty()
            && !facts
                .product
                .as_deref()
                .is_some_and(|p| self.gpu_products.iter().any(|g| product_matches(g, p)))
        {
            return Some(Unmet::Product {
                globs: self.gpu_products.clone(),
                has: facts.product.clone(),
            });
        }
        if let Some(min_gib) = self.min_gpu_memory_gib
            && facts
                .gpu_memory_mib
                .is_none_or(|m| m * 100 < u64::from(min_gib) * 1024 * MEMORY_SHARE_PERCENT)
        {
            return Some(Unmet::Memory {
                min_gib,
                has_mib: facts.gpu_memory_mib,
            });
        }
        None
    }

    /// Of several places' facts (named), the requirement that keeps the most of them out and,
    /// for it, the place whose fact comes closest: what a job no place satisfies is told.
    pub fn closest<'f>(
        &self,
        places: impl IntoIterator<Item = (&'f str, &'f Facts)>,
    ) -> Option<(Unmet, &'f str)> {
        let mut by_field: BTreeMap<&'static str, (usize, Unmet, &'f str)> = BTreeMap::new();
        for (name, facts) in places {
            let u = self.first_unmet(facts)?;
            let e = by_field.entry(u.field()).or_insert((0, u.clone(), name));
            e.0 += 1;
            if u.closeness() > e.1.closeness() {
                e.1 = u;
                e.2 = name;
            }
        }
        by_field
            .into_values()
            .max_by_key(|(n, _, _)| *n)
            .map(|(_, u, name)| (u, name))
    }
}

/// Whether GPU product `product` matches `glob` (`*` any run of characters, as the
/// instance-type globs of a pool), case-insensitively: GFD's product names mix cases across
/// releases.
pub fn product_matches(glob: &str, product: &str) -> bool {
    crate::policy::glob_match(&glob.to_lowercase(), &product.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn versions_parse_compare_and_print_as_written() {
        let v: Version = "550.54.15".parse().unwrap();
        assert_eq!(v.to_string(), "550.54.15");
        assert_eq!(
            "535.104.05".parse::<Version>().unwrap().to_string(),
            "535.104.05"
        );
        assert!(
            "535.104.05"
                .parse::<Version>()
                .unwrap()
                .at_least(&"535.104.5".parse().unwrap())
        );
        assert_eq!("12.4".parse::<Version>().unwrap().to_string(), "12.4");
        assert!(v.at_least(&"550.54".parse().unwrap()));
        assert!(
            !"535.104.12"
                .parse::<Version>()
                .unwrap()
                .at_least(&"550".parse().unwrap())
        );
        assert!(
            "12.10"
                .parse::<Version>()
                .unwrap()
                .at_least(&"12.4".parse().unwrap())
        );
        for bad in ["", "12.", "v12", "1.2.3.4", "12.x", "-1"] {
            assert!(bad.parse::<Version>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gfd_labels_become_facts() {
        let f = Facts::from_labels(&labels(&[
            (labels::DRIVER_MAJOR, "535"),
            (labels::DRIVER_MINOR, "104"),
            (labels::DRIVER_REV, "05"),
            (labels::CUDA_MAJOR, "12"),
            (labels::CUDA_MINOR, "2"),
            (labels::PRODUCT, "NVIDIA-A100-SXM4-40GB"),
            (labels::MEMORY, "40960"),
        ]));
        assert_eq!(f.driver.unwrap().to_string(), "535.104.05");
        assert_eq!(f.cuda.unwrap().to_string(), "12.2");
        assert_eq!(f.product.as_deref(), Some("NVIDIA-A100-SXM4-40GB"));
        assert_eq!(f.gpu_memory_mib, Some(40960));
        // An empty revision (GFD writes "" for some drivers) leaves major.minor.
        let f = Facts::from_labels(&labels(&[
            (labels::DRIVER_MAJOR, "550"),
            (labels::DRIVER_MINOR, "120"),
            (labels::DRIVER_REV, ""),
        ]));
        assert_eq!(f.driver.unwrap().to_string(), "550.120");
        assert!(Facts::from_labels(&labels(&[(labels::MEMORY, "lots")])).is_empty());
    }

    #[test]
    fn requirements_are_met_only_by_known_facts() {
        let req = Requirements {
            min_driver: Some("550.54".parse().unwrap()),
            min_cuda: Some("12.4".parse().unwrap()),
            gpu_products: vec!["*A100*80GB".into(), "*H100*".into()],
            min_gpu_memory_gib: Some(80),
        };
        let good = Facts {
            driver: Some("550.54.15".parse().unwrap()),
            cuda: Some("12.4".parse().unwrap()),
            product: Some("NVIDIA-H100-80GB-HBM3".into()),
            gpu_memory_mib: Some(81559),
        };
        assert!(req.met_by(&good));
        assert!(Requirements::default().met_by(&Facts::default()));
        let old = Facts {
            cuda: Some("12.2".parse().unwrap()),
            ..good.clone()
        };
        assert_eq!(
            req.first_unmet(&old).map(|u| (u.wanted(), u.fact())),
            Some(("minCudaVersion 12.4".into(), "CUDA 12.2".into()))
        );
        let small = Facts {
            product: Some("NVIDIA-A100-SXM4-80GB".into()),
            gpu_memory_mib: Some(40960),
            ..good.clone()
        };
        assert_eq!(
            req.first_unmet(&small).map(|u| u.fact()),
            Some("40 GiB per GPU".into())
        );
        // A "24 GB" A10G reports 23,028 MiB and meets 24 GiB; 22 GiB does not.
        let a10g = |mib| Facts {
            gpu_memory_mib: Some(mib),
            ..Facts::default()
        };
        let needs = |gib| Requirements {
            min_gpu_memory_gib: Some(gib),
            ..Requirements::default()
        };
        assert!(needs(24).met_by(&a10g(23_028)));
        assert!(!needs(24).met_by(&a10g(22_528)));
        let unlabelled = Facts::default();
        assert_eq!(
            req.first_unmet(&unlabelled).map(|u| u.fact()),
            Some("no known driver".into())
        );
    }

    #[test]
    fn the_closest_facts_are_those_of_the_requirement_most_places_miss() {
        let req = Requirements {
            min_cuda: Some("12.4".parse().unwrap()),
            ..Requirements::default()
        };
        let a = Facts {
            cuda: Some("12.2".parse().unwrap()),
            ..Facts::default()
        };
        let b = Facts {
            cuda: Some("11.8".parse().unwrap()),
            ..Facts::default()
        };
        let (u, place) = req.closest([("b", &b), ("a", &a)]).unwrap();
        assert_eq!((u.fact().as_str(), place), ("CUDA 12.2", "a"));
        let ok = Facts {
            cuda: Some("12.6".parse().unwrap()),
            ..Facts::default()
        };
        assert!(req.closest([("a", &a), ("ok", &ok)]).is_none());
        assert!(req.closest(std::iter::empty()).is_none());
    }

    #[test]
    fn products_match_globs_whatever_their_case() {
        assert!(product_matches("*A100*", "NVIDIA-A100-SXM4-80GB"));
        assert!(product_matches(
            "nvidia-a100-sxm4-*gb",
            "NVIDIA-A100-SXM4-80GB"
        ));
        assert!(!product_matches("*H100*", "NVIDIA-A100-SXM4-80GB"));
        assert!(!product_matches("A100", "A100-80GB"));
    }
}
