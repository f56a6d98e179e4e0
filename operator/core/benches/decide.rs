//! One `decide` cycle on large synthetic snapshots: pending jobs x private nodes, with 500
//! cloud offerings. Results go to docs/performance.md.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use spillway_core::*;

/// The time the snapshots are decided at.
const NOW_MS: i64 = 1_000_000_000;

/// `pending` jobs queued over the `spread_s` seconds before now, `nodes` busy private nodes.
fn snapshot(pending: usize, nodes: usize, spread_s: i64) -> Snapshot {
    let models = ["A100", "H100", "L40S", "A10G"];
    let mut s = Snapshot::default();
    s.settings.explain = false;
    s.pools = vec![Pool::private("onprem"), Pool::cloud("aws", "us-east-1")];
    s.queues = (0..8)
        .map(|i| {
            let mut q = Queue::new(format!("team-{i}"));
            q.weight = 1 + i % 3;
            q.burst.enabled = true;
            q.burst.max_wait = Duration::from_secs(900);
            q.budget_hourly_usd = Some(500.0);
            q
        })
        .collect();
    // Nodes mostly full: a realistic busy cluster, where most pending jobs wait.
    s.nodes = (0..nodes)
        .map(|i| Node {
            name: format!("node-{i:05}"),
            pool: "onprem".into(),
            gpu_model: Some(GpuModel::normalize(models[i % 4])),
            gpus: 8,
            free_gpus: (i % 5 == 0) as u32 * (i % 8) as u32,
            schedulable: true,
            instance_id: None,
            idle_since: None,
        })
        .collect();
    s.offerings = (0..500)
        .map(|i| Offering {
            pool: "aws".into(),
            instance_type: format!("g{}.{}xlarge", i % 7, i % 50),
            gpu_model: GpuModel::normalize(models[i % 4]),
            gpus: [1, 4, 8][i % 3],
            capacity_type: if i % 2 == 0 {
                CapacityType::OnDemand
            } else {
                CapacityType::Spot
            },
            region: "us-east-1".into(),
            zone: format!("us-east-1{}", ["a", "b", "c"][i % 3]),
            hourly_price: 1.0 + (i % 37) as f64,
            unavailable_until: None,
            gpu_memory_gib: 0.0,
            recent_interruptions: 0,
        })
        .collect();
    s.jobs = (0..pending)
        .map(|i| {
            let mut j = Job::new(
                format!("ns/job-{i:06}"),
                format!("team-{}", i % 8),
                [1, 2, 4, 8][i % 4],
                Time::from_millis(
                    NOW_MS - spread_s * 1000 + (i as i64 * spread_s * 1000) / pending.max(1) as i64,
                ),
            );
            j.priority = (i % 3) as i32;
            j.estimated_runtime =
                (i % 2 == 0).then(|| Duration::from_secs(600 + (i % 100) as u64 * 60));
            if i % 5 == 0 {
                j.gpu_models = vec![GpuModel::normalize(models[i % 4])];
            }
            j
        })
        .collect();
    s
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    let now = Time::from_millis(NOW_MS);
    // Jobs queued in the last 10 minutes: none has waited past its 15-minute maxWait.
    for (pending, nodes) in [
        (1_000, 1_000),
        (10_000, 1_000),
        (1_000, 10_000),
        (10_000, 10_000),
        (100_000, 10_000),
    ] {
        let s = snapshot(pending, nodes, 600);
        group.bench_with_input(
            BenchmarkId::new("pending_x_nodes", format!("{pending}x{nodes}")),
            &s,
            |b, s| b.iter(|| decide(s, &NoPolicy, now)),
        );
    }
    // A burst storm: jobs queued over the last 2 hours, most past maxWait, each priced against
    // 500 offerings until the queues' budgets run out.
    for pending in [1_000, 10_000] {
        let s = snapshot(pending, 1_000, 7_200);
        group.bench_with_input(
            BenchmarkId::new("burst_storm", format!("{pending}x1000")),
            &s,
            |b, s| b.iter(|| decide(s, &NoPolicy, now)),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
