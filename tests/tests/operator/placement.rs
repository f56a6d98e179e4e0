//! Placement: private first, gangs, models, priority and fair share.

use std::collections::BTreeMap;

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuQueue};
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::{World, condition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_first_jobs_run_on_private_nodes() {
    let _turn = serial().await;
    let w = World::new("op-private").await;
    w.nodes(2, 8, Some("A100-80GB")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("big", json!({"gpusPerReplica": 8}), None).await;
    w.submit("small-a", json!({"gpusPerReplica": 4}), None)
        .await;
    w.submit("small-b", json!({"gpusPerReplica": 4}), None)
        .await;

    let mut used_nodes = BTreeMap::new();
    for name in ["big", "small-a", "small-b"] {
        let job = w.wait_phase(name, JobPhase::Running).await;
        let st = job.status.clone().unwrap_or_default();
        assert_eq!(st.environment, Some(spillway_api::Environment::Private));
        assert_eq!(st.pool.as_deref(), Some(w.pool.as_str()));
        let d = st.decision.clone().expect("decision");
        assert_eq!(d.outcome.as_deref(), Some("StartPrivate"), "{d:?}");
        assert_eq!(d.reason.as_deref(), Some("FitsPrivate"), "{d:?}");
        let pods = w.wait_pods_running(name, 1).await;
        let pod = &pods[0];
        let spec = pod.spec.clone().unwrap_or_default();
        let node = spec.node_name.clone().expect("bound");
        assert_eq!(
            st.nodes,
            vec![node.clone()],
            "status.nodes names the bound node"
        );
        let limits = spec.containers[0]
            .resources
            .clone()
            .and_then(|r| r.limits)
            .unwrap_or_default();
        let want = if name == "big" { "8" } else { "4" };
        assert_eq!(
            limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
            Some(want)
        );
        assert_eq!(
            pod.labels().get("spillway.io/job").map(String::as_str),
            Some(name)
        );
        assert_eq!(
            pod.labels().get("spillway.io/replica").map(String::as_str),
            Some("0")
        );
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("GpuJob", name));
        *used_nodes.entry(node).or_insert(0) += want.parse::<u32>().unwrap_or(0);
    }
    assert!(
        used_nodes.values().all(|g| *g == 8),
        "two full nodes: {used_nodes:?}"
    );

    // `kubectl get gpujobs`: the printer columns show where and why.
    let (columns, rows) = w.table().await;
    let col = |n: &str| {
        columns
            .iter()
            .position(|c| c == n)
            .unwrap_or_else(|| panic!("column {n} in {columns:?}"))
    };
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row[col("Where")], json!("private"), "{row:?}");
        assert_eq!(row[col("Pool")], json!(w.pool), "{row:?}");
        assert_eq!(row[col("Phase")], json!("Running"), "{row:?}");
        assert_eq!(row[col("Reason")], json!("FitsPrivate"), "{row:?}");
    }

    // An Event records the decision, with the same reason.
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, "a FitsPrivate Event for big", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big")
                    && e.reason.as_deref() == Some("FitsPrivate")
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} events", list.items.len()))
    })
    .await;

    // Queue and pool status follow.
    eventually(WAIT, "queue status", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let st = q.status.unwrap_or_default();
        match (st.running, st.gpus_in_use.as_ref().map(|g| g.private)) {
            (3, Some(16)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually(WAIT, "pool status", || async {
        let p = Api::<ComputePool>::all(w.client.clone())
            .get(&w.pool)
            .await
            .map_err(|e| e.to_string())?;
        let st = p.status.unwrap_or_default();
        match (
            st.gpus.as_ref().map(|g| (g.capacity, g.allocated)),
            st.nodes.as_ref().map(|n| n.total),
        ) {
            (Some((16, 16)), Some(2)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_waits_whole_until_two_nodes_are_free() {
    let _turn = serial().await;
    let w = World::new("op-gang").await;
    w.nodes(2, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("first", json!({"gpusPerReplica": 8}), Some(6))
        .await;
    w.wait_phase("first", JobPhase::Running).await;
    w.submit("gang", json!({"gpusPerReplica": 8, "replicas": 2}), Some(2))
        .await;

    // While `first` holds one node, the gang waits as a whole: no pod at all.
    let job = eventually(WAIT, "gang to get a Wait decision", || async {
        let j = w.job("gang").await;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        if d.as_ref().and_then(|d| d.outcome.as_deref()) == Some("Wait") {
            Ok(j)
        } else {
            Err(format!("{d:?}"))
        }
    })
    .await;
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));
    assert!(w.pods_of("gang").await.is_empty(), "no partial gang");
    assert!(w.job("first").await.status.and_then(|s| s.phase) == Some(JobPhase::Running));

    // `first` finishes; the gang starts on both nodes.
    w.wait_phase("first", JobPhase::Succeeded).await;
    let gang = w.wait_phase("gang", JobPhase::Running).await;
    let nodes = gang.status.unwrap_or_default().nodes;
    assert_eq!(nodes.len(), 2);
    assert_ne!(nodes[0], nodes[1], "one replica per node");
    let finished = w.wait_phase("gang", JobPhase::Succeeded).await;
    let st = finished.status.unwrap_or_default();
    assert!(st.finished_at.is_some());
    assert!(
        st.cost.map(|c| c.accrued_usd).unwrap_or(0.0) > 0.0,
        "private GPUs cost 1.5/h each"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_model_constraints_follow_node_labels() {
    let _turn = serial().await;
    let w = World::new("op-models").await;
    let a100 = w.nodes(1, 8, Some("A100-80GB")).await;
    let h100 = w.nodes(1, 8, Some("H100")).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("wants-h100", json!({"gpuModels": ["H100"]}), None)
        .await;
    w.submit("wants-a100", json!({"gpuModels": ["A100-80GB"]}), None)
        .await;
    w.submit("wants-v100", json!({"gpuModels": ["V100"]}), None)
        .await;
    let h = w.wait_phase("wants-h100", JobPhase::Running).await;
    assert_eq!(h.status.unwrap_or_default().nodes, h100);
    let a = w.wait_phase("wants-a100", JobPhase::Running).await;
    assert_eq!(a.status.unwrap_or_default().nodes, a100);
    // No V100 anywhere and no cloud: it can never run, and says so.
    let v = eventually(WAIT, "V100 job rejected", || async {
        let j = w.job("wants-v100").await;
        match condition(&j, "Invalid") {
            Some((s, r, _)) if s == "True" => Ok(r),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(v, "NeverFits");
    assert!(w.pods_of("wants-v100").await.is_empty());
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_weighted_fair_share_between_two_queues() {
    let _turn = serial().await;
    let w = World::new("op-share").await;
    let light = format!("{}-light", w.ns);
    let heavy = format!("{}-heavy", w.ns);
    w.create_queue(&light, json!({"weight": 1, "maxPriority": 10}))
        .await;
    w.create_queue(&heavy, json!({"weight": 3, "maxPriority": 10}))
        .await;
    w.nodes(1, 8, None).await;
    // Everything is submitted before the operator starts, so one cycle sees it all.
    for i in 0..8 {
        w.submit_to(&format!("light-{i}"), &light, json!({}), None)
            .await;
        w.submit_to(&format!("heavy-{i}"), &heavy, json!({}), None)
            .await;
    }
    w.submit_to("light-urgent", &light, json!({"priority": 10}), None)
        .await;
    w.submit_to("heavy-urgent", &heavy, json!({"priority": 10}), None)
        .await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let running = eventually(WAIT, "8 GPUs in use", || async {
        let jobs = w
            .jobs()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<String> = jobs
            .items
            .iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Running))
            .map(|j| j.name_any())
            .collect();
        if running.len() == 8 {
            Ok(running)
        } else {
            Err(format!("{running:?}"))
        }
    })
    .await;
    let heavy_running = running.iter().filter(|n| n.starts_with("heavy-")).count();
    let light_running = running.iter().filter(|n| n.starts_with("light-")).count();
    assert_eq!(
        (light_running, heavy_running),
        (2, 6),
        "weights 1:3 share 8 GPUs 2:6: {running:?}"
    );
    assert!(
        running.contains(&"light-urgent".to_string()),
        "priority first: {running:?}"
    );
    assert!(
        running.contains(&"heavy-urgent".to_string()),
        "priority first: {running:?}"
    );
    // The rest wait, saying why.
    let waiting = w.job("light-7").await;
    let d = waiting.status.and_then(|s| s.decision).expect("decision");
    assert_eq!(d.outcome.as_deref(), Some("Wait"));
    op.stop().await.expect("clean stop");
}
