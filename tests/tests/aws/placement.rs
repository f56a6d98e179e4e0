//! Gangs in EC2 cluster placement groups: one group per gang launch, every instance of it asked
//! for in that group (one request, so one zone), EFA interfaces where the pool asks and the
//! type has them, a launch refused for capacity relaunched whole elsewhere into a group of its
//! own, and each group deleted once its instances are gone. moto has no placement groups: the
//! world's proxy serves them and records what each `RunInstances` asked
//! (`spillway_tests::placement`).

use std::time::Duration;

use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::moto::cluster_instances;
use spillway_tests::operator::{eventually, serial};

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_launches_whole_into_its_own_placement_group_which_goes_after_it() {
    let _turn = serial().await;
    let w = World::new("aws-pg", json!({})).await;
    // EFA asked: g5.8xlarge has it, g6.xlarge (the cheapest) has not.
    w.patch_aws_pool(json!({"efa": true})).await;
    // No capacity for g6.xlarge in any group: more failures than the SDK's three attempts.
    w.proxy.fail(
        "RunInstances",
        Some("InstanceType=g6.xlarge"),
        500,
        "InsufficientInstanceCapacity",
        10,
    );
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("pair", json!({"replicas": 2}), Some(5)).await;
    let job = w.wait_phase("pair", JobPhase::Running).await;
    let need = format!("{}/pair#0", w.ns);
    let groups = w.proxy.placement_groups();
    let mine: Vec<_> = groups
        .iter()
        .filter(|g| g.tags.get("spillway.io/need") == Some(&need))
        .collect();
    // The refused launch's group, deleted at once; the one the gang runs in.
    assert_eq!(mine.len(), 2, "{groups:#?}");
    let (refused, placed): (Vec<_>, Vec<_>) = mine.into_iter().partition(|g| g.state == "deleted");
    assert_eq!((refused.len(), placed.len()), (1, 1), "{groups:#?}");
    let group = placed[0].name.clone();
    assert_eq!(placed[0].strategy, "cluster");
    assert_eq!(
        placed[0].tags.get("spillway.io/cluster"),
        Some(&w.cluster_tag)
    );
    let st = job.status.clone().unwrap_or_default();
    assert_eq!(st.placement_group.as_deref(), Some(group.as_str()));
    // Every launch of the gang asked for all of it in one group.
    let runs = w.proxy.runs();
    let of_need: Vec<_> = runs
        .iter()
        .filter(|r| r.tag("spillway.io/need") == Some(need.as_str()))
        .collect();
    assert!(
        of_need.len() >= 4,
        "three refused tries and one launch: {runs:#?}"
    );
    for r in &of_need {
        assert_eq!(r.counts(), (2, 2), "the whole gang or nothing: {r:?}");
        assert!(r.group().is_some(), "in a group: {r:?}");
        assert_eq!(r.group(), r.tag("spillway.io/placement-group"));
    }
    let launched: Vec<_> = of_need.iter().filter(|r| !r.failed).collect();
    assert_eq!(launched.len(), 1, "{of_need:#?}");
    let ok = launched[0];
    assert_eq!(ok.get("InstanceType"), Some("g5.8xlarge"), "elsewhere");
    assert_eq!(ok.group(), Some(group.as_str()));
    assert_eq!(ok.get("NetworkInterface.1.InterfaceType"), Some("efa"));
    assert_eq!(ok.get("NetworkInterface.1.DeviceIndex"), Some("0"));
    let refused_group = refused[0].name.as_str();
    for r in of_need.iter().filter(|r| r.failed) {
        assert_eq!(r.get("InstanceType"), Some("g6.xlarge"));
        assert_eq!(
            r.group(),
            Some(refused_group),
            "the refused launch's own group"
        );
        assert_eq!(
            r.get("NetworkInterface.1.InterfaceType"),
            None,
            "no EFA on a type without it"
        );
    }
    // Both instances in moto, in one zone, on the gang's nodes.
    let instances = cluster_instances(&w.ec2, &w.cluster_tag)
        .await
        .expect("describe");
    let gang: Vec<_> = instances
        .iter()
        .filter(|i| i.tag("spillway.io/need") == need)
        .collect();
    assert_eq!(gang.len(), 2, "{instances:?}");
    assert_eq!(gang[0].zone, gang[1].zone, "one zone");
    let mut nodes = st.nodes.clone();
    nodes.sort();
    let mut ids: Vec<String> = gang.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    assert_eq!(nodes, ids);
    // The job ends, its instances idle out, and the group goes with them.
    w.wait_phase("pair", JobPhase::Succeeded).await;
    eventually(
        Duration::from_secs(150),
        "the gang's placement group deleted",
        || async {
            let groups = w.proxy.placement_groups();
            let live: Vec<_> = groups.iter().filter(|g| g.state != "deleted").collect();
            if live.is_empty() {
                Ok(())
            } else {
                Err(format!("{live:#?} {:?}", w.instances().await))
            }
        },
    )
    .await;
    op.stop().await.expect("clean stop");
}
