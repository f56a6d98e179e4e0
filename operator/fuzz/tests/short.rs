//! The short form of the fuzz campaigns, run with the test suite: every harness on its corpus
//! (the regressions of earlier findings included) and a few hundred mutations of it. No input
//! may panic, and every rejection must say what is wrong (and where, for files). The long form
//! is `scripts/fuzz.sh` (10^6 inputs per harness); its figures are in docs/reliability.md.

use std::path::Path;

use spillway_fuzz::{Harness, campaign, seeds};

fn short(harness: Harness, runs: u64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = seeds(harness, &root.join("corpus"), &root.join("../.."));
    assert!(!corpus.is_empty());
    let report = campaign(harness, &corpus, runs.max(corpus.len() as u64), 7);
    let show = |input: &[u8]| {
        String::from_utf8_lossy(input)
            .chars()
            .take(300)
            .collect::<String>()
    };
    assert!(
        report.panics.is_empty(),
        "{}: {} inputs panicked; the first: {:?} on {:?}",
        harness.name(),
        report.panics.len(),
        report.panics[0].1,
        show(&report.panics[0].0)
    );
    assert!(
        report.unclear.is_empty(),
        "{}: unclear rejections; the first: {} on {:?}",
        harness.name(),
        report.unclear[0].1,
        show(&report.unclear[0].0)
    );
    assert!(
        report.accepted > 0,
        "{}: the corpus has no valid input",
        harness.name()
    );
    assert!(
        report.rejected > 0,
        "{}: no mutation was rejected",
        harness.name()
    );
}

#[test]
fn manifests_and_policies() {
    short(Harness::Manifests, 300);
}

#[test]
fn resource_specs() {
    short(Harness::Specs, 2_000);
}

#[test]
fn traces() {
    short(Harness::Trace, 2_000);
}

#[test]
fn node_lists_and_inventories() {
    short(Harness::Nodes, 2_000);
}

#[test]
fn catalogs() {
    short(Harness::Catalog, 2_000);
}

#[test]
fn jwks_documents() {
    short(Harness::Jwks, 300);
}

#[test]
fn tokens() {
    short(Harness::Token, 2_000);
}

/// The harness itself: an input that panics is caught and reported with its message, and a
/// rejection without a position is not taken for a clear one.
#[test]
fn the_harness_catches_panics_and_unclear_rejections() {
    assert!(
        matches!(
            spillway_fuzz::run_one(Harness::Trace, b"x"),
            Ok(spillway_fuzz::Verdict::Rejected(_))
        ),
        "a plain rejection is not a panic"
    );
    let panicked = spillway_fuzz::caught(|| panic!("boom at {}", 3));
    assert_eq!(panicked, Err("boom at 3".to_string()));
    let panicked = spillway_fuzz::caught(|| panic!("boom"));
    assert_eq!(panicked, Err("boom".to_string()));
    assert!(
        Harness::Trace
            .clear("3: runtime_s must be a number")
            .is_ok()
    );
    assert!(Harness::Trace.clear("runtime_s must be a number").is_err());
    assert!(Harness::Trace.clear("0: no line zero").is_err());
    assert!(
        Harness::Manifests
            .clear("fuzz.yaml:3:5: error: unknown field")
            .is_ok()
    );
    assert!(
        Harness::Manifests
            .clear("fuzz.yaml:3: BurstPolicy p rule r: when: ...")
            .is_ok()
    );
    assert!(Harness::Manifests.clear("unknown field").is_err());
    assert!(Harness::Specs.clear("").is_err());
}
