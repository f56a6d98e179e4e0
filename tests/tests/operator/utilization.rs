//! GPU utilization end to end: a real Prometheus scrapes a stand-in for dcgm-exporter (no GPU
//! exists here: that endpoint is the simulated edge), and the operator reads it: a busy and an
//! idle job report their use, the idle one is suspended by its queue's policy, and Prometheus
//! going away leaves jobs running and the queue saying so.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_api::GpuQueue;
use spillway_api::job::JobPhase;
use spillway_k8s::utilization::{GPU_UTIL, GR_ENGINE_ACTIVE, UtilizationConfig};
use spillway_tests::dcgm::{DcgmExporter, GpuUse};
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::prometheus::Prometheus;
use spillway_tests::workload::WAIT;

use crate::world::{World, condition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_gpus_are_found_through_prometheus_and_suspended_by_the_queue() {
    let _turn = serial().await;
    let w = World::new("op-util").await;
    w.nodes(2, 1, None).await;
    Api::<GpuQueue>::all(w.client.clone())
        .patch(
            &w.queue,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"idle": {"threshold": 5, "after": "3s", "action": "Suspend"}}}),
            ),
        )
        .await
        .expect("idle policy");
    let dcgm = DcgmExporter::start().await.expect("dcgm-exporter stand-in");
    let mut prometheus =
        Prometheus::start_with(&[&dcgm.addr.to_string()], None).expect("Prometheus");
    let mut settings = test_settings("op-util");
    settings.utilization = Some(UtilizationConfig {
        prometheus_url: format!("http://{}", prometheus.addr),
        bearer_token_file: None,
        every: Duration::from_secs(1),
    });
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    w.submit("busy", json!({}), None).await;
    w.submit("idle", json!({"restartable": true}), None).await;
    w.wait_pods_running("busy", 1).await;
    w.wait_pods_running("idle", 1).await;
    dcgm.set(vec![
        GpuUse {
            namespace: w.ns.clone(),
            pod: "busy-0-0".into(),
            gpu: 0,
            util_percent: 97.0,
            engine_active: Some(0.85),
        },
        GpuUse {
            namespace: w.ns.clone(),
            pod: "idle-0-0".into(),
            gpu: 1,
            util_percent: 1.0,
            engine_active: None,
        },
    ]);

    // The busy one reads the engine's activity (85 %), not the device's 97 %.
    eventually(WAIT, "busy's utilization", || async {
        let u = w.job("busy").await.status.and_then(|s| s.utilization);
        match &u {
            Some(u) if (u.gpu_percent - 85.0).abs() < 1.0 && u.source == GR_ENGINE_ACTIVE => Ok(()),
            _ => Err(format!("{u:?}")),
        }
    })
    .await;
    // The idle one is suspended 3 s into its idle spell and requeued.
    let idle = eventually(WAIT, "idle suspended", || async {
        let j = w.job("idle").await;
        match condition(&j, "Idle") {
            Some((s, r, m)) if s == "True" && r == "Suspended" => Ok((j, m)),
            other => Err(format!(
                "{other:?} {:?}",
                j.status.as_ref().map(|s| &s.utilization)
            )),
        }
    })
    .await;
    assert!(
        idle.1.contains("below 5%") && idle.1.contains(GPU_UTIL),
        "{}",
        idle.1
    );
    assert!(idle.0.status.clone().unwrap_or_default().restarts >= Some(1));
    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.ns);
    let warned = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("Idle") && e.type_.as_deref() == Some("Warning"));
    assert!(warned, "an Idle Warning Event");
    let (_, metrics) = op.get("/metrics").await.expect("metrics");
    let series = format!(
        "spillway_gpu_utilization_ratio{{queue=\"{}\",environment=\"private\"}}",
        w.queue
    );
    assert!(metrics.contains(&series), "{metrics}");
    assert!(metrics.contains(r#"spillway_utilization_queries_total{result="ok"}"#));

    // Prometheus goes away: the queue says so, the busy job runs on.
    prometheus.kill().expect("stop Prometheus");
    eventually(WAIT, "UtilizationKnown False", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let c = q
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "UtilizationKnown");
        match &c {
            Some(c) if c.status == "False" && c.reason == "PrometheusUnreachable" => Ok(()),
            _ => Err(format!("{c:?}")),
        }
    })
    .await;
    assert_eq!(
        w.job("busy").await.status.and_then(|s| s.phase),
        Some(JobPhase::Running)
    );
    op.stop().await.expect("clean stop");
}
