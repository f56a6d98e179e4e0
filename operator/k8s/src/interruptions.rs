//! What a node says of the notices it was marked for (the `spillway.io/interrupted` taint and
//! its annotations), and the patch that marks it. The marks are what outlives a notice: once
//! a node shows them, the notice's message can be deleted and any leader carries on from the
//! node (moving its jobs off, terminating its instance at the deadline).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use spillway_core::Time;

use crate::clock::parse_rfc3339;
use crate::labels::{INTERRUPTED_TAINT, INTERRUPTION_DEADLINE_ANNOTATION, REBALANCE_AT_ANNOTATION};

/// The marks a node carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks {
    /// The taint's value (the notice's kind), when tainted.
    pub taint: Option<String>,
    pub cordoned: bool,
    /// When its instance is lost (a spot warning's deadline).
    pub deadline: Option<Time>,
    /// Since when its restartable jobs are to move (a rebalance recommendation, `Replace`).
    pub rebalance_at: Option<Time>,
}

/// The marks of `node`.
pub fn marks(node: &Node) -> Marks {
    let spec = node.spec.as_ref();
    let at = |key: &str| node.annotations().get(key).and_then(|v| parse_rfc3339(v));
    Marks {
        taint: spec
            .and_then(|s| s.taints.as_ref())
            .and_then(|ts| ts.iter().find(|t| t.key == INTERRUPTED_TAINT))
            .map(|t| t.value.clone().unwrap_or_default()),
        cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        deadline: at(INTERRUPTION_DEADLINE_ANNOTATION),
        rebalance_at: at(REBALANCE_AT_ANNOTATION),
    }
}

/// Whether `node` carries the taint and every one of `annotations` (an annotation already
/// there with another value is kept: the first notice's deadline stands).
pub fn marked(node: &Node, annotations: &BTreeMap<String, String>) -> bool {
    let m = marks(node);
    m.taint.is_some()
        && m.cordoned
        && annotations
            .keys()
            .all(|k| node.annotations().contains_key(k))
}

/// The merge patch that cordons `node`, adds the taint with `value` (when it has none) and the
/// annotations it lacks, over its version; `None` when it is marked already.
pub fn mark_patch(
    node: &Node,
    value: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<serde_json::Value> {
    if marked(node, annotations) {
        return None;
    }
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == INTERRUPTED_TAINT) {
        taints.push(Taint {
            key: INTERRUPTED_TAINT.into(),
            value: Some(value.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    }
    let missing: BTreeMap<&String, &String> = annotations
        .iter()
        .filter(|(k, _)| !node.annotations().contains_key(*k))
        .collect();
    Some(serde_json::json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "annotations": missing,
        },
        "spec": {"unschedulable": true, "taints": taints},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: serde_json::Value, annotations: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    #[test]
    fn marking_keeps_other_taints_and_the_first_deadline() {
        let deadline = BTreeMap::from([(
            INTERRUPTION_DEADLINE_ANNOTATION.to_string(),
            "2026-12-06T13:02:00Z".to_string(),
        )]);
        let n = node(
            serde_json::json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
            serde_json::json!({}),
        );
        let p = mark_patch(&n, "spot-interruption-warning", &deadline).unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["spec"]["unschedulable"], true);
        let keys: Vec<&str> = p["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["nvidia.com/gpu", INTERRUPTED_TAINT]);
        assert_eq!(
            p["metadata"]["annotations"][INTERRUPTION_DEADLINE_ANNOTATION],
            "2026-12-06T13:02:00Z"
        );

        let mut done = node(
            serde_json::json!([{"key": INTERRUPTED_TAINT, "value": "spot-interruption-warning", "effect": "NoSchedule"}]),
            serde_json::json!({INTERRUPTION_DEADLINE_ANNOTATION: "2026-12-06T13:01:00Z"}),
        );
        done.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(
            mark_patch(&done, "spot-interruption-warning", &deadline),
            None
        );
        let m = marks(&done);
        assert_eq!(m.taint.as_deref(), Some("spot-interruption-warning"));
        assert_eq!(m.deadline, parse_rfc3339("2026-12-06T13:01:00Z"));
        assert_eq!(m.rebalance_at, None);
    }
}
