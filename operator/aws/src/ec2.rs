//! [`CloudProvider`] on EC2 through `aws-sdk-ec2` and the standard AWS configuration chain
//! (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL_EC2`).

use std::future::Future;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::RequestId;
use aws_sdk_ec2::types::{
    Filter, IamInstanceProfileSpecification, InstanceMarketOptionsRequest,
    InstanceNetworkInterfaceSpecification, InstanceStateName, InstanceType,
    LaunchTemplateSpecification, MarketType, Placement, PlacementGroupState, PlacementStrategy,
    ResourceType, Tag, TagSpecification,
};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use spillway_cloud::{
    BoxFuture, CallPolicy, CloudError, CloudInstance, CloudProvider, Image, ImageInfo,
    InstanceState, InstanceTypeInfo, LaunchRequest, PlacementGroup, SpotPrice, tags,
};
use spillway_core::{CapacityType, Time};

/// EC2 in one region.
#[derive(Clone, Debug)]
pub struct Ec2Provider {
    client: Client,
    policy: CallPolicy,
}

impl Ec2Provider {
    /// A provider on `client`, whose retries are set to `policy` (the SDK's standard
    /// strategy: the one retry layer of every call).
    pub fn new(client: Client, policy: CallPolicy) -> Ec2Provider {
        let retry = aws_config::retry::RetryConfig::standard()
            .with_max_attempts(policy.attempts.max(1))
            .with_initial_backoff(policy.initial_backoff)
            .with_max_backoff(policy.max_backoff);
        let config = client.config().to_builder().retry_config(retry).build();
        Ec2Provider {
            client: Client::from_conf(config),
            policy,
        }
    }

    /// A provider for `region` from the standard AWS configuration chain.
    pub async fn from_env(region: &str, policy: CallPolicy) -> Ec2Provider {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_string()))
            .load()
            .await;
        Ec2Provider::new(Client::new(&config), policy)
    }

    /// Runs `call` (one SDK operation, its retries inside the SDK) within the policy's
    /// timeout. The call is a span (`ec2.<Call>`, kind client) with the request id EC2 gave
    /// and, when it failed, the error's class: exported with the operator's traces, as a child
    /// of whatever span the caller is in (a job's provisioning).
    async fn call<T, F, Fut>(&self, what: &'static str, call: F) -> Result<T, CloudError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "ec2",
            otel.name = format!("ec2.{what}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            rpc.system = "aws-api",
            rpc.service = "EC2",
            rpc.method = what,
            aws.request_id = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = match tokio::time::timeout(
            self.policy.timeout,
            call().instrument(span.clone()),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(CloudError::Other(format!(
                "{what} timed out after {:?}",
                self.policy.timeout
            ))),
        };
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.kind());
        }
        result
    }

    async fn describe(&self, filters: Vec<Filter>) -> Result<Vec<CloudInstance>, CloudError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("DescribeInstances", || {
                    let req = self
                        .client
                        .describe_instances()
                        .set_filters(Some(filters.clone()))
                        .set_next_token(token.clone());
                    async move { sent(req.send().await) }
                })
                .await?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                if let Some(ci) = to_cloud_instance(i) {
                    out.push(ci);
                }
            }
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
    }
}

/// An SDK call's answer, its request id recorded on the current span (the call's attempt).
fn sent<O, E>(r: Result<O, E>) -> Result<O, CloudError>
where
    O: RequestId,
    E: RequestId + ProvideErrorMetadata + std::fmt::Debug,
{
    let id = match &r {
        Ok(o) => o.request_id(),
        Err(e) => e.request_id(),
    };
    if let Some(id) = id {
        tracing::Span::current().record("aws.request_id", id);
    }
    r.map_err(sdk_error)
}

fn sdk_error<E: ProvideErrorMetadata + std::fmt::Debug>(e: E) -> CloudError {
    match e.code() {
        Some(code) => CloudError::from_code(code, e.message().unwrap_or_default()),
        None => CloudError::Other(format!("{e:?}")),
    }
}

