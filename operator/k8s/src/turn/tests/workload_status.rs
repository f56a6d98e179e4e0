//! A labelled workload's GpuJob status while the caches lag behind what the loop wrote: at a
//! thousand nodes the watch of GpuJobs ran minutes behind, and each status read back from an
//! older one was written again (23 status writes per job where 4 do).

use std::sync::Arc;

use serde_json::{Value, json};
use spillway_api::{GpuJob, GpuJobStatus};

use super::fixtures::*;
use super::workloads::{applied, dynamic, job_pod, merge, patches, stored, workload};
use crate::actions::{Action, StatusKind};
use crate::turn::Turn;
use crate::world::Inputs;

/// The GpuJob statuses turn `t` wrote.
fn statuses(t: &Turn) -> Vec<Value> {
    (t.actions.iter())
        .filter_map(|a| match a {
            Action::ApplyStatus(p) if p.kind == StatusKind::GpuJob => {
                Some(p.body["status"].clone())
            }
            _ => None,
        })
        .collect()
}

fn sorted_nodes(st: &Value) -> Vec<String> {
    // None written: none.
    let mut n: Vec<String> = serde_json::from_value(st["nodes"].clone()).unwrap_or_default();
    n.sort();
    n
}

/// A labelled Job `name` of `replicas` 4-GPU pods on nodes a and b of 4 GPUs each: its GpuJob
/// made and stored, then the turn that runs it (at noon plus a minute).
fn run_on_two_nodes(name: &str, replicas: u32) -> (Inputs, Value, Loop, Arc<GpuJob>, Turn) {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 4), node("b", "onprem", 4)];
    let w = workload(name, replicas, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let made = applied(&l.turn(&i, None, noon()));
    let job = stored(made[0].clone());
    i.jobs = vec![job.clone()];
    let t = l.turn(&i, None, noon() + minutes(1));
    (i, w, l, job, t)
}

#[test]
fn a_run_whose_status_the_cache_shows_late_is_not_written_again_while_its_pods_wait() {
    let (mut i, mut w, mut l, job, t) = run_on_two_nodes("pair", 2);
    let p = patches(&t);
    assert_eq!(p[0].what, "run", "{:?}", kinds(&t));
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    let run = statuses(&t);
    assert_eq!(run.len(), 1);
    assert_eq!(sorted_nodes(&run[0]), ["a", "b"]);

    // The Job controller made both pods; the scheduler has bound neither. The cache shows,
    // at each turn, the status as it was written two turns before.
    let unbound = |n: u32| {
        let mut pod = (*job_pod(&w, n, "", "Pending")).clone();
        pod.spec.as_mut().expect("spec").node_name = None;
        Arc::new(pod)
    };
    i.pods = vec![unbound(0), unbound(1)];
    let mut latest: Vec<Option<Value>> = vec![None, Some(run[0].clone())];
    let mut writes = Vec::new();
    let show = |i: &mut Inputs, st: &Option<Value>| {
        let mut gj = (*job).clone();
        gj.status = st
            .as_ref()
            .map(|s| serde_json::from_value::<GpuJobStatus>(s.clone()).expect("a status"));
        i.jobs = vec![Arc::new(gj)];
    };
    for m in 2..=12 {
        show(&mut i, &latest[latest.len() - 2]);
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(patches(&t).is_empty(), "{m}: {:?}", patches(&t));
        let written = statuses(&t);
        for st in &written {
            assert_eq!(sorted_nodes(st), ["a", "b"], "{m}: {st}");
            assert_eq!(st["pool"], "onprem", "{m}: {st}");
        }
        writes.extend(written.iter().map(|st| (m, st.clone())));
        let last = written
            .last()
            .cloned()
            .or_else(|| latest.last().cloned().flatten());
        latest.push(last);
    }
    assert!(writes.is_empty(), "{writes:#?}");

    // Bound (in the other order) and running: written once, its nodes in the order the run
    // said them, then quiet once the cache shows it.
    i.pods = vec![
        job_pod(&w, 0, "b", "Running"),
        job_pod(&w, 1, "a", "Running"),
    ];
    show(&mut i, &latest[latest.len() - 1]);
    let t = l.turn(&i, None, noon() + minutes(13));
    let written = statuses(&t);
    assert_eq!(written.len(), 1, "{written:#?}");
    assert_eq!(written[0]["nodes"], json!(["a", "b"]));
    let running = (written[0]["conditions"]
        .as_array()
        .expect("conditions")
        .iter())
    .find(|c| c["type"] == "Running")
    .expect("a Running condition");
    assert_eq!(running["reason"], "AllReplicasRunning");
    show(&mut i, &Some(written[0].clone()));
    let t = l.turn(&i, None, noon() + minutes(14));
    assert!(statuses(&t).is_empty(), "{:#?}", statuses(&t));
}

#[test]
fn a_run_placed_again_is_not_taken_for_the_first_one_the_cache_still_shows() {
    // The first run's patch was refused after its status (on a) was written; a has been taken
    // since, and the job is run again on b while the cache still shows the first status.
    let (mut i, mut w, mut l, job, t) = run_on_two_nodes("solo", 1);
    let run = (t.actions.iter())
        .find(|a| matches!(a, Action::PatchWorkload(p) if p.what == "run"))
        .cloned()
        .expect("a run");
    let first = statuses(&t);
    assert_eq!(first[0]["nodes"], json!(["a"]));
    l.state.feedback(&crate::executor::Failure {
        action: run,
        error: crate::error::api_error(409, "Conflict", "the object has been modified"),
    });
    let mut gj = (*job).clone();
    gj.status = Some(serde_json::from_value(first[0].clone()).expect("a status"));
    i.jobs = vec![Arc::new(gj)];
    let other = workload("other", 1, false);
    i.pods = vec![job_pod(&other, 0, "a", "Running")];
    let t = l.turn(&i, None, noon() + minutes(2));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].what, "run");
    assert_eq!(super::workloads::pinned_node(&p[0].patch), "b");
    let second = statuses(&t);
    assert_eq!(second.len(), 1, "{second:#?}");
    assert_eq!(second[0]["nodes"], json!(["b"]));
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    // Its pod is made, not bound yet; the cache shows the first run's status still.
    let mut pod = (*job_pod(&w, 0, "", "Pending")).clone();
    pod.spec.as_mut().expect("spec").node_name = None;
    i.pods.push(Arc::new(pod));
    for m in 3..=6 {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(patches(&t).is_empty(), "{m}: {:?}", patches(&t));
        for st in statuses(&t) {
            assert_eq!(st["nodes"], json!(["b"]), "{m}: {st}");
        }
    }
}
