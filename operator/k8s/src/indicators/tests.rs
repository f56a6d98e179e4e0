use super::*;

fn at(s: &str) -> Time {
    crate::clock::parse_rfc3339(s).expect("a time")
}

#[test]
fn quantiles_interpolate_within_buckets_as_prometheus_does() {
    let mut h = Hist::default();
    // 10 observations in (60, 120], 10 in (300, 600].
    for _ in 0..10 {
        h.observe(SECONDS_BOUNDS, 90.0);
        h.observe(SECONDS_BOUNDS, 400.0);
    }
    // Rank 10 of 20 is the top of the (60, 120] bucket.
    assert_eq!(h.quantile(SECONDS_BOUNDS, 0.5), Some(120.0));
    // Rank 19 is 9/10 of the way through (300, 600].
    assert_eq!(h.quantile(SECONDS_BOUNDS, 0.95), Some(570.0));
    let mut big = Hist::default();
    big.observe(SECONDS_BOUNDS, 1e9);
    assert_eq!(
        big.quantile(SECONDS_BOUNDS, 0.5),
        Some(86400.0),
        "+Inf: the last bound"
    );
    assert_eq!(Hist::default().quantile(SECONDS_BOUNDS, 0.5), None);
}

#[test]
fn gpu_time_is_spread_over_the_hours_it_spans() {
    let mut b = Book::default();
    b.ran(
        "q",
        "onprem",
        "private",
        2.0,
        at("2026-12-05T10:30:00Z"),
        at("2026-12-05T12:15:00Z"),
    );
    let hours: Vec<(u8, f64)> = b.days[&(
        "queue.q".to_string(),
        day_hour(at("2026-12-05T00:00:00Z")).0,
    )]
        .hours
        .iter()
        .map(|(h, b)| (*h, b.gpu_seconds["private"]))
        .collect();
    assert_eq!(hours, [(10, 3600.0), (11, 7200.0), (12, 1800.0)]);
}

#[test]
fn windows_take_the_last_24_hours_and_the_last_30_days() {
    let now = at("2026-12-05T10:20:00Z");
    let mut b = Book::default();
    b.started("q", "private", 30.0, at("2026-12-05T10:00:00Z"));
    b.started("q", "cloud", 600.0, at("2026-12-04T11:00:00Z")); // 23 hours back: in
    b.started("q", "cloud", 900.0, at("2026-12-04T10:00:00Z")); // 24 hours back: out
    b.started("q", "private", 5.0, at("2026-11-06T10:00:00Z")); // 29 days back: in 30d
    b.started("q", "private", 5.0, at("2026-11-05T10:00:00Z")); // 30 days back: out
    let day = b.window("queue.q", now, Window::Hours24);
    let n: u64 = day.time_to_start.values().map(|h| h.count).sum();
    assert_eq!(n, 2);
    let month = b.window("queue.q", now, Window::Days30);
    let n: u64 = month.time_to_start.values().map(|h| h.count).sum();
    assert_eq!(n, 4);
    let i = indicators(&day, 0.0);
    assert_eq!(i.burst_share, 0.5);
    let tts = i.time_to_start_seconds;
    assert_eq!(tts.count, 2);
    assert_eq!(tts.by_environment.cloud.count, 1);
    // Nothing observed: counts of 0, every field still there.
    let none = indicators(&Bucket::default(), 0.0);
    assert_eq!(none.recovery_seconds.count, 0);
    assert_eq!(none.cost_per_run_usd.mean, 0.0);
    assert_eq!(
        serde_json::to_value(&none).unwrap()["timeToStartSeconds"]["byEnvironment"]["remote"]["count"],
        0
    );
}

#[test]
fn the_ledger_round_trips_and_old_days_are_merged_then_dropped() {
    let mut b = Book::default();
    b.finished("q", 2.0, at("2026-12-01T08:00:00Z"));
    b.finished("q", 4.0, at("2026-12-01T09:00:00Z"));
    b.capacity(8.0, at("2026-12-05T09:00:00Z"), at("2026-12-05T10:00:00Z"));
    b.ran(
        "q",
        "onprem",
        "private",
        2.0,
        at("2026-12-05T09:00:00Z"),
        at("2026-12-05T10:00:00Z"),
    );
    b.through = Some(at("2026-12-05T10:00:00Z"));
    b.compact(at("2026-12-05T10:00:00Z"));
    let data = b.data();
    assert_eq!(
        data["2026-12-01.queue.q"], r#"{"d":{"cost":{"b":{"6":1,"7":1},"n":2,"s":6.0}}}"#,
        "days before yesterday are one bucket"
    );
    assert_eq!(data["through"], "2026-12-05T10:00:00Z");
    let cm = ConfigMap {
        data: Some(data.clone()),
        ..ConfigMap::default()
    };
    let mut read = Book::read(Some(&cm));
    assert_eq!(read.data(), data);
    assert_eq!(read.through, b.through);
    let now = at("2026-12-05T10:30:00Z");
    let i = read.queue_indicators("q", now);
    let month = i.last_30d;
    assert_eq!(month.cost_per_run_usd.mean, 3.0);
    assert_eq!(month.private_gpu_allocation, 0.25);
    assert_eq!(month.gpu_hours.private, 2.0);
    assert_eq!(i.last_24h.cost_per_run_usd.count, 0);
    // 31 days on, December 1st is gone.
    read.compact(at("2027-01-01T00:00:00Z"));
    assert!(!read.data().contains_key("2026-12-01.queue.q"));
    // An entry that cannot be read is kept as it is.
    let mut data = data;
    data.insert("2026-12-05.queue.broken".into(), "{not json".into());
    let read = Book::read(Some(&ConfigMap {
        data: Some(data.clone()),
        ..ConfigMap::default()
    }));
    assert_eq!(read.data()["2026-12-05.queue.broken"], "{not json");
}
