//! The operator's traces reach a real OTLP receiver: one trace per GpuJob, kept on the job so
//! it continues across an operator restart, and a span per decision cycle.

use std::time::Duration;

use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::operator::{RunningOperator, serial};
use spillway_tests::otlp;

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_trace_reaches_the_collector_and_continues_across_a_restart() {
    let _turn = serial().await;
    otlp::install();
    let w = World::new("op-trace").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    w.submit("traced", json!({}), Some(6)).await;
    let job = w.wait_phase("traced", JobPhase::Running).await;
    let traceparent = spillway_tests::operator::eventually(
        Duration::from_secs(30),
        "the trace context on the job",
        || async {
            let j = Api::<spillway_api::GpuJob>::namespaced(w.client.clone(), &w.ns)
                .get("traced")
                .await
                .map_err(|e| e.to_string())?;
            j.annotations()
                .get("spillway.io/traceparent")
                .cloned()
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace_id, root_id) = (parts[1].to_string(), parts[2].to_string());
    assert_eq!(job.metadata.name.as_deref(), Some("traced"));
    // The pod carries the same context, so the workload's spans join the trace.
    let pods = w.pods_of("traced").await;
    let env = pods[0].spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "TRACEPARENT" && e.value.as_deref() == Some(traceparent.as_str()))
    );

    // The first operator's spans (the decision) arrive; then it dies mid-job.
    otlp::wait_trace(
        &trace_id,
        Duration::from_secs(30),
        "the decision span",
        |s| s.iter().any(|s| s.name == "spillway.decide"),
    )
    .await;
    op.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator again");
    w.wait_phase("traced", JobPhase::Succeeded).await;
    let spans = otlp::wait_trace(
        &trace_id,
        Duration::from_secs(30),
        "the run and root spans from the second operator",
        |s| {
            ["spillway.wait", "spillway.run", "spillway.gpujob"]
                .iter()
                .all(|n| s.iter().any(|s| s.name == *n))
        },
    )
    .await;
    let named = |n: &str| spans.iter().find(|s| s.name == n).cloned().expect(n);
    let root = named("spillway.gpujob");
    assert_eq!(
        root.span_id, root_id,
        "the root takes the job's trace context"
    );
    assert_eq!(root.parent_span_id, "", "and has no parent");
    assert_eq!(
        otlp::attr(&root, "spillway.phase").as_deref(),
        Some("Succeeded")
    );
    let decide = named("spillway.decide");
    assert_eq!(decide.parent_span_id, root_id);
    assert_eq!(
        otlp::attr(&decide, "spillway.outcome").as_deref(),
        Some("StartPrivate")
    );
    assert_eq!(
        otlp::attr(&decide, "spillway.reason").as_deref(),
        Some("FitsPrivate")
    );
    assert!(decide.attributes.contains_key("spillway.wait_s"));
    let wait = named("spillway.wait");
    assert_eq!(
        otlp::attr(&wait, "spillway.environment").as_deref(),
        Some("private")
    );
    let run = named("spillway.run");
    assert_eq!(run.parent_span_id, root_id);
    assert!(run.end_time_unix_nano > run.start_time_unix_nano);
    assert!(root.start_time_unix_nano <= decide.start_time_unix_nano);
    assert!(root.end_time_unix_nano >= run.end_time_unix_nano);
    // A span per decision cycle, with its size.
    let cycles = otlp::spans_named("spillway.cycle");
    assert!(!cycles.is_empty());
    assert!(cycles[0].attributes.contains_key("spillway.cycle.jobs"));
    assert!(otlp::metrics().telemetry_spans_total("exported") > 0);
    // The metrics of /metrics arrive over OTLP too (here those of the exporter's own
    // registry, which the binary shares with the operator).
    spillway_tests::operator::eventually(Duration::from_secs(30), "metrics over OTLP", || async {
        let names = otlp::metric_names();
        if [
            "spillway_telemetry_spans_total",
            "spillway_leader",
            "spillway_actions_in_flight",
        ]
        .iter()
        .all(|n| names.contains(*n))
        {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    op.stop().await.expect("clean stop");
}
