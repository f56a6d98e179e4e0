//! The AWS SDK against moto: launch with tags, find by tag, terminate (EC2); the interruption
//! queue's messages (SQS).

use aws_sdk_ec2::types::{
    Filter, InstanceStateName, InstanceType, ResourceType, Tag, TagSpecification,
};
use spillway_tests::moto::MotoServer;

#[tokio::test]
async fn run_describe_terminate_through_the_sdk() {
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let cluster_tag = spillway_tests::unique_name("cluster");

    let images = ec2
        .describe_images()
        .send()
        .await
        .expect("moto lists its stock AMIs");
    let ami = images
        .images()
        .iter()
        .find_map(|i| i.image_id().map(str::to_string))
        .expect("moto ships at least one AMI");

    let run = ec2
        .run_instances()
        .image_id(&ami)
        .instance_type(InstanceType::G5Xlarge)
        .min_count(2)
        .max_count(2)
        .client_token(format!("{cluster_tag}-need-1"))
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(
                    Tag::builder()
                        .key("spillway.io/cluster")
                        .value(&cluster_tag)
                        .build(),
                )
                .tags(
                    Tag::builder()
                        .key("spillway.io/need")
                        .value("need-1")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("RunInstances: {e:?}\n{}", moto.log_tail()));
    let launched: Vec<String> = run
        .instances()
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    assert_eq!(launched.len(), 2);

    let by_tag = |value: String| {
        Filter::builder()
            .name("tag:spillway.io/cluster")
            .values(value)
            .build()
    };
    let found = ec2
        .describe_instances()
        .filters(by_tag(cluster_tag.clone()))
        .send()
        .await
        .expect("DescribeInstances by tag");
    let mut found_ids: Vec<String> = found
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    found_ids.sort();
    let mut want = launched.clone();
    want.sort();
    assert_eq!(
        found_ids, want,
        "the tag filter finds exactly our instances"
    );

    let other = ec2
        .describe_instances()
        .filters(by_tag("someone-else".into()))
        .send()
        .await
        .unwrap();
    assert!(
        other
            .reservations()
            .iter()
            .all(|r| r.instances().is_empty())
    );

    ec2.terminate_instances()
        .set_instance_ids(Some(launched.clone()))
        .send()
        .await
        .expect("TerminateInstances");
    let after = ec2
        .describe_instances()
        .filters(by_tag(cluster_tag.clone()))
        .send()
        .await
        .unwrap();
    for i in after.reservations().iter().flat_map(|r| r.instances()) {
        let state = i.state().and_then(|s| s.name()).cloned();
        assert!(
            matches!(
                state,
                Some(InstanceStateName::Terminated | InstanceStateName::ShuttingDown)
            ),
            "instance {:?} is {state:?} after TerminateInstances",
            i.instance_id()
        );
    }
}

#[tokio::test]
async fn unknown_instance_types_are_refused_as_on_ec2() {
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let err = ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(InstanceType::from("p9.nonexistent"))
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .expect_err("moto validates instance types");
    let code = aws_sdk_ec2::error::ProvideErrorMetadata::code(&err).map(str::to_string);
    assert!(code.is_some(), "a typed EC2 error code, got {err:?}");
}