fn tag_filter(key: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

fn live_states() -> Filter {
    Filter::builder()
        .name("instance-state-name")
        .values("pending")
        .values("running")
        .values("shutting-down")
        .values("stopping")
        .values("stopped")
        .build()
}

fn to_cloud_instance(i: &aws_sdk_ec2::types::Instance) -> Option<CloudInstance> {
    let tag = |k: &str| tag_value(i.tags(), k);
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Pending) => InstanceState::Pending,
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::ShuttingDown) => InstanceState::ShuttingDown,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        Some(InstanceStateName::Stopping) => InstanceState::Stopping,
        Some(InstanceStateName::Stopped) => InstanceState::Stopped,
        _ => InstanceState::Pending,
    };
    let spot = i.instance_lifecycle().is_some_and(|l| l.as_str() == "spot")
        || tag(tags::CAPACITY_TYPE) == "spot";
    Some(CloudInstance {
        id: i.instance_id()?.to_string(),
        pool: tag(tags::POOL),
        job: tag(tags::JOB),
        queue: tag(tags::QUEUE),
        need: tag(tags::NEED),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        capacity_type: if spot {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        },
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        state,
        launched_at: i
            .launch_time()
            .map(|t| Time::from_millis(t.to_millis().unwrap_or(0)))
            .unwrap_or(Time::from_millis(0)),
        placement_group: Some(tag(tags::PLACEMENT_GROUP))
            .filter(|g| !g.is_empty())
            .or_else(|| i.placement()?.group_name().map(str::to_string))
            .unwrap_or_default(),
    })
}

/// The value of tag `key` among `tags` (empty when it is missing).
fn tag_value(tags: &[Tag], key: &str) -> String {
    tags.iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
        .unwrap_or_default()
        .to_string()
}

/// The tags Spillway puts on what it makes for one launch (instances, placement groups).
fn launch_tags(r: &LaunchRequest) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> =
        r.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    all.extend([
        (tags::CLUSTER.to_string(), r.cluster.clone()),
        (tags::POOL.to_string(), r.pool.clone()),
        (tags::JOB.to_string(), r.job.clone()),
        (tags::QUEUE.to_string(), r.queue.clone()),
        (tags::NEED.to_string(), r.need.clone()),
    ]);
    all
}

fn tag_specification(kind: ResourceType, tags: &[(String, String)]) -> TagSpecification {
    let mut spec = TagSpecification::builder().resource_type(kind);
    for (k, v) in tags {
        spec = spec.tags(Tag::builder().key(k).value(v).build());
    }
    spec.build()
}

