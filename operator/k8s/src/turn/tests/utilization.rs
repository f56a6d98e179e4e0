//! GPU utilization: each running job's figure from Prometheus' samples, idle spells, the
//! queue's idle policy (warn, suspend, exempt) and Prometheus going away.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::*;
use crate::actions::StatusKind;
use crate::utilization::{GPU_UTIL, GR_ENGINE_ACTIVE, PodUse, Samples};

/// Jobs `busy` and `idle` (one GPU each) running on private nodes `a` and `b` since 11:00, in
/// queue `q` with `idle` as its idle policy.
fn running(idle: serde_json::Value) -> crate::world::Inputs {
    let mut i = cluster();
    i.queues = vec![queue("q", json!({"idle": idle}))];
    i.nodes = vec![node("a", "onprem", 1), node("b", "onprem", 1)];
    let started = json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z",
                         "environment": "private", "pool": "onprem"});
    let busy = job("busy").status(started.clone()).build();
    let idle = job("idle").restartable().status(started).build();
    i.pods = vec![
        pod(&busy, 0, 0, "a", "Running"),
        pod(&idle, 0, 0, "b", "Running"),
    ];
    i.jobs = vec![busy, idle];
    i
}

fn samples(at: spillway_core::Time, busy: f64, idle: f64) -> Option<Arc<Samples>> {
    Some(Arc::new(Samples {
        at: Some(at),
        pods: [
            (
                (NS.to_string(), "busy-0-0".to_string()),
                PodUse {
                    percent: busy,
                    source: GR_ENGINE_ACTIVE,
                },
            ),
            (
                (NS.to_string(), "idle-0-0".to_string()),
                PodUse {
                    percent: idle,
                    source: GPU_UTIL,
                },
            ),
        ]
        .into(),
        error: None,
    }))
}

/// The jobs as the cache shows them once the turn's statuses were written.
fn seen(i: &mut crate::world::Inputs, t: &crate::turn::Turn) {
    for j in &mut i.jobs {
        let name = j.metadata.name.clone().unwrap_or_default();
        if let Some(st) = status_of(t, StatusKind::GpuJob, &name) {
            let mut job = (**j).clone();
            job.status = Some(serde_json::from_value(st).unwrap());
            *j = Arc::new(job);
        }
    }
}

#[test]
fn each_running_job_gets_its_figure_and_an_idle_one_is_warned_after_its_spell() {
    let mut i = running(json!({"threshold": 5, "after": "30m"}));
    i.utilization = samples(noon(), 80.0, 1.2);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let busy = status_of(&t, StatusKind::GpuJob, "busy").expect("busy's status");
    assert_eq!(busy["utilization"]["gpuPercent"], 80.0);
    assert_eq!(busy["utilization"]["source"], GR_ENGINE_ACTIVE);
    assert!(busy["utilization"].get("idleSince").is_none());
    let idle = status_of(&t, StatusKind::GpuJob, "idle").expect("idle's status");
    assert_eq!(idle["utilization"]["gpuPercent"], 1.2);
    assert_eq!(idle["utilization"]["idleSince"], "2026-03-10T12:00:00Z");
    assert!(condition(&idle, "Idle").is_none(), "not idle for 30m yet");
    let gauge = l.metrics.render();
    assert!(
        gauge.contains(r#"spillway_gpu_utilization_ratio{queue="q",environment="private"} 0.406"#),
        "{gauge}"
    );

    // Five minutes on, nothing moved by a point: nothing is written.
    seen(&mut i, &t);
    i.utilization = samples(noon() + minutes(5), 80.4, 1.0);
    let t = l.turn(&i, None, noon() + minutes(5));
    assert!(
        status_of(&t, StatusKind::GpuJob, "busy").is_none(),
        "{:?}",
        kinds(&t)
    );
    assert!(
        status_of(&t, StatusKind::GpuJob, "idle").is_none(),
        "{:?}",
        kinds(&t)
    );

    // Thirty minutes below 5%: warned once, with its GPUs and how long.
    i.utilization = samples(noon() + minutes(30), 80.0, 1.0);
    let t = l.turn(&i, None, noon() + minutes(30));
    let idle = status_of(&t, StatusKind::GpuJob, "idle").expect("idle's status");
    let (status, reason, message) = condition(&idle, "Idle").expect("Idle");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "IdleGPUs"));
    assert!(
        message.contains("1 GPU(s) on b") && message.contains("30m"),
        "{message}"
    );
    assert!(events(&t).contains(&("idle".into(), "Idle".into(), true)));
    assert!(evictions(&t).is_empty(), "Warn only warns");
    seen(&mut i, &t);
    let t = l.turn(&i, None, noon() + minutes(31));
    assert!(!events(&t).iter().any(|e| e.1 == "Idle"), "warned once");

    // Busy again: Idle turns False.
    i.utilization = samples(noon() + minutes(40), 80.0, 60.0);
    let t = l.turn(&i, None, noon() + minutes(40));
    let idle = status_of(&t, StatusKind::GpuJob, "idle").expect("idle's status");
    let (status, reason, _) = condition(&idle, "Idle").expect("Idle");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Busy"));
    assert!(idle["utilization"].get("idleSince").is_none());
}

