//! Spillway's cloud contract: the [`CloudProvider`] trait through which instances are
//! launched, listed and terminated, and instance-type facts and spot prices are read. The
//! operator implements it on EC2 (`spillway-aws`); the simulator implements it on its virtual
//! clock (`spillway-sim`), so both drive the cloud through the same calls and see the same
//! errors.
//!
//! Invariants:
//! - Every instance Spillway launches carries the tags `spillway.io/cluster`,
//!   `spillway.io/pool`, `spillway.io/job`, `spillway.io/queue` and `spillway.io/need`; Spillway
//!   lists, and so ever terminates, only instances with its cluster tag.
//! - A launch carries a `ClientToken` derived from the cluster and the need, and callers look the
//!   need up by its tag first, so no need is launched twice (moto ignores ClientToken; real EC2
//!   honours it for the window before the tags are visible).
//! - Errors are data: capacity errors, throttling and bad requests are told apart
//!   ([`CloudError`]), so the caller can cool an offering down, back off, or give up.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use spillway_core::{CapacityType, ErrorCategory, Time};

pub mod facts;
pub mod notices;

/// A boxed, sendable future (the same type as `futures::future::BoxFuture`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Tag keys.
pub mod tags {
    pub const CLUSTER: &str = "spillway.io/cluster";
    pub const POOL: &str = "spillway.io/pool";
    pub const JOB: &str = "spillway.io/job";
    pub const QUEUE: &str = "spillway.io/queue";
    pub const NEED: &str = "spillway.io/need";
    pub const CAPACITY_TYPE: &str = "spillway.io/capacity-type";
    /// On an instance: the cluster placement group it was launched into.
    pub const PLACEMENT_GROUP: &str = "spillway.io/placement-group";
    /// On a machine image: the NVIDIA driver version it installs (`550.54.15`).
    pub const IMAGE_DRIVER: &str = "spillway.io/nvidia-driver-version";
    /// On a machine image: the CUDA version its driver supports (`12.4`).
    pub const IMAGE_CUDA: &str = "spillway.io/cuda-version";
}

/// What the provider says of one machine image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageInfo {
    pub id: String,
    pub tags: BTreeMap<String, String>,
}

impl ImageInfo {
    /// The driver and CUDA versions the image's tags ([`tags::IMAGE_DRIVER`],
    /// [`tags::IMAGE_CUDA`]) state; a tag that is missing or not a version is unknown.
    pub fn facts(&self) -> spillway_core::Facts {
        let version = |k: &str| self.tags.get(k).and_then(|v| v.parse().ok());
        spillway_core::Facts {
            driver: version(tags::IMAGE_DRIVER),
            cuda: version(tags::IMAGE_CUDA),
            ..spillway_core::Facts::default()
        }
    }
}

/// The machine image to boot.
#[derive(Clone, Debug, PartialEq)]
pub enum Image {
    Ami(String),
    LaunchTemplate {
        id: Option<String>,
        name: Option<String>,
        version: Option<String>,
    },
}

/// One launch: `count` instances of one offering for one need.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    pub cluster: String,
    pub pool: String,
    pub job: String,
    pub queue: String,
    pub need: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    /// An availability-zone name to place the instances in, when the offering names one.
    pub zone: Option<String>,
    pub count: u32,
    pub image: Image,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub iam_instance_profile: Option<String>,
    /// Extra tags (the pool's `tags`).
    pub tags: BTreeMap<String, String>,
    /// Rendered user data (plain text; base64-encoded by the provider).
    pub user_data: Option<String>,
    /// How many times this need's token was spent on instances that are gone since (0 for a
    /// need's first launch); part of the idempotency token.
    pub token_generation: u32,
    /// The cluster placement group to launch every instance into (made first with
    /// [`CloudProvider::create_placement_group`]; one request, so one zone), if any.
    pub placement_group: Option<String>,
    /// Give each instance an EFA network interface (device 0) instead of a plain one.
    pub efa: bool,
}

impl LaunchRequest {
    /// The idempotency token for this need: stable across retries and restarts, at most 64
    /// characters as EC2 requires.
    pub fn client_token(&self) -> String {
        client_token_of(&self.cluster, &self.need, self.token_generation)
    }

