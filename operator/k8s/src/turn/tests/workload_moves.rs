//! A labelled workload whose job moves on: moved home from the cloud (suspended, then run again
//! on the private node held for it); an operator that died between running a workload and
//! writing its job's status (it finds the run, or holds the workload and places it again); a
//! running workload whose job's pool becomes another cluster's.

use serde_json::json;

use super::fixtures::*;
use super::workloads::{
    applied, dynamic, job_pod, merge, patches, pinned_node, stored, suspended_leaving_its_pods,
    workload, written_status,
};
use crate::actions::StatusKind;

#[test]
fn a_restartable_workload_in_the_cloud_is_suspended_then_run_on_the_private_node_held_for_it() {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]}}),
    )];
    i.pools.push(aws_pool("aws", json!({"idleTimeout": "2m"})));
    // No private GPU yet; the job's own instance has joined.
    i.nodes = vec![cloud_node("ip-1", "aws", 8, "i-1")];
    let mut c = cloud();
    c.instance(
        "i-1",
        "aws",
        "team/job-train#0",
        "p4d.24xlarge",
        at("2026-03-10T11:57:00Z"),
    );
    let mut w = workload("train", 1, true);
    w["metadata"]["annotations"] =
        json!({"spillway.io/restartable": "true", "spillway.io/estimatedRuntime": "4h"});
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, Some(&c), noon());
    i.jobs = vec![stored(applied(&t).remove(0))];

    // Run on the instance, with the pool's tolerations.
    let t = l.turn(&i, Some(&c), noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].what, "run");
    assert_eq!(pinned_node(&p[0].patch), "ip-1");
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    i.pods = vec![job_pod(&w, 0, "ip-1", "Running")];
    let st = written_status(&mut i, &t, "job-train");
    assert_eq!(st["pool"], "aws", "{st}");
    // It runs; turns with nothing new ask nothing of it (and keep what they found).
    for k in 0..3 {
        let t = l.turn(&i, Some(&c), noon() + minutes(1));
        assert!(patches(&t).is_empty(), "turn {k}: {:?}", kinds(&t));
    }

    // A private node frees up: the job is moved home. The workload is suspended (its Job
    // controller deletes its pods; Spillway deletes none) and the node is held for it.
    i.nodes.push(node("a", "onprem", 8));
    let t = l.turn(&i, Some(&c), noon() + minutes(2));
    let suspend = suspended_leaving_its_pods(&t);
    let st = written_status(&mut i, &t, "job-train");
    assert_eq!(st["phase"], "Suspended", "{st}");
    assert_eq!(st["decision"]["reason"], "Repatriating", "{st}");
    assert_eq!(
        (st["restarts"].clone(), st["nodes"].clone()),
        (json!(1), json!(["a"]))
    );

    // Suspended, its pod gone: run again, this time pinned to the private node.
    merge(&mut w, &suspend.patch);
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    i.pods.clear();
    let t = l.turn(&i, Some(&c), noon() + minutes(3));
    let p = patches(&t);
    assert_eq!(p.len(), 1, "{:?}", kinds(&t));
    assert_eq!(p[0].what, "run");
    assert_eq!(pinned_node(&p[0].patch), "a");
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["decision"]["reason"], "Repatriated", "{st}");
}

#[test]
fn an_operator_that_died_after_running_a_workload_finds_its_pods_or_holds_it_again() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut w = workload("train", 1, true);
    i.workloads = vec![dynamic(&w)];
    let mut first = Loop::new();
    let t = first.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    let t = first.turn(&i, None, noon() + minutes(1));
    let run = patches(&t).remove(0);
    assert_eq!(run.what, "run");
    // The run landed; the operator died before the job's status was written.
    merge(&mut w, &run.patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];

    // Its successor sees the Job's pod: the job runs there, nothing is run or held again.
    let mut with_pod = i.clone();
    with_pod.pods = vec![job_pod(&w, 0, "a", "Running")];
    let t = Loop::new().turn(&with_pod, None, noon() + minutes(2));
    assert!(patches(&t).is_empty(), "{:?}", patches(&t));
    let st = status_of(&t, StatusKind::GpuJob, "job-train").expect("status");
    assert_eq!(st["phase"], "Running", "{st}");
    assert_eq!(st["nodes"], json!(["a"]), "{st}");

    // No pod made yet: the successor cannot tell the run from one made by someone else, so
    // it holds the workload and places it again once its Job controller has suspended it.
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon() + minutes(2));
    let p = patches(&t);
    assert_eq!(p.iter().map(|p| p.what).collect::<Vec<_>>(), ["suspend"]);
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("3");
    i.workloads = vec![dynamic(&w)];
    let t = l.turn(&i, None, noon() + minutes(3));
    assert_eq!(
        patches(&t).iter().map(|p| p.what).collect::<Vec<_>>(),
        ["run"]
    );
}

/// A running workload is left alone through quiet turns while its pool's status is written
/// (as it is whenever jobs start and end), and suspended once its job's pool is another
/// cluster's: a job placed there runs as a copy, not as the workload here.
#[test]
fn a_quiet_running_workload_is_suspended_once_its_pool_is_another_clusters() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    let mut w = workload("train", 1, true);
    i.workloads = vec![dynamic(&w)];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    i.jobs = vec![stored(applied(&t).remove(0))];
    let t = l.turn(&i, None, noon() + minutes(1));
    let p = patches(&t);
    assert_eq!(p.iter().map(|p| p.what).collect::<Vec<_>>(), ["run"]);
    merge(&mut w, &p[0].patch);
    w["metadata"]["resourceVersion"] = json!("2");
    i.workloads = vec![dynamic(&w)];
    i.pods = vec![job_pod(&w, 0, "a", "Running")];
    written_status(&mut i, &t, "job-train");
    // Quiet turns, the pool's status written anew before each: nothing is asked of it.
    for k in 0..3 {
        let mut pool = (*i.pools[0]).clone();
        pool.status = Some(serde_json::from_value(json!({"hourlyUSD": f64::from(k)})).unwrap());
        i.pools[0] = std::sync::Arc::new(pool);
        let t = l.turn(&i, None, noon() + minutes(2));
        assert!(patches(&t).is_empty(), "turn {k}: {:?}", kinds(&t));
    }
    // The pool of its job is another cluster's now.
    i.pools[0] = cluster_pool("onprem", 1.0);
    let t = l.turn(&i, None, noon() + minutes(3));
    assert_eq!(
        patches(&t).iter().map(|p| p.what).collect::<Vec<_>>(),
        ["suspend"],
        "{:?}",
        kinds(&t)
    );
}
