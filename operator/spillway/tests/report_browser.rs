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
