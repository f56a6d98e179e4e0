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
    assert!(text.starts_with("NAMESPACES (jobs queued, running or finished since 2026-12-05T00:00:00Z, the last 14h)\nNAMESPACE   JOBS"), "{text}");
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
        csv.contains("namespace,vision,2,2,8,1,0,16.8,60,1200,8.4,16,0.5,,0,0\n"),
        "{csv}"
    );
    assert!(csv.contains("queue,research,3,2,"), "{csv}");
}

/// The jobs of [`jobs`], the private run measured: 6 of its 8 GPU-hours sampled, 3 busy, 2
/// idle.
fn measured() -> Vec<GpuJob> {
    let mut all = jobs();
    let st = all[0].status.as_mut().expect("a status");
    st.utilization = serde_json::from_value(json!({
        "gpuPercent": 40.0, "source": "DCGM_FI_DEV_GPU_UTIL",
        "sampledAt": "2026-12-05T12:00:00Z",
        "sampledGpuHours": 6.0, "busyGpuHours": 3.0, "idleGpuHours": 2.0,
    }))
    .expect("utilization");
    all
}

#[test]
fn the_windows_share_of_each_run_counts_its_cost_use_and_idle_gpus() {
    let all = runs(&measured());
    // 11:01 to 13:00: the private run's second hour (of 10:01-12:01), the cloud run's last
    // 19 minutes, the running job not yet started.
    let r = report(
        &all,
        &[],
        "2h",
        ms("2026-12-05T11:01:00Z"),
        ms("2026-12-05T13:00:00Z"),
    );
    let vision = &r.namespaces[0];
    assert_eq!(vision.name, "vision");
    assert_eq!(vision.gpu_hours.private, 4.0);
    // Half of $16, and 19/60 of $0.80.
    assert_eq!(vision.cost_usd, 8.25);
    // Half the private run's measured hours: 3 sampled, 1.5 busy, 1 idle at $2 a GPU-hour.
    assert_eq!(vision.sampled_gpu_hours, 3.0);
    assert_eq!(vision.gpu_utilization, Some(0.5));
    assert_eq!((vision.idle_gpu_hours, vision.idle_cost_usd), (1.0, 2.0));
    assert!(
        vision.time_to_start_seconds.is_none(),
        "no first start in the window"
    );
    assert_eq!(vision.finished, 2);
    let text = render(&r);
    assert!(text.contains("GPU-UTIL") && text.contains("50%"), "{text}");
}

#[test]
fn the_days_add_up_to_the_window_and_the_page_reads_in_human_units() {
    let all = runs(&measured());
    let (from, to) = (ms("2026-12-03T12:00:00Z"), ms("2026-12-05T14:00:00Z"));
    let days = super::super::report_html::series(&all, from, to);
    // 50 hours: more than two days, so days (UTC), the first and last cut by the window.
    let labels: Vec<&str> = days.iter().map(|d| d.label.as_str()).collect();
    assert_eq!(labels, ["Dec 03", "Dec 04", "Dec 05"]);
    let r = report(&all, &[], "50h", from, to);
    let sum = |f: &dyn Fn(&Row) -> f64| days.iter().map(|d| f(&d.row)).sum::<f64>();
    let total = |f: &dyn Fn(&Row) -> f64| r.queues.iter().map(f).sum::<f64>();
    for (what, f) in [
        (
            "private GPU-hours",
            &(|r: &Row| r.gpu_hours.private) as &dyn Fn(&Row) -> f64,
        ),
        ("cloud GPU-hours", &|r: &Row| r.gpu_hours.cloud),
        ("cost", &|r: &Row| r.cost_usd),
        ("idle GPU-hours", &|r: &Row| r.idle_gpu_hours),
    ] {
        assert!(
            (sum(f) - total(f)).abs() < 0.02,
            "{what}: days {} against {}",
            sum(f),
            total(f)
        );
    }
    // The day's cost by environment adds up to its cost.
    for d in &days {
        assert!(
            (d.cost.iter().sum::<f64>() - d.row.cost_usd).abs() < 0.02,
            "{d:?}"
        );
    }
    assert_eq!(days[1].cost, [0.0, 0.0, 0.0], "nothing ran on Dec 04");

    let (page, charts) = super::super::report_html::render(&r, &all, from, to).expect("the page");
    let names: Vec<&str> = charts.iter().map(|c| c.0).collect();
    assert_eq!(
        names,
        [
            "gpu-hours.svg",
            "cost.svg",
            "utilization.svg",
            "time-to-start.svg"
        ]
    );
    for text in [
        "GPU use and cost: the last 50 hours",
        "3 Dec 2026 12:00 to 5 Dec 2026 14:00 UTC",
        "<b>$42.80</b>",
        "<td>research</td>",
        "<td>vision</td>",
        "<td>20 min</td>",
        "GPU utilization",
        "<b>50%</b>",
    ] {
        assert!(page.contains(text), "{text:?} missing:\n{page}");
    }
    assert!(
        !page.contains("live cluster") && !page.contains("NaN"),
        "{page}"
    );
}

#[test]
fn human_units() {
    use super::super::report_html::{dollars, duration};
    assert_eq!(
        [30.0, 60.0, 90.0, 600.0, 5400.0, 86400.0, 7.0 * 86400.0].map(duration),
        [
            "30 s", "1 min", "1.5 min", "10 min", "1.5 h", "24 h", "7 days"
        ]
    );
    assert_eq!(
        [0.5, 99.5, 1234.4, 1234567.0].map(dollars),
        ["$0.50", "$99.50", "$1,234", "$1,234,567"]
    );
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
    r.recorded = vec![super::super::chargeback::Recorded {
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
