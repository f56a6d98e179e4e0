//! Cluster placement groups: a gang launch that wants its instances on one network spine
//! ([`core::Launch::together`], in a pool with `spec.aws.clusterPlacement`, the default) goes
//! into an EC2 cluster placement group made for it, and its instances get EFA interfaces
//! where the pool asks for them (`spec.aws.efa`) and the type has them.
//!
//! A group is named after its launch ([`LaunchRequest::placement_group_name`]): a retry of
//! the same launch finds its group again, a launch elsewhere after a capacity error gets a new
//! one. A launch that EC2 refused leaves its group empty: it is deleted at once. Every other
//! group is deleted by the turn ([`crate::actions::Action::DeletePlacementGroup`]) once no
//! instance of it is left and nothing launches for its need; groups an earlier operator made
//! are found by listing them (by the cluster tag) every [`LIST_EVERY`].

use spillway_api::pool::AwsPool;

use super::*;

/// How often each region's placement groups are listed.
const LIST_EVERY: core::Duration = FACTS_EVERY;

/// A group with no instance in it is kept this long after it was made or first listed: the
/// instances of a launch show in listings within it.
pub const GROUP_GRACE: core::Duration = LISTING_LAG;

/// A delete that failed (the group's instances still leaving it) is asked again after this.
const DELETE_RETRY: core::Duration = core::Duration::from_secs(30);

/// A placement group Spillway made or found.
#[derive(Clone, Debug)]
pub(super) struct Group {
    region: String,
    need: String,
    since: Time,
    deleting: bool,
    retry_at: Option<Time>,
}

/// A placement group as a turn sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupView {
    pub name: String,
    pub region: String,
    /// The need it was made for.
    pub need: String,
    /// When it was made, or first listed.
    pub since: Time,
    /// A listed instance (running or on its way out) is in it.
    pub in_use: bool,
    /// Being deleted now, or not to be asked again before this.
    pub deleting: bool,
    pub retry_at: Option<Time>,
}

impl Cloud {
    /// Whether the provider says `instance_type` supports EFA in `region`.
    fn efa_supported(&self, region: &str, instance_type: &str) -> bool {
        self.state()
            .facts
            .get(region)
            .and_then(|f| f.facts.types.get(instance_type))
            .is_some_and(|t| t.efa_supported == Some(true))
    }

    /// Sets the request's EFA interfaces and placement group, as its pool and launch say.
    pub(super) fn arrange(
        &self,
        aws: &AwsPool,
        launch: &core::Launch,
        request: &mut LaunchRequest,
    ) {
        request.efa = aws.efa && self.efa_supported(&aws.region, &request.instance_type);
        if launch.together && aws.cluster_placement() {
            request.placement_group = Some(request.placement_group_name());
        }
    }

    /// Makes the request's placement group, if it has one. It is remembered first, so one
    /// made by a call whose answer was lost is still collected.
    pub(super) async fn make_group(
        &self,
        provider: &dyn CloudProvider,
        region: &str,
        request: &LaunchRequest,
    ) -> Result<(), CloudError> {
        let Some(name) = &request.placement_group else {
            return Ok(());
        };
        let now = crate::clock::now();
        self.state().groups.insert(
            name.clone(),
            Group {
                region: region.to_string(),
                need: request.need.clone(),
                since: now,
                deleting: false,
                retry_at: None,
            },
        );
        provider.create_placement_group(request).await
    }

    /// Deletes the group of a launch EC2 refused (it holds no instance): the next launch of
    /// the need, elsewhere, makes its own. A failure leaves it to the turn.
    pub(super) async fn drop_group(&self, provider: &dyn CloudProvider, request: &LaunchRequest) {
        let Some(name) = &request.placement_group else {
            return;
        };
        match provider.delete_placement_group(name).await {
            Ok(()) => {
                self.state().groups.remove(name);
            }
            Err(e) => {
                tracing::warn!(group = %name, error = %e, "cannot delete the placement group of a refused launch; trying again later")
            }
        }
    }

    /// Lists the region's placement groups when due: those of launches this process did not
    /// make (an earlier operator's) are then known, and collected like its own.
    pub(super) async fn list_groups(&self, region: &str, provider: &dyn CloudProvider, now: Time) {
        let due = self
            .state()
            .groups_listed
            .get(region)
            .is_none_or(|at| now.since(*at) >= LIST_EVERY);
        if !due {
            return;
        }
        match provider.placement_groups(&self.config.cluster).await {
            Ok(list) => {
                let mut st = self.state();
                for g in list.into_iter().filter(|g| !g.gone) {
                    st.groups.entry(g.name).or_insert(Group {
                        region: region.to_string(),
                        need: g.need,
                        since: now,
                        deleting: false,
                        retry_at: None,
                    });
                }
                st.groups_listed.insert(region.to_string(), now);
            }
            Err(e) => {
                // Asked again at the next round, not at every listing.
                self.state().groups_listed.insert(region.to_string(), now);
                tracing::warn!(region, error = %e, "cannot list placement groups; groups of earlier launches are not collected until they can be")
            }
        }
    }

    /// The known groups, and whether an instance is in each.
    pub(super) fn group_views(st: &State) -> Vec<GroupView> {
        let mut out: Vec<GroupView> = st
            .groups
            .iter()
            .map(|(name, g)| GroupView {
                name: name.clone(),
                region: g.region.clone(),
                need: g.need.clone(),
                since: g.since,
                in_use: st.instances.values().any(|(_, i)| {
                    i.state != spillway_cloud::InstanceState::Terminated
                        && i.placement_group == *name
                }),
                deleting: g.deleting,
                retry_at: g.retry_at,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Marks a group as being deleted; false if it already is, or is not known.
    pub fn start_group_delete(&self, name: &str) -> bool {
        match self.state().groups.get_mut(name) {
            Some(g) if !g.deleting => {
                g.deleting = true;
                true
            }
            _ => false,
        }
    }

    /// Forgets a delete that will not happen (now).
    pub fn cancel_group_delete(&self, name: &str) {
        if let Some(g) = self.state().groups.get_mut(name) {
            g.deleting = false;
        }
    }

    /// Deletes a placement group and forgets it; after a failure it is asked again in
    /// [`DELETE_RETRY`].
    pub async fn delete_placement_group(&self, region: &str, name: &str) -> Result<(), CloudError> {
        let provider = self.provider(region).await;
        let r = provider.delete_placement_group(name).await;
        let mut st = self.state();
        match &r {
            Ok(()) => {
                st.groups.remove(name);
            }
            Err(_) => {
                if let Some(g) = st.groups.get_mut(name) {
                    g.deleting = false;
                    g.retry_at = Some(crate::clock::now() + DELETE_RETRY);
                }
            }
        }
        r
    }
}
