//! Small types several resources share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Schema for a duration string such as `90m`, `4h` or `1h30m`.
pub(crate) fn duration_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let _ = generator;
    schemars::json_schema!({
        "type": "string",
        "pattern": spillway_core::duration::DURATION_PATTERN,
    })
}

/// Schema for an optional duration string.
pub(crate) fn optional_duration_schema(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    let _ = generator;
    schemars::json_schema!({
        "type": "string",
        "nullable": true,
        "pattern": spillway_core::duration::DURATION_PATTERN,
    })
}

/// A free-form object the API server keeps as is (validated where it is used).
pub(crate) fn preserve_unknown_object(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    let _ = generator;
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The name of a Kubernetes object: lower-case letters, digits, `-` and `.`, starting and
/// ending with a letter or digit (with a length of at most 253, checked apart). The same rule
/// as [`crate::validate::check_dns_subdomain`].
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$";

/// Dollar budgets. Either limit may be left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.monthlyUSD) || !has(self.hourlyUSD) || self.hourlyUSD <= self.monthlyUSD",
     "message": "hourlyUSD exceeds monthlyUSD: the month's budget would be spent within the hour"},
]))]
pub struct Budget {
    /// Maximum spend per calendar month (UTC), in USD: the cloud's, and with `countsPrivate`
    /// the private GPU time too.
    #[serde(
        rename = "monthlyUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub monthly_usd: Option<f64>,
    /// Maximum spend rate, in USD per hour, summed over the instances running at once (and
    /// with `countsPrivate` the queue's private jobs).
    #[serde(rename = "hourlyUSD", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub hourly_usd: Option<f64>,
    /// Count the queue's private GPU time in the budget too, at its pool's `gpuCostPerHour`
    /// (a pool without one counts nothing). Private jobs still start when the budget is spent:
    /// it then holds back bursts. Default: the budget counts cloud spend only.
    #[serde(
        rename = "countsPrivate",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub counts_private: bool,
}
