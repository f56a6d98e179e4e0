//! GPU model names.
//!
//! Spillway speaks of GPU models by short names: `H100`, `H200`, `A100`, `A100-80GB`, `L40S`,
//! `L4`, `A10G`, `A10`, `T4`, `V100`, `V100-32GB`, `P100`... The same names are used in
//! `GpuJob.spec.gpuModels`, in the `spillway.io/gpu-model` node label and in price catalogs.
//! [`GpuModel::normalize`] turns what NVIDIA's GPU feature discovery writes into the
//! `nvidia.com/gpu.product` label (`NVIDIA-A100-SXM4-80GB`, `Tesla-V100-SXM2-16GB`, ...) and
//! other common spellings into those names. Unknown models keep their (trimmed) spelling, so
//! a site with an unusual GPU can still match jobs to nodes by the name it uses.

use std::fmt;

/// A normalised GPU model name.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct GpuModel(String);

/// Models Spillway knows by name, most specific first (so `A100-80GB` wins over `A100`).
const KNOWN: &[(&str, &[&str])] = &[
    ("H200", &["H200"]),
    ("H100", &["H100"]),
    (
        "A100-80GB",
        &[
            "A100-SXM4-80GB",
            "A100-PCIE-80GB",
            "A100-80GB",
            "A100_80GB",
            "A10080GB",
        ],
    ),
    ("A100", &["A100"]),
    ("L40S", &["L40S"]),
    ("L40", &["L40"]),
    ("L4", &["L4"]),
    ("A10G", &["A10G"]),
    ("A10", &["A10"]),
    ("T4", &["T4"]),
    (
        "V100-32GB",
        &["V100-SXM2-32GB", "V100-PCIE-32GB", "V100-32GB", "V100M32"],
    ),
    ("V100", &["V100"]),
    ("P100", &["P100"]),
    ("K80", &["K80"]),
    ("M60", &["M60"]),
];

impl GpuModel {
    /// Normalises a model name or an `nvidia.com/gpu.product` label value.
    pub fn normalize(raw: &str) -> GpuModel {
        let trimmed = raw.trim();
        let upper = trimmed.to_ascii_uppercase();
        let stripped = upper
            .trim_start_matches("NVIDIA-")
            .trim_start_matches("NVIDIA ")
            .trim_start_matches("TESLA-")
            .trim_start_matches("TESLA ");
        for (name, spellings) in KNOWN {
            for spelling in *spellings {
                if token_match(stripped, spelling) {
                    return GpuModel((*name).to_string());
                }
            }
        }
        GpuModel(trimmed.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is one of the models Spillway knows by name.
    pub fn is_known(&self) -> bool {
        KNOWN.iter().any(|(name, _)| *name == self.0)
    }
}

/// `spelling` occurs in `s` as a whole token: at the start, followed by the end or a separator.
fn token_match(s: &str, spelling: &str) -> bool {
    match s.strip_prefix(spelling) {
        Some(rest) => rest.is_empty() || rest.starts_with(['-', '_', ' ', '.']),
        None => false,
    }
}

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for GpuModel {
    fn from(s: &str) -> Self {
        GpuModel::normalize(s)
    }
}

/// A uniform set of nodes written `NODESxGPUS[:MODEL]`, as in `4x8` or `2x8:H100` (used by
/// `spillway simulate --private-gpus` and by policy-test situations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeShape {
    pub nodes: u32,
    pub gpus: u32,
    pub model: Option<GpuModel>,
}

impl NodeShape {
    /// Parses `NODESxGPUS[:MODEL]`; the error says what is wrong, without the caller's context.
    pub fn parse(spec: &str) -> Result<NodeShape, String> {
        let (shape, model) = match spec.split_once(':') {
            Some((s, m)) => (s, Some(GpuModel::normalize(m))),
            None => (spec, None),
        };
        let (n, g) = shape.split_once(['x', 'X']).ok_or_else(|| {
            format!("{spec:?}: expected NODESxGPUS[:MODEL], such as 4x8 or 2x8:H100")
        })?;
        let nodes: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("{spec:?}: {n:?} is not a node count"))?;
        let gpus: u32 = g
            .trim()
            .parse()
            .map_err(|_| format!("{spec:?}: {g:?} is not a GPU count"))?;
        if gpus == 0 {
            return Err(format!("{spec:?}: nodes need at least one GPU"));
        }
        Ok(NodeShape { nodes, gpus, model })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_feature_discovery_labels() {
        let cases = [
            ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
            ("NVIDIA-A100-SXM4-40GB", "A100"),
            ("NVIDIA-A100-PCIE-80GB", "A100-80GB"),
            ("NVIDIA-H100-80GB-HBM3", "H100"),
            ("NVIDIA-L40S", "L40S"),
            ("NVIDIA-L4", "L4"),
            ("NVIDIA-A10G", "A10G"),
            ("NVIDIA-A10", "A10"),
            ("Tesla-T4", "T4"),
            ("Tesla-V100-SXM2-16GB", "V100"),
            ("Tesla-V100-SXM2-32GB", "V100-32GB"),
            ("a100-80gb", "A100-80GB"),
            ("H100", "H100"),
        ];
        for (raw, want) in cases {
            assert_eq!(GpuModel::normalize(raw).as_str(), want, "{raw}");
        }
    }

    #[test]
    fn keeps_unknown_models_as_written() {
        let m = GpuModel::normalize(" MI300X ");
        assert_eq!(m.as_str(), "MI300X");
        assert!(!m.is_known());
        // A prefix of a known name is not that name.
        assert_eq!(GpuModel::normalize("L400").as_str(), "L400");
    }
}
