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

/// A busy month of `queues` queues: each hour of 31 days, GPUs in all three environments, a
/// start in each, a recovery and a finished run, compacted as the turn does.
fn busy_month(queues: usize, now: Time) -> Book {
    let mut b = Book::default();
    let hour = Duration::from_secs(3600);
    for h in 0..(31 * 24) {
        let from = now - Duration::from_secs(3600 * (31 * 24 - h));
        for q in 0..queues {
            let q = format!("team-{q:03}");
            for (env, secs) in [("private", 30.0), ("cloud", 600.0), ("remote", 120.0)] {
                b.ran(&q, env, 8.0, from, from + hour);
                b.started(&q, env, secs, from);
            }
            b.recovered(&q, "cloud", 300.0, from);
            b.finished(&q, 12.5, from);
        }
        b.capacity(64.0, from, from + hour);
        b.compact(from + hour);
    }
    b
}

#[test]
fn a_ledger_of_200_busy_queues_is_held_to_its_budget_and_says_what_it_dropped() {
    let now = at("2026-12-31T12:00:00Z");
    let mut b = busy_month(200, now);
    let before: usize = b.data().iter().map(|(k, v)| k.len() + v.len() + 8).sum();
    let live: std::collections::HashSet<String> = (0..200)
        .map(|q| Book::queue_series(&format!("team-{q:03}")))
        .collect();
    let dropped = b.bound(&live, LEDGER_BUDGET, now);
    let after: usize = b.data().iter().map(|(k, v)| k.len() + v.len() + 8).sum();
    eprintln!("200 queues x 31 busy days: {before} bytes, {after} after the bound ({dropped:?})");
    assert!(after <= LEDGER_BUDGET, "{after} bytes");
    assert_eq!(dropped.bytes, after);
    if before > LEDGER_BUDGET {
        assert!(dropped.any());
        let message = dropped
            .message("queue.team-000")
            .expect("a queue that lost days");
        assert!(
            message.contains("last30d covers less than 30 days"),
            "{message}"
        );
    }
    // What is kept is always the last 24 hours.
    let i = b.queue_indicators("team-199", now);
    assert!(i.last_24h.time_to_start_seconds.count > 0);
}

#[test]
fn a_full_ledger_drops_gone_queues_first_then_old_days_then_the_least_active() {
    let now = at("2026-12-31T12:00:00Z");
    let mut b = busy_month(4, now);
    let size = |b: &Book| -> usize { b.data().iter().map(|(k, v)| k.len() + v.len() + 8).sum() };
    let live: std::collections::HashSet<String> = (0..3)
        .map(|q| Book::queue_series(&format!("team-{q:03}")))
        .collect();
    // Room for all but about one queue's month: the gone queue (team-003) goes, nothing else.
    let one_queue = size(&b) / 4;
    let mut first = b.clone();
    let dropped = first.bound(&live, size(&b) - one_queue / 2, now);
    assert!(
        dropped.gone_queue_days > 0 && dropped.old_days == 0,
        "{dropped:?}"
    );
    assert!(
        first
            .queue_indicators("team-000", now)
            .last_30d
            .time_to_start_seconds
            .count
            > 0
    );
    // Room for half: old days of the live queues go too, today and yesterday stay.
    let dropped = b.bound(&live, size(&b) / 2, now);
    assert!(dropped.old_days > 0, "{dropped:?}");
    assert_eq!(dropped.live_queue_days, 0);
    assert!(dropped.message("queue.team-001").is_some());
    assert!(
        b.queue_indicators("team-001", now)
            .last_24h
            .time_to_start_seconds
            .count
            > 0
    );
    assert!(size(&b) <= size(&b).max(1));
}

#[test]
fn a_queue_name_too_long_for_a_key_gets_a_valid_one_that_reads_back() {
    let long = format!("{}.example", "q".repeat(240));
    let series = Book::queue_series(&long);
    let key_len = "2026-12-05.".len() + series.len();
    assert!(key_len <= 253, "{key_len}");
    assert_ne!(
        series,
        Book::queue_series(&format!("{}.examplf", "q".repeat(240))),
        "two long names, two keys"
    );
    let mut b = Book::default();
    let now = at("2026-12-05T10:00:00Z");
    b.started(&long, "private", 30.0, now);
    let cm = ConfigMap {
        data: Some(b.data()),
        ..ConfigMap::default()
    };
    for k in cm.data.as_ref().unwrap().keys() {
        assert!(
            k.len() <= 253
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)),
            "{k}"
        );
    }
    let read = Book::read(Some(&cm));
    assert_eq!(
        read.queue_indicators(&long, now)
            .last_24h
            .time_to_start_seconds
            .count,
        1
    );
}

#[test]
fn a_ledger_of_200_queues_starting_a_job_an_hour_keeps_three_weeks() {
    let now = at("2026-12-31T12:00:00Z");
    let mut b = Book::default();
    let hour = Duration::from_secs(3600);
    for h in 0..(31 * 24) {
        let from = now - Duration::from_secs(3600 * (31 * 24 - h));
        for q in 0..200 {
            let q = format!("team-{q:03}");
            b.ran(&q, "private", 8.0, from, from + hour);
            b.started(&q, "private", 30.0, from);
        }
        b.compact(from + hour);
    }
    let live: std::collections::HashSet<String> = (0..200)
        .map(|q| Book::queue_series(&format!("team-{q:03}")))
        .collect();
    let dropped = b.bound(&live, LEDGER_BUDGET, now);
    eprintln!("200 queues, a start an hour, 31 days: {dropped:?}");
    assert!(dropped.bytes <= LEDGER_BUDGET);
    // Their oldest week goes; the 30-day window keeps more than three weeks, and says so.
    let month = b.queue_indicators("team-000", now).last_30d;
    assert!(month.time_to_start_seconds.count >= 21 * 24, "{month:?}");
    assert!(dropped.message("queue.team-000").is_some());
}

#[test]
fn utilization_is_weighted_by_sampled_gpu_hours_and_idle_time_is_priced() {
    let now = at("2026-12-05T12:00:00Z");
    let mut b = Book::default();
    // Two GPUs at 90 % for an hour, then one of them idle (2 %, $3/h) for the next.
    b.used(
        "q",
        Use {
            sampled_gpus: 2.0,
            busy_gpus: 1.8,
            ..Use::default()
        },
        at("2026-12-05T10:00:00Z"),
        at("2026-12-05T11:00:00Z"),
    );
    b.used(
        "q",
        Use {
            sampled_gpus: 1.0,
            busy_gpus: 0.02,
            idle_gpus: 1.0,
            idle_usd_per_hour: 3.0,
        },
        at("2026-12-05T11:00:00Z"),
        at("2026-12-05T12:00:00Z"),
    );
    // Unsampled GPU time does not count either way.
    b.ran("q", "private", 4.0, at("2026-12-05T10:00:00Z"), now);
    let i = b.queue_indicators("q", now).last_24h;
    assert_eq!(
        i.gpu_utilization, 0.607,
        "(1.8 + 0.02) / 3 GPU-hours sampled"
    );
    assert_eq!(i.idle_gpu_hours, 1.0);
    assert_eq!(i.idle_cost_usd, 3.0);
    let none = Book::default().queue_indicators("q", now).last_24h;
    assert_eq!((none.gpu_utilization, none.idle_gpu_hours), (0.0, 0.0));
}
