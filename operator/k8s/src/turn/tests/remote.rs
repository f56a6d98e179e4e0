//! Cluster pools: a start in another cluster, its pods seen back at home, their garbage, and a
//! cluster that stops answering.

use kube::ResourceExt;
use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::error::api_error;
use crate::executor::Failure;
use crate::remote::{RemoteCluster, RemoteState};

/// Queue `q` bursting (to any pool), private pool `onprem` with one full 8-GPU node, and
/// cluster pool `dc2` with one 8-GPU node `gpu-1` there.
fn with_dc2(state: RemoteState) -> crate::world::Inputs {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s"}}),
    )];
    i.pools.push(cluster_pool("dc2", 1.5));
    i.remote = vec![RemoteCluster {
        pool: "dc2".into(),
        state,
        nodes: vec![remote_node("gpu-1", 8)],
        pods: Vec::new(),
        jobs: Vec::new(),
        jobs_problem: None,
        jobs_known: true,
        retiring: false,
    }];
    i
}

#[test]
fn a_job_no_home_node_can_hold_starts_in_the_other_cluster_without_an_owner_there() {
    let mut i = with_dc2(RemoteState::Connected);
    i.jobs = vec![job("train").gpus(4).build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert!(creates(&t).is_empty(), "nothing at home: {:?}", kinds(&t));
    let made = remote_creates(&t);
    assert_eq!(made.len(), 1, "{:?}", kinds(&t));
    let (pool, pod) = &made[0];
    assert_eq!(pool, "dc2");
    assert_eq!(pod.namespace().as_deref(), Some("spillway-jobs"));
    assert_eq!(pod.name_any(), "train-uid-trai-0-0");
    assert!(pod.metadata.owner_references.is_none());
    assert_eq!(pod.labels()[crate::labels::HOME_CLUSTER_LABEL], HOME);
    assert_eq!(pod.labels()[crate::labels::JOB_UID_LABEL], "uid-train");
    assert_eq!(pod.labels()[crate::labels::JOB_NAMESPACE_LABEL], NS);
    assert_eq!(pod.annotations()[crate::labels::NODE_ANNOTATION], "gpu-1");
    let env: Vec<(String, String)> = pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    let attrs = env
        .iter()
        .find(|(k, _)| k == "OTEL_RESOURCE_ATTRIBUTES")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(attrs.contains("spillway.environment=remote"), "{attrs}");
    assert!(attrs.contains("k8s.cluster.name=dc2"), "{attrs}");
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["phase"], "Running");
    assert_eq!(st["environment"], "remote");
    assert_eq!(st["pool"], "dc2");
    assert_eq!(st["decision"]["reason"], "RemoteCapacity");

    // The pod appears there, Running: the job runs, nothing is created again; it succeeds.
    i.remote[0].pods = vec![seen_there(pod, "Running")];
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(remote_creates(&t).is_empty());
    i.remote[0].pods = vec![seen_there(pod, "Succeeded")];
    let t = l.turn(&i, None, noon() + minutes(30));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["phase"], "Succeeded");
}

#[test]
fn home_capacity_comes_first() {
    let mut i = with_dc2(RemoteState::Connected);
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").gpus(4).build()];
    let t = Loop::new().turn(&i, None, noon());
    assert_eq!(creates(&t).len(), 1);
    assert!(remote_creates(&t).is_empty());
}

