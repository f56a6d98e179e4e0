//! Interconnect topology: the levels of a private pool's network (racks, NVLink domains, ...),
//! named by node label keys, and where a gang wants its replicas among them
//! (docs/topology.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most levels a pool's topology may name.
pub const MAX_LEVELS: usize = 8;

/// The levels of a private pool's interconnect, outermost first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolTopology {
    /// Node label keys, outermost first, for example `spillway.io/block`, `spillway.io/rack`,
    /// `kubernetes.io/hostname`. The nodes with one value of a level's label form one domain
    /// of that level; a node without the label is in no domain of it.
    #[schemars(length(min = 1, max = 8))]
    #[schemars(inner(length(min = 1, max = 316)))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub levels: Vec<String>,
}

/// Where a gang's replicas go relative to each other on private nodes. Exactly one of
/// `required` and `preferred`, each a level of the private pools' `topology.levels`.
/// A job of one replica is not affected.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.required) != has(self.preferred)",
     "message": "set exactly one of required and preferred"},
]))]
pub struct JobTopology {
    /// All replicas inside one domain of this level, or the job waits (reason
    /// `TopologyUnfit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub required: Option<String>,
    /// As few domains of this level as can hold the gang now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub preferred: Option<String>,
}

impl JobTopology {
    /// The wish as the core sees it (`None` when neither is set; validation refuses that).
    pub fn to_core(&self) -> Option<spillway_core::TopologyWish> {
        match (&self.required, &self.preferred) {
            (Some(level), _) => Some(spillway_core::TopologyWish {
                level: level.clone(),
                required: true,
            }),
            (None, Some(level)) => Some(spillway_core::TopologyWish {
                level: level.clone(),
                required: false,
            }),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wish_is_one_level_required_or_preferred() {
        let t = |required: Option<&str>, preferred: Option<&str>| JobTopology {
            required: required.map(String::from),
            preferred: preferred.map(String::from),
        };
        let rack = |required| {
            Some(spillway_core::TopologyWish {
                level: "spillway.io/rack".into(),
                required,
            })
        };
        assert_eq!(t(Some("spillway.io/rack"), None).to_core(), rack(true));
        assert_eq!(t(None, Some("spillway.io/rack")).to_core(), rack(false));
        assert_eq!(t(None, None).to_core(), None);
    }
}
