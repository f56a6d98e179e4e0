//! `BurstPolicy`: ordered rules, written in CEL, that decide when and where jobs may burst.
//!
//! The semantics (evaluation order, how effects combine) are owned by `spillway-policy` and
//! documented in `docs/policy.md`; this module is only the wire format.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use spillway_core::{CapacityType, Classification, Environment};

use crate::common::{optional_duration_schema, preserve_unknown_object};
use crate::queue::WaitMode;

/// Ordered rules that decide when and where GpuJobs may burst to the cloud, with optional tests
/// that `spillway policy test` runs.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "spillway.io",
    version = "v1alpha1",
    kind = "BurstPolicy",
    doc = "Ordered CEL rules that decide when and where GpuJobs may burst to the cloud, with tests.",
    plural = "burstpolicies",
    singular = "burstpolicy",
    shortname = "bp",
    category = "spillway",
    status = "BurstPolicyStatus",
    printcolumn = r#"{"name":"Order","type":"integer","jsonPath":".spec.order"}"#,
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.rules"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BurstPolicySpec {
    /// Policies are evaluated in ascending `order`, then by name. Defaults to 0.
    #[serde(default)]
    pub order: i32,
    /// The rules, evaluated top to bottom.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<PolicyRule>,
    /// Examples that `spillway policy test` checks: a job, a situation and the expected
    /// decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub tests: Vec<PolicyTest>,
}

/// One rule: a condition and what it does when the condition holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.forbid) || !has(self.require) || self.forbid != self.require",
     "message": "a rule cannot forbid and require the same environment"},
    {"rule": "!has(self.allowClassifications) || !self.allowClassifications.exists(c, c == 'Restricted')",
     "message": "Restricted data never leaves private nodes and cannot be allowed in the cloud"},
]))]
pub struct PolicyRule {
    /// A name unique within the policy; decisions cite it as `policy/rule`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// What the rule is for, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A CEL expression over `job`, `queue`, `waited` and `now`; the rule applies when it is
    /// true. Empty means always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The job must not run in this environment (`private` or `cloud`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbid: Option<Environment>,
    /// The job must run in this environment (`private` or `cloud`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<Environment>,
    /// How long the job waits for private GPUs before it may burst, such as `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_duration_schema")]
    pub max_wait: Option<String>,
    /// `fixed`, `compute-wait` or `cost-aware` (see GpuQueue `burst.waitMode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_mode: Option<WaitMode>,
    /// In `compute-wait` mode, seconds of wait per GPU-second of estimated work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub compute_wait_factor: Option<f64>,
    /// Upper bound on the hourly price of a cloud placement for the whole job, in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_hourly_cost: Option<f64>,
    /// Allowed capacity types (`spot`, `on-demand`). Listing `spot` here also allows spot for
    /// jobs that are not restartable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub capacity_types: Vec<CapacityType>,
    /// Allowed instance types; `*` matches any run of characters, as in `p4d.*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// Allowed regions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Dataset classifications allowed in the cloud by this rule (only `Confidential` can be
    /// allowed; `Restricted` data never leaves private nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4), extend("x-kubernetes-list-type" = "set"))]
    pub allow_classifications: Vec<Classification>,
    /// A CEL expression over `offering` (and `job`, `queue`): offerings for which it is false
    /// are not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offering_filter: Option<String>,
    /// Whether a restartable job running in the cloud moves back to private GPUs: `never`, or
    /// `whenCheaper` (the default: when enough are free and finishing there is cheaper, lost
    /// work and restart included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repatriate: Option<Repatriate>,
}

/// Whether a restartable cloud job moves back to private GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Repatriate {
    /// Once in the cloud, the job finishes there.
    #[serde(rename = "never")]
    Never,
    /// When enough private GPUs are free and finishing there is cheaper.
    #[serde(rename = "whenCheaper")]
    WhenCheaper,
}

/// An example decision that `spillway policy test` checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTest {
    /// What the test shows.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The job: a GpuJob `spec` (the `template` may be left out).
    #[schemars(schema_with = "preserve_unknown_object")]
    pub job: serde_json::Value,
    /// The situation: waited time, queue state, free private GPUs, offerings, datasets (see
    /// docs/policy.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub situation: Option<serde_json::Value>,
    /// The expected decision.
    pub expect: PolicyExpectation,
}

/// The expected decision of a policy test. Fields left out are not checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyExpectation {
    /// `StartPrivate`, `StartCloud`, `Wait`, `Stop` or `Reject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// `private` or `cloud`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// The PascalCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deciding rule, as `rule` or `policy/rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The chosen instance type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// The chosen capacity type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<CapacityType>,
}

/// The observed state of a BurstPolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BurstPolicyStatus {
    /// Rules in force (0 while the policy is invalid: an invalid policy is left out whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<i64>,
    /// `Ready`: `True` when every rule compiled and the policy is in force, `False` with
    /// reason `Invalid` and a message naming the rule, the field and the column otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
