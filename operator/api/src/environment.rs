//! What a job requires of its GPUs' environment (`GpuJob spec.requirements`) and what a cloud
//! pool's image provides (`ComputePool spec.aws.environment`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core as core;

/// A dotted version of one to three numbers, as NVIDIA writes them.
pub const VERSION_PATTERN: &str = r"^[0-9]+(\.[0-9]+){0,2}$";

/// What the job's GPUs must come with. Private nodes state it through the labels NVIDIA's GPU
/// feature discovery puts on them (`nvidia.com/cuda.driver.*`, `nvidia.com/cuda.runtime.*`,
/// `nvidia.com/gpu.product`, `nvidia.com/gpu.memory`); a node without those labels meets no
/// requirement of that kind. Cloud offerings state it through their pool's
/// `aws.environment` and their instance type. A job that no node or offering meets waits,
/// and its decision says which requirement and the closest facts there are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRequirements {
    /// The lowest NVIDIA driver version, such as `"550.54"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VERSION_PATTERN))]
    pub min_driver_version: Option<String>,
    /// The lowest CUDA version the driver must support, such as `"12.4"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VERSION_PATTERN))]
    pub min_cuda_version: Option<String>,
    /// Globs (`*`) on the GPU product (`nvidia.com/gpu.product`, such as
    /// `NVIDIA-A100-SXM4-80GB`; for a cloud offering before launch, its GPU model such as
    /// `A100-80GB`), compared without regard to case; any one matching is enough.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1, max = 253)), extend("x-kubernetes-list-type" = "set"))]
    pub gpu_products: Vec<String>,
    /// The least memory of one GPU, GiB.
    #[serde(
        default,
        rename = "minGpuMemoryGiB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 4096))]
    pub min_gpu_memory_gib: Option<i32>,
}

/// What the image of a cloud pool's instances provides: the facts its offerings show jobs'
/// `requirements` before any instance exists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageEnvironment {
    /// The NVIDIA driver version of the image, such as `"550.54.15"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VERSION_PATTERN))]
    pub driver_version: Option<String>,
    /// The CUDA version its driver supports, such as `"12.4"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VERSION_PATTERN))]
    pub cuda_version: Option<String>,
}

/// What a pool's GPUs come with, as the operator last read it: the distinct values over its
/// nodes (GPU feature discovery's labels, and the kubelet's node info), or, for a cloud pool
/// with no node yet, what its image promises (`aws.environment`, else the image's tags) and its
/// instance types' GPUs. At most 8 values each; every list is written, empty or not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolEnvironment {
    /// `nodes` (the pool's nodes state it) or `image` (a cloud pool's promise).
    pub source: String,
    /// NVIDIA driver versions.
    #[serde(default)]
    pub driver_versions: Vec<String>,
    /// CUDA versions the drivers support.
    #[serde(default)]
    pub cuda_versions: Vec<String>,
    /// GPU products (`nvidia.com/gpu.product`; for an image, the instance types' GPU models).
    #[serde(default)]
    pub gpu_products: Vec<String>,
    /// Memory of one GPU, MiB.
    #[serde(rename = "gpuMemoryMiB", default)]
    pub gpu_memory_mib: Vec<i64>,
    /// Kernel versions of the nodes (`status.nodeInfo.kernelVersion`).
    #[serde(default)]
    pub kernel_versions: Vec<String>,
    /// Container runtimes of the nodes (`status.nodeInfo.containerRuntimeVersion`).
    #[serde(default)]
    pub container_runtimes: Vec<String>,
}

/// How many distinct values of one kind [`PoolEnvironment`] keeps.
pub const ENVIRONMENT_VALUES: usize = 8;

impl PoolEnvironment {
    /// The driver and CUDA versions stated, as the core's facts (one per value; what does not
    /// parse is left out), for comparing pools.
    pub fn facts(&self) -> Vec<core::Facts> {
        let drivers = self.driver_versions.iter().filter_map(|v| v.parse().ok());
        let cudas = self.cuda_versions.iter().filter_map(|v| v.parse().ok());
        drivers
            .map(|d| core::Facts {
                driver: Some(d),
                ..core::Facts::default()
            })
            .chain(cudas.map(|c| core::Facts {
                cuda: Some(c),
                ..core::Facts::default()
            }))
            .collect()
    }
}

impl JobRequirements {
    /// The core's requirements (a version that does not parse was refused by validation and
    /// counts as none here).
    pub fn to_core(&self) -> core::Requirements {
        core::Requirements {
            min_driver: self
                .min_driver_version
                .as_deref()
                .and_then(|v| v.parse().ok()),
            min_cuda: self
                .min_cuda_version
                .as_deref()
                .and_then(|v| v.parse().ok()),
            gpu_products: self.gpu_products.clone(),
            min_gpu_memory_gib: self.min_gpu_memory_gib.and_then(|g| u32::try_from(g).ok()),
        }
    }
}

impl ImageEnvironment {
    /// The driver and CUDA facts the image promises.
    pub fn facts(&self) -> core::Facts {
        core::Facts {
            driver: self.driver_version.as_deref().and_then(|v| v.parse().ok()),
            cuda: self.cuda_version.as_deref().and_then(|v| v.parse().ok()),
            ..core::Facts::default()
        }
    }
}
