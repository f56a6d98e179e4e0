//! The CPU cost of one operator turn without the API: building the snapshot from the caches
//! (1,000 GpuJobs, 1,000 of their pods, 125 nodes) and deciding on it; and a whole turn on a
//! world in which nothing changed, or only a queue's status or one pod, at 1,000 and 10,000 jobs.

use spillway_k8s::hashing::{HashMap, HashMapExt};
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_core::{Settings, Time};
use spillway_k8s::actions::{Action, StatusKind};
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

/// What the caches show once the turn's writes landed: the jobs' and queues' statuses and the
/// jobs' trace context annotations (new objects, as a watch hands out).
fn settle(i: &mut world::Inputs, actions: &[Action]) {
    for a in actions {
        match a {
            Action::ApplyStatus(p) => {
                let status = p.body["status"].clone();
                match p.kind {
                    StatusKind::GpuJob => {
                        if let Some(j) = i.jobs.iter_mut().find(|j| {
                            j.metadata.name.as_deref() == Some(p.name.as_str())
                                && j.metadata.namespace == p.namespace
                        }) {
                            let mut job = (**j).clone();
                            job.status = Some(serde_json::from_value(status).unwrap());
                            *j = Arc::new(job);
                        }
                    }
                    StatusKind::GpuQueue => {
                        for q in i.queues.iter_mut() {
                            let mut queue = (**q).clone();
                            queue.status = Some(serde_json::from_value(status.clone()).unwrap());
                            *q = Arc::new(queue);
                        }
                    }
                    _ => {}
                }
            }
            Action::ApplyWorkloadJob(j) => {
                let mut job = (**j).clone();
                let name = job.metadata.name.clone().unwrap_or_default();
                job.metadata.uid = Some(format!("gj-{name}"));
                job.metadata.resource_version = Some("1".into());
                job.metadata.creation_timestamp =
                    Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
                match i
                    .jobs
                    .iter_mut()
                    .find(|j| j.metadata.name == job.metadata.name)
                {
                    Some(j) => *j = Arc::new(job),
                    None => i.jobs.push(Arc::new(job)),
                }
            }
            // The workload takes the patch, and a run's Job controller makes its pod on the
            // node the placement pins.
            Action::PatchWorkload(p) => {
                let Some(w) = i
                    .workloads
                    .iter_mut()
                    .find(|w| w.metadata.name.as_deref() == Some(p.name.as_str()))
                else {
                    continue;
                };
                let mut v = serde_json::to_value(&**w).unwrap();
                merge(&mut v, &p.patch);
                v["metadata"]["resourceVersion"] = json!("2");
                *w = Arc::new(serde_json::from_value(v.clone()).unwrap());
                if p.what == "run" {
                    let t = &v["spec"]["template"];
                    let node = t["spec"]["affinity"]["nodeAffinity"]
                        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                        ["matchFields"][0]["values"][0]
                        .clone();
                    i.pods.push(Arc::new(
                        serde_json::from_value(json!({
                            "metadata": {"name": format!("{}-0", p.name), "namespace": "ns",
                                         "uid": format!("pod-{}", p.name), "labels": t["metadata"]["labels"],
                                         "creationTimestamp": "2026-01-01T00:01:00Z",
                                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": p.name, "uid": v["metadata"]["uid"], "controller": true}]},
                            "spec": {"nodeName": node, "containers": [{"name": "c",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                            "status": {"phase": "Running"},
                        }))
                        .unwrap(),
                    ));
                }
            }
            Action::Annotate {
                namespace,
                name,
                key,
                value,
            } => {
                if let Some(j) = i.jobs.iter_mut().find(|j| {
                    j.metadata.name.as_deref() == Some(name.as_str())
                        && j.metadata.namespace.as_deref() == Some(namespace.as_str())
                }) {
                    let mut job = (**j).clone();
                    job.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(key.clone(), value.clone());
                    *j = Arc::new(job);
                }
            }
            _ => {}
        }
    }
}

fn merge(a: &mut serde_json::Value, b: &serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// `jobs` labelled batch Jobs of one 1-GPU pod each (made suspended, as the webhook holds
/// them), on `nodes` 8-GPU nodes.
fn workload_inputs(jobs: usize, nodes: usize) -> world::Inputs {
    let mut i = inputs(0, 0, nodes);
    for j in 0..jobs {
        i.workloads.push(Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("w{j}"), "namespace": "ns", "uid": format!("w-{j}"),
                             "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
                "spec": {"parallelism": 1, "suspend": true,
                         "template": {"spec": {"restartPolicy": "Never", "containers": [
                             {"name": "main", "image": "trainer",
                              "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
            }))
            .unwrap(),
        ));
    }
    i
}

/// A whole turn (`State::turn`: the snapshot, the policies, the core's cycle, statuses and
/// what to write) on a world in which nothing changed since the last turn: every job running
/// with its pod, its status and trace context written by an earlier turn and shown by the
/// caches. Then the same world with its queue's status written again between two turns (the
/// loop writes it whenever a job of the queue starts or ends), with the clock moving a second
/// a turn, and with one pod handed out as a new object between turns.
fn whole_turn(c: &mut Criterion) {
    let metrics = spillway_k8s::Metrics::default();
    let now = Time::from_secs_f64(1.8e9);
    let cases = [
        ("running", 1_000, 125),
        ("running", 10_000, 1_250),
        ("running labelled Jobs", 10_000, 1_250),
    ];
    for (what, jobs, nodes) in cases {
        let mut i = if what == "running" {
            inputs(jobs, jobs, nodes)
        } else {
            workload_inputs(jobs, nodes)
        };
        let mut state = State::new(TurnSettings::default());
        // Until a turn writes nothing, the caches show what it wrote.
        for _ in 0..5 {
            let t = state.turn(i.clone(), None, &metrics, now);
            settle(&mut i, &t.actions);
        }
        assert!(
            state
                .turn(i.clone(), None, &metrics, now)
                .actions
                .is_empty()
        );
        c.bench_function(
            &format!("turn: whole turn, nothing changed, {jobs} {what}, {nodes} nodes"),
            |b| b.iter(|| state.turn(i.clone(), None, &metrics, now)),
        );
        let mut queues = [i.queues[0].clone(), i.queues[0].clone()];
        for (n, q) in queues.iter_mut().enumerate() {
            let mut queue = (**q).clone();
            queue.status.get_or_insert_default().pending = n as i64 + 1;
            *q = Arc::new(queue);
        }
        let mut k = 0;
        c.bench_function(
            &format!("turn: whole turn, queue status written, {jobs} {what}, {nodes} nodes"),
            |b| {
                b.iter(|| {
                    k ^= 1;
                    i.queues[0] = queues[k].clone();
                    state.turn(i.clone(), None, &metrics, now)
                })
            },
        );
        // One pod handed out as a new object between turns (a watch event that changed
        // nothing the loop reads, such as a status heartbeat): its job is looked at again.
        let pods = [i.pods[0].clone(), Arc::new((*i.pods[0]).clone())];
        c.bench_function(
            &format!("turn: whole turn, one pod new, {jobs} {what}, {nodes} nodes"),
            |b| {
                b.iter(|| {
                    k ^= 1;
                    i.pods[0] = pods[k].clone();
                    state.turn(i.clone(), None, &metrics, now)
                })
            },
        );
        // Nothing changed but the clock, a second a turn: what accrues with time (the
        // indicators' GPU-seconds of every running job, spend) is worked out every turn.
        let mut clock = now;
        c.bench_function(
            &format!("turn: whole turn, the clock moved 1 s, {jobs} {what}, {nodes} nodes"),
            |b| {
                b.iter(|| {
                    clock = clock + spillway_core::Duration::from_secs(1);
                    state.turn(i.clone(), None, &metrics, clock)
                })
            },
        );
    }
}

criterion_group!(benches, bench, whole_turn);
criterion_main!(benches);
