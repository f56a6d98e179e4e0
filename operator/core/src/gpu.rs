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

    /// A cloud provider's GPU name with the memory of one GPU (EC2's `DescribeInstanceTypes`
    /// says `A100` with 81920 MiB for a p4de): the memory tells the 80 GB variants apart.
    pub fn from_provider(name: &str, memory_mib: u64) -> GpuModel {
        let m = GpuModel::normalize(name);
        let gib = memory_mib as f64 / 1024.0;
        match m.as_str() {
            "A100" if gib >= 70.0 => GpuModel("A100-80GB".into()),
            "V100" if gib >= 30.0 => GpuModel("V100-32GB".into()),
            _ => m,
        }
    }

    /// Memory of one GPU of this model, GiB, from Spillway's built-in table (the fallback when
    /// the provider does not say).
    pub fn memory_gib(&self) -> Option<f64> {
        MEMORY_GIB
            .iter()
            .find(|(name, _)| *name == self.0)
            .map(|(_, gib)| *gib)
    }
}

/// Memory of one GPU per known model, GiB.
const MEMORY_GIB: &[(&str, f64)] = &[
    ("H200", 141.0),
    ("H100", 80.0),
    ("A100-80GB", 80.0),
    ("A100", 40.0),
    ("L40S", 48.0),
    ("L40", 48.0),
    ("L4", 24.0),
    ("A10G", 24.0),
    ("A10", 24.0),
    ("T4", 16.0),
    ("V100-32GB", 32.0),
    ("V100", 16.0),
    ("P100", 16.0),
    ("K80", 12.0),
    ("M60", 8.0),
];

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
    /// The most nodes a shape may name (a simulated inventory is built node by node).
    pub const MAX_NODES: u32 = 100_000;
    /// The most GPUs a node may have.
    pub const MAX_GPUS: u32 = 64;

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
        if gpus > NodeShape::MAX_GPUS {
            return Err(format!(
                "{spec:?}: at most {} GPUs per node, got {gpus}",
                NodeShape::MAX_GPUS
            ));
        }
        if nodes > NodeShape::MAX_NODES {
            return Err(format!(
                "{spec:?}: at most {} nodes, got {nodes}",
                NodeShape::MAX_NODES
            ));
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
    fn provider_names_with_memory_pick_the_variant() {
        assert_eq!(GpuModel::from_provider("A100", 81920).as_str(), "A100-80GB");
        assert_eq!(GpuModel::from_provider("A100", 40960).as_str(), "A100");
        assert_eq!(GpuModel::from_provider("V100", 32768).as_str(), "V100-32GB");
        assert_eq!(GpuModel::from_provider("A10G", 24576).as_str(), "A10G");
        assert_eq!(GpuModel::from_provider("A10G", 0).memory_gib(), Some(24.0));
        assert_eq!(GpuModel::normalize("MI300X").memory_gib(), None);
        for (name, _) in KNOWN {
            assert!(
                GpuModel::normalize(name).memory_gib().is_some(),
                "{name} has no memory in the table"
            );
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
