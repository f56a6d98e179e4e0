//! Interconnect topology on the real API server: a pool of two racks of two 8-GPU nodes, pods
//! of others taking nodes, gangs that must (or would like to) stay within one rack.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use spillway_api::ComputePool;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::FakeNode;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

const RACK: &str = "spillway.test/rack";

/// A pod of someone else's, bound to `node`, holding its 8 GPUs.
async fn foreign_pod(w: &World, name: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": w.ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(w.client.clone(), &w.ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("a foreign pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_required_in_one_rack_runs_in_the_free_rack_and_the_next_waits_for_one() {
    let _turn = serial().await;
    let w = World::new("op-topology").await;
    Api::<ComputePool>::all(w.client.clone())
        .patch(
            &w.pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"private": {"topology": {"levels": [RACK]}}}})),
        )
        .await
        .expect("the pool's topology");
    let mut racks: Vec<(String, &str)> = Vec::new();
    for rack in ["r1", "r1", "r2", "r2"] {
        let name = spillway_tests::unique_name(&format!("{}-{rack}", w.ns));
        let node = FakeNode::gpu(&name, 8)
            .label("spillway.test/pool", &w.pool)
            .label(RACK, rack);
        w.kubelet.register(node).await.expect("register node");
        racks.push((name, rack));
    }
    let rack_of = |node: &str| racks.iter().find(|(n, _)| n == node).map(|(_, r)| *r);
    foreign_pod(&w, "theirs-1", &racks[0].0).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    let wish = json!({"replicas": 2, "gpusPerReplica": 8,
                      "topology": {"required": RACK}});

    // Rack r1 has one node taken: the gang runs in r2, both replicas.
    w.submit("first", wish.clone(), Some(6)).await;
    let job = w.wait_phase("first", JobPhase::Running).await;
    let st = job.status.clone().unwrap_or_default();
    let placed: Vec<Option<&str>> = st.nodes.iter().map(|n| rack_of(n)).collect();
    assert_eq!(placed, [Some("r2"), Some("r2")], "{st:?}");
    assert_eq!(st.topology_domain.as_deref(), Some("spillway.test/rack=r2"));
    let message = st.decision.and_then(|d| d.message).unwrap_or_default();
    assert!(message.contains("spillway.test/rack=r2"), "{message}");
    w.wait_phase("first", JobPhase::Succeeded).await;

    // Now one node of each rack is taken: two nodes are free, in different racks.
    foreign_pod(&w, "theirs-2", &racks[2].0).await;
    w.submit("second", wish, None).await;
    let waiting = eventually(WAIT, "second waits for a rack", || async {
        let st = w.job("second").await.status.unwrap_or_default();
        let d = st.decision.clone().unwrap_or_default();
        match d.reason.as_deref() {
            Some("TopologyUnfit") => Ok(d),
            other => Err(format!("{other:?}: {:?}", d.message)),
        }
    })
    .await;
    let message = waiting.message.unwrap_or_default();
    assert!(message.contains("with 8 free GPUs"), "{message}");
    assert_eq!(
        w.job("second").await.status.and_then(|s| s.phase),
        Some(JobPhase::Queued)
    );

    // The pool's status shows each rack's free GPUs (`kubectl spillway pools`).
    eventually(
        WAIT,
        "each rack's free GPUs in the pool's status",
        || async {
            let pool = Api::<ComputePool>::all(w.client.clone())
                .get(&w.pool)
                .await
                .map_err(|e| e.to_string())?;
            let domains: Vec<(String, i64, i64)> = (pool.status.unwrap_or_default().domains)
                .into_iter()
                .map(|d| (d.domain, d.capacity, d.free))
                .collect();
            let want = vec![(format!("{RACK}=r1"), 16, 8), (format!("{RACK}=r2"), 16, 8)];
            if domains == want {
                Ok(())
            } else {
                Err(format!("{domains:?}"))
            }
        },
    )
    .await;

    // A gang that only prefers one rack takes the two free nodes across both.
    w.submit(
        "spread",
        json!({"replicas": 2, "gpusPerReplica": 8, "topology": {"preferred": RACK}}),
        Some(4),
    )
    .await;
    let st = w
        .wait_phase("spread", JobPhase::Running)
        .await
        .status
        .unwrap_or_default();
    let mut placed: Vec<&str> = st.nodes.iter().filter_map(|n| rack_of(n)).collect();
    placed.sort();
    assert_eq!(placed, ["r1", "r2"]);
    // The roomiest racks first (equal here: by name).
    assert_eq!(
        st.topology_domain.as_deref(),
        Some("spillway.test/rack=r1,r2")
    );
    w.wait_phase("spread", JobPhase::Succeeded).await;

    // Rack r1 frees up: the required gang runs there whole.
    Api::<Pod>::namespaced(w.client.clone(), &w.ns)
        .delete("theirs-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the foreign pod");
    let st = w
        .wait_phase("second", JobPhase::Running)
        .await
        .status
        .unwrap_or_default();
    let placed: Vec<Option<&str>> = st.nodes.iter().map(|n| rack_of(n)).collect();
    assert_eq!(placed, [Some("r1"), Some("r1")]);
    op.stop().await.expect("clean stop");
}
