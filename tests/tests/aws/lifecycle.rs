//! Instances' lives: restarts, losses, spot reclaims, deletion, machines that never join.

use std::time::Duration;

use kube::Api;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob};
use spillway_k8s::cloud::CloudConfig;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_run_instances_the_restarted_operator_uses_the_same_instance() {
    let _turn = serial().await;
    let w = World::new("aws-restart", json!({})).await;
    // Machines take 6 s to boot, so the operator dies while the instance is pending.
    let _machines = w.boot_machines(Some(Duration::from_secs(6)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("survivor", json!({}), None).await;
    eventually(WAIT, "an instance for the need", || async {
        let n = w.instances().await.len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    op.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let op = w.operator().await;
    let job = w.wait_phase("survivor", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(
        instances.len(),
        1,
        "exactly one instance for the need: {instances:?}"
    );
    assert_eq!(
        job.status.unwrap_or_default().nodes,
        vec![instances[0].0.clone()]
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_terminated_behind_our_back_requeues_or_fails_its_job() {
    let _turn = serial().await;
    let w = World::new("aws-lost", json!({})).await;
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("fragile", json!({}), None).await;
    w.submit("sturdy", json!({"restartable": true}), None).await;
    let fragile = w.wait_phase("fragile", JobPhase::Running).await;
    let sturdy = w.wait_phase("sturdy", JobPhase::Running).await;
    let node_of = |j: &GpuJob| j.status.clone().unwrap_or_default().nodes[0].clone();
    for id in [node_of(&fragile), node_of(&sturdy)] {
        w.ec2
            .terminate_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("terminate behind the operator's back");
    }
    let failed = w.wait_phase("fragile", JobPhase::Failed).await;
    let cond = failed
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .expect("Failed condition");
    assert_eq!(cond.reason, "ReplicaLost", "{cond:?}");
    // The restartable one is requeued and runs again, on a new instance.
    let again = w.wait_restarted("sturdy").await;
    assert_ne!(node_of(&again), node_of(&sturdy));
    drop(machines);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_spot_instance_is_remembered_and_its_job_requeued() {
    let _turn = serial().await;
    let w = World::new("aws-spot", json!({"capacityTypes": ["spot"]})).await;
    let pools: Api<ComputePool> = Api::all(w.client.clone());
    pools
        .patch(
            &w.aws_pool,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"aws": {"capacityTypes": ["spot"]}}})),
        )
        .await
        .expect("spot-only pool");
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("checkpointing", json!({"restartable": true}), None)
        .await;
    let first = w.wait_phase("checkpointing", JobPhase::Running).await;
    let node = first.status.clone().unwrap_or_default().nodes[0].clone();
    let spot = w
        .ec2
        .describe_instances()
        .instance_ids(&node)
        .send()
        .await
        .expect("describe the spot instance");
    let lifecycle = spot
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find_map(|i| i.instance_lifecycle().map(|l| l.as_str().to_string()));
    assert_eq!(
        lifecycle.as_deref(),
        Some("spot"),
        "launched on the spot market"
    );
    // EC2 reclaims it (here: terminated behind the operator's back).
    w.ec2
        .terminate_instances()
        .instance_ids(&node)
        .send()
        .await
        .expect("reclaim");
    let again = eventually(WAIT, "the job to run again", || async {
        let j = w
            .jobs()
            .get("checkpointing")
            .await
            .map_err(|e| e.to_string())?;
        let st = j.status.clone().unwrap_or_default();
        if st.restarts == Some(1) && st.phase == Some(JobPhase::Running) {
            Ok(j)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    assert_ne!(again.status.unwrap_or_default().nodes[0], node);
    let series = format!(
        "spillway_spot_interruptions_total{{pool=\"{}\",instance_type=\"g6.xlarge\"}} 1",
        w.aws_pool
    );
    eventually(WAIT, "the interruption in metrics", || async {
        let (_, metrics) = op.get("/metrics").await.map_err(|e| e.to_string())?;
        if metrics.contains(&series) {
            Ok(())
        } else {
            Err(metrics)
        }
    })
    .await;
    drop(machines);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_provisioning_job_releases_its_instances_first() {
    let _turn = serial().await;
    let w = World::new("aws-delete", json!({})).await;
    // Machines never boot, and garbage collection waits long: only the finalizer can act.
    let op = w
        .operator_with(CloudConfig {
            gc_grace: Duration::from_secs(600),
            ..w.cloud()
        })
        .await;
    w.fill_private_gpu().await;
    w.submit("doomed", json!({}), None).await;
    let job = w.wait_phase("doomed", JobPhase::Provisioning).await;
    eventually(WAIT, "the instance and the finalizer", || async {
        let j = w.jobs().get("doomed").await.map_err(|e| e.to_string())?;
        let fin = j.metadata.finalizers.clone().unwrap_or_default();
        let n = w.instances().await.len();
        if n == 1 && fin.contains(&"spillway.io/cloud-resources".to_string()) {
            Ok(())
        } else {
            Err(format!("{n} instances, finalizers {fin:?}"))
        }
    })
    .await;
    assert_eq!(
        job.status.and_then(|s| s.environment),
        Some(spillway_api::Environment::Cloud)
    );
    w.jobs()
        .delete("doomed", &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    eventually(
        WAIT,
        "the instance to be terminated and the job gone",
        || async {
            let list = w.instances().await;
            let terminated = list
                .iter()
                .all(|i| i.2 == "terminated" || i.2 == "shutting-down");
            let gone = w
                .jobs()
                .get_opt("doomed")
                .await
                .map_err(|e| e.to_string())?
                .is_none();
            if terminated && gone {
                Ok(())
            } else {
                Err(format!("{list:?}, job gone: {gone}"))
            }
        },
    )
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_never_joins_is_replaced() {
    let _turn = serial().await;
    let w = World::new("aws-join", json!({})).await;
    // No machine ever boots; the join timeout is 4 s.
    let op = w
        .operator_with(CloudConfig {
            join_timeout: Duration::from_secs(4),
            ..w.cloud()
        })
        .await;
    w.fill_private_gpu().await;
    w.submit("stuck", json!({}), None).await;
    let first = eventually(WAIT, "a first instance", || async {
        let list = w.instances().await;
        list.first()
            .map(|i| i.0.clone())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    // It is terminated after the join timeout and the need is planned again, under attempt 1.
    eventually(
        WAIT,
        "a replacement for the instance that never joined",
        || async {
            let list = w.instances().await;
            let old_gone = list
                .iter()
                .any(|i| i.0 == first && (i.2 == "terminated" || i.2 == "shutting-down"));
            let replacement = list
                .iter()
                .any(|i| i.3 == format!("{}/stuck#1", w.ns) && i.2 != "terminated");
            if old_gone && replacement {
                Ok(())
            } else {
                Err(format!("{list:?}"))
            }
        },
    )
    .await;
    let job = w.jobs().get("stuck").await.expect("job");
    let st = job.status.unwrap_or_default();
    assert_eq!(st.restarts, Some(1), "{st:?}");
    assert_eq!(st.phase, Some(JobPhase::Provisioning), "{st:?}");
    op.stop().await.expect("clean stop");
}

/// A gang's need loses one of its two instances before the job starts (terminated behind the
/// operator's back while both were still booting). The one left can never hold the job: it is
/// launched again under its next attempt's need (a minute after the first launch, as long as a
/// listing may show part of a launch), runs there, and the instance left idles out. Before,
/// the job waited for the lost instance forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_lost_an_instance_before_starting_launches_again() {
    let _turn = serial().await;
    let w = World::new("aws-gang", json!({})).await;
    // A join timeout well past the minute a launch's instance is kept unlisted: the instance
    // lost is not taken for one that never joined (which would replace it too, another way).
    let op = w
        .operator_with(CloudConfig {
            join_timeout: Duration::from_secs(600),
            ..w.cloud()
        })
        .await;
    w.fill_private_gpu().await;
    w.submit("pair", json!({"replicas": 2}), None).await;
    let need0 = format!("{}/pair#0", w.ns);
    let first = eventually(WAIT, "the gang's two instances", || async {
        let list = w.instances().await;
        let ids: Vec<String> = list
            .iter()
            .filter(|i| i.3 == need0)
            .map(|i| i.0.clone())
            .collect();
        if ids.len() == 2 {
            Ok(ids)
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await;
    w.ec2
        .terminate_instances()
        .instance_ids(first[0].clone())
        .send()
        .await
        .expect("terminate behind the operator's back");
    // Machines boot from now on (once EC2 says the lost one is going, so no machine boots for
    // it): the instance left joins, and is not enough.
    w.wait_terminated(&first[0]).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(3)));
    let need1 = format!("{}/pair#1", w.ns);
    let running = eventually(
        Duration::from_secs(150),
        "the gang running on its next need's instances",
        || async {
            let j = w.jobs().get("pair").await.map_err(|e| e.to_string())?;
            let st = j.status.clone().unwrap_or_default();
            if st.phase == Some(JobPhase::Running) {
                Ok(st)
            } else {
                Err(format!("{st:?} {:?}", w.instances().await))
            }
        },
    )
    .await;
    // Launched again one of two ways, whichever the operator saw first: the need replanned (the
    // job's next attempt on two fresh instances, the one left idling out), or, when the
    // instance left had not joined and went as an orphan first, the need launched again under
    // its own key (the job never started, so it keeps its attempt). Never on the lost
    // instance, never more than one launch again.
    let list = w.instances().await;
    let mut on: Vec<&String> = running.nodes.iter().collect();
    on.sort();
    assert!(!on.contains(&&first[0]), "on the lost instance: {list:?}");
    if running.restarts == Some(1) {
        let fresh: Vec<&String> = list.iter().filter(|i| i.3 == need1).map(|i| &i.0).collect();
        assert_eq!(
            fresh.len(),
            2,
            "one launch of two for the new need: {list:?}"
        );
        let mut fresh_sorted = fresh.clone();
        fresh_sorted.sort();
        assert_eq!(on, fresh_sorted, "on the new need's instances: {list:?}");
    } else {
        assert_eq!(running.restarts.unwrap_or(0), 0, "{running:?}");
        let of_need0: Vec<_> = list.iter().filter(|i| i.3 == need0).collect();
        assert!(
            of_need0.len() <= 4,
            "at most one launch again for the need: {list:?}"
        );
        for n in &on {
            assert!(
                of_need0.iter().any(|i| &&i.0 == n && i.2 == "running"),
                "{n} is no running instance of the need: {list:?}"
            );
        }
        assert!(
            list.iter().all(|i| i.3 != need1),
            "no second need: {list:?}"
        );
        op.stop().await.expect("clean stop");
        return;
    }
    // The instance left runs nothing and idles out (idle timeout 3 s).
    eventually(WAIT, "the instance left terminated", || async {
        let list = w.instances().await;
        let left = list.iter().find(|i| i.0 == first[1]);
        match left {
            Some(i) if i.2 == "terminated" || i.2 == "shutting-down" => Ok(()),
            _ => Err(format!("{list:?}")),
        }
    })
    .await;
    w.wait_warning("NeedReplanned", &need1).await;
    op.stop().await.expect("clean stop");
}
