//! A campaign: many mutated inputs through one harness, each under `catch_unwind`, with what
//! went wrong kept (panics, unclear rejections, the slowest input).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{Harness, Verdict};
use crate::mutate::{Rng, mutate};

/// Inputs longer than this are cut (parsers must not hang on less).
pub const MAX_LEN: usize = 64 * 1024;

/// What a campaign found.
#[derive(Debug, Default)]
pub struct Report {
    pub runs: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Inputs that panicked, with the panic's message.
    pub panics: Vec<(Vec<u8>, String)>,
    /// Rejections that do not say clearly what is wrong, with why not.
    pub unclear: Vec<(Vec<u8>, String)>,
    /// The slowest input and its time.
    pub slowest: Option<(Duration, Vec<u8>)>,
    pub wall: Duration,
}

/// The seeds of `harness`: `corpus/<name>/*` under `corpus_dir`, the repository files it
/// names (relative to `repo`), and seeds made at run time.
pub fn seeds(harness: Harness, corpus_dir: &Path, repo: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(corpus_dir.join(harness.name())) {
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        out.extend(paths.iter().filter_map(|p| std::fs::read(p).ok()));
    }
    out.extend(
        harness
            .repository_seeds()
            .iter()
            .filter_map(|f| std::fs::read(repo.join(f)).ok()),
    );
    out.extend(harness.generated_seeds());
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

/// Runs `input` through `harness`; `Err` with the panic's message if it panicked.
pub fn run_one(harness: Harness, input: &[u8]) -> Result<Verdict, String> {
    caught(|| harness.run(input))
}

/// `run`'s verdict, or `Err` with its panic's message.
pub fn caught(run: impl FnOnce() -> Verdict) -> Result<Verdict, String> {
    catch_unwind(AssertUnwindSafe(run)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// `runs` inputs from `seeds` (the seeds themselves first), mutated with `seed`.
pub fn campaign(harness: Harness, seeds: &[Vec<u8>], runs: u64, seed: u64) -> Report {
    campaign_watched(harness, seeds, runs, seed, &mut |_| {})
}

/// [`campaign`], showing each input to `before` before it runs (a watchdog keeps it, to
/// write out an input that never returns).
pub fn campaign_watched(
    harness: Harness,
    seeds: &[Vec<u8>],
    runs: u64,
    seed: u64,
    before: &mut dyn FnMut(&[u8]),
) -> Report {
    let started = Instant::now();
    let mut rng = Rng::new(seed ^ (harness.name().len() as u64 * 0x1000_0001));
    let dictionary = harness.dictionary();
    let mut report = Report::default();
    for i in 0..runs {
        let input = match seeds.get(i as usize) {
            Some(s) => s.clone(),
            None => mutate(&mut rng, seeds, &dictionary, MAX_LEN),
        };
        before(&input);
        let t = Instant::now();
        let verdict = run_one(harness, &input);
        let took = t.elapsed();
        report.runs += 1;
        match verdict {
            Ok(Verdict::Accepted) => report.accepted += 1,
            Ok(Verdict::Rejected(message)) => {
                report.rejected += 1;
                if let Err(why) = harness.clear(&message) {
                    report
                        .unclear
                        .push((input.clone(), format!("{why}: {message}")));
                }
            }
            Err(message) => report.panics.push((input.clone(), message)),
        }
        if report.slowest.as_ref().is_none_or(|(d, _)| took > *d) {
            report.slowest = Some((took, input));
        }
    }
    report.wall = started.elapsed();
    report
}