/// `DescribeInstanceTypes` and `DescribeSpotPriceHistory` through [`Ec2Provider`]: moto
/// reports g5.xlarge's one A10G with its memory, leaves unknown names out (the filter, unlike
/// the InstanceTypes parameter, does not fail the call), and answers placeholder spot prices,
/// which the catalog overlay does not believe.
#[tokio::test]
async fn instance_type_facts_and_spot_prices_through_the_provider() {
    use spillway_cloud::CloudProvider;
    let moto = MotoServer::shared().await;
    let provider = spillway_aws::Ec2Provider::new(moto.ec2_client().await, Default::default());
    let types = vec![
        "g6.xlarge".to_string(),
        "g5.xlarge".to_string(),
        "p4d.24xlarge".to_string(),
        "p9.nonexistent".to_string(),
    ];
    let mut facts = provider
        .instance_types(&types)
        .await
        .unwrap_or_else(|e| panic!("DescribeInstanceTypes: {e}\n{}", moto.log_tail()));
    facts.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
    let g5 = facts
        .iter()
        .find(|t| t.instance_type == "g5.xlarge")
        .expect("g5.xlarge described");
    assert_eq!((g5.gpus, g5.gpu_model.as_str()), (1, "A10G"));
    assert!(g5.gpu_memory_mib >= 20_000, "A10G memory: {g5:?}");
    let p4d = facts
        .iter()
        .find(|t| t.instance_type == "p4d.24xlarge")
        .expect("p4d.24xlarge described");
    assert_eq!((p4d.gpus, p4d.gpu_model.as_str()), (8, "A100"));
    // EFA as moto's copy of EC2's type data says.
    let efa = |t: &str| {
        facts
            .iter()
            .find(|f| f.instance_type == t)
            .map(|f| f.efa_supported)
    };
    assert_eq!(efa("p4d.24xlarge"), Some(Some(true)));
    assert_eq!(efa("g6.xlarge"), Some(Some(false)));
    assert!(
        facts.iter().all(|t| t.instance_type != "p9.nonexistent"),
        "unknown types are left out"
    );

    let prices = provider
        .spot_prices(&types[..1])
        .await
        .unwrap_or_else(|e| panic!("DescribeSpotPriceHistory: {e}\n{}", moto.log_tail()));
    assert!(!prices.is_empty(), "moto prices g6.xlarge in some zones");
    assert!(prices.iter().all(|p| p.instance_type == "g6.xlarge"));
    assert!(
        prices.iter().all(|p| p.zone.starts_with("us-east-1")),
        "{prices:?}"
    );
    // moto's price is a placeholder: the overlay keeps the catalog's spot price.
    let rows = spillway_core::catalog::parse(spillway_k8s::cloud::DEFAULT_CATALOG).unwrap();
    let offers = spillway_core::catalog::offerings(&rows, "aws", "us-east-1", &types[..1]);
    let region = spillway_cloud::facts::RegionFacts {
        types: facts
            .iter()
            .map(|t| (t.instance_type.clone(), t.clone()))
            .collect(),
        spot: prices,
        images: Default::default(),
    };
    let applied = spillway_cloud::facts::apply(offers.clone(), &region, &[]);
    let spot = |v: &[spillway_core::Offering]| -> Vec<(String, f64)> {
        v.iter()
            .filter(|o| o.capacity_type == spillway_core::CapacityType::Spot)
            .map(|o| (o.zone.clone(), o.hourly_price))
            .collect()
    };
    assert!(
        !spot(&offers).is_empty(),
        "the catalog prices g6.xlarge spot"
    );
    assert_eq!(spot(&applied), spot(&offers));
    // The GPU memory is moto's (the built-in table says 24 GiB for an L4).
    let l4 = facts
        .iter()
        .find(|t| t.instance_type == "g6.xlarge")
        .expect("g6.xlarge described");
    assert_eq!(l4.gpu_model, "L4");
    assert!(
        applied
            .iter()
            .all(|o| o.gpu_memory_gib == l4.gpu_memory_mib as f64 / 1024.0),
        "{applied:?}"
    );
    assert!(applied.iter().all(|o| o.gpu_model.as_str() == "L4"));
}

/// A gang's placement group through [`spillway_aws::Ec2Provider`], against the proxy that
/// serves placement groups in front of moto: made with the launch's tags (twice is fine),
/// listed by the cluster tag, launched into with every instance tagged with it and an EFA
/// interface, refused deletion while an instance is in it, deleted after (twice is fine).
#[tokio::test]
async fn a_placement_group_through_the_provider() {
    use spillway_cloud::{CloudProvider, Image, LaunchRequest};
    let moto = MotoServer::shared().await;
    let proxy = spillway_tests::faults::FaultProxy::start(&moto.endpoint)
        .await
        .expect("proxy");
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config(Some(&proxy.endpoint)).await);
    let provider = spillway_aws::Ec2Provider::new(ec2, Default::default());
    let cluster = spillway_tests::unique_name("pg");
    let ami = moto.ami().await;
    let mut request = LaunchRequest {
        cluster: cluster.clone(),
        pool: "aws".into(),
        job: "ns/train".into(),
        queue: "q".into(),
        need: "ns/train#0".into(),
        instance_type: "g5.8xlarge".into(),
        capacity_type: spillway_core::CapacityType::OnDemand,
        zone: None,
        count: 2,
        image: Image::Ami(ami),
        subnet_ids: vec![],
        security_group_ids: vec![],
        iam_instance_profile: None,
        tags: Default::default(),
        user_data: None,
        token_generation: 0,
        placement_group: None,
        efa: true,
    };
    let name = request.placement_group_name();
    request.placement_group = Some(name.clone());
    provider
        .create_placement_group(&request)
        .await
        .expect("made");
    provider
        .create_placement_group(&request)
        .await
        .expect("made again: fine");
    let groups = provider.placement_groups(&cluster).await.expect("listed");
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        (
            groups[0].name.as_str(),
            groups[0].need.as_str(),
            groups[0].pool.as_str()
        ),
        (name.as_str(), "ns/train#0", "aws")
    );
    assert!(!groups[0].gone);
    assert!(
        provider
            .placement_groups("another-cluster")
            .await
            .expect("listed")
            .is_empty()
    );
    let launched = provider.launch(&request).await.expect("launched");
    assert_eq!(launched.len(), 2);
    assert!(
        launched.iter().all(|i| i.placement_group == name),
        "{launched:?}"
    );
    let run = proxy.runs().pop().expect("a RunInstances");
    assert_eq!(run.group(), Some(name.as_str()));
    assert_eq!(run.counts(), (2, 2));
    assert_eq!(run.get("NetworkInterface.1.InterfaceType"), Some("efa"));
    let err = provider
        .delete_placement_group(&name)
        .await
        .expect_err("in use");
    assert!(
        err.to_string().contains("InvalidPlacementGroup.InUse"),
        "{err}"
    );
    let ids: Vec<String> = launched.iter().map(|i| i.id.clone()).collect();
    provider.terminate(&ids).await.expect("terminated");
    provider
        .delete_placement_group(&name)
        .await
        .expect("deleted");
    provider
        .delete_placement_group(&name)
        .await
        .expect("gone already: fine");
    let groups = provider.placement_groups(&cluster).await.expect("listed");
    assert!(groups.iter().all(|g| g.gone), "{groups:?}");
}

