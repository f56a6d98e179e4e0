//! The cloud side's failure paths, with an in-memory provider (the real EC2 path is tested
//! against moto in tests/tests/aws.rs).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway_api::ComputePool;
use spillway_cloud::{
    BoxFuture, CloudError, CloudInstance, CloudProvider, ImageInfo, InstanceState,
    InstanceTypeInfo, LaunchRequest, SpotPrice,
};
use spillway_core::{CapacityType, Launch, OfferingChoice, Time};
use spillway_k8s::cloud::{Cloud, CloudConfig, CloudView, DEFAULT_CATALOG, ProviderFactory};
use tokio::sync::Notify;

#[derive(Default)]
struct Fake {
    existing: Mutex<Vec<CloudInstance>>,
    fail_with: Option<CloudError>,
    launches: Mutex<Vec<LaunchRequest>>,
    types: Vec<InstanceTypeInfo>,
    spot: Vec<SpotPrice>,
    /// What `spot_prices` answers instead (a missing permission, say).
    spot_error: Option<CloudError>,
    fact_calls: AtomicU32,
    /// Each token's answer, given again when the token comes back (as EC2 does).
    tokens: Mutex<std::collections::HashMap<String, Vec<CloudInstance>>>,
    /// Machine images by id.
    images: Vec<ImageInfo>,
}

fn instance(id: &str, need: &str) -> CloudInstance {
    CloudInstance {
        id: id.into(),
        pool: "aws".into(),
        job: "ns/j".into(),
        queue: "q".into(),
        need: need.into(),
        instance_type: "g6.xlarge".into(),
        capacity_type: CapacityType::OnDemand,
        zone: "us-east-1a".into(),
        state: InstanceState::Running,
        launched_at: Time::from_millis(0),
        placement_group: String::new(),
    }
}

impl CloudProvider for Fake {
    fn instances<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move { Ok(self.existing.lock().unwrap().clone()) })
    }
    fn instances_for_need<'a>(
        &'a self,
        _: &'a str,
        need: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move {
            Ok(self
                .existing
                .lock()
                .unwrap()
                .iter()
                .filter(|i| i.need == need)
                .cloned()
                .collect())
        })
    }
    fn launch<'a>(
        &'a self,
        r: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move {
            self.launches.lock().unwrap().push(r.clone());
            if let Some(e) = &self.fail_with {
                return Err(e.clone());
            }
            let mut tokens = self.tokens.lock().unwrap();
            let made = tokens.len();
            let answer = tokens.entry(r.client_token()).or_insert_with(|| {
                let id = match made {
                    0 => "i-new".to_string(),
                    n => format!("i-new-{n}"),
                };
                vec![instance(&id, &r.need)]
            });
            Ok(answer.clone())
        })
    }
    fn terminate<'a>(&'a self, _: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async { Ok(()) })
    }
    fn instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceTypeInfo>, CloudError>> {
        Box::pin(async move {
            self.fact_calls.fetch_add(1, Ordering::SeqCst);
            Ok(self
                .types
                .iter()
                .filter(|t| types.contains(&t.instance_type))
                .cloned()
                .collect())
        })
    }
    fn image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<ImageInfo>, CloudError>> {
        Box::pin(async move { Ok(self.images.iter().find(|i| i.id == id).cloned()) })
    }
    fn spot_prices<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<SpotPrice>, CloudError>> {
        Box::pin(async move {
            if let Some(e) = &self.spot_error {
                return Err(e.clone());
            }
            Ok(self
                .spot
                .iter()
                .filter(|p| types.contains(&p.instance_type))
                .cloned()
                .collect())
        })
    }
}

fn cloud(fake: Arc<Fake>) -> Arc<Cloud> {
    let factory: ProviderFactory = Arc::new(move |_| {
        let f = fake.clone();
        Box::pin(async move { f as Arc<dyn CloudProvider> })
    });
    Cloud::new(CloudConfig {
        cluster: "c".into(),
        factory,
        catalog: spillway_core::catalog::parse(DEFAULT_CATALOG).unwrap(),
        poll: Duration::from_secs(1),
        join_timeout: Duration::from_secs(60),
        gc_grace: Duration::from_secs(60),
        capacity_cooldown: Duration::from_secs(300),
        join: None,
        notices: None,
    })
}

