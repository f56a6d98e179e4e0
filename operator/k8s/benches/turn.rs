//! The CPU cost of one operator turn without the API: building the snapshot from the caches
//! (1,000 GpuJobs, 1,000 of their pods, 125 nodes) and deciding on it; and a whole turn on a
//! world in which nothing changed, at 1,000 and 10,000 jobs.

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_core::{Settings, Time};
use spillway_k8s::turn::{State, TurnSettings};
use spillway_k8s::{pods, world};
use spillway_policy::PolicyEngine;

fn inputs(jobs: usize, running: usize, nodes: usize) -> world::Inputs {
    let mut i = world::Inputs {
        queues: vec![Arc::new(
            serde_json::from_value::<GpuQueue>(json!({"metadata": {"name": "q"}, "spec": {}}))
                .unwrap(),
        )],
        pools: vec![Arc::new(
            serde_json::from_value::<ComputePool>(json!({"metadata": {"name": "p"},
                "spec": {"private": {"nodeSelector": {"gpu": "yes"}}}}))
            .unwrap(),
        )],
        ..world::Inputs::default()
    };
    for n in 0..nodes {
        i.nodes.push(Arc::new(
            serde_json::from_value::<Node>(json!({
                "metadata": {"name": format!("n{n}"), "labels": {"gpu": "yes"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        ));
    }
    for j in 0..jobs {
        let job: GpuJob = serde_json::from_value(json!({
            "metadata": {"name": format!("job-{j}"), "namespace": "ns", "uid": format!("u{j}"),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queue": "q", "gpusPerReplica": 1,
                     "template": {"spec": {"containers": [{"name": "c", "image": "x",
                        "env": [{"name": "A", "value": "1"}], "args": ["--lr", "0.1"]}]}}},
        }))
        .unwrap();
        if j < running {
            let mut p = pods::replica_pod(&job, 0, 0, &format!("n{}", j % nodes), None);
            // As the API server sets it on every pod.
            p.metadata.creation_timestamp =
                Some(serde_json::from_value(json!("2026-01-01T00:01:00Z")).unwrap());
            p.status = Some(serde_json::from_value(json!({"phase": "Running"})).unwrap());
            i.pods.push(Arc::new(p));
        }
        i.jobs.push(Arc::new(job));
    }
    i
}

fn bench(c: &mut Criterion) {
    let engine = PolicyEngine::empty();
    let now = Time::from_secs_f64(1.8e9);
    for (name, running) in [("1000 pending", 0), ("1000 running", 1000)] {
        let i = inputs(1000, running, 125);
        c.bench_function(&format!("turn: build snapshot, {name}, 125 nodes"), |b| {
            b.iter(|| {
                world::build(
                    &i,
                    &HashMap::new(),
                    &HashMap::new(),
                    Settings::default(),
                    now,
                )
            })
        });
        let built = world::build(
            &i,
            &HashMap::new(),
            &HashMap::new(),
            Settings::default(),
            now,
        );
        c.bench_function(&format!("turn: decide, {name}, 125 nodes"), |b| {
            b.iter(|| spillway_core::decide(&built.snapshot, &engine, now))
        });
    }
}

/// A whole turn (`State::turn`: the snapshot, the policies, the core's cycle, statuses and
/// what to write) on a world in which nothing changed since the last turn: every job running
/// with its pod, its status written by the turn before. The jobs' views are kept from the turn
/// before (`world::Memo`); the rest of the turn still goes over every job.
fn whole_turn(c: &mut Criterion) {
    let metrics = spillway_k8s::Metrics::default();
    let now = Time::from_secs_f64(1.8e9);
    for (jobs, nodes) in [(1_000, 125), (10_000, 1_250)] {
        let i = inputs(jobs, jobs, nodes);
        let mut state = State::new(TurnSettings::default());
        state.turn(i.clone(), None, &metrics, now);
        c.bench_function(
            &format!("turn: whole turn, nothing changed, {jobs} running, {nodes} nodes"),
            |b| b.iter(|| state.turn(i.clone(), None, &metrics, now)),
        );
    }
}

criterion_group!(benches, bench, whole_turn);
criterion_main!(benches);
