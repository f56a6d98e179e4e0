//! `spillway-fuzz`: runs fuzz campaigns and reports what they found.
//!
//! ```text
//! spillway-fuzz [HARNESS...] [--runs N] [--seed S] [--max-ms MS] [--findings DIR]
//! ```
//!
//! Harnesses: manifests, specs, trace, nodes, catalog, jwks, token (default: all). Exits 1 when
//! an input panicked, was rejected without a clear message, or took longer than `--max-ms`
//! (1000); those inputs are written to `--findings` (default `target/fuzz-findings`) to be
//! added to `operator/fuzz/corpus/<harness>/` once fixed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spillway_fuzz::{Harness, Report, campaign_watched, seeds};

fn main() -> ExitCode {
    let mut harnesses = Vec::new();
    let mut runs: u64 = 10_000;
    let mut seed: u64 = 1;
    let mut max_ms: u128 = 1000;
    let mut findings = PathBuf::from("target/fuzz-findings");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("error: {name} needs a value");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--runs" => runs = number(&value("--runs")),
            "--seed" => seed = number(&value("--seed")),
            "--max-ms" => max_ms = number::<u64>(&value("--max-ms")) as u128,
            "--findings" => findings = PathBuf::from(value("--findings")),
            "-h" | "--help" => {
                println!(
                    "spillway-fuzz [HARNESS...] [--runs N] [--seed S] [--max-ms MS] [--findings DIR]\nharnesses: {}",
                    names()
                );
                return ExitCode::SUCCESS;
            }
            name => match Harness::by_name(name) {
                Some(h) => harnesses.push(h),
                None => {
                    eprintln!("error: unknown harness {name:?} (harnesses: {})", names());
                    return ExitCode::from(2);
                }
            },
        }
    }
    if harnesses.is_empty() {
        harnesses = Harness::ALL.to_vec();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = root.join("../..");
    // Panics are caught and reported with their input; keep the default hook quiet.
    std::panic::set_hook(Box::new(|_| {}));
    println!("| harness | inputs | accepted | rejected | panics | unclear | slowest | inputs/s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut failed = false;
    // The input running now and since when: a watchdog writes it out and stops the campaign
    // when it runs for ten times `--max-ms` (a hang).
    let current: Arc<Mutex<(Harness, Instant, Vec<u8>)>> =
        Arc::new(Mutex::new((harnesses[0], Instant::now(), Vec::new())));
    {
        let current = current.clone();
        let findings = findings.clone();
        let limit = Duration::from_millis((max_ms * 10) as u64);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let c = current.lock().unwrap_or_else(|e| e.into_inner());
                if c.1.elapsed() > limit {
                    let dir = findings.join(c.0.name());
                    let _ = std::fs::create_dir_all(&dir);
                    let file = dir.join(format!("hang-{seed}"));
                    let _ = std::fs::write(&file, &c.2);
                    eprintln!(
                        "{}: an input has run for {} s: a hang (input in {})",
                        c.0.name(),
                        c.1.elapsed().as_secs(),
                        file.display()
                    );
                    std::process::exit(1);
                }
            }
        });
    }
    for h in harnesses {
        let corpus = seeds(h, &root.join("corpus"), &repo);
        let report = campaign_watched(h, &corpus, runs, seed, &mut |input| {
            let mut c = current.lock().unwrap_or_else(|e| e.into_inner());
            c.0 = h;
            c.1 = Instant::now();
            c.2.clear();
            c.2.extend_from_slice(input);
        });
        let slow = report
            .slowest
            .as_ref()
            .filter(|(d, _)| d.as_millis() > max_ms);
        println!("{}", row(h, &report));
        let save = |what: &str, i: usize, input: &[u8], why: &str| {
            let dir = findings.join(h.name());
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{what}-{seed}-{i}"));
            let _ = std::fs::write(&file, input);
            eprintln!("{}: {what}: {why} (input in {})", h.name(), file.display());
        };
        for (i, (input, why)) in report.panics.iter().enumerate() {
            save("panic", i, input, why);
        }
        for (i, (input, why)) in report.unclear.iter().enumerate().take(20) {
            save("unclear", i, input, why);
        }
        if let Some((d, input)) = slow {
            save("slow", 0, input, &format!("{} ms", d.as_millis()));
        }
        failed |= !report.panics.is_empty() || !report.unclear.is_empty() || slow.is_some();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn row(h: Harness, r: &Report) -> String {
    let slowest = r
        .slowest
        .as_ref()
        .map_or(0.0, |(d, _)| d.as_secs_f64() * 1000.0);
    format!(
        "| {} | {} | {} | {} | {} | {} | {:.1} ms | {:.0} |",
        h.name(),
        r.runs,
        r.accepted,
        r.rejected,
        r.panics.len(),
        r.unclear.len(),
        slowest,
        r.runs as f64 / r.wall.as_secs_f64().max(1e-9)
    )
}

fn names() -> String {
    Harness::ALL
        .iter()
        .map(|h| h.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn number<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| {
        eprintln!("error: {s:?} is not a number");
        std::process::exit(2)
    })
}
