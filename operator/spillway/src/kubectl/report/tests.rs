use super::*;
use serde_json::json;
use spillway_api::GpuJob;

fn ms(s: &str) -> i64 {
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .expect("a time")
        .as_millisecond()
}

fn job(ns: &str, name: &str, queue: &str, gpus: u32, status: serde_json::Value) -> GpuJob {
    serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"queue": queue, "gpusPerReplica": gpus, "template": {"spec": {"containers": []}}},
        "status": status,
    }))
    .expect("a job")
}

/// Two teams over the day of 2026-12-05: a private run, a cloud run, a running job, one
/// finished the day before.
fn jobs() -> Vec<GpuJob> {
    vec![
        job(
            "vision",
            "a",
            "research",
            4,
            json!({
            "phase": "Succeeded", "environment": "private", "pool": "onprem",
            "queuedAt": "2026-12-05T10:00:00Z", "firstStartedAt": "2026-12-05T10:01:00Z",
            "startedAt": "2026-12-05T10:01:00Z", "finishedAt": "2026-12-05T12:01:00Z",
            "cost": {"accruedUSD": 16.0, "hourlyUSD": 0.0}}),
        ),
        job(
            "vision",
            "b",
            "research",
            1,
            json!({
            "phase": "Failed", "environment": "cloud", "pool": "aws",
            "queuedAt": "2026-12-05T10:00:00Z", "firstStartedAt": "2026-12-05T10:20:00Z",
            "startedAt": "2026-12-05T10:20:00Z", "finishedAt": "2026-12-05T11:20:00Z",
            "cost": {"accruedUSD": 0.8, "hourlyUSD": 0.0}}),
        ),
        job(
            "nlp",
            "c",
            "research",
            8,
            json!({
            "phase": "Running", "environment": "private", "pool": "onprem",
            "queuedAt": "2026-12-05T13:00:00Z", "firstStartedAt": "2026-12-05T13:00:30Z",
            "startedAt": "2026-12-05T13:00:30Z", "cost": {"accruedUSD": 10.0, "hourlyUSD": 16.0}}),
        ),
        job(
            "nlp",
            "old",
            "research",
            8,
            json!({
            "phase": "Succeeded", "environment": "private", "pool": "onprem",
            "queuedAt": "2026-12-03T13:00:00Z", "firstStartedAt": "2026-12-03T13:00:00Z",
            "startedAt": "2026-12-03T13:00:00Z", "finishedAt": "2026-12-03T14:00:00Z",
            "cost": {"accruedUSD": 16.0, "hourlyUSD": 0.0}}),
        ),
    ]
}

#[test]
fn namespaces_and_queues_get_gpu_hours_cost_and_indicators_over_the_window() {
    let from = ms("2026-12-05T00:00:00Z");
    let to = ms("2026-12-05T14:00:00Z");
    let all = runs(&jobs());
    let r = report(&all, &[], "14h", from, to);
    let vision = r
        .namespaces
        .iter()
        .find(|n| n.name == "vision")
        .expect("vision");
    assert_eq!((vision.jobs, vision.finished), (2, 2));
    assert_eq!(vision.gpu_hours.private, 8.0);
    assert_eq!(vision.gpu_hours.cloud, 1.0);
    assert_eq!(vision.cost_usd, 16.8);
    let tts = vision.time_to_start_seconds.clone().expect("time to start");
    assert_eq!((tts.p50, tts.p95, tts.count), (60.0, 1200.0, 2));
    assert_eq!(vision.burst_share, Some(0.5));
    let cost = vision.cost_per_run_usd.clone().expect("cost per run");
    assert_eq!((cost.mean, cost.p95, cost.count), (8.4, 16.0, 2));
    let nlp = r.namespaces.iter().find(|n| n.name == "nlp").expect("nlp");
    assert_eq!(
        (nlp.jobs, nlp.finished),
        (1, 0),
        "the old run is outside the window"
    );
    // 8 GPUs from 13:00:30 to 14:00.
    assert_eq!(nlp.gpu_hours.private, 7.93);
    assert!(nlp.cost_per_run_usd.is_none());
    let queue = &r.queues[0];
    assert_eq!((queue.name.as_str(), queue.jobs), ("research", 3));

    let text = render(&r);
    assert!(text.starts_with("NAMESPACES (jobs running or finished since 2026-12-05T00:00:00Z, the last 14h)\nNAMESPACE   JOBS"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "vision", "2", "2", "8.00", "1.00", "0.00", "16.80", "60s", "1200s", "8.40",
                    "16.00", "50%"
                ]),
        "{text}"
    );
    let csv = csv(&r).expect("csv");
    let mut lines = csv.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("scope,name,jobs,finished,gpu_hours_private")
    );
    assert!(
        csv.contains("namespace,vision,2,2,8,1,0,16.8,60,1200,8.4,16,0.5\n"),
        "{csv}"
    );
    assert!(csv.contains("queue,research,3,2,"), "{csv}");
}

#[test]
fn the_live_outcome_draws_the_simulators_charts() {
    let from = ms("2026-12-05T00:00:00Z");
    let to = ms("2026-12-05T14:00:00Z");
    let all = runs(&jobs());
    let out = super::super::report_html::outcome(&all, 8, from, to);
    assert_eq!(out.jobs.len(), 3);
    // The cloud run's $0.80 spread over its hour, all of it spent by 11:20.
    let last = out.samples.last().expect("samples");
    assert!((last.cloud_spend_usd - 0.8).abs() < 1e-9, "{last:?}");
    let at_1050 = out
        .samples
        .iter()
        .rev()
        .find(|s| s.t_s <= 10.0 * 3600.0 + 50.0 * 60.0)
        .expect("a sample");
    assert_eq!(at_1050.cloud_busy_gpus, 1);
    assert_eq!(at_1050.private_busy_gpus, 4);
    let summary = spillway_sim::report::summarize("live cluster", &out, 0.0);
    assert_eq!(summary.burst_jobs, 1);
    assert_eq!(summary.cloud_cost_usd, 0.8);
    let charts = spillway_sim::html::charts(&[(summary, out)]).expect("charts");
    assert_eq!(charts.len(), 6);
}

#[test]
fn queues_with_measured_gpu_use_get_their_own_table() {
    let all = runs(&jobs());
    let mut r = report(
        &all,
        &[],
        "14h",
        ms("2026-12-05T00:00:00Z"),
        ms("2026-12-05T14:00:00Z"),
    );
    assert!(
        !render(&r).contains("GPU USE"),
        "nothing measured, no table"
    );
    let mut indicators = spillway_api::indicators::QueueIndicators::default();
    indicators.last_30d.gpu_utilization = 0.42;
    indicators.last_30d.idle_gpu_hours = 3.5;
    indicators.last_30d.idle_cost_usd = 12.25;
    r.recorded = vec![super::Recorded {
        queue: "research".into(),
        indicators,
    }];
    let text = render(&r);
    assert!(text.contains("GPU USE"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["research", "42%", "3.50", "12.25"]),
        "{text}"
    );
}