    /// The name of the cluster placement group for this launch: one per need, token
    /// generation and offering (instance type, capacity type, pinned zone), so a retry of the
    /// same launch finds its group again and a launch elsewhere after a capacity error gets a
    /// fresh one. `spillway-pg-` and an FNV-1a hash, hex: 28 characters.
    pub fn placement_group_name(&self) -> String {
        let parts = [
            self.cluster.as_str(),
            self.need.as_str(),
            &self.token_generation.to_string(),
            self.instance_type.as_str(),
            self.capacity_type.as_str(),
            self.zone.as_deref().unwrap_or(""),
        ];
        let bytes = parts.iter().flat_map(|p| p.bytes().chain([0u8]));
        format!("spillway-pg-{:016x}", fnv1a(bytes))
    }
}

/// FNV-1a of the bytes.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `spillway-` and an FNV-1a hash of cluster and need, hex: 25 characters. The token of a
/// need's first launch (generation 0).
pub fn client_token(cluster: &str, need: &str) -> String {
    client_token_of(cluster, need, 0)
}

/// The token of a need's launch of `generation` (0: the first; a later one is asked for only
/// when EC2 answered an earlier token with instances that are gone).
pub fn client_token_of(cluster: &str, need: &str, generation: u32) -> String {
    let generation = generation.to_string();
    let tail = (generation != "0").then_some(generation.as_bytes());
    let h = fnv1a(
        cluster.bytes().chain([0u8]).chain(need.bytes()).chain(
            tail.into_iter()
                .flat_map(|g| [0u8].into_iter().chain(g.iter().copied())),
        ),
    );
    format!("spillway-{h:016x}")
}

/// An instance's lifecycle state, as EC2 reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl InstanceState {
    /// Gone or going: it will never run a job again.
    pub fn is_gone(self) -> bool {
        matches!(
            self,
            InstanceState::ShuttingDown
                | InstanceState::Terminated
                | InstanceState::Stopping
                | InstanceState::Stopped
        )
    }
}

/// An instance with Spillway's cluster tag.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudInstance {
    pub id: String,
    pub pool: String,
    pub job: String,
    pub queue: String,
    pub need: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub zone: String,
    pub state: InstanceState,
    pub launched_at: Time,
    /// The cluster placement group it was launched into (its [`tags::PLACEMENT_GROUP`] tag),
    /// empty when none.
    pub placement_group: String,
}

/// A cluster placement group with Spillway's cluster tag.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementGroup {
    pub name: String,
    /// The need it was made for (its `spillway.io/need` tag).
    pub need: String,
    pub pool: String,
    /// Being deleted or deleted already.
    pub gone: bool,
}

/// Why a cloud call failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// No capacity for this offering now (`InsufficientInstanceCapacity`,
    /// `InstanceLimitExceeded`, `Unsupported`, `SpotMaxPriceTooLow`, ...): try another one.
    #[error("no capacity: {code}: {message}")]
    Capacity { code: String, message: String },
    /// Throttled (`RequestLimitExceeded`): back off and retry.
    #[error("throttled: {code}: {message}")]
    Throttled { code: String, message: String },
    /// The request is wrong (bad AMI, unknown instance type, missing permission): retrying the
    /// same request will not help.
    #[error("request refused: {code}: {message}")]
    Refused { code: String, message: String },
    /// Anything else (network, timeout, server error): retry later.
    #[error("{0}")]
    Other(String),
}

impl CloudError {
    /// The error's category: capacity and throttling are transient (for a capacity error the
    /// caller tries another offering rather than the same one again), a refused request is
    /// invalid input unless it is a missing permission.
    pub fn category(&self) -> ErrorCategory {
        match self {
            CloudError::Capacity { .. } | CloudError::Throttled { .. } | CloudError::Other(_) => {
                ErrorCategory::Transient
            }
            CloudError::Refused { code, .. } => match code.as_str() {
                "UnauthorizedOperation" | "AuthFailure" | "OptInRequired" => {
                    ErrorCategory::Permission
                }
                c if c.ends_with(".NotFound") => ErrorCategory::NotFound,
                _ => ErrorCategory::InvalidInput,
            },
        }
    }

    /// Whether the request may have acted though it failed: EC2's answer was not one that says
    /// it did nothing (the connection dropped or the call timed out with the request sent, a
    /// server error, a code not known here). Capacity errors, throttling and refusals are EC2
    /// saying this request did nothing (a launch's caller also counts throttling as open: it
    /// may answer the SDK's retry of an attempt that acted; `spillway-k8s`'s `cloud.rs`).
    pub fn may_have_acted(&self) -> bool {
        matches!(self, CloudError::Other(_))
    }

