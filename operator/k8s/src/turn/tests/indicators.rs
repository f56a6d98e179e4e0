//! Indicators: what status writes observe (first starts, recoveries, finished runs), the
//! GPU-seconds accrued, the queue's `status.indicators`, the metrics and the ledger.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::spend_record::RecordRef;
use crate::turn::TurnSettings;
use crate::world::Inputs;

/// A cluster of one 8-GPU private node in pool `onprem` at $2 per GPU-hour.
fn priced() -> Inputs {
    Inputs {
        queues: vec![queue("q", json!({}))],
        pools: vec![from(
            json!({"metadata": {"name": "onprem", "generation": 1},
            "spec": {"private": {"nodeSelector": {"pool": "onprem"}, "gpuCostPerHour": 2.0}}}),
        )],
        nodes: vec![node("a", "onprem", 8)],
        ..Inputs::default()
    }
}

fn ledger_loop() -> Loop {
    Loop::with(TurnSettings {
        indicator_record: Some(RecordRef {
            namespace: "spillway-system".into(),
            name: "spillway-indicators".into(),
        }),
        ..TurnSettings::default()
    })
}

/// The ledger data the turn writes, if it writes it.
fn ledger(t: &crate::turn::Turn) -> Option<ConfigMap> {
    t.actions.iter().find_map(|a| match a {
        Action::RecordIndicators(cm) => Some((**cm).clone()),
        _ => None,
    })
}

/// The pods of `job`'s attempt 0 as the caches show them, in `phase`.
fn pods_of(
    i: &Inputs,
    job: usize,
    replicas: u32,
    phase: &str,
) -> Vec<Arc<k8s_openapi::api::core::v1::Pod>> {
    (0..replicas)
        .map(|r| pod(&i.jobs[job], 0, r, "a", phase))
        .collect()
}

#[test]
fn a_first_start_a_finished_run_and_gpu_hours_make_the_queues_indicators() {
    let mut i = priced();
    // Queued at 11:59, started at noon: one minute to start.
    i.jobs = vec![job("train").gpus(4).build()];
    let mut l = ledger_loop();
    let t = l.turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("job status");
    assert_eq!(st["firstStartedAt"], "2026-03-10T12:00:00Z");
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let day = &q["indicators"]["last24h"];
    assert_eq!(day["timeToStartSeconds"]["count"], 1, "{q}");
    assert_eq!(
        day["timeToStartSeconds"]["byEnvironment"]["private"]["count"],
        1
    );
    // 60 s falls in the (30, 60] bucket; its median is read halfway through it, as
    // Prometheus' histogram_quantile reads it.
    assert_eq!(day["timeToStartSeconds"]["p50"], 45.0);
    assert_eq!(day["burstShare"], 0.0);
    let text = l.metrics.render();
    assert!(
        text.contains(
            "spillway_time_to_start_seconds_bucket{queue=\"q\",environment=\"private\",le=\"60\"} 1"
        ),
        "{text}"
    );
    assert!(ledger(&t).is_some(), "the first turn writes the ledger");

    // Half an hour on the node: 2 GPU-hours, a quarter of the 8 private GPUs.
    let started = i.jobs[0].clone();
    let mut running = (*started).clone();
    running.status = Some(serde_json::from_value(st.clone()).expect("status"));
    i.jobs = vec![Arc::new(running)];
    i.pods = pods_of(&i, 0, 1, "Running");
    let t = l.turn(&i, None, noon() + minutes(30));
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let day = &q["indicators"]["last24h"];
    assert_eq!(day["gpuHours"]["private"], 2.0, "{q}");
    assert_eq!(
        day["privateGpuAllocation"], 0.5,
        "4 of 8 GPUs for the half hour: {q}"
    );
    assert!(
        l.metrics.render().contains(
            "spillway_gpu_seconds_total{queue=\"q\",pool=\"onprem\",environment=\"private\"} 7200"
        ),
        "{}",
        l.metrics.render()
    );

    // It succeeds: a run that cost its GPUs' time (4 GPUs x $2 x 0.5 h = $4).
    i.pods = pods_of(&i, 0, 1, "Succeeded");
    let t = l.turn(&i, None, noon() + minutes(31));
    let st = status_of(&t, StatusKind::GpuJob, "train").expect("finished");
    assert_eq!(st["phase"], "Succeeded");
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let cost = &q["indicators"]["last30d"]["costPerRunUSD"];
    assert_eq!(cost["count"], 1, "{q}");
    // 4 GPUs x $2 x 31 minutes, to the cent.
    assert_eq!(st["cost"]["accruedUSD"], 4.1333);
    assert_eq!(cost["mean"], 4.13, "{q}");
    // Its last minute is counted too: 4 GPUs for 31 minutes.
    assert_eq!(
        q["indicators"]["last24h"]["gpuHours"]["private"], 2.07,
        "{q}"
    );
    assert!(
        l.metrics
            .render()
            .contains("spillway_run_cost_usd_count{queue=\"q\"} 1")
    );
}

