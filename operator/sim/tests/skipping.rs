//! The replay skips an instant at which only jobs arrived that the last plan shows cannot
//! change it (`spillway_core::Quiet`). Skipping must not change a single figure: random
//! traces are replayed with every strategy both ways and compared whole.

use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};
use spillway_core::{GpuModel, NoPolicy, catalog};
use spillway_sim::trace::{self, TraceJob};
use spillway_sim::{Options, Strategy, example, replay, setup};

/// A seeded stream for the traces.
struct Rng(TestRng);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Rng(TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// Bursty arrivals of mixed gangs: priorities, model constraints, datasets (one that does
/// not exist), some larger than any node, some restartable.
fn trace(seed: u64, jobs: usize) -> Vec<TraceJob> {
    let mut rng = Rng::new(seed);
    let mut t = 0.0;
    (0..jobs)
        .map(|i| {
            // Half the jobs come in bursts at the same second.
            if rng.below(2) == 0 {
                t += rng.below(120) as f64;
            }
            let gpus = [1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 16][rng.below(12) as usize];
            TraceJob {
                id: format!("j{i}"),
                arrival_s: t,
                runtime_s: 60.0 + rng.below(7_200) as f64,
                gpus,
                replicas: if gpus <= 2 {
                    1 + rng.below(2) as u32
                } else {
                    1
                },
                estimated_runtime_s: (rng.below(2) == 0).then(|| 60.0 + rng.below(7_200) as f64),
                gpu_models: match rng.below(12) {
                    0 => vec![GpuModel::normalize("A100")],
                    1 => vec![GpuModel::normalize("H100")],
                    _ => vec![],
                },
                queue: None,
                priority: rng.below(3) as i32 - 1,
                restartable: rng.below(3) == 0,
                datasets: if rng.below(40) == 0 {
                    vec!["no-such-dataset".into()]
                } else {
                    vec![]
                },
                requirements: Default::default(),
                censored: false,
                kind: None,
                gpu_percent: None,
                namespace: None,
            }
        })
        .collect()
}

#[test]
fn skipping_quiet_instants_changes_no_figure() {
    let rows = catalog::parse(example::CATALOG).expect("catalog");
    let strategies = [
        Strategy::NeverBurst,
        Strategy::Spillway,
        Strategy::NoWait,
        Strategy::starburst(),
        "constant-wait:900".parse().unwrap(),
    ];
    let mut skipped = 0;
    for seed in 0..12 {
        let jobs = trace(seed, 300);
        let private = ["2x8:A100", "1x8:A100", "3x4"][seed as usize % 3];
        let inventory = trace::parse_private_gpus(private).expect("inventory");
        let base = setup::snapshot(None, &inventory, &rows).expect("world");
        for strategy in &strategies {
            let options = Options {
                spot_interruptions_per_hour: if seed % 4 == 3 { 0.5 } else { 0.0 },
                ..Options::default()
            };
            let every = Options {
                decide_every_event: true,
                ..options.clone()
            };
            let (_, mut fast) = replay(&base, &jobs, strategy, &options, &NoPolicy, &mut |_, _| {});
            let (_, mut full) = replay(&base, &jobs, strategy, &every, &NoPolicy, &mut |_, _| {});
            assert_eq!(full.cycles_skipped, 0);
            assert_eq!(
                fast.decide_calls + fast.cycles_skipped,
                full.decide_calls,
                "seed {seed}, {strategy}: every instant is decided or skipped"
            );
            skipped += fast.cycles_skipped;
            (fast.decide_calls, fast.cycles_skipped) = (0, 0);
            full.decide_calls = 0;
            assert_eq!(
                format!("{fast:?}"),
                format!("{full:?}"),
                "seed {seed}, {private}, {strategy}"
            );
        }
    }
    assert!(skipped > 300, "only {skipped} instants skipped");
}
