//! A burst job's trace at a real OTLP receiver: its decision, the provisioning with the EC2
//! calls as child spans (request id, error class), the join of its instance, its run.

use std::time::Duration;

use kube::{Api, ResourceExt};
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::otlp;

use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_jobs_trace_has_its_provisioning_and_ec2_calls() {
    let _turn = serial().await;
    otlp::install();
    let w = World::new("aws-trace", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("burst", json!({}), Some(3)).await;
    w.wait_phase("burst", JobPhase::Succeeded).await;
    let traceparent = eventually(Duration::from_secs(10), "the trace context", || async {
        let j = Api::<spillway_api::GpuJob>::namespaced(w.client.clone(), &w.ns)
            .get("burst")
            .await
            .map_err(|e| e.to_string())?;
        j.annotations()
            .get("spillway.io/traceparent")
            .cloned()
            .ok_or_else(|| "none".to_string())
    })
    .await;
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace_id, root_id) = (parts[1], parts[2]);
    let spans = otlp::wait_trace(
        trace_id,
        Duration::from_secs(30),
        "the burst's spans",
        |s| {
            [
                "spillway.provision",
                "ec2.RunInstances",
                "spillway.join",
                "spillway.gpujob",
            ]
            .iter()
            .all(|n| s.iter().any(|s| s.name == *n))
        },
    )
    .await;
    let named = |n: &str| spans.iter().find(|s| s.name == n).cloned().expect(n);
    let provision = named("spillway.provision");
    assert_eq!(
        provision.parent_span_id, root_id,
        "provisioning is part of the job's trace"
    );
    assert_eq!(
        otlp::attr(&provision, "spillway.offering.instance_type").as_deref(),
        Some("g6.xlarge")
    );
    let run = named("ec2.RunInstances");
    assert_eq!(
        run.parent_span_id, provision.span_id,
        "the EC2 call is its child"
    );
    assert_eq!(run.kind, "SPAN_KIND_CLIENT");
    assert_eq!(
        otlp::attr(&run, "rpc.method").as_deref(),
        Some("RunInstances")
    );
    assert!(
        otlp::attr(&run, "aws.request_id").is_some_and(|id| !id.is_empty()),
        "the request id EC2 (moto) gave: {:?}",
        run.attributes
    );
    let lookup = spans
        .iter()
        .find(|s| s.name == "ec2.DescribeInstances" && s.parent_span_id == provision.span_id)
        .expect("the need looked up first, as a child too");
    assert!(lookup.start_time_unix_nano <= run.start_time_unix_nano);
    let decide = spans
        .iter()
        .find(|s| {
            s.name == "spillway.decide"
                && otlp::attr(s, "spillway.outcome").as_deref() == Some("StartCloud")
        })
        .or_else(|| spans.iter().find(|s| s.name == "spillway.decide"))
        .expect("a decision");
    assert_eq!(decide.parent_span_id, root_id);
    let join = named("spillway.join");
    assert!(join.end_time_unix_nano >= join.start_time_unix_nano);
    let wait = spans
        .iter()
        .find(|s| s.name == "spillway.wait")
        .expect("the wait");
    assert_eq!(
        otlp::attr(wait, "spillway.environment").as_deref(),
        Some("cloud")
    );
    op.stop().await.expect("clean stop");
}
