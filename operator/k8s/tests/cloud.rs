//! The cloud side's failure paths, with an in-memory provider (the real EC2 path is tested
//! against moto in tests/tests/aws.rs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use spillway_api::ComputePool;
use spillway_aws::{CloudError, CloudInstance, CloudProvider, InstanceState, LaunchRequest};
use spillway_core::{CapacityType, Launch, OfferingChoice, Time};
use spillway_k8s::cloud::{Cloud, CloudConfig, CloudView, DEFAULT_CATALOG, ProviderFactory};
use tokio::sync::Notify;

#[derive(Default)]
struct Fake {
    existing: Vec<CloudInstance>,
    fail_with: Option<CloudError>,
    launches: Mutex<Vec<LaunchRequest>>,
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
    }
}

impl CloudProvider for Fake {
    fn instances<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move { Ok(self.existing.clone()) })
    }
    fn instances_for_need<'a>(
        &'a self,
        _: &'a str,
        need: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        Box::pin(async move {
            Ok(self
                .existing
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
            match &self.fail_with {
                Some(e) => Err(e.clone()),
                None => Ok(vec![instance("i-new", &r.need)]),
            }
        })
    }
    fn terminate<'a>(&'a self, _: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async { Ok(()) })
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
    }
}

#[tokio::test]
async fn a_need_with_instances_is_adopted_not_launched_again() {
    let fake = Arc::new(Fake {
        existing: vec![instance("i-old", "ns/j#0")],
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
    assert!(c.start_launch("ns/j#1", "aws"));
    assert!(
        !c.start_launch("ns/j#1", "aws"),
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
    assert_eq!(r.client_token(), spillway_aws::client_token("c", "ns/j#0"));
    assert_eq!(
        r.zone, None,
        "a zone id from the catalog is not a placement zone name"
    );
    let regions = ["us-east-1".to_string()].into_iter().collect();
    let view: CloudView = c.view(&regions);
    let now = spillway_k8s::controller::now();
    let offers = c.offerings(&[pool("on-demand")], &view, now);
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
