//! The simulator's reports in a real headless browser (Debian's Chromium, installed by
//! scripts/test.sh and named by SPILLWAY_CHROMIUM): they load without console errors and fit a
//! laptop-width window without horizontal scrolling.

use std::path::PathBuf;
use std::process::{Command, Output};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("run spillway")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-browser-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_sweep_report_reads_well_in_a_browser() {
    let dir = tmp("sweep");
    let out = spillway(&[
        "simulate",
        "--sweep",
        "--strategy",
        "spillway,starburst,constant-wait:900,no-wait",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("frontier") && table.contains("today"),
        "{table}"
    );
    let svg = std::fs::read_to_string(dir.join("frontier.svg")).unwrap();
    for family in ["spillway", "starburst", "constant-wait", "no-wait"] {
        assert!(svg.contains(family), "{family} missing from the chart");
    }
    spillway_tests::browser::check_in_browser(&dir);
}

#[test]
fn the_comparison_report_reads_well_in_a_browser() {
    let dir = tmp("compare");
    let out = spillway(&["simulate", "--report", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    spillway_tests::browser::check_in_browser(&dir);
}

/// A month of two queues and four teams: arrivals by day and night, runtimes from five minutes
/// to twelve hours, 1 to 8 GPUs, and each job's GPU use (most busy, some middling, a few idle),
/// drawn from a fixed seed. Arrivals end after 27 days, so every run ends in the month.
#[cfg(feature = "cluster")]
fn month_trace() -> String {
    let mut state = 0x5eed_u64;
    let mut draw = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out =
        String::from("job_id,arrival_s,runtime_s,num_gpus,queue,namespace,gpu_utilization\n");
    let mut t = 0.0;
    let mut i = 0;
    while t < 27.0 * 86400.0 {
        // Three times the arrivals by day (08:00-20:00) as by night.
        let hour = (t / 3600.0) % 24.0;
        let rate = if (8.0..20.0).contains(&hour) {
            3.0
        } else {
            1.0
        };
        t += -draw().ln() * 3600.0 / rate;
        let runtime = 300.0 * (144.0f64).powf(draw());
        let gpus = [1, 1, 1, 2, 4, 8][(draw() * 6.0) as usize];
        let team = ["vision", "nlp", "speech", "robotics"][(draw() * 4.0) as usize];
        let queue = if team == "robotics" {
            "batch"
        } else {
            "research"
        };
        let u = draw();
        let util = if u < 0.1 {
            draw() * 4.0
        } else if u < 0.3 {
            10.0 + draw() * 30.0
        } else {
            40.0 + draw() * 55.0
        };
        out.push_str(&format!(
            "m{i},{t:.0},{runtime:.0},{gpus},{queue},{team},{util:.1}\n"
        ));
        i += 1;
    }
    out
}

#[cfg(feature = "cluster")]
#[test]
fn a_replayed_month_makes_the_report_a_platform_lead_reads() {
    let dir = tmp("month");
    let trace = dir.join("month.csv");
    std::fs::write(&trace, month_trace()).unwrap();
    let config = dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    let setup = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/config/setup.yaml"),
    )
    .unwrap();
    std::fs::write(
        config.join("setup.yaml"),
        format!("{setup}\n---\napiVersion: spillway.io/v1alpha1\nkind: GpuQueue\nmetadata:\n  name: batch\nspec:\n  weight: 1\n"),
    )
    .unwrap();
    let jobs = dir.join("jobs.yaml");
    let out = spillway(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--private-gpus",
        "2x8",
        "--strategy",
        "spillway",
        "--json",
        "--jobs-out",
        jobs.to_str().unwrap(),
        "--trace-start",
        "2026-11-01T00:00:00Z",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sim: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cloud_cost = sim[0]["cloud_cost_usd"].as_f64().unwrap();
    assert!(sim[0]["burst_jobs"].as_u64().unwrap() > 0, "{sim}");

    let html = dir.join("report");
    let out = spillway(&[
        "report",
        "-f",
        jobs.to_str().unwrap(),
        "--since",
        "30d",
        "--until",
        "2026-12-01T00:00:00Z",
        "-o",
        "json",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = |rows: &serde_json::Value, f: &dyn Fn(&serde_json::Value) -> f64| {
        rows.as_array().unwrap().iter().map(f).sum::<f64>()
    };
    let cost = |row: &serde_json::Value| row["costUSD"].as_f64().unwrap();
    let private = |row: &serde_json::Value| row["gpuHours"]["private"].as_f64().unwrap();
    let names: Vec<&str> = (r["namespaces"].as_array().unwrap().iter())
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nlp", "robotics", "speech", "vision"]);
    assert_eq!(r["queues"].as_array().unwrap().len(), 2);
    // Namespaces and queues split the same jobs; the cost is the private GPU-hours at the
    // pool's $1.10 plus the replay's cloud spend.
    let (by_ns, by_queue) = (sum(&r["namespaces"], &cost), sum(&r["queues"], &cost));
    assert!((by_ns - by_queue).abs() < 0.1, "{by_ns} against {by_queue}");
    let expected = sum(&r["namespaces"], &private) * 1.10 + cloud_cost;
    assert!(
        (by_ns - expected).abs() < expected * 0.005,
        "the report's ${by_ns} against the replay's ${expected}"
    );
    for row in r["namespaces"].as_array().unwrap() {
        let u = row["gpuUtilization"]
            .as_f64()
            .expect("utilization measured");
        assert!((0.4..0.8).contains(&u), "{row}");
        assert!(row["idleCostUSD"].as_f64().unwrap() > 0.0, "{row}");
    }

    for chart in [
        "gpu-hours.svg",
        "cost.svg",
        "utilization.svg",
        "time-to-start.svg",
    ] {
        assert!(html.join(chart).exists(), "{chart}");
    }
    let page = std::fs::read_to_string(html.join("index.html")).unwrap();
    for text in [
        "GPU use and cost: the last 30 days",
        "By namespace",
        "<td>robotics</td>",
        "Nov 01",
        "Idle GPUs cost",
    ] {
        assert!(page.contains(text), "{text:?} missing");
    }
    spillway_tests::browser::check_in_browser(&html);
}