#[test]
fn a_job_running_again_after_a_lost_node_is_a_recovery() {
    let mut i = priced();
    let lost = job("gang")
        .gpus(4)
        .restartable()
        .status(
            json!({"phase": "Running", "queuedAt": "2026-03-10T11:00:00Z",
                       "firstStartedAt": "2026-03-10T11:01:00Z",
                       "startedAt": "2026-03-10T11:01:00Z"}),
        )
        .build();
    // Its pod was on node "b", which is gone.
    i.pods = vec![pod(&lost, 0, 0, "b", "Running")];
    i.jobs = vec![lost];
    let mut l = Loop::new();
    let t = l.turn(&i, None, noon());
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("requeued");
    assert_eq!(st["phase"], "Queued");
    assert_eq!(st["interruptedAt"], "2026-03-10T12:00:00Z");

    // Requeued (its status as written), its old pod gone: it runs again two minutes later.
    let mut requeued = (*i.jobs[0]).clone();
    requeued.status = Some(serde_json::from_value(st).expect("status"));
    i.jobs = vec![Arc::new(requeued)];
    i.pods = Vec::new();
    let t = l.turn(&i, None, noon() + minutes(2));
    let st = status_of(&t, StatusKind::GpuJob, "gang").expect("started again");
    assert_eq!(st["phase"], "Running");
    assert!(st.get("interruptedAt").is_none(), "{st}");
    assert_eq!(st["firstStartedAt"], "2026-03-10T11:01:00Z", "kept");
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let rec = &q["indicators"]["last24h"]["recoverySeconds"];
    assert_eq!(rec["count"], 1, "{q}");
    // 120 s falls in the (60, 120] bucket: halfway through it.
    assert_eq!(rec["p50"], 90.0);
    assert_eq!(
        q["indicators"]["last24h"]["timeToStartSeconds"]["count"], 0,
        "a restart is no first start: {q}"
    );
}

#[test]
fn a_new_leader_takes_the_ledger_up_and_accrues_the_gap() {
    let mut i = priced();
    let running = job("train")
        .gpus(8)
        .status(
            json!({"phase": "Running", "queuedAt": "2026-03-10T11:00:00Z",
                       "firstStartedAt": "2026-03-10T11:00:00Z",
                       "startedAt": "2026-03-10T11:00:00Z"}),
        )
        .build();
    i.pods = vec![pod(&running, 0, 0, "a", "Running")];
    i.jobs = vec![running];
    // The last leader wrote the ledger through 11:30, with a first start in it.
    let mut l = ledger_loop();
    l.turn(&i, None, at("2026-03-10T11:00:00Z"));
    let mut book = crate::indicators::Book::default();
    book.started("q", "private", 60.0, at("2026-03-10T11:00:00Z"));
    book.through = Some(at("2026-03-10T11:30:00Z"));
    i.indicator_record = Some(Arc::new(ConfigMap {
        data: Some(book.data()),
        ..ConfigMap::default()
    }));
    // A new leader at noon: the half hour since is accrued for the job running all along.
    let mut next = ledger_loop();
    let t = next.turn(&i, None, noon());
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let day = &q["indicators"]["last24h"];
    assert_eq!(
        day["gpuHours"]["private"], 4.0,
        "8 GPUs for half an hour: {q}"
    );
    assert_eq!(
        day["timeToStartSeconds"]["count"], 1,
        "the last leader's start: {q}"
    );
    let data = ledger(&t).expect("written").data.expect("data");
    assert_eq!(data["through"], "2026-03-10T12:00:00Z");
    // A failed write is made again at the next turn.
    let failed = crate::executor::Failure {
        action: Action::RecordIndicators(Box::default()),
        error: crate::error::Error::Caches("refused".into()),
    };
    next.state.feedback(&failed);
    let t = next.turn(&i, None, noon() + minutes(1));
    assert!(ledger(&t).is_some(), "{:?}", kinds(&t));
    let t = next.turn(&i, None, noon() + minutes(1));
    assert!(ledger(&t).is_none(), "not again at once: {:?}", kinds(&t));
}

/// A short job that started and finished between two accruals (GPU-seconds are accrued every
/// 10 s at most), its end already written (so its view is done), counts up to its end.
#[test]
fn a_job_that_ran_between_two_accruals_counts_up_to_its_end() {
    let mut i = priced();
    let mut l = Loop::new();
    l.turn(&i, None, noon());
    i.jobs = vec![
        job("short")
            .gpus(2)
            .status(
                json!({"phase": "Succeeded", "environment": "private", "pool": "onprem",
                           "queuedAt": "2026-03-10T12:00:00Z",
                           "firstStartedAt": "2026-03-10T12:00:02Z",
                           "startedAt": "2026-03-10T12:00:02Z",
                           "finishedAt": "2026-03-10T12:00:06Z"}),
            )
            .build(),
    ];
    l.turn(&i, None, noon() + spillway_core::Duration::from_secs(5));
    assert!(
        !l.metrics
            .render()
            .contains("spillway_gpu_seconds_total{queue"),
        "not accrued within 10 s"
    );
    l.turn(&i, None, noon() + spillway_core::Duration::from_secs(20));
    let text = l.metrics.render();
    assert!(
        text.contains(
            "spillway_gpu_seconds_total{queue=\"q\",pool=\"onprem\",environment=\"private\"} 8"
        ),
        "2 GPUs for 4 s: {text}"
    );
}
