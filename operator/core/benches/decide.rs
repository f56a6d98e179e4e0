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
            facts: Default::default(),
            name: format!("node-{i:05}"),
            pool: "onprem".into(),
            gpu_model: Some(GpuModel::normalize(models[i % 4])),
            gpus: 8,
            free_gpus: (i % 5 == 0) as u32 * (i % 8) as u32,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            domains: Vec::new(),
        })
        .collect();
    s.offerings = (0..500)
        .map(|i| Offering {
            facts: Default::default(),
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
            efa: Default::default(),
            environment: Environment::Cloud,
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
        // The same cycle in buffers kept from the last (the simulator's and the scheduler's
        // way since December 1, late).
        if matches!((pending, nodes), (1_000, 1_000) | (100_000, 10_000)) {
            let mut scratch = Scratch::new();
            group.bench_with_input(
                BenchmarkId::new("pending_x_nodes_kept_scratch", format!("{pending}x{nodes}")),
                &s,
                |b, s| b.iter(|| decide_with(s, &NoPolicy, now, &mut scratch)),
            );
        }
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
    // Nothing to place: every GPU busy with a running job of known end. `decide` takes its
    // short path; `decide_in_full` builds every table of the cycle.
    let busy = running_everywhere(10_000, now);
    group.bench_function("nothing_to_place/80000x10000", |b| {
        b.iter(|| decide(&busy, &NoPolicy, now))
    });
    group.bench_function("nothing_to_place_in_full/80000x10000", |b| {
        b.iter(|| spillway_core::decide::decide_in_full(&busy, &NoPolicy, now))
    });
    // A scheduler deciding in full (something changed): `decide` plus telling what changed.
    let s = snapshot(100_000, 10_000, 600);
    let mut warm = Scheduler::new(s.clone());
    warm.cycle(&NoPolicy, now);
    let job = s.jobs[0].clone();
    group.bench_function("scheduler_changed/100000x10000", |b| {
        b.iter(|| {
            warm.apply(Change::JobGone(job.id.clone()));
            warm.apply(Change::Job(Box::new(job.clone())));
            warm.cycle(&NoPolicy, now)
        })
    });
    // The operator's common turn: nothing arrived, finished or changed since the last one.
    let mut sched = settled(snapshot(100_000, 10_000, 600), now);
    let later = now + Duration::from_secs(1);
    group.bench_function("scheduler_unchanged/100000x10000", |b| {
        b.iter(|| sched.cycle(&NoPolicy, later))
    });
    group.finish();
}

/// `nodes` full private nodes, each running eight one-GPU jobs that end within the day.
fn running_everywhere(nodes: usize, now: Time) -> Snapshot {
    let mut s = snapshot(0, nodes, 600);
    for (n, node) in s.nodes.iter_mut().enumerate() {
        node.free_gpus = 0;
        for k in 0..8 {
            let i = n * 8 + k;
            let mut j = Job::new(format!("ns/run-{i:06}"), format!("team-{}", i % 8), 1, now);
            j.estimated_runtime = Some(Duration::from_secs(600 + (i % 1440) as u64 * 60));
            j.state = JobState::Running {
                nodes: vec![node.name.clone()],
                started_at: now - Duration::from_secs(300),
                environment: Environment::Private,
            };
            s.jobs.push(j);
        }
    }
    s
}

/// A scheduler on `s` after its starts were carried out, so that its last plan asks for
/// nothing.
fn settled(s: Snapshot, now: Time) -> Scheduler {
    let mut sched = Scheduler::new(s);
    loop {
        let plan = sched.cycle(&NoPolicy, now);
        if plan.starts.is_empty() && plan.launches.is_empty() && plan.terminations.is_empty() {
            return sched;
        }
        let snap = sched.snapshot();
        let jobs: std::collections::HashMap<&str, &Job> =
            snap.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        let mut nodes: std::collections::HashMap<&str, Node> = std::collections::HashMap::new();
        let mut changes = Vec::new();
        for st in &plan.starts {
            let mut job = jobs[st.job.as_str()].clone();
            for n in &st.nodes {
                let node = nodes
                    .entry(n.as_str())
                    .or_insert_with(|| snap.nodes.iter().find(|x| &x.name == n).unwrap().clone());
                node.free_gpus -= job.gpus_per_replica;
            }
            job.state = JobState::Running {
                nodes: st.nodes.clone(),
                started_at: now,
                environment: Environment::Private,
            };
            changes.push(Change::Job(Box::new(job)));
        }
        changes.extend(nodes.into_values().map(Change::Node));
        for c in changes {
            sched.apply(c);
        }
    }
}

/// `Scheduler::sync`, as the operator calls it at every turn with the world rebuilt from its
/// caches: the same world again, the same world with its jobs in another order and back (two
/// calls per iteration), and two worlds one job apart in turn (two calls, one change each).
fn bench_sync(c: &mut Criterion) {
    let mut group = c.benchmark_group("sync");
    group.sample_size(20);
    for (pending, nodes) in [(1_000, 125), (10_000, 1_000)] {
        let a = snapshot(pending, nodes, 600);
        let mut reordered = a.clone();
        reordered.jobs.reverse();
        let mut b = a.clone();
        b.jobs[pending / 2].priority += 1;
        let mut sched = Scheduler::default();
        let _ = sched.sync(&a);
        group.bench_function(format!("unchanged/{pending}x{nodes}"), |bench| {
            bench.iter(|| sched.sync(&a))
        });
        group.bench_function(format!("unchanged_reordered/{pending}x{nodes}"), |bench| {
            bench.iter(|| {
                let _ = sched.sync(&reordered);
                sched.sync(&a)
            })
        });
        let mut sched = Scheduler::default();
        let _ = sched.sync(&a);
        group.bench_function(
            format!("one_job_changed_twice/{pending}x{nodes}"),
            |bench| {
                bench.iter(|| {
                    let _ = sched.sync(&b);
                    sched.sync(&a)
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_decide, bench_sync);
criterion_main!(benches);
