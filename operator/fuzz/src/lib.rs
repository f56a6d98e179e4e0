//! Fuzzing Spillway's parsers of outside input on stable Rust: a seed corpus per harness
//! (`corpus/<harness>/`, plus the repository's examples), mutated with a seeded generator, each
//! input run through the product's own entry point under `catch_unwind`. A short campaign per
//! harness runs with the test suite (`tests/short.rs`); `scripts/fuzz.sh` runs 10^6 inputs per
//! harness with the `spillway-fuzz` binary and reports its figures in docs/reliability.md.

pub mod campaign;
pub mod harness;
pub mod mutate;

pub use campaign::{Report, campaign, campaign_watched, caught, run_one, seeds};
pub use harness::{Harness, Verdict};
