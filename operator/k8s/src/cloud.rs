//! The cloud side of the loop: what instances exist (polled by tag), which offerings a cloud
//! pool has (the price catalog with the provider's instance-type facts and spot prices laid
//! over it, minus offerings cooling down after a capacity error, with each spot offering's
//! recent interruptions), and the launches, terminations and garbage collection the loop asks
//! for.
//!
//! Nothing here decides: the core plans launches and scale-down; this module carries them out
//! and keeps the facts the next snapshot needs.

pub mod notices;
mod offerings;
pub mod placement;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::ResourceExt;
use spillway_api::ComputePool;
use spillway_cloud::facts::RegionFacts;
use spillway_cloud::{CloudError, CloudInstance, CloudProvider, Image, LaunchRequest};
use spillway_core::catalog::CatalogRow;
use spillway_core::spot::SpotHistory;
use spillway_core::{self as core, CapacityType, Time};
use tokio::sync::Notify;

/// Makes the provider of one region.
pub type ProviderFactory =
    Arc<dyn Fn(String) -> BoxFuture<'static, Arc<dyn CloudProvider>> + Send + Sync>;

/// How the operator uses the cloud.
#[derive(Clone)]
pub struct CloudConfig {
    /// The value of the `spillway.io/cluster` tag on this cluster's instances.
    pub cluster: String,
    pub factory: ProviderFactory,
    /// Prices and GPU counts of instance types (the bundled catalog unless overridden).
    pub catalog: Vec<CatalogRow>,
    /// How often instances are listed.
    pub poll: Duration,
    /// An instance whose node has not joined after this long is terminated and its need
    /// re-planned.
    pub join_timeout: Duration,
    /// An instance with no need that wants it and no node is terminated after this long.
    pub gc_grace: Duration,
    /// An offering whose launch failed (capacity error or refusal) is skipped for this long.
    pub capacity_cooldown: Duration,
    /// Where joining machines find the API server; `None` launches without user data.
    pub join: Option<crate::bootstrap::JoinConfig>,
    /// Makes the readers of the pools' interruption queues; `None` reads none.
    pub notices: Option<notices::NoticeFactory>,
}

impl std::fmt::Debug for CloudConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudConfig")
            .field("cluster", &self.cluster)
            .field("catalog_rows", &self.catalog.len())
            .field("poll", &self.poll)
            .field("join_timeout", &self.join_timeout)
            .field("gc_grace", &self.gc_grace)
            .finish()
    }
}

/// The bundled on-demand and spot price catalog (SkyPilot format, us-east-1).
pub const DEFAULT_CATALOG: &str = include_str!("../../../examples/catalog-aws-us-east-1.csv");

type OfferingKey = (String, String, CapacityType, String);

/// What the pools of one region need the provider to describe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub types: BTreeSet<String>,
    /// The pools' `amiId`s.
    pub images: BTreeSet<String>,
}

/// The zone of a cool-down that applies to every zone of an offering.
const ANY_ZONE: &str = "*";

/// How often instance-type facts and spot prices are read again (spot prices move slowly;
/// EC2 publishes a new one at most every few minutes).
const FACTS_EVERY: core::Duration = core::Duration::from_secs(600);

/// What the provider said of one region's instance types and images, and when.
#[derive(Debug, Default)]
struct Facts {
    /// The instance types and images asked about.
    asked: Wanted,
    at: Option<Time>,
    facts: RegionFacts,
}

