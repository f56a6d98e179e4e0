//! Spillway's simulator: the decision core replayed on real GPU traces with a virtual clock, a
//! simulated private cluster and a simulated cloud. No cluster, no cloud, no I/O but reading
//! inputs and writing reports (done by the caller).
//!
//! Invariants: the simulator calls the same `spillway_core::decide` as the operator, with the
//! same manifests, and drives its cloud through the same `spillway_cloud::CloudProvider` trait;
//! what it simulates (machines, boot delays, capacity errors, spot interruptions) lives here
//! ([`cloud::SimCloud`]), never in the core.

pub mod bound;
pub mod cloud;
pub mod engine;
pub mod environment;
pub mod estimates;
pub mod html;
pub mod report;
mod seeded;
pub mod setup;
pub mod strategy;
pub mod sweep;
pub mod topology;
pub mod trace;

use std::time::Instant;

use spillway_core::{Duration, Policy};

pub use engine::{Outcome, World};
pub use estimates::Estimates;
pub use report::Summary;
pub use strategy::Strategy;
pub use trace::TraceJob;

/// The bundled example: an extract of the openb trace, a setup and a price catalog.
pub mod example {
    pub const TRACE: &str = include_str!("../../../examples/openb-extract.csv");
    pub const TRACE_NAME: &str = "examples/openb-extract.csv";
    pub const CONFIG: &str = include_str!("../../../examples/config/setup.yaml");
    pub const CONFIG_NAME: &str = "examples/config/setup.yaml";
    pub const CATALOG: &str = include_str!("../../../examples/catalog-aws-us-east-1.csv");
    pub const CATALOG_NAME: &str = "examples/catalog-aws-us-east-1.csv";
    /// The private inventory of the example: one node of eight GPUs.
    pub const PRIVATE_GPUS: &str = "1x8";
    /// The example's runtime estimates: the real runtimes with a log-normal error of sigma 0.5.
    pub const ESTIMATES: crate::Estimates = crate::Estimates::Noisy(0.5);
}

/// Options of a replay besides the world.
#[derive(Clone, Debug)]
pub struct Options {
    pub boot_delay: Duration,
    pub seed: u64,
    pub capacity_error_rate: f64,
    pub spot_interruptions_per_hour: f64,
    /// How long before a spot interruption the cloud warns of it, and Spillway acts (EC2
    /// warns two minutes ahead; the operator reads the warnings from an interruption queue).
    /// Zero: interruptions are seen when the instance is gone.
    pub interruption_warning: Duration,
    /// Runtime estimates; with [`Estimates::Trace`], `starburst` uses the real runtimes when
    /// the trace has no estimates (as Starburst's own simulator does).
    pub estimates: Estimates,
    /// How often restartable jobs checkpoint: a preempted or interrupted one loses the work
    /// since its last checkpoint. `None`: they lose nothing.
    pub checkpoint_interval: Option<Duration>,
    /// Decide at every instant something happened, even when the last plan shows that the
    /// jobs that just arrived cannot change it ([`spillway_core::Quiet`]). Results are the
    /// same either way (tests compare both); off, the replay skips those cycles.
    pub decide_every_event: bool,
    /// Racks of the private nodes (`--private-topology`; the snapshot's nodes must be in them
    /// already, [`topology::apply`]): each replay binds gangs to one rack, and is replayed again
    /// ignoring racks for the summary's `topology` figures.
    pub racks: Option<topology::Racks>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            boot_delay: Duration::from_secs(180),
            seed: 1,
            capacity_error_rate: 0.0,
            spot_interruptions_per_hour: 0.05,
            interruption_warning: Duration::ZERO,
            estimates: Estimates::Trace,
            checkpoint_interval: None,
            decide_every_event: false,
            racks: None,
        }
    }
}

/// Replays `trace` once per strategy; returns each summary with its outcome.
pub fn compare(
    base: &spillway_core::Snapshot,
    trace: &[TraceJob],
    strategies: &[Strategy],
    options: &Options,
    policy: &dyn Policy,
) -> Vec<(Summary, Outcome)> {
    compare_with_progress(base, trace, strategies, options, policy, &mut |_, _, _| {})
}

/// [`compare`], calling `progress(strategy, arrived, total)` during each replay.
pub fn compare_with_progress(
    base: &spillway_core::Snapshot,
    trace: &[TraceJob],
    strategies: &[Strategy],
    options: &Options,
    policy: &dyn Policy,
    progress: &mut dyn FnMut(&Strategy, usize, usize),
) -> Vec<(Summary, Outcome)> {
    strategies
        .iter()
        .map(|strategy| {
            replay(
                base,
                trace,
                strategy,
                options,
                policy,
                &mut |done, total| progress(strategy, done, total),
            )
        })
        .collect()
}

/// Replays `trace` with one strategy applied to `base`.
pub fn replay(
    base: &spillway_core::Snapshot,
    trace: &[TraceJob],
    strategy: &Strategy,
    options: &Options,
    policy: &dyn Policy,
    progress: &mut dyn FnMut(usize, usize),
) -> (Summary, Outcome) {
    let mut snapshot = base.clone();
    let oracle = strategy.apply(&mut snapshot, options.boot_delay);
    let estimates = match options.estimates {
        Estimates::Trace if oracle => Estimates::Exact,
        e => e,
    };
    let world = World {
        snapshot,
        boot_delay: options.boot_delay,
        capacity_error_rate: options.capacity_error_rate,
        capacity_cooldown: Duration::from_secs(300),
        spot_interruptions_per_hour: options.spot_interruptions_per_hour,
        interruption_warning: options.interruption_warning,
        seed: options.seed,
        estimates,
        checkpoint_interval: options.checkpoint_interval,
        decide_every_event: options.decide_every_event,
        bind_gangs: options.racks.is_some(),
    };
    let started = Instant::now();
    let outcome = engine::run_with_progress(&world, trace, policy, progress);
    let wall = started.elapsed().as_secs_f64();
    let mut summary = report::summarize(&strategy.to_string(), &outcome, wall);
    if let Some(racks) = options.racks {
        let ignoring = World {
            bind_gangs: false,
            ..world
        };
        let other = engine::run_with_progress(&ignoring, trace, policy, &mut |_, _| {});
        summary.topology = Some(report::summarize_topology(racks, &outcome, &other));
    }
    (summary, outcome)
}