    /// A short, bounded name of the error's kind (metrics, conditions): `capacity`,
    /// `throttled`, `refused`, `other`.
    pub fn kind(&self) -> &'static str {
        match self {
            CloudError::Capacity { .. } => "capacity",
            CloudError::Throttled { .. } => "throttled",
            CloudError::Refused { .. } => "refused",
            CloudError::Other(_) => "other",
        }
    }

    /// Classifies an EC2 error code.
    pub fn from_code(code: &str, message: &str) -> CloudError {
        let (code, message) = (code.to_string(), message.to_string());
        match code.as_str() {
            "InsufficientInstanceCapacity"
            | "InsufficientCapacity"
            | "InstanceLimitExceeded"
            | "Unsupported"
            | "SpotMaxPriceTooLow"
            | "MaxSpotInstanceCountExceeded"
            | "InsufficientHostCapacity"
            | "VcpuLimitExceeded" => CloudError::Capacity { code, message },
            "RequestLimitExceeded" | "Throttling" | "ThrottlingException" => {
                CloudError::Throttled { code, message }
            }
            c if c.starts_with("Invalid")
                || c.starts_with("Missing")
                || c == "IdempotentParameterMismatch"
                || c == "UnauthorizedOperation"
                || c == "AuthFailure"
                || c == "OptInRequired" =>
            {
                CloudError::Refused { code, message }
            }
            _ => CloudError::Other(format!("{code}: {message}")),
        }
    }
}

/// What the provider says of one instance type's GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceTypeInfo {
    pub instance_type: String,
    /// GPUs per instance (0 when the type has none or the provider does not say).
    pub gpus: u32,
    /// The GPU's name as the provider spells it (`A10G`, `A100`, `H100`).
    pub gpu_model: String,
    /// Memory of one GPU, MiB.
    pub gpu_memory_mib: u64,
    /// Whether the type supports Elastic Fabric Adapter interfaces (`None`: not said).
    pub efa_supported: Option<bool>,
}

/// One recent spot price of an instance type in one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotPrice {
    pub instance_type: String,
    /// Availability-zone name (`us-east-1a`).
    pub zone: String,
    /// USD per hour for one instance.
    pub hourly_price: f64,
    pub at: Time,
}

/// Launch, list and terminate instances, and read instance-type facts and spot prices. The
/// operator holds one per region; the simulator one for its whole replay.
pub trait CloudProvider: Send + Sync {
    /// Instances tagged with `cluster` (any state but terminated).
    fn instances<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>>;
    /// Instances tagged with `cluster` and `need` (any state but terminated).
    fn instances_for_need<'a>(
        &'a self,
        cluster: &'a str,
        need: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>>;
    /// Launches the instances of one request, all or none.
    fn launch<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>>;
    /// Terminates instances (already gone ones are fine).
    fn terminate<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>>;
    /// GPU facts of these instance types; types the provider does not know are left out.
    fn instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceTypeInfo>, CloudError>>;
    /// The latest spot price of these instance types in each zone that sells them (Linux).
    fn spot_prices<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<SpotPrice>, CloudError>>;
    /// One machine image and its tags; `None` when the provider does not know it. A provider
    /// with no images to describe (the simulator) keeps this default: none.
    fn image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<ImageInfo>, CloudError>> {
        let _ = id;
        Box::pin(async { Ok(None) })
    }

    /// Makes the cluster placement group `request.placement_group` (strategy `cluster`),
    /// tagged with the request's cluster, pool, job and need; one that exists already is
    /// fine. A provider with no placement groups (the simulator) keeps this default: nothing
    /// to make.
    fn create_placement_group<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<(), CloudError>> {
        let _ = request;
        Box::pin(async { Ok(()) })
    }

    /// The placement groups tagged with `cluster`. Default: none.
    fn placement_groups<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<PlacementGroup>, CloudError>> {
        let _ = cluster;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Deletes a placement group (one already gone is fine). Default: nothing to delete.
    fn delete_placement_group<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), CloudError>> {
        let _ = name;
        Box::pin(async { Ok(()) })
    }