#[derive(Debug, Default)]
struct State {
    /// Live instances by id, with their region.
    instances: HashMap<String, (String, CloudInstance)>,
    /// Regions listed successfully at least once, and when the last listing was asked for.
    refreshed: HashMap<String, Time>,
    /// Instances our own launches returned, and when: a listing asked for while they were
    /// being launched (or just after: EC2's describe calls are eventually consistent) may not
    /// show them yet, and must not make them vanish.
    launched: HashMap<String, Time>,
    /// Needs being launched, so a need is never launched twice at once and what a launch
    /// under way will cost counts against budgets and pool limits before EC2 answers.
    launching: HashMap<String, core::Launch>,
    /// Launches that failed in a way that leaves open whether EC2 acted (the response was
    /// lost, the call timed out, a server error), by need, with their region and when they
    /// failed. They count as launching until a listing says what EC2 did: one that shows the
    /// need's instances, or one asked for [`UNSETTLED_LAG`] after the failure (or, with no
    /// listing answered, for [`UNSETTLED_AT_MOST`]).
    unsettled: HashMap<String, (String, core::Launch, Time)>,
    /// Instances Spillway terminated, and when (kept an hour): EC2 answering a launch with
    /// one of them means the launch's token was spent.
    retired: HashMap<String, Time>,
    /// Per need whose token was spent: the generation of its next token.
    token_generation: HashMap<String, u32>,
    cooldowns: HashMap<OfferingKey, Time>,
    terminating: HashSet<String>,
    facts: HashMap<String, Facts>,
    spot: SpotHistory,
    health: HashMap<String, LaunchHealth>,
    notices: notices::NoticeState,
    /// Placement groups made or listed, by name.
    groups: HashMap<String, placement::Group>,
    /// When each region's placement groups were last listed.
    groups_listed: HashMap<String, Time>,
}

/// Whether a RunInstances that failed with `e` may have launched instances: EC2 did not say it
/// did nothing ([`CloudError::may_have_acted`]), or it throttled, which may be its answer to
/// the SDK's retry (beneath, under the same client token) of an attempt whose answer was lost
/// and that acted: the rate limit refuses a request before its token is looked at.
fn launch_may_have_acted(e: &CloudError) -> bool {
    e.may_have_acted() || matches!(e, CloudError::Throttled { .. })
}

/// How long an instance a launch returned is kept in the view while listings do not show it.
pub const LISTING_LAG: core::Duration = core::Duration::from_secs(60);

/// How long after a launch of unknown outcome a listing that does not show the need's
/// instances is taken to mean none were launched (EC2's describe calls are eventually
/// consistent: a listing asked for at once may miss an instance just launched).
pub const UNSETTLED_LAG: core::Duration = core::Duration::from_secs(5);

/// How long a launch of unknown outcome holds its job back when no listing settles it.
const UNSETTLED_AT_MOST: core::Duration = core::Duration::from_secs(60);

/// How long a launch error counts towards a pool's `LaunchHealthy` condition.
pub const LAUNCH_ERROR_MEMORY: core::Duration = core::Duration::from_secs(900);

/// A launch that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchError {
    pub at: Time,
    /// `capacity`, `throttled`, `refused` or `other`.
    pub kind: &'static str,
    /// `instance type capacity-type zone`.
    pub offering: String,
    pub message: String,
}

/// Recent launches of one pool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchHealth {
    /// Failures of the last [`LAUNCH_ERROR_MEMORY`], oldest first.
    pub errors: Vec<LaunchError>,
    pub last_success: Option<Time>,
}

/// The operator's view of the cloud, shared by the loop and the poller.
pub struct Cloud {
    pub config: CloudConfig,
    providers: Mutex<HashMap<String, Arc<dyn CloudProvider>>>,
    /// The interruption queues' readers, by region.
    queues: Mutex<HashMap<String, Arc<dyn spillway_cloud::notices::NoticeQueue>>>,
    state: Mutex<State>,
}

/// A copy of the cloud facts for one turn.
#[derive(Clone, Debug, Default)]
pub struct CloudView {
    pub instances: Vec<CloudInstance>,
    /// Launches under way, by need.
    pub launching: HashMap<String, core::Launch>,
    pub cooldowns: HashMap<OfferingKey, Time>,
    /// Every region of a cloud pool has been listed at least once.
    pub complete: bool,
    /// When the last listing of each region was asked for.
    pub listed_at: HashMap<String, Time>,
    /// Instances being terminated: their nodes take no new work.
    pub terminating: HashSet<String>,
    /// Instance-type facts and spot prices per region.
    pub facts: HashMap<String, RegionFacts>,
    pub spot: SpotHistory,
    /// The region each listed instance is in.
    pub regions: HashMap<String, String>,
    /// Recent launch outcomes per pool.
    pub health: HashMap<String, LaunchHealth>,
    /// Messages of the interruption queues received and not deleted yet, by id.
    pub notices: Vec<notices::PendingMessage>,
    /// Instances of this cluster the notices name that no listing shows any more.
    pub gone: HashSet<String>,
    /// Cluster placement groups made or listed.
    pub placement_groups: Vec<placement::GroupView>,
}