#[test]
fn a_remote_pod_whose_job_is_gone_is_deleted_there_once() {
    let mut i = with_dc2(RemoteState::Connected);
    let gone = job("gone").gpus(4).build();
    let created = crate::remote::view::remote_pod(
        crate::pods::replica_pod(&gone, 0, 0, "gpu-1", Some(&cluster_pool("dc2", 1.5))),
        &gone,
        "spillway-jobs",
        HOME,
    );
    i.remote[0].pods = vec![seen_there(&created, "Running")];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let deletes: Vec<_> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteRemotePod {
                pool,
                namespace,
                name,
                ..
            } => Some((pool.clone(), namespace.clone(), name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deletes,
        [(
            "dc2".into(),
            "spillway-jobs".into(),
            "gone-uid-gone-0-0".into()
        )]
    );
    // Its token Secret there goes with it.
    assert!(t.actions.iter().any(|a| matches!(a,
        Action::DeleteRemoteSecret { pool, name, .. } if pool == "dc2" && name == "spillway-token-uid-gone")));
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(!kinds(&t).contains(&"delete_remote_pod"), "asked once");
    // The delete failed (the cluster went away): asked again at the next turn.
    let failed = Failure {
        action: Action::DeleteRemotePod {
            pool: "dc2".into(),
            namespace: "spillway-jobs".into(),
            name: "gone-uid-gone-0-0".into(),
            uid: "remote-uid-gone-uid-gone-0-0".into(),
            grace_seconds: None,
        },
        error: api_error(503, "ServiceUnavailable", "down"),
    };
    l.state.feedback(&failed);
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(kinds(&t).contains(&"delete_remote_pod"));
}

#[test]
fn an_unreachable_cluster_takes_no_new_job_keeps_its_running_ones_then_loses_them() {
    let mut i = with_dc2(RemoteState::Connected);
    i.jobs = vec![job("train").gpus(4).restartable().build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let (_, pod) = remote_creates(&t).remove(0);
    i.remote[0].pods = vec![seen_there(&pod, "Running")];
    l.turn(&i, None, noon() + minutes(1));

    // The other API server stops answering: Ready=False (Unreachable), a Warning; the job
    // runs on as last seen; a new job does not go there.
    i.remote[0].state = RemoteState::Unreachable {
        since: noon() + minutes(2),
        error: "connection refused".into(),
    };
    i.jobs.push(job("second").gpus(4).build());
    let t = l.turn(&i, None, noon() + minutes(3));
    let st = status_of(&t, StatusKind::ComputePool, "dc2").expect("pool status");
    let (ready, reason, message) = condition(&st, "Ready").expect("Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "Unreachable"));
    assert!(message.contains("connection refused"), "{message}");
    assert!(events(&t).contains(&("dc2".into(), "Unreachable".into(), true)));
    assert!(remote_creates(&t).is_empty(), "no new job there");
    assert!(status_of(&t, StatusKind::GpuJob, "train").is_none_or(|s| s["phase"] == "Running"));

    // Past lostAfter (10m): the job is lost with the cluster and requeued; deleting its pod
    // there fails while the cluster is away.
    let t = l.turn(&i, None, noon() + minutes(13));
    for a in &t.actions {
        if matches!(a, Action::DeleteRemotePod { .. }) {
            l.state.feedback(&Failure {
                action: a.clone(),
                error: api_error(503, "ServiceUnavailable", "down"),
            });
        }
    }
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("requeued");
    assert_eq!(st["phase"], "Queued", "{st}");
    assert_eq!(st["restarts"], 1);

    // It answers again: Ready, and the old attempt's pod there is deleted.
    i.remote[0].state = RemoteState::Connected;
    let t = l.turn(&i, None, noon() + minutes(14));
    let st = status_of(&t, StatusKind::ComputePool, "dc2").expect("pool status");
    assert_eq!(condition(&st, "Ready").expect("Ready").0, "True");
    assert!(
        t.actions.iter().any(
            |a| matches!(a, Action::DeleteRemotePod { name, .. } if name == "train-uid-trai-0-0")
        ),
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn a_cluster_pool_that_cannot_connect_says_why() {
    let i = with_dc2(RemoteState::Connecting {
        error: Some("Secret spillway-system/dc2 not found".into()),
        since: Some(noon()),
    });
    let t = Loop::new().turn(&i, None, noon());
    let st = status_of(&t, StatusKind::ComputePool, "dc2").expect("pool status");
    let (ready, reason, message) = condition(&st, "Ready").expect("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "ConnectionFailed")
    );
    assert!(message.contains("not found"), "{message}");
}

#[test]
fn remote_gpu_time_is_billed_to_the_queue_and_the_pool() {
    let mut i = with_dc2(RemoteState::Connected);
    i.jobs = vec![job("train").gpus(4).build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let (_, pod) = remote_creates(&t).remove(0);
    i.remote[0].pods = vec![seen_there(&pod, "Running")];
    let t = l.turn(&i, None, noon() + minutes(1));
    let pool = status_of(&t, StatusKind::ComputePool, "dc2").expect("pool status");
    assert_eq!(pool["hourlyUSD"], 6.0, "{pool}");
    let t = l.turn(&i, None, noon() + minutes(61));
    let pool = status_of(&t, StatusKind::ComputePool, "dc2").expect("pool status");
    assert_eq!(pool["hourlyUSD"], 6.0, "{pool}");
    let usd = pool["thisMonthUSD"].as_f64().expect("billed");
    assert!(
        (usd - 6.0).abs() < 0.2,
        "4 GPUs x $1.5 for about an hour: {usd}"
    );
}

#[test]
fn a_new_operator_that_cannot_reach_the_other_cluster_keeps_its_jobs_there() {
    let mut i = with_dc2(RemoteState::Connected);
    i.jobs = vec![job("train").gpus(4).restartable().build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let (_, pod) = remote_creates(&t).remove(0);
    i.remote[0].pods = vec![seen_there(&pod, "Running")];
    let t = l.turn(&i, None, noon() + minutes(1));
    let running = status_of(&t, StatusKind::GpuJob, "train").expect("running");
    assert_eq!(running["phase"], "Running", "{running}");

    // A successor starts while the other API server is away: at its first turn it has no
    // connection yet, then one that has never seen a node or a pod there.
    i.jobs = vec![job("train").gpus(4).restartable().status(running).build()];
    let mut l = Loop::new();
    let mut first = i.clone();
    first.remote.clear();
    let t = l.turn(&first, None, noon() + minutes(2));
    assert!(
        status_of(&t, StatusKind::GpuJob, "train").is_none_or(|s| s["phase"] == "Running"),
        "{:?}",
        status_of(&t, StatusKind::GpuJob, "train")
    );
    i.remote[0] = RemoteCluster {
        pool: "dc2".into(),
        state: RemoteState::Connecting {
            error: Some("connection refused".into()),
            since: Some(noon() + minutes(2)),
        },
        nodes: Vec::new(),
        pods: Vec::new(),
        jobs: Vec::new(),
        jobs_problem: None,
        jobs_known: true,
        retiring: false,
    };
    for m in [3, 5] {
        let t = l.turn(&i, None, noon() + minutes(m));
        assert!(remote_creates(&t).is_empty(), "nothing made there again");
        assert!(
            status_of(&t, StatusKind::GpuJob, "train").is_none_or(|s| s["phase"] == "Running"),
            "{:?}",
            status_of(&t, StatusKind::GpuJob, "train")
        );
    }
    // Still unseen once its lostAfter (10m) has passed since the first failure: lost and
    // requeued, like a job on a lost node.
    let t = l.turn(&i, None, noon() + minutes(13));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("requeued");
    assert_eq!(
        (&st["phase"], &st["restarts"]),
        (&json!("Queued"), &json!(1)),
        "{st}"
    );
}

#[test]
fn a_job_whose_pods_name_a_secret_never_goes_to_another_cluster_and_says_why() {
    let mut i = with_dc2(RemoteState::Connected);
    let mut j = job("thief").gpus(4);
    j.0["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "loot", "secret": {"secretName": "spillway-token-other"}}]);
    i.jobs = vec![j.build()];
    let t = Loop::new().turn(&i, None, noon());
    assert!(remote_creates(&t).is_empty(), "{:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "thief").expect("job status");
    assert_eq!(st["phase"], "Queued");
    let message = st["decision"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot run in another cluster")
            && message.contains("volumes[0] (loot): a Secret volume"),
        "{st}"
    );
}

#[test]
fn a_pending_job_waits_while_a_cluster_its_queue_may_use_is_unseen() {
    // An operator that has not listed the other cluster yet: the job's pods may be there.
    let mut i = with_dc2(RemoteState::Connecting {
        error: None,
        since: None,
    });
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").gpus(4).build()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    assert!(
        creates(&t).is_empty() && remote_creates(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["decision"]["reason"], "ClusterUnseen", "{st}");
    assert!(t.wake.is_some(), "looks again");
    // Listed (nothing of the job there): it is placed.
    i.remote[0].state = RemoteState::Connected;
    let t = l.turn(&i, None, noon() + minutes(1));
    assert_eq!(creates(&t).len(), 1, "{:?}", kinds(&t));
}

#[test]
fn the_pods_left_in_a_place_the_pool_no_longer_uses_are_deleted_through_it() {
    let mut i = with_dc2(RemoteState::Connected);
    let train = job("train")
        .gpus(4)
        .status(json!({"phase": "Running"}))
        .build();
    // The pool moved to another namespace (or was deleted): its old place is retiring, and
    // holds a pod of a job that still exists, and one of another home cluster.
    let made = |home: &str| {
        let mut p = crate::remote::view::remote_pod(
            crate::pods::replica_pod(&train, 0, 0, "gpu-1", Some(&cluster_pool("dc2", 1.5))),
            &train,
            "old-jobs",
            home,
        );
        if home != HOME {
            p.metadata.name = Some("theirs".into());
        }
        seen_there(&p, "Running")
    };
    i.jobs = vec![train.clone()];
    i.remote.push(RemoteCluster {
        pool: "dc2#1".into(),
        state: RemoteState::Connected,
        nodes: Vec::new(),
        pods: vec![made(HOME), made("another-home-cluster")],
        jobs: Vec::new(),
        jobs_problem: None,
        jobs_known: true,
        retiring: true,
    });
    let t = Loop::new().turn(&i, None, noon());
    let deletes: Vec<(String, String)> = t
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteRemotePod { pool, name, .. } => Some((pool.clone(), name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deletes,
        [("dc2#1".to_string(), "train-uid-trai-0-0".to_string())],
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn pods_listed_there_before_the_nodes_are_not_seen_until_the_cluster_is() {
    // An operator killed right after creating a job's pods there, before its status said so.
    let mut i = with_dc2(RemoteState::Connected);
    i.jobs = vec![job("train").gpus(4).restartable().build()];
    let t = Loop::new().turn(&i, None, noon());
    let (_, pod) = remote_creates(&t).remove(0);
    let there = seen_there(&pod, "Running");

    // Its successor, with home GPUs free: the pods' list is done, the nodes' is not yet (the
    // cluster is still unseen). The pods are not seen on nodes it has not seen, which would
    // take the job for lost and start it at home: it waits.
    i.nodes = vec![node("a", "onprem", 8)];
    i.remote[0].state = RemoteState::Connecting {
        error: None,
        since: None,
    };
    i.remote[0].nodes = Vec::new();
    i.remote[0].pods = vec![there.clone()];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon() + minutes(1));
    assert!(creates(&t).is_empty(), "started at home: {:?}", kinds(&t));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["decision"]["reason"], "ClusterUnseen", "{st}");
    assert!(st.get("restarts").is_none_or(|r| r == 0), "{st}");

    // Listed: it runs there, as started.
    i.remote[0].state = RemoteState::Connected;
    i.remote[0].nodes = vec![remote_node("gpu-1", 8)];
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(
        creates(&t).is_empty() && remote_creates(&t).is_empty(),
        "{:?}",
        kinds(&t)
    );
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(
        (&st["phase"], &st["pool"]),
        (&json!("Running"), &json!("dc2")),
        "{st}"
    );
}
