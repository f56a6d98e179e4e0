//! Repatriation end to end: a restartable job that burst to EC2 comes home when a private GPU
//! frees up: suspended while its cloud pod stops, started on the private node, and its
//! instance scaled down.

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_api::Environment;
use spillway_api::job::JobPhase;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_job_comes_home_when_a_private_gpu_frees_up() {
    let _turn = serial().await;
    // A fixed wait: the job bursts at once, though its 4-hour estimate would let it wait for
    // the private GPU under the default compute-wait.
    let w = World::new("aws-home", json!({"waitMode": "fixed"})).await;
    let _machines = w.boot_machines(Some(std::time::Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit(
        "train",
        json!({"restartable": true, "estimatedRuntime": "4h", "checkpointInterval": "30m"}),
        None,
    )
    .await;
    let burst = w.wait_phase("train", JobPhase::Running).await;
    let st = burst.status.clone().unwrap_or_default();
    assert_eq!(st.environment, Some(Environment::Cloud), "{st:?}");
    let instance = st.nodes[0].clone();

    // The private GPU frees up: the job moves home.
    w.jobs()
        .delete("blocker", &Default::default())
        .await
        .expect("delete the blocker");
    let home = eventually(WAIT, "train to run on the private node", || async {
        let j = w.jobs().get("train").await.map_err(|e| e.to_string())?;
        let st = j.status.clone().unwrap_or_default();
        if st.phase == Some(JobPhase::Running) && st.environment == Some(Environment::Private) {
            Ok(j)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    let st = home.status.clone().unwrap_or_default();
    assert_eq!(st.restarts, Some(1));
    assert_eq!(st.nodes, vec![format!("{}-private-0", w.ns)]);
    assert_eq!(
        st.decision.as_ref().and_then(|d| d.reason.as_deref()),
        Some("Repatriated")
    );
    let suspended = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .expect("a Suspended condition");
    assert_eq!(
        (suspended.status.as_str(), suspended.reason.as_str()),
        ("False", "Resumed")
    );
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    let list = events.list(&ListParams::default()).await.expect("events");
    let moving = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("Repatriating"))
        .expect("a Repatriating Event");
    let note = moving.note.clone().unwrap_or_default();
    assert!(note.contains("saves about $"), "{note}");
    // Never two attempts' pods at once: only the private attempt's pod is left.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let left = pods
        .list(&ListParams::default().labels("spillway.io/job=train"))
        .await
        .expect("pods");
    assert_eq!(left.items.len(), 1);

    // The cloud node it left idles and is scaled down (idle timeout 3 s).
    eventually(WAIT, "the instance to be terminated", || async {
        let states: Vec<_> = w
            .instances()
            .await
            .into_iter()
            .filter(|(id, ..)| *id == instance)
            .map(|(_, _, state, _)| state)
            .collect();
        if states
            .iter()
            .all(|s| s == "terminated" || s == "shutting-down")
        {
            Ok(())
        } else {
            Err(format!("{states:?}"))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}
