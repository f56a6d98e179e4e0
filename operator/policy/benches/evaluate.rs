//! Policy evaluation throughput: `effects` for one job against the six example policy files'
//! rules (rules evaluated per second = rules x calls per second). docs/performance.md.

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use spillway_api::manifests::Manifests;
use spillway_core::*;
use spillway_policy::PolicyEngine;

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let m = Manifests::load(&dir).expect("example policies load");
    let policies: Vec<_> = m.policies.into_iter().map(|p| p.object).collect();
    let engine = PolicyEngine::compile(&policies).expect("example policies compile");
    let mut queue = Queue::new("research");
    queue.budget_monthly_usd = Some(50_000.0);
    let mut job = Job::new("ml/train", "research", 8, Time::from_millis(0));
    job.datasets = vec!["contracts".into()];
    job.estimated_runtime = Some(Duration::from_secs(7200));
    let dataset = Dataset {
        name: "contracts".into(),
        classification: Classification::Confidential,
        cloud_regions: vec![],
        remote_locations: vec![],
        size_gib: 50.0,
        egress_usd_per_gib: 0.09,
    };
    let state = QueueState::default();
    let ctx = PolicyContext {
        job: &job,
        queue: &queue,
        queue_state: &state,
        datasets: vec![&dataset],
        waited: Duration::from_secs(1800),
        now: Time::from_millis(1_800_000),
    };
    let mut group = c.benchmark_group("policy");
    group.throughput(Throughput::Elements(engine.len() as u64));
    group.bench_function(format!("effects_{}_rules", engine.len()), |b| {
        b.iter(|| engine.effects(&ctx))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