impl CloudProvider for Ec2Provider {
    fn instances<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(self.describe(vec![tag_filter(tags::CLUSTER, cluster), live_states()]))
    }

    fn owned<'a>(
        &'a self,
        cluster: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<String>, CloudError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            // A filter, not InstanceIds: an id EC2 does not know is no error, just not ours.
            let by_id = Filter::builder()
                .name("instance-id")
                .set_values(Some(ids.to_vec()))
                .build();
            let found = self
                .describe(vec![tag_filter(tags::CLUSTER, cluster), by_id])
                .await?;
            Ok(found.into_iter().map(|i| i.id).collect())
        })
    }

    fn instances_for_need<'a>(
        &'a self,
        cluster: &'a str,
        need: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(self.describe(vec![
            tag_filter(tags::CLUSTER, cluster),
            tag_filter(tags::NEED, need),
            live_states(),
        ]))
    }

    fn launch<'a>(
        &'a self,
        r: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move {
            let mut all_tags = launch_tags(r);
            all_tags.extend([
                (
                    tags::CAPACITY_TYPE.to_string(),
                    r.capacity_type.as_str().to_string(),
                ),
                ("Name".to_string(), format!("spillway-{}", r.pool)),
            ]);
            if let Some(group) = &r.placement_group {
                all_tags.push((tags::PLACEMENT_GROUP.to_string(), group.clone()));
            }
            let tag_spec = tag_specification(ResourceType::Instance, &all_tags);
            let token = r.client_token();
            let launched = self
                .call("RunInstances", || {
                    let mut req = self
                        .client
                        .run_instances()
                        .instance_type(InstanceType::from(r.instance_type.as_str()))
                        .min_count(r.count as i32)
                        .max_count(r.count as i32)
                        .client_token(&token)
                        .tag_specifications(tag_spec.clone());
                    req = match &r.image {
                        Image::Ami(ami) => req.image_id(ami),
                        Image::LaunchTemplate { id, name, version } => req.launch_template(
                            LaunchTemplateSpecification::builder()
                                .set_launch_template_id(id.clone())
                                .set_launch_template_name(name.clone())
                                .set_version(version.clone())
                                .build(),
                        ),
                    };
                    // Spread needs over the subnets (and so over their zones). One request, one
                    // subnet: a gang's instances share a zone.
                    let subnet = (!r.subnet_ids.is_empty()).then(|| {
                        let i = token.bytes().map(usize::from).sum::<usize>() % r.subnet_ids.len();
                        r.subnet_ids[i].clone()
                    });
                    let groups =
                        (!r.security_group_ids.is_empty()).then(|| r.security_group_ids.clone());
                    if r.efa {
                        // The interface carries the subnet and security groups (EC2 refuses
                        // them beside a network interface).
                        req = req.network_interfaces(
                            InstanceNetworkInterfaceSpecification::builder()
                                .device_index(0)
                                .interface_type("efa")
                                .delete_on_termination(true)
                                .set_subnet_id(subnet.clone())
                                .set_groups(groups)
                                .build(),
                        );
                    } else {
                        req = req
                            .set_subnet_id(subnet.clone())
                            .set_security_group_ids(groups);
                    }
                    let zone = r.zone.as_ref().filter(|_| subnet.is_none());
                    if zone.is_some() || r.placement_group.is_some() {
                        req = req.placement(
                            Placement::builder()
                                .set_availability_zone(zone.cloned())
                                .set_group_name(r.placement_group.clone())
                                .build(),
                        );
                    }
                    if let Some(profile) = &r.iam_instance_profile {
                        let spec = if profile.starts_with("arn:") {
                            IamInstanceProfileSpecification::builder().arn(profile)
                        } else {
                            IamInstanceProfileSpecification::builder().name(profile)
                        };
                        req = req.iam_instance_profile(spec.build());
                    }
                    if r.capacity_type == CapacityType::Spot {
                        req = req.instance_market_options(
                            InstanceMarketOptionsRequest::builder()
                                .market_type(MarketType::Spot)
                                .build(),
                        );
                    }
                    if let Some(data) = &r.user_data {
                        req = req.user_data(BASE64.encode(data.as_bytes()));
                    }
                    async move { sent(req.send().await) }
                })
                .await?;
            Ok(launched
                .instances()
                .iter()
                .filter_map(to_cloud_instance)
                .collect())
        })
    }

    fn terminate<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            let r = self
                .call("TerminateInstances", || {
                    let req = self
                        .client
                        .terminate_instances()
                        .set_instance_ids(Some(ids.to_vec()));
                    async move { sent(req.send().await) }
                })
                .await;
            match r {
                Ok(_) => Ok(()),
                // Already gone.
                Err(CloudError::Refused { code, .. }) if code == "InvalidInstanceID.NotFound" => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    }

    fn instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceTypeInfo>, CloudError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            // The `instance-type` filter (unlike the InstanceTypes parameter) leaves unknown
            // names out instead of failing the whole call.
            for chunk in types.chunks(100) {
                let filter = Filter::builder()
                    .name("instance-type")
                    .set_values(Some(chunk.to_vec()))
                    .build();
                let mut token: Option<String> = None;
                loop {
                    let page = self
                        .call("DescribeInstanceTypes", || {
                            let req = self
                                .client
                                .describe_instance_types()
                                .filters(filter.clone())
                                .set_next_token(token.clone());
                            async move { sent(req.send().await) }
                        })
                        .await?;
                    out.extend(page.instance_types().iter().filter_map(to_type_info));
                    token = page.next_token().map(str::to_string);
                    if token.is_none() {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    fn spot_prices<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<SpotPrice>, CloudError>> {
        Box::pin(async move {
            let mut out: Vec<SpotPrice> = Vec::new();
            if types.is_empty() {
                return Ok(out);
            }
            // A start time of now asks for the price in force now, per type and zone.
            let now = aws_sdk_ec2::primitives::DateTime::from(std::time::SystemTime::now());
            let mut token: Option<String> = None;
            loop {
                let page = self
                    .call("DescribeSpotPriceHistory", || {
                        let req = self
                            .client
                            .describe_spot_price_history()
                            .set_instance_types(Some(
                                types
                                    .iter()
                                    .map(|t| InstanceType::from(t.as_str()))
                                    .collect(),
                            ))
                            .product_descriptions("Linux/UNIX")
                            .start_time(now)
                            .set_next_token(token.clone());
                        async move { sent(req.send().await) }
                    })
                    .await?;
                for p in page.spot_price_history() {
                    let (Some(t), Some(zone), Some(price)) = (
                        p.instance_type(),
                        p.availability_zone(),
                        p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                    ) else {
                        continue;
                    };
                    let at = p
                        .timestamp()
                        .and_then(|t| t.to_millis().ok())
                        .map(Time::from_millis)
                        .unwrap_or(Time::from_millis(0));
                    let price = SpotPrice {
                        instance_type: t.as_str().to_string(),
                        zone: zone.to_string(),
                        hourly_price: price,
                        at,
                    };
                    // Keep the newest price of each type and zone.
                    match out
                        .iter_mut()
                        .find(|o| o.instance_type == price.instance_type && o.zone == price.zone)
                    {
                        Some(o) if o.at < price.at => *o = price,
                        Some(_) => {}
                        None => out.push(price),
                    }
                }
                token = page
                    .next_token()
                    .filter(|t| !t.is_empty())
                    .map(str::to_string);
                if token.is_none() {
                    return Ok(out);
                }
            }
        })
    }

    fn create_placement_group<'a>(
        &'a self,
        r: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            let Some(name) = &r.placement_group else {
                return Ok(());
            };
            let spec = tag_specification(ResourceType::PlacementGroup, &launch_tags(r));
            let made = self
                .call("CreatePlacementGroup", || {
                    let req = self
                        .client
                        .create_placement_group()
                        .group_name(name)
                        .strategy(PlacementStrategy::Cluster)
                        .tag_specifications(spec.clone());
                    async move { sent(req.send().await) }
                })
                .await;
            match made {
                // Made by an earlier try of this launch.
                Err(CloudError::Refused { code, .. })
                    if code == "InvalidPlacementGroup.Duplicate" =>
                {
                    Ok(())
                }
                r => r.map(|_| ()),
            }
        })
    }

    fn placement_groups<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<PlacementGroup>, CloudError>> {
        Box::pin(async move {
            let page = self
                .call("DescribePlacementGroups", || {
                    let req = self
                        .client
                        .describe_placement_groups()
                        .filters(tag_filter(tags::CLUSTER, cluster));
                    async move { sent(req.send().await) }
                })
                .await?;
            Ok(page
                .placement_groups()
                .iter()
                .filter_map(|g| {
                    let tag = |k: &str| tag_value(g.tags(), k);
                    Some(PlacementGroup {
                        name: g.group_name()?.to_string(),
                        need: tag(tags::NEED),
                        pool: tag(tags::POOL),
                        gone: matches!(
                            g.state(),
                            Some(PlacementGroupState::Deleting | PlacementGroupState::Deleted)
                        ),
                    })
                })
                .collect())
        })
    }

    fn delete_placement_group<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            let r = self
                .call("DeletePlacementGroup", || {
                    let req = self.client.delete_placement_group().group_name(name);
                    async move { sent(req.send().await) }
                })
                .await;
            match r {
                // Already gone.
                Err(CloudError::Refused { code, .. })
                    if code == "InvalidPlacementGroup.Unknown" =>
                {
                    Ok(())
                }
                r => r.map(|_| ()),
            }
        })
    }

    fn image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<ImageInfo>, CloudError>> {
        Box::pin(async move {
            let r = self
                .call("DescribeImages", || {
                    let req = self.client.describe_images().image_ids(id);
                    async move { sent(req.send().await) }
                })
                .await;
            match r {
                Ok(page) => Ok(page.images().iter().find_map(to_image_info)),
                // Gone, or never an image id: nothing to read.
                Err(CloudError::Refused { code, .. })
                    if code == "InvalidAMIID.NotFound"
                        || code == "InvalidAMIID.Unavailable"
                        || code == "InvalidAMIID.Malformed" =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
    }
}

/// One DescribeImages answer, as the image's tags.
fn to_image_info(i: &aws_sdk_ec2::types::Image) -> Option<ImageInfo> {
    Some(ImageInfo {
        id: i.image_id()?.to_string(),
        tags: i
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_string(),
                    t.value().unwrap_or_default().to_string(),
                ))
            })
            .collect(),
    })
}

/// One DescribeInstanceTypes answer, as facts.
fn to_type_info(t: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
    let name = t.instance_type()?.as_str().to_string();
    let gpus = t.gpu_info().map(|g| g.gpus()).unwrap_or_default();
    let first = gpus.first();
    Some(InstanceTypeInfo {
        instance_type: name,
        gpus: gpus
            .iter()
            .map(|g| g.count().unwrap_or(0).max(0) as u32)
            .sum(),
        gpu_model: first.and_then(|g| g.name()).unwrap_or_default().to_string(),
        gpu_memory_mib: first
            .and_then(|g| g.memory_info())
            .and_then(|m| m.size_in_mib())
            .unwrap_or(0)
            .max(0) as u64,
        efa_supported: t.network_info().and_then(|n| n.efa_supported()),
    })
}