/// `DescribeImages` through [`spillway_aws::Ec2Provider`]: an image's tags, which state the
/// environment a pool promises when its spec does not; an image that does not exist is none.
#[tokio::test]
async fn an_images_tags_through_the_provider() {
    use spillway_cloud::CloudProvider;
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let image = spillway_tests::moto::tagged_image(
        &ec2,
        &spillway_tests::unique_name("gpu-base"),
        &[
            ("spillway.io/nvidia-driver-version", "550.54.15"),
            ("spillway.io/cuda-version", "12.4"),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("an image: {e:?}\n{}", moto.log_tail()));
    let provider = spillway_aws::Ec2Provider::new(ec2, Default::default());
    let info = provider
        .image(&image)
        .await
        .unwrap_or_else(|e| panic!("DescribeImages: {e}\n{}", moto.log_tail()))
        .expect("the image is described");
    let facts = info.facts();
    assert_eq!(
        (
            facts.driver.map(|v| v.to_string()),
            facts.cuda.map(|v| v.to_string())
        ),
        (Some("550.54.15".into()), Some("12.4".into())),
        "{info:?}"
    );
    assert_eq!(
        provider.image("ami-0123456789abcdef0").await.ok(),
        Some(None),
        "an unknown image is none, not an error"
    );
}

/// The interruption queue through [`spillway_aws::SqsQueue`] on moto's SQS: EventBridge's
/// events are read into notices, garbage is an error of its message (not of the receive), a
/// message not deleted comes back once its visibility timeout passes, and a deleted one does
/// not.
#[tokio::test]
async fn interruption_notices_through_the_queue() {
    use spillway_cloud::notices::{NoticeKind, NoticeQueue};
    use std::time::Duration;
    let moto = MotoServer::shared().await;
    let sqs = moto.sqs_client().await;
    let name = spillway_tests::unique_name("notices");
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "1",
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue: {e:?}\n{}", moto.log_tail()))
        .queue_url()
        .expect("a queue URL")
        .to_string();
    let warning = spillway_tests::moto::spot_warning("i-0123456789abcdef0", "2026-12-06T13:00:00Z");
    for body in [warning.as_str(), "not an event"] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let queue = spillway_aws::SqsQueue::new(sqs.clone(), Default::default());
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(queue.receive(&url, Duration::from_secs(1)).await.unwrap());
        if got.len() == 2 {
            break;
        }
    }
    assert_eq!(got.len(), 2, "{got:?}");
    let (good, bad): (Vec<_>, Vec<_>) = got.into_iter().partition(|m| m.notices.is_ok());
    let notice = &good[0].notices.as_ref().unwrap()[0];
    assert_eq!(notice.kind, NoticeKind::SpotInterruptionWarning);
    assert_eq!(notice.instance, "i-0123456789abcdef0");
    assert!(
        bad[0]
            .notices
            .as_ref()
            .unwrap_err()
            .starts_with("not an EventBridge event")
    );

    queue.delete(&url, &good[0].receipt).await.unwrap();
    // Deleting again with the old receipt is done, not an error.
    queue.delete(&url, &good[0].receipt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut again = Vec::new();
    for _ in 0..5 {
        again.extend(queue.receive(&url, Duration::from_secs(1)).await.unwrap());
        if !again.is_empty() {
            break;
        }
    }
    let ids: Vec<&str> = again.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        ids,
        [bad[0].id.as_str()],
        "only the message not deleted comes back"
    );
    assert_ne!(
        again[0].receipt, bad[0].receipt,
        "a redelivery has a new receipt"
    );
}
