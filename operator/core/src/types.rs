//! Small domain enums shared by every layer.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    // The organisation's own GPU nodes.
    Private,
    // Public cloud instances launched by Spillway.
    Cloud,
    // Nodes of another Kubernetes cluster (a `cluster` pool), reached through its API server.
    Remote,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Private => "private",
            Environment::Cloud => "cloud",
            Environment::Remote => "remote",
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a cloud instance is bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum CapacityType {
    #[serde(rename = "on-demand")]
    OnDemand,
    #[serde(rename = "spot")]
    Spot,
}

impl CapacityType {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How sensitive a dataset is. Ordered from least to most sensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Classification {
    Public,
    Internal,
    Confidential,
    Restricted,
}

impl Classification {
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::Public => "Public",
            Classification::Internal => "Internal",
            Classification::Confidential => "Confidential",
            Classification::Restricted => "Restricted",
        }
    }
}

impl fmt::Display for Classification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a job may be placed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Placement {
    // Private first; the cloud when queue and policies allow it.
    #[default]
    Auto,
    // Never the cloud.
    PrivateOnly,
    // Never private nodes.
    CloudOnly,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Auto => "Auto",
            Placement::PrivateOnly => "PrivateOnly",
            Placement::CloudOnly => "CloudOnly",
        }
    }
}
