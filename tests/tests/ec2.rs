//! The AWS SDK against moto's EC2 server: launch with tags, find by tag, terminate.

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
