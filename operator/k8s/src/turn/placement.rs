//! Cluster placement groups: which to delete (no instance left in them, nothing launching for
//! their need), and the group a cloud job's instances are in (`status.placementGroup`).

use crate::hashing::{HashMap, HashMapExt};

use spillway_core::{self as core, Time};

use super::{CloudInputs, State};
use crate::actions::Action;
use crate::cloud::placement::GROUP_GRACE;
use crate::world::{self, JobView, Lifecycle};

impl State {
    /// Deletes each known placement group that no listed instance is in and no launch of its
    /// need is under way for, [`GROUP_GRACE`] after it was made or first listed. Only once
    /// every cloud region has been listed.
    pub(super) fn collect_placement_groups(&mut self, cloud: CloudInputs<'_>, now: Time) {
        let view = cloud.view;
        if !view.complete {
            return;
        }
        for g in &view.placement_groups {
            let idle = !g.in_use
                && !g.deleting
                && !view.launching.contains_key(&g.need)
                && now.since(g.since) >= GROUP_GRACE
                && g.retry_at.is_none_or(|t| t <= now);
            if idle {
                self.emit(Action::DeletePlacementGroup {
                    region: g.region.clone(),
                    name: g.name.clone(),
                });
            }
        }
    }
}

/// The placement group of each need whose listed instances are in one.
pub(super) fn groups_by_need(built: &world::Built) -> HashMap<&str, &str> {
    let mut out = HashMap::with_capacity(built.cloud_groups.len());
    for (need, group) in &built.cloud_groups {
        out.insert(need.as_str(), group.as_str());
    }
    out
}

/// The placement group a cloud job's instances are in: those its running replicas sit on, or
/// those launched for its current attempt.
pub(super) fn group_of(
    view: &JobView,
    on_node: &HashMap<&str, &core::Instance>,
    groups: &HashMap<&str, &str>,
) -> Option<String> {
    let group = match &view.lifecycle {
        Lifecycle::Running { nodes, .. } => nodes
            .iter()
            .filter_map(|n| on_node.get(n.as_str()))
            .find_map(|i| groups.get(i.need.as_str())),
        Lifecycle::Provisioning { .. } => {
            groups.get(format!("{}#{}", view.id, view.attempt).as_str())
        }
        _ => None,
    };
    group.map(|g| g.to_string())
}
