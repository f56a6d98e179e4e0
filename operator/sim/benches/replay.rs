//! Full replay of the openb default trace with 32 private GPUs, as `spillway simulate` runs it
//! (the pods still running when the trace was cut left out), and with those pods kept
//! (`--keep-censored`); trace loading on its own. The trace is `$OPENB` (docs/simulator.md says
//! where to get it), else `../shared/data/...` beside the repository, else the bundled extract.

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use spillway_core::{NoPolicy, catalog};
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, compare, example, setup};

fn openb() -> (String, String) {
    let path = std::env::var_os("OPENB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv")
        });
    match std::fs::read_to_string(&path) {
        Ok(text) => ("openb_default".into(), text),
        Err(_) => ("bundled_extract".into(), example::TRACE.to_string()),
    }
}

fn bench_replay(c: &mut Criterion) {
    let (name, text) = openb();
    let all = trace::parse(&text, TraceFormat::Openb).expect("trace parses");
    let mut jobs = all.clone();
    trace::drop_censored(&mut jobs);
    let rows = catalog::parse(example::CATALOG).expect("catalog parses");
    let inventory = trace::parse_private_gpus("4x8").expect("inventory");
    let base = setup::snapshot(None, &inventory, &rows).expect("world");
    let options = Options::default();

    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.bench_function(format!("load_{name}"), |b| {
        b.iter(|| trace::parse(&text, TraceFormat::Openb).map(|j| j.len()))
    });
    for (kept, trace) in [("", &jobs), ("_keep_censored", &all)] {
        for strategy in [Strategy::Spillway, Strategy::starburst(), Strategy::NoWait] {
            group.bench_function(format!("{name}{kept}_32gpus_{strategy}"), |b| {
                b.iter(|| {
                    compare(
                        &base,
                        trace,
                        std::slice::from_ref(&strategy),
                        &options,
                        &NoPolicy,
                    )
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_replay);
criterion_main!(benches);