fn pool(capacity: &str) -> Arc<ComputePool> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "aws"},
            "spec": {"aws": {"region": "us-east-1", "amiId": "ami-1",
                             "instanceTypes": ["g6.xlarge"], "capacityTypes": [capacity]}},
        }))
        .unwrap(),
    )
}

fn launch(need: &str) -> Launch {
    Launch {
        job: "ns/j".into(),
        queue: "q".into(),
        need: need.into(),
        offering: OfferingChoice {
            pool: "aws".into(),
            instance_type: "g6.xlarge".into(),
            capacity_type: CapacityType::OnDemand,
            region: "us-east-1".into(),
            zone: "use1-az1".into(),
            hourly_price: 0.8048,
            gpus_per_instance: 1,
        },
        count: 1,
        together: false,
    }
}

#[tokio::test]
async fn a_need_with_instances_is_adopted_not_launched_again() {
    let fake = Arc::new(Fake {
        existing: Mutex::new(vec![instance("i-old", "ns/j#0")]),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let got = c
        .launch(&pool("on-demand"), &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap();
    assert_eq!(got[0].id, "i-old");
    assert!(
        fake.launches.lock().unwrap().is_empty(),
        "no RunInstances for an existing need"
    );
    assert!(c.start_launch(&launch("ns/j#1")));
    assert!(
        !c.start_launch(&launch("ns/j#1")),
        "one launch per need at a time"
    );
}

#[tokio::test]
async fn a_failed_launch_cools_the_offering_down() {
    let fake = Arc::new(Fake {
        fail_with: Some(CloudError::from_code(
            "InsufficientInstanceCapacity",
            "none left",
        )),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let err = c
        .launch(&pool("on-demand"), &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::Capacity { .. }));
    let r = &fake.launches.lock().unwrap()[0];
    assert_eq!(
        r.client_token(),
        spillway_cloud::client_token("c", "ns/j#0")
    );
    assert_eq!(
        r.zone, None,
        "a zone id from the catalog is not a placement zone name"
    );
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let view: CloudView = c.view(&regions);
    let now = spillway_k8s::clock::now();
    let offers = c.config.offerings(&[pool("on-demand")], &view, now);
    // The launch could not be pinned to a zone, so every zone of g6.xlarge on-demand cools.
    assert!(offers.len() > 1);
    assert!(
        offers
            .iter()
            .all(|o| o.unavailable_until.is_some_and(|t| t > now))
    );
    assert!(
        offers
            .iter()
            .all(|o| o.capacity_type == CapacityType::OnDemand),
        "pool capacity types"
    );
}

#[tokio::test]
async fn provider_facts_and_spot_interruptions_shape_the_offerings() {
    let mut spot = instance("i-spot", "ns/j#0");
    spot.capacity_type = CapacityType::Spot;
    let price = |zone: &str, p: f64| SpotPrice {
        instance_type: "g6.xlarge".into(),
        zone: zone.into(),
        hourly_price: p,
        at: Time::from_millis(0),
    };
    let fake = Arc::new(Fake {
        existing: Mutex::new(vec![spot.clone()]),
        types: vec![InstanceTypeInfo {
            instance_type: "g6.xlarge".into(),
            gpus: 1,
            gpu_model: "L4".into(),
            gpu_memory_mib: 22888,
            efa_supported: None,
        }],
        // moto's placeholder price in us-east-1b is not believed.
        spot: vec![price("us-east-1a", 0.35), price("us-east-1b", 0.00001)],
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = [pool("spot")];
    assert!(c.refresh(&pools).await.is_empty());
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let now = spillway_k8s::clock::now();
    let offers = c.config.offerings(&pools, &c.view(&regions), now);
    let got: Vec<(&str, f64, u32)> = offers
        .iter()
        .map(|o| (o.zone.as_str(), o.hourly_price, o.recent_interruptions))
        .collect();
    assert_eq!(got, vec![("us-east-1a", 0.35, 0)]);
    assert_eq!(offers[0].gpu_memory_gib, 22888.0 / 1024.0);
    assert_eq!(c.config.describe(&spot, &c.view(&regions)), (1, 0.35));

    // The spot instance vanishes without Spillway terminating it: an interruption.
    fake.existing.lock().unwrap().clear();
    let lost = c.refresh(&pools).await;
    assert_eq!(
        lost.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["i-spot"]
    );
    let offers = c.config.offerings(&pools, &c.view(&regions), now);
    assert_eq!(offers[0].recent_interruptions, 1);

    // One Spillway terminates is not.
    let mut mine = instance("i-mine", "ns/j#1");
    mine.capacity_type = CapacityType::Spot;
    fake.existing.lock().unwrap().push(mine);
    assert!(c.refresh(&pools).await.is_empty());
    assert!(c.start_terminate("i-mine"));
    c.terminate("us-east-1", &["i-mine".to_string()])
        .await
        .unwrap();
    fake.existing.lock().unwrap().clear();
    assert!(c.refresh(&pools).await.is_empty());
    assert_eq!(
        fake.fact_calls.load(Ordering::SeqCst),
        1,
        "facts are read once per FACTS_EVERY, not at every listing"
    );
}

#[tokio::test]
async fn a_failed_spot_price_read_keeps_the_other_facts_and_is_not_retried_every_listing() {
    let fake = Arc::new(Fake {
        types: vec![InstanceTypeInfo {
            instance_type: "g6.xlarge".into(),
            gpus: 1,
            gpu_model: "L4".into(),
            gpu_memory_mib: 22888,
            efa_supported: None,
        }],
        spot_error: Some(CloudError::from_code(
            "UnauthorizedOperation",
            "not allowed: ec2:DescribeSpotPriceHistory",
        )),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = [pool("spot")];
    for _ in 0..3 {
        c.refresh(&pools).await;
    }
    assert_eq!(fake.fact_calls.load(Ordering::SeqCst), 1);
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let offers = c
        .config
        .offerings(&pools, &c.view(&regions), spillway_k8s::clock::now());
    let mut prices: Vec<(String, f64)> = offers
        .iter()
        .map(|o| (o.zone.clone(), o.hourly_price))
        .collect();
    prices.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        prices,
        [
            ("use1-az1".to_string(), 0.4011),
            ("use1-az2".to_string(), 0.3653),
            ("use1-az4".to_string(), 0.349),
            ("use1-az6".to_string(), 0.3988),
        ],
        "the catalog's spot offerings stand"
    );
    assert!(
        offers.iter().all(|o| o.gpu_memory_gib == 22888.0 / 1024.0),
        "the instance-type facts still apply"
    );
}

/// A listing that does not show an instance our own launch just returned (asked for while it
/// was being launched, or EC2's describe lagging) keeps it in the view: it still counts against
/// the budget and is not taken for an interrupted spot instance. Found by the chaos suite's
/// EC2 storm, where listings answered 10 s late.
#[tokio::test]
async fn a_listing_that_misses_a_fresh_launch_does_not_make_it_vanish() {
    let fake = Arc::new(Fake::default());
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    c.refresh(&pools).await;
    let got = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap();
    assert_eq!(got[0].id, "i-new");
    // The provider's listing does not show it yet.
    assert!(c.refresh(&pools).await.is_empty(), "nothing interrupted");
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let view = c.view(&regions);
    assert_eq!(
        view.instances
            .iter()
            .map(|i| i.id.as_str())
            .collect::<Vec<_>>(),
        vec!["i-new"]
    );
    assert!(view.listed_at.contains_key("us-east-1"));
    // Once a listing shows it, it is an instance like any other; once one shows it gone, it
    // is gone.
    fake.existing
        .lock()
        .unwrap()
        .push(instance("i-new", "ns/j#0"));
    c.refresh(&pools).await;
    fake.existing.lock().unwrap()[0].state = InstanceState::Terminated;
    c.refresh(&pools).await;
    assert!(c.view(&regions).instances.is_empty());
}

/// A launch whose outcome is unknown (the response lost, the call timed out) may have made
/// instances: until a listing says what EC2 did, the need counts as launching (its cost
/// against the budget, no second launch), then it is an instance like any other. Found by the
/// chaos suite's EC2 storm, where a launch whose response was lost was forgotten and the
/// budget spent again before a listing showed the instance.
#[tokio::test]
async fn a_launch_of_unknown_outcome_counts_until_a_listing_shows_its_instances() {
    let fake = Arc::new(Fake {
        fail_with: Some(CloudError::Other(
            "connection closed before a response".into(),
        )),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    let regions = ["us-east-1".to_string()].into_iter().collect();
    c.refresh(&pools).await;
    assert!(c.start_launch(&launch("ns/j#0")));
    let err = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(err.may_have_acted());
    assert!(c.view(&regions).launching.contains_key("ns/j#0"));
    assert!(
        !c.start_launch(&launch("ns/j#0")),
        "no second launch while the first one's outcome is unknown"
    );
    // A listing asked for at once that does not show it settles nothing (EC2 may lag).
    c.refresh(&pools).await;
    assert!(c.view(&regions).launching.contains_key("ns/j#0"));
    // EC2 did act: the next listing shows the instance, which takes the launch's place.
    fake.existing
        .lock()
        .unwrap()
        .push(instance("i-acted", "ns/j#0"));
    c.refresh(&pools).await;
    let view = c.view(&regions);
    assert!(view.launching.is_empty(), "{:?}", view.launching);
    assert_eq!(view.instances.len(), 1);
    assert!(c.start_launch(&launch("ns/j#1")));
}

/// A launch of unknown outcome that did nothing is settled by the first listing asked for
/// [`spillway_k8s::cloud::UNSETTLED_LAG`] after it failed; a refusal is settled at once.
#[tokio::test]
async fn a_launch_of_unknown_outcome_that_did_nothing_is_settled_by_a_later_listing() {
    let fake = Arc::new(Fake {
        fail_with: Some(CloudError::Other("RunInstances timed out after 30s".into())),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    let regions = ["us-east-1".to_string()].into_iter().collect();
    c.launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    c.refresh(&pools).await;
    assert!(c.view(&regions).launching.contains_key("ns/j#0"));
    let lag = spillway_k8s::cloud::UNSETTLED_LAG.as_millis();
    tokio::time::sleep(Duration::from_millis(lag + 50)).await;
    c.refresh(&pools).await;
    assert!(c.view(&regions).launching.is_empty());
    assert!(c.start_launch(&launch("ns/j#0")), "planned again");

    let refused = Arc::new(Fake {
        fail_with: Some(CloudError::from_code("InvalidAMIID.Malformed", "bad ami")),
        ..Fake::default()
    });
    let c = cloud(refused);
    let err = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(!err.may_have_acted());
    assert!(c.view(&regions).launching.is_empty());
}

/// Throttling may answer a retry (the SDK's, beneath) of a launch whose first answer was lost
/// and that acted: the need counts as launching until a listing says what EC2 did.
#[tokio::test]
async fn a_throttled_launch_counts_until_a_listing_shows_what_ec2_did() {
    let fake = Arc::new(Fake {
        fail_with: Some(CloudError::from_code(
            "RequestLimitExceeded",
            "Request limit exceeded.",
        )),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    let regions = ["us-east-1".to_string()].into_iter().collect();
    c.refresh(&pools).await;
    assert!(c.start_launch(&launch("ns/j#0")));
    let err = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::Throttled { .. }), "{err}");
    assert!(c.view(&regions).launching.contains_key("ns/j#0"));
    assert!(!c.start_launch(&launch("ns/j#0")), "no second launch yet");
    fake.existing
        .lock()
        .unwrap()
        .push(instance("i-acted", "ns/j#0"));
    c.refresh(&pools).await;
    let view = c.view(&regions);
    assert!(view.launching.is_empty(), "{:?}", view.launching);
    assert_eq!(view.instances.len(), 1);
}

/// EC2 answers a token it has seen with that launch's instances, even once they are gone. A
/// need launched again after Spillway terminated its instances (the collector took them, or
/// they idled) must not take them back for live: found by the chaos suite's EC2 storm, where
/// the dead instance stayed in the view for a minute, billed, while its job waited for it.
#[tokio::test]
async fn a_need_launched_again_after_its_instances_were_terminated_asks_under_a_new_token() {
    let fake = Arc::new(Fake::default());
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    let regions = ["us-east-1".to_string()].into_iter().collect();
    c.refresh(&pools).await;
    let first = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap();
    assert_eq!(first[0].id, "i-new");
    c.terminate("us-east-1", &["i-new".to_string()])
        .await
        .unwrap();
    let err = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("new token"), "{err}");
    let view = c.view(&regions);
    assert!(view.instances.is_empty(), "{:?}", view.instances);
    assert!(view.launching.is_empty(), "EC2 did nothing new");
    assert!(view.cooldowns.is_empty(), "the offering is not to blame");
    let again = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap();
    assert_eq!(again[0].id, "i-new-1");
    let tokens: Vec<String> = fake
        .launches
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.client_token())
        .collect();
    assert_eq!(tokens[0], tokens[1], "the same need, the same token");
    assert_ne!(tokens[1], tokens[2], "a new token once the first was spent");
    assert_eq!(c.view(&regions).instances.len(), 1);
}

/// EC2 refuses a token a launch with other parameters used (`IdempotentParameterMismatch`: the
/// need launched again with new user data, or into another offering): the token is spent, the
/// offering is not to blame, and the next launch asks under a new token, once a listing
/// [`spillway_k8s::cloud::UNSETTLED_LAG`] later shows that the launch that used it made no
/// instances (EC2's listings may not show them yet).
#[tokio::test]
async fn a_token_refused_for_other_parameters_is_spent_not_the_offerings_fault() {
    let fake = Arc::new(Fake {
        fail_with: Some(CloudError::from_code(
            "IdempotentParameterMismatch",
            "the client token was used by a request with other parameters",
        )),
        ..Fake::default()
    });
    let c = cloud(fake.clone());
    let pools = vec![pool("on-demand")];
    let regions = ["us-east-1".to_string()].into_iter().collect();
    c.refresh(&pools).await;
    let err = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("new token"), "{err}");
    let view = c.view(&regions);
    assert!(
        view.launching.contains_key("ns/j#0"),
        "the launch that used the token may have made instances not listed yet"
    );
    assert!(view.cooldowns.is_empty(), "the offering is not to blame");
    assert!(!c.start_launch(&launch("ns/j#0")));
    let lag = spillway_k8s::cloud::UNSETTLED_LAG.as_millis();
    tokio::time::sleep(Duration::from_millis(lag + 50)).await;
    c.refresh(&pools).await;
    assert!(c.view(&regions).launching.is_empty(), "none listed");
    let _ = c
        .launch(&pools[0], &launch("ns/j#0"), None, &Notify::new())
        .await;
    let tokens: Vec<String> = fake
        .launches
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.client_token())
        .collect();
    assert_ne!(
        tokens[0], tokens[1],
        "a new token once the first was refused"
    );
}

/// A pool that states no `aws.environment` promises what its image's tags say; one that states
/// it is believed over the tags, field by field.
#[tokio::test]
async fn an_images_tags_are_the_environment_a_pool_promises_unless_it_states_one() {
    let fake = Arc::new(Fake {
        images: vec![ImageInfo {
            id: "ami-1".into(),
            tags: [
                ("spillway.io/nvidia-driver-version", "550.54.15"),
                ("spillway.io/cuda-version", "12.4"),
                ("Name", "gpu-base"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }],
        ..Fake::default()
    });
    let c = cloud(fake);
    let tagged = pool("on-demand");
    let mut stated = (*pool("on-demand")).clone();
    stated.metadata.name = Some("stated".into());
    if let Some(aws) = stated.spec.aws.as_mut() {
        aws.environment = Some(spillway_api::environment::ImageEnvironment {
            driver_version: None,
            cuda_version: Some("12.6".into()),
        });
    }
    let mut unknown = (*pool("on-demand")).clone();
    unknown.metadata.name = Some("unknown".into());
    if let Some(aws) = unknown.spec.aws.as_mut() {
        aws.ami_id = Some("ami-gone".into());
    }
    let pools = [tagged, Arc::new(stated), Arc::new(unknown)];
    c.refresh(&pools).await;
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let offers = c
        .config
        .offerings(&pools, &c.view(&regions), spillway_k8s::clock::now());
    let facts = |pool: &str| {
        let f = &offers.iter().find(|o| o.pool == pool).expect(pool).facts;
        (
            f.driver.map(|v| v.to_string()),
            f.cuda.map(|v| v.to_string()),
            f.product.clone(),
        )
    };
    assert_eq!(
        facts("aws"),
        (
            Some("550.54.15".into()),
            Some("12.4".into()),
            Some("L4".into())
        )
    );
    assert_eq!(
        facts("stated"),
        (
            Some("550.54.15".into()),
            Some("12.6".into()),
            Some("L4".into())
        ),
        "the stated CUDA wins, the tag fills the driver"
    );
    assert_eq!(facts("unknown"), (None, None, Some("L4".into())));
}