    /// Those of `ids` that carry the cluster tag `cluster`, in any state (terminated ones
    /// included, for as long as the provider still describes them): whether a notice about an
    /// instance no listing shows any more concerns this cluster. A provider with no notices
    /// (the simulator) keeps this default: none.
    fn owned<'a>(
        &'a self,
        cluster: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<String>, CloudError>> {
        let _ = (cluster, ids);
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// How each cloud call is bounded. There is one retry layer per call, beneath this trait: the
/// provider SDK's standard strategy (exponential backoff with full jitter from
/// `initial_backoff` up to `max_backoff`, a server's `x-amz-retry-after` hint honoured up to
/// `max_backoff`, and a client-wide retry quota that stops retrying when most calls fail). A
/// call that still fails is the caller's to act on at its next decision, never retried again
/// above: the operator's executor does not retry cloud errors.
#[derive(Clone, Debug)]
pub struct CallPolicy {
    /// The whole call, its retries included.
    pub timeout: Duration,
    /// Requests one call may send in all, the first included: the budget of one logical
    /// action (a launch, a terminate, one page of a listing).
    pub attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        CallPolicy {
            timeout: Duration::from_secs(60),
            attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(20),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_are_stable_short_and_distinct() {
        let a = client_token("prod", "ns/job#0");
        assert_eq!(
            a,
            client_token_of("prod", "ns/job#0", 0),
            "generation 0 is the first"
        );
        assert_ne!(a, client_token_of("prod", "ns/job#0", 1));
        assert_ne!(
            client_token_of("prod", "ns/job#0", 1),
            client_token_of("prod", "ns/job#0", 2)
        );
        assert_eq!(a, client_token("prod", "ns/job#0"));
        assert_ne!(a, client_token("prod", "ns/job#1"));
        assert_ne!(a, client_token("staging", "ns/job#0"));
        assert!(a.len() <= 64);
    }

    #[test]
    fn placement_groups_are_named_per_need_and_offering() {
        let r = LaunchRequest {
            cluster: "prod".into(),
            pool: "aws".into(),
            job: "ns/train".into(),
            queue: "q".into(),
            need: "ns/train#0".into(),
            instance_type: "p5.48xlarge".into(),
            capacity_type: CapacityType::OnDemand,
            zone: None,
            count: 4,
            image: Image::Ami("ami-1".into()),
            subnet_ids: vec![],
            security_group_ids: vec![],
            iam_instance_profile: None,
            tags: BTreeMap::new(),
            user_data: None,
            token_generation: 0,
            placement_group: None,
            efa: true,
        };
        let name = r.placement_group_name();
        assert_eq!(name, r.clone().placement_group_name(), "stable");
        assert!(
            name.starts_with("spillway-pg-") && name.len() == 28,
            "{name}"
        );
        let other = |f: fn(&mut LaunchRequest)| {
            let mut o = r.clone();
            f(&mut o);
            o.placement_group_name()
        };
        assert_ne!(name, other(|o| o.instance_type = "p4d.24xlarge".into()));
        assert_ne!(name, other(|o| o.zone = Some("us-east-1a".into())));
        assert_ne!(name, other(|o| o.capacity_type = CapacityType::Spot));
        assert_ne!(name, other(|o| o.token_generation = 1));
        assert_ne!(name, other(|o| o.need = "ns/train#1".into()));
        assert_eq!(name, other(|o| o.count = 8), "the count is not the group's");
    }

    #[test]
    fn error_codes_are_classified() {
        assert!(matches!(
            CloudError::from_code("InsufficientInstanceCapacity", "x"),
            CloudError::Capacity { .. }
        ));
        assert!(matches!(
            CloudError::from_code("RequestLimitExceeded", "x"),
            CloudError::Throttled { .. }
        ));
        assert!(matches!(
            CloudError::from_code("InvalidAMIID.NotFound", "x"),
            CloudError::Refused { .. }
        ));
        assert!(matches!(
            CloudError::from_code("InternalError", "x"),
            CloudError::Other(_)
        ));
    }

    #[test]
    fn errors_have_categories() {
        let c = |code: &str| CloudError::from_code(code, "x").category();
        assert_eq!(c("InsufficientInstanceCapacity"), ErrorCategory::Transient);
        assert_eq!(c("RequestLimitExceeded"), ErrorCategory::Transient);
        assert_eq!(c("UnauthorizedOperation"), ErrorCategory::Permission);
        assert_eq!(c("InvalidAMIID.NotFound"), ErrorCategory::NotFound);
        assert_eq!(c("InvalidParameterValue"), ErrorCategory::InvalidInput);
        assert_eq!(c("InternalError"), ErrorCategory::Transient);
    }
}
