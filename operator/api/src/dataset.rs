//! `Dataset`: data a job reads, with a classification and the places copies live.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core::Classification;

/// Data that jobs read. Its classification decides where those jobs may run: `Restricted`
/// never leaves private nodes, `Confidential` goes to the cloud only where a BurstPolicy rule
/// allows it. A cloud placement in a region with no copy pays egress for `sizeGiB`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "spillway.io",
    version = "v1alpha1",
    kind = "Dataset",
    doc = "Data that GpuJobs read, with a classification that decides where those jobs may run and the places copies live.",
    plural = "datasets",
    singular = "dataset",
    shortname = "ds",
    category = "spillway",
    status = "DatasetStatus",
    printcolumn = r#"{"name":"Classification","type":"string","jsonPath":".spec.classification"}"#,
    printcolumn = r#"{"name":"Size GiB","type":"number","jsonPath":".spec.sizeGiB"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DatasetSpec {
    /// `Public`, `Internal`, `Confidential` or `Restricted`.
    pub classification: Classification,
    /// Where copies of the data live.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<DatasetLocation>,
    /// Size of the data, in GiB.
    #[serde(rename = "sizeGiB", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size_gib: Option<f64>,
    /// Cost of moving one GiB out to a place with no copy, in USD. Unset means 0.
    #[serde(
        rename = "egressUSDPerGiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub egress_usd_per_gib: Option<f64>,
}

/// Where a copy of a dataset lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LocationEnvironment {
    Private,
    Aws,
    /// Another cluster's storage: `region` is the `location` of its cluster pool.
    Remote,
}

/// One copy of a dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.environment != 'aws' || (has(self.region) && size(self.region) > 0)",
     "message": "an aws location needs a region"},
    {"rule": "self.environment != 'remote' || (has(self.region) && size(self.region) > 0)",
     "message": "a remote location needs a region: the location of its cluster pool"},
]))]
pub struct DatasetLocation {
    /// `private` (the organisation's storage), `aws`, or `remote` (another cluster's storage).
    pub environment: LocationEnvironment,
    /// The region of the copy (required for `aws`), for example `us-east-1`; for `remote`
    /// (required) the `location` of the cluster pool it is beside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Where the copy is, for example `s3://bucket/prefix` or `nfs://filer/path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// The observed state of a Dataset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DatasetStatus {
    /// `Ready`: `True` when the operator can use the Dataset, `False` with reason `Invalid`
    /// and a message naming the field when it cannot (jobs reading it then wait).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