impl Cloud {
    pub fn new(config: CloudConfig) -> Arc<Cloud> {
        Arc::new(Cloud {
            config,
            providers: Mutex::default(),
            queues: Mutex::default(),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub async fn provider(&self, region: &str) -> Arc<dyn CloudProvider> {
        if let Some(p) = self
            .providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(region)
        {
            return p.clone();
        }
        let p = (self.config.factory)(region.to_string()).await;
        self.providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(region.to_string())
            .or_insert(p)
            .clone()
    }

    /// The instance types of the catalog each region's pools may launch, and their images.
    pub fn wanted(&self, pools: &[Arc<ComputePool>]) -> BTreeMap<String, Wanted> {
        let mut out: BTreeMap<String, Wanted> = BTreeMap::new();
        for p in pools {
            let Some(aws) = &p.spec.aws else { continue };
            let wanted = out.entry(aws.region.clone()).or_default();
            for o in core::catalog::offerings(
                &self.config.catalog,
                &p.name_any(),
                &aws.region,
                &aws.instance_types,
            ) {
                wanted.types.insert(o.instance_type);
            }
            wanted.images.extend(aws.ami_id.iter().cloned());
        }
        out
    }

    /// Lists the instances of the pools' regions, replacing what was known of them, and reads
    /// instance-type facts and spot prices again when they are old or new types are wanted.
    /// Returns the spot instances that went away without Spillway terminating them
    /// (interruptions), which are also remembered per offering.
    pub async fn refresh(&self, pools: &[Arc<ComputePool>]) -> Vec<CloudInstance> {
        let mut interrupted = Vec::new();
        let wanted = self.wanted(pools);
        {
            // A launch of unknown outcome in a region no pool uses any more, or that no
            // listing settled in a minute (EC2 answering no listing meanwhile), stops holding
            // its job back: the need is planned again (a launch looks its instances up by
            // tag first, and the collector takes any that nothing wants).
            let now = crate::clock::now();
            self.state().unsettled.retain(|_, (r, _, failed)| {
                wanted.contains_key(r.as_str()) && now.since(*failed) < UNSETTLED_AT_MOST
            });
        }
        for (region, types) in wanted {
            let provider = self.provider(&region).await;
            let now = crate::clock::now();
            match provider.instances(&self.config.cluster).await {
                Ok(list) => {
                    let mut st = self.state();
                    let listed: HashMap<&str, &CloudInstance> =
                        list.iter().map(|i| (i.id.as_str(), i)).collect();
                    let unlisted_launch = |id: &str, st: &State| {
                        !listed.contains_key(id)
                            && st
                                .launched
                                .get(id)
                                .is_some_and(|t| now.since(*t) < LISTING_LAG)
                    };
                    let lost: Vec<CloudInstance> = st
                        .instances
                        .values()
                        .filter(|(r, i)| {
                            *r == region
                                && i.capacity_type == CapacityType::Spot
                                && !i.state.is_gone()
                                && !st.terminating.contains(&i.id)
                                && !unlisted_launch(&i.id, &st)
                                && listed.get(i.id.as_str()).is_none_or(|n| n.state.is_gone())
                        })
                        .map(|(_, i)| i.clone())
                        .collect();
                    for i in &lost {
                        tracing::warn!(instance = %i.id, pool = %i.pool, instance_type = %i.instance_type, zone = %i.zone, "spot instance interrupted");
                    }
                    // A warned instance was counted when the warning came.
                    let lost: Vec<CloudInstance> = lost
                        .into_iter()
                        .filter(|i| !st.notices.warned.contains(&i.id))
                        .collect();
                    for i in &lost {
                        st.spot.record(&i.pool, &i.instance_type, &i.zone, now);
                    }
                    st.spot.forget(now);
                    interrupted.extend(lost);
                    let kept: Vec<(String, (String, CloudInstance))> = st
                        .instances
                        .iter()
                        .filter(|(id, (r, _))| *r == region && unlisted_launch(id, &st))
                        .map(|(id, v)| (id.clone(), v.clone()))
                        .collect();
                    // A launch's instance no listing showed in a minute is gone: should EC2
                    // answer its token with it again, the token is spent (a restarted operator
                    // has not terminated it itself).
                    let never_listed: Vec<String> = st
                        .launched
                        .iter()
                        .filter(|(id, t)| {
                            now.since(**t) >= LISTING_LAG
                                && !listed.contains_key(id.as_str())
                                && st
                                    .instances
                                    .get(id.as_str())
                                    .is_some_and(|(r, _)| *r == region)
                        })
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in never_listed {
                        st.retired.insert(id, now);
                    }
                    st.launched.retain(|id, t| {
                        now.since(*t) < LISTING_LAG && !listed.contains_key(id.as_str())
                    });
                    // A launch of unknown outcome is settled by a listing that shows the
                    // need's instances (they count from now on as instances) or by one asked
                    // for long enough after it failed that it would show them (none then).
                    let shown: HashSet<&str> = list.iter().map(|i| i.need.as_str()).collect();
                    st.unsettled.retain(|need, (r, _, failed)| {
                        *r != region
                            || !(shown.contains(need.as_str())
                                || now.since(*failed) >= UNSETTLED_LAG)
                    });
                    tracing::debug!(
                        region = %region,
                        listed = ?listed.keys().collect::<Vec<_>>(),
                        kept = ?kept.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                        "instances listed"
                    );
                    st.instances.retain(|_, (r, _)| *r != region);
                    st.instances.extend(kept);
                    for i in list {
                        st.instances.insert(i.id.clone(), (region.clone(), i));
                    }
                    let live: HashSet<String> = st.instances.keys().cloned().collect();
                    st.terminating.retain(|id| live.contains(id));
                    st.refreshed.insert(region.clone(), now);
                }
                Err(e) => {
                    tracing::warn!(region = %region, error = %e, "cannot list cloud instances")
                }
            }
            let stale = {
                let st = self.state();
                st.facts.get(&region).is_none_or(|f| {
                    f.asked != types || f.at.is_none_or(|at| now.since(at) >= FACTS_EVERY)
                })
            };
            if stale && !(types.types.is_empty() && types.images.is_empty()) {
                self.refresh_facts(&region, types, provider.as_ref(), now)
                    .await;
            }
            self.list_groups(&region, provider.as_ref(), now).await;
        }
        interrupted
    }

    /// Reads instance-type facts, spot prices and the pools' images of one region. A failed
    /// call keeps what was known (or the catalog alone) and is tried again in [`FACTS_EVERY`].
    async fn refresh_facts(
        &self,
        region: &str,
        types: Wanted,
        provider: &dyn CloudProvider,
        now: Time,
    ) {
        let list: Vec<String> = types.types.iter().cloned().collect();
        let described = provider.instance_types(&list).await;
        let priced = provider.spot_prices(&list).await;
        let mut images = Vec::new();
        for ami in &types.images {
            images.push((ami.clone(), provider.image(ami).await));
        }
        let mut st = self.state();
        let entry = st.facts.entry(region.to_string()).or_default();
        // Each read stands alone: what failed keeps its earlier answer (or the catalog) until
        // the next round, so a missing permission costs a warning per round, not per listing.
        match described {
            Ok(described) => {
                entry.facts.types = described
                    .into_iter()
                    .map(|t| (t.instance_type.clone(), t))
                    .collect()
            }
            Err(e) => {
                tracing::warn!(region, error = %e, "cannot describe instance types; using the catalog's GPU figures")
            }
        }
        match priced {
            Ok(priced) => entry.facts.spot = priced,
            Err(e) => {
                tracing::warn!(region, error = %e, "cannot read spot prices; using the catalog's")
            }
        }
        for (ami, read) in images {
            match read {
                Ok(Some(info)) => {
                    entry.facts.images.insert(ami, info);
                }
                Ok(None) => {
                    tracing::warn!(region, image = %ami, "the image is not known to the cloud; its pool promises only its aws.environment");
                    entry.facts.images.remove(&ami);
                }
                Err(e) => {
                    tracing::warn!(region, image = %ami, error = %e, "cannot describe the image; keeping what its tags said before")
                }
            }
        }
        entry
            .facts
            .images
            .retain(|ami, _| types.images.contains(ami));
        entry.asked = types;
        entry.at = Some(now);
    }

    pub fn view(&self, regions: &BTreeSet<String>) -> CloudView {
        let st = self.state();
        CloudView {
            instances: st
                .instances
                .values()
                .filter(|(_, i)| !i.state.is_gone())
                .map(|(_, i)| i.clone())
                .collect(),
            launching: st
                .launching
                .iter()
                .chain(st.unsettled.iter().map(|(need, (_, l, _))| (need, l)))
                .map(|(need, l)| (need.clone(), l.clone()))
                .collect(),
            cooldowns: st.cooldowns.clone(),
            complete: regions.iter().all(|r| st.refreshed.contains_key(r)),
            listed_at: st.refreshed.clone(),
            terminating: st.terminating.clone(),
            facts: st
                .facts
                .iter()
                .map(|(r, f)| (r.clone(), f.facts.clone()))
                .collect(),
            spot: st.spot.clone(),
            regions: st
                .instances
                .iter()
                .map(|(id, (r, _))| (id.clone(), r.clone()))
                .collect(),
            health: st.health.clone(),
            notices: st.notices.pending.values().cloned().collect(),
            gone: st.notices.gone.clone(),
            placement_groups: Cloud::group_views(&st),
        }
    }

    /// The GPU model of an instance type: the provider's word, else the catalog's.
    pub fn gpu_model(&self, instance_type: &str) -> String {
        let st = self.state();
        let provider = st
            .facts
            .values()
            .find_map(|f| f.facts.types.get(instance_type))
            .filter(|t| t.gpus > 0);
        match provider {
            Some(t) => core::GpuModel::from_provider(&t.gpu_model, t.gpu_memory_mib)
                .as_str()
                .to_string(),
            None => self
                .config
                .catalog_row(instance_type, "")
                .map(|r| r.gpu_model.as_str().to_string())
                .unwrap_or_default(),
        }
    }

    /// Launches one need unless it already has instances (looked up by tag first, so a
    /// restarted operator adopts what it launched before). Returns what to tell the user.
    pub async fn launch(
        self: &Arc<Self>,
        pool: &ComputePool,
        launch: &core::Launch,
        user_data: Option<String>,
        changed: &Notify,
    ) -> Result<Vec<CloudInstance>, CloudError> {
        let Some(aws) = &pool.spec.aws else {
            return Err(CloudError::Refused {
                code: "NotACloudPool".into(),
                message: format!("ComputePool {} has no aws section", pool.name_any()),
            });
        };
        let provider = self.provider(&aws.region).await;
        // Catalog zones are often zone ids (`use1-az1`), which RunInstances cannot take: only
        // a zone name of the pool's region pins the launch. Unpinned, a failure says nothing
        // about one zone, so it cools every zone of the offering down.
        let zone = Some(launch.offering.zone.clone())
            .filter(|z| z.starts_with(&aws.region))
            .filter(|z| aws.availability_zones.is_empty() || aws.availability_zones.contains(z))
            .filter(|_| aws.subnet_ids.is_empty());
        // Whether RunInstances was sent: the errors before it (the lookup, the placement
        // group) say nothing about a launch.
        let mut sent = false;
        let result = async {
            let existing = provider
                .instances_for_need(&self.config.cluster, &launch.need)
                .await?;
            if !existing.is_empty() {
                tracing::info!(need = %launch.need, count = existing.len(), "need already has instances; adopting them");
                return Ok(existing);
            }
            let image = match (&aws.ami_id, &aws.launch_template) {
                (Some(ami), _) => Image::Ami(ami.clone()),
                (None, Some(t)) => Image::LaunchTemplate {
                    id: t.id.clone(),
                    name: t.name.clone(),
                    version: t.version.clone(),
                },
                (None, None) => {
                    return Err(CloudError::Refused {
                        code: "NoImage".into(),
                        message: "the pool names neither amiId nor launchTemplate".into(),
                    });
                }
            };
            let mut request = LaunchRequest {
                cluster: self.config.cluster.clone(),
                pool: pool.name_any(),
                job: launch.job.clone(),
                queue: launch.queue.clone(),
                need: launch.need.clone(),
                instance_type: launch.offering.instance_type.clone(),
                capacity_type: launch.offering.capacity_type,
                zone: zone.clone(),
                count: launch.count.max(1),
                image,
                subnet_ids: aws.subnet_ids.clone(),
                security_group_ids: aws.security_group_ids.clone(),
                iam_instance_profile: aws.iam_instance_profile.clone(),
                tags: aws.tags.clone(),
                user_data,
                token_generation: self.state().token_generation.get(&launch.need).copied().unwrap_or(0),
                placement_group: None,
                efa: false,
            };
            self.arrange(aws, launch, &mut request);
            self.make_group(provider.as_ref(), &aws.region, &request).await?;
            sent = true;
            let launched = provider.launch(&request).await;
            if launched.as_ref().is_err_and(|e| !launch_may_have_acted(e)) {
                self.drop_group(provider.as_ref(), &request).await;
            }
            launched
        }
        .await;
        let now = crate::clock::now();
        // EC2 answers a token it has seen with that launch's instances, even once they are
        // gone: a need launched again after its instances were terminated (by the collector,
        // or idle) would get them back, dead, and wait for them; and it refuses the token
        // outright (`IdempotentParameterMismatch`) when the need is launched again otherwise
        // (another offering, new user data). Either answer spends the token; the need's next
        // launch asks under a new one. A refused token was used by a launch whose instances the
        // lookup above did not show: they may be too new for EC2's listings yet.
        let refused_token = matches!(&result, Err(CloudError::Refused { code, .. }) if code == "IdempotentParameterMismatch");
        let spent = match &result {
            Ok(list) => {
                let st = self.state();
                list.iter()
                    .any(|i| i.state.is_gone() || st.retired.contains_key(&i.id))
            }
            Err(CloudError::Refused { code, .. }) => code == "IdempotentParameterMismatch",
            Err(_) => false,
        };
        let result = if spent {
            let mut st = self.state();
            let generation = st.token_generation.entry(launch.need.clone()).or_insert(0);
            *generation += 1;
            let why = if refused_token {
                "by a launch with other parameters, whose instances may not be listed yet"
            } else {
                "by instances that are gone since"
            };
            tracing::warn!(need = %launch.need, generation = *generation, "the launch's idempotency token was used {why}; launching under a new token next");
            Err(CloudError::Other(format!(
                "the launch's idempotency token was used {why}; need {} is launched again under a new token",
                launch.need
            )))
        } else {
            result
        };
        {
            let mut st = self.state();
            st.launching.remove(&launch.need);
            let pool_name = pool.name_any();
            let health = st.health.entry(pool_name).or_default();
            health
                .errors
                .retain(|e| now.since(e.at) < LAUNCH_ERROR_MEMORY);
            match &result {
                Ok(_) => health.last_success = Some(now),
                // Not the pool's failure.
                Err(_) if spent => {}
                Err(e) => {
                    let o = &launch.offering;
                    health.errors.push(LaunchError {
                        at: now,
                        kind: e.kind(),
                        offering: format!(
                            "{} {} {}",
                            o.instance_type,
                            o.capacity_type.as_str(),
                            zone.as_deref().unwrap_or("(any zone)")
                        ),
                        message: e.to_string(),
                    });
                    let len = health.errors.len();
                    if len > 20 {
                        health.errors.drain(..len - 20);
                    }
                }
            }
            match &result {
                // A spent token: EC2 did nothing new, and the offering is fine.
                Err(_) if spent && !refused_token => {}
                Err(e) if refused_token || (sent && launch_may_have_acted(e)) => {
                    tracing::warn!(need = %launch.need, error = %e, "launch outcome unknown; counted as launching until a listing shows what EC2 did");
                    st.unsettled.insert(
                        launch.need.clone(),
                        (aws.region.clone(), launch.clone(), now),
                    );
                }
                Err(_) => {}
                Ok(_) => {
                    st.unsettled.remove(&launch.need);
                }
            }
            match &result {
                Ok(instances) => {
                    for i in instances {
                        st.instances
                            .insert(i.id.clone(), (aws.region.clone(), i.clone()));
                        st.launched.insert(i.id.clone(), now);
                    }
                }
                Err(_) if spent => {}
                // Any failure cools the offering down, so a refused request (bad AMI, missing
                // permission) is not repeated every cycle; the next cycle picks another one.
                Err(_) => {
                    let o = &launch.offering;
                    let cooled_zone = zone.clone().unwrap_or_else(|| ANY_ZONE.to_string());
                    st.cooldowns.insert(
                        (
                            o.pool.clone(),
                            o.instance_type.clone(),
                            o.capacity_type,
                            cooled_zone,
                        ),
                        now + core::Duration::from_secs(self.config.capacity_cooldown.as_secs()),
                    );
                }
            }
        }
        changed.notify_one();
        result
    }

    /// Marks a need as launching; false if it already is, or if its last launch's outcome is
    /// not known yet (a listing will tell).
    pub fn start_launch(&self, launch: &core::Launch) -> bool {
        let mut st = self.state();
        if st.launching.contains_key(&launch.need) || st.unsettled.contains_key(&launch.need) {
            return false;
        }
        st.launching.insert(launch.need.clone(), launch.clone());
        true
    }

    /// Forgets a launch that will not happen.
    pub fn cancel_launch(&self, need: &str) {
        self.state().launching.remove(need);
    }

    /// Marks an instance as being terminated; false if it already is.
    pub fn start_terminate(&self, id: &str) -> bool {
        self.state().terminating.insert(id.to_string())
    }

    /// Forgets a termination that will not happen (now).
    pub fn cancel_terminate(&self, id: &str) {
        self.state().terminating.remove(id);
    }

    /// Terminates instances of `region` and forgets them.
    pub async fn terminate(&self, region: &str, ids: &[String]) -> Result<(), CloudError> {
        let provider = self.provider(region).await;
        let r = provider.terminate(ids).await;
        let mut st = self.state();
        match &r {
            Ok(()) => {
                let now = crate::clock::now();
                st.retired
                    .retain(|_, t| now.since(*t) < core::Duration::from_secs(3600));
                for id in ids {
                    st.instances.remove(id);
                    st.retired.insert(id.clone(), now);
                }
            }
            Err(_) => {
                for id in ids {
                    st.terminating.remove(id);
                }
            }
        }
        r
    }

    /// The region an instance was listed in.
    pub fn region_of(&self, id: &str) -> Option<String> {
        self.state().instances.get(id).map(|(r, _)| r.clone())
    }
}

/// Polls the cloud pools' regions every `poll`, notifying `changed` after each listing.
pub async fn poll(
    cloud: Arc<Cloud>,
    pools: impl Fn() -> Vec<Arc<ComputePool>>,
    metrics: Arc<crate::metrics::Metrics>,
    changed: Arc<Notify>,
) {
    loop {
        let ps = pools();
        if ps.iter().any(|p| p.spec.aws.is_some()) {
            for i in cloud.refresh(&ps).await {
                metrics.spot_interrupted(&i.pool, &i.instance_type);
            }
            changed.notify_one();
        }
        tokio::time::sleep(cloud.config.poll).await;
    }
}