#[test]
fn suspend_requeues_an_idle_restartable_job_unless_it_is_exempt() {
    let mut i = running(json!({"after": "10m", "action": "Suspend"}));
    i.utilization = samples(noon(), 80.0, 0.0);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    seen(&mut i, &t);
    i.utilization = samples(noon() + minutes(10), 80.0, 0.0);
    let t = l.turn(&i, None, noon() + minutes(10));
    assert_eq!(evictions(&t), [("idle-0-0".to_string(), 30)]);
    let idle = status_of(&t, StatusKind::GpuJob, "idle").expect("idle's status");
    assert_eq!(idle["phase"], "Queued");
    assert_eq!(idle["restarts"], 1);
    assert!(
        idle.get("utilization").is_none(),
        "measured afresh when it runs again"
    );
    let (_, reason, message) = condition(&idle, "Idle").expect("Idle");
    assert_eq!(reason, "Suspended");
    assert!(message.contains("freeing its GPUs"), "{message}");

    // It runs again (attempt 1) and idles again: a new spell, suspended again.
    seen(&mut i, &t);
    let mut again = (*i.jobs[1]).clone();
    let st = again.status.as_mut().unwrap();
    st.phase = Some(spillway_api::job::JobPhase::Running);
    st.started_at = Some(crate::clock::k8s_time(noon() + minutes(12)));
    let again = Arc::new(again);
    i.jobs[1] = again.clone();
    i.pods[1] = pod(&again, 1, 0, "b", "Running");
    let idle_again = |at| {
        let mut s = (*samples(at, 80.0, 0.0).unwrap()).clone();
        s.pods.insert(
            (NS.to_string(), "idle-1-0".to_string()),
            PodUse {
                percent: 0.5,
                source: GPU_UTIL,
            },
        );
        Some(Arc::new(s))
    };
    i.utilization = idle_again(noon() + minutes(13));
    let t = l.turn(&i, None, noon() + minutes(13));
    assert!(
        evictions(&t).is_empty(),
        "a new spell starts: {:?}",
        kinds(&t)
    );
    seen(&mut i, &t);
    i.utilization = idle_again(noon() + minutes(23));
    let t = l.turn(&i, None, noon() + minutes(23));
    assert_eq!(evictions(&t), [("idle-1-0".to_string(), 30)]);

    // Exempt by annotation (the queue allows it by default): nothing happens.
    let mut i = running(json!({"after": "10m", "action": "Suspend"}));
    let mut j = (*i.jobs[1]).clone();
    j.metadata.annotations = Some([("spillway.io/idle-exempt".into(), "true".into())].into());
    i.jobs[1] = Arc::new(j);
    i.utilization = samples(noon(), 80.0, 0.0);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    seen(&mut i, &t);
    i.utilization = samples(noon() + minutes(20), 80.0, 0.0);
    let t = l.turn(&i, None, noon() + minutes(20));
    assert!(evictions(&t).is_empty() && !events(&t).iter().any(|e| e.1 == "Idle"));
}

#[test]
fn prometheus_unreachable_leaves_jobs_running_and_says_so_on_the_queue() {
    let mut i = running(json!({"after": "10m", "action": "Suspend"}));
    i.utilization = Some(Arc::new(Samples {
        at: None,
        pods: Default::default(),
        error: Some(("connection refused".into(), noon())),
    }));
    let t = Loop::new().turn(&i, None, noon() + minutes(30));
    assert!(evictions(&t).is_empty());
    assert!(
        status_of(&t, StatusKind::GpuJob, "idle").is_none_or(|s| s.get("utilization").is_none())
    );
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let (status, reason, message) = condition(&q, "UtilizationKnown").expect("UtilizationKnown");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PrometheusUnreachable")
    );
    assert!(message.contains("connection refused"), "{message}");
}

#[test]
fn a_runs_gpu_hours_accrue_between_figures_and_an_unsampled_gap_does_not_count() {
    let mut i = running(json!({"threshold": 5, "after": "30m"}));
    i.utilization = samples(noon(), 80.0, 1.2);
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let busy = status_of(&t, StatusKind::GpuJob, "busy").expect("busy's status");
    assert!(
        busy["utilization"].get("sampledGpuHours").is_none(),
        "nothing yet"
    );
    seen(&mut i, &t);

    // Ten minutes on the figure is written again, with the stretch at the figure that held.
    i.utilization = samples(noon() + minutes(10), 80.0, 1.2);
    let t = l.turn(&i, None, noon() + minutes(10));
    let busy = status_of(&t, StatusKind::GpuJob, "busy").expect("rewritten");
    let u = &busy["utilization"];
    assert_eq!(u["sampledGpuHours"], 0.1667, "{u}");
    assert_eq!(u["busyGpuHours"], 0.1333, "{u}");
    assert!(u.get("idleGpuHours").is_none(), "{u}");
    let idle = status_of(&t, StatusKind::GpuJob, "idle").expect("rewritten");
    let u = &idle["utilization"];
    assert_eq!(
        (
            &u["sampledGpuHours"],
            &u["idleGpuHours"],
            &u["busyGpuHours"]
        ),
        (&json!(0.1667), &json!(0.1667), &json!(0.002)),
        "{u}"
    );
    seen(&mut i, &t);

    // Prometheus silent for half an hour: that stretch went unsampled and does not count.
    i.utilization = samples(noon() + minutes(40), 40.0, 1.2);
    let t = l.turn(&i, None, noon() + minutes(40));
    let busy = status_of(&t, StatusKind::GpuJob, "busy").expect("moved");
    let u = &busy["utilization"];
    assert_eq!(
        (&u["gpuPercent"], &u["sampledGpuHours"]),
        (&json!(40.0), &json!(0.1667)),
        "{u}"
    );
    seen(&mut i, &t);

    // Requeued, a job's next run is measured afresh.
    let mut st: spillway_api::GpuJobStatus = serde_json::from_value(busy).expect("a status");
    crate::turn::jobs::requeued(&mut st, 1);
    assert!(st.utilization.is_none());
}
