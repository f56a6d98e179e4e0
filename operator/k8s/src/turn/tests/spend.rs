//! The spend ledger: a queue deleted and applied again mid-month keeps its month's spend.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::spend_record::RecordRef;
use crate::turn::TurnSettings;
use crate::world::Inputs;

fn recorded() -> Loop {
    Loop::with(TurnSettings {
        spend_record: Some(RecordRef {
            namespace: "spillway-system".into(),
            name: "spillway-spend".into(),
        }),
        ..TurnSettings::default()
    })
}

/// The ledger written by a turn, if it wrote one.
fn ledger_of(t: &crate::turn::Turn) -> Option<ConfigMap> {
    t.actions.iter().find_map(|a| match a {
        Action::RecordSpend(c) => Some((**c).clone()),
        _ => None,
    })
}

/// Queue `q` with a 1.10 USD monthly budget and `status`; one private GPU, busy; job `train`
/// running on a cloud instance since 11:00.
fn world(status: serde_json::Value) -> (Inputs, Cloudy) {
    let spec = json!({"burst": {"enabled": true, "maxWait": "0s", "pools": ["aws"]},
                      "budget": {"monthlyUSD": 1.10}});
    let busy = job("busy")
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    let train = job("train").status(json!({"phase": "Running"})).build();
    let i = Inputs {
        queues: vec![queue_with_status("q", spec, status)],
        pools: vec![private_pool("onprem"), aws_pool("aws", json!({}))],
        nodes: vec![node("a", "onprem", 1), cloud_node("ip-1", "aws", 1, "i-1")],
        pods: vec![
            pod(&busy, 0, 0, "a", "Running"),
            pod(&train, 0, 0, "ip-1", "Running"),
        ],
        jobs: vec![busy, train],
        ..Inputs::default()
    };
    let mut c = cloud();
    c.instance(
        "i-1",
        "aws",
        "team/train#0",
        "g6.xlarge",
        at("2026-03-10T11:00:00Z"),
    );
    (i, c)
}

#[test]
fn a_queue_applied_again_mid_month_keeps_its_spend_and_its_budget_holds() {
    // 1.00 USD through 11:50 in status; by noon, ten more minutes of a g6.xlarge.
    let billed = json!({"spend": {"thisMonthUSD": 1.0, "hourlyUSD": 0.8048,
                                  "accruedThrough": "2026-03-10T11:50:00Z"}});
    let (mut i, c) = world(billed);
    let mut l = recorded();
    let t = l.turn(&i, Some(&c), noon());
    let cm = ledger_of(&t).expect("the ledger is written when an account opens");
    assert_eq!(cm.metadata.name.as_deref(), Some("spillway-spend"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("spillway-system"));
    let entry: serde_json::Value =
        serde_json::from_str(&cm.data.as_ref().unwrap()["2026-03.queue.q"]).unwrap();
    assert!((entry["usd"].as_f64().unwrap() - (1.0 + 0.8048 / 6.0)).abs() < 1e-9);
    assert_eq!(entry["through"], "2026-03-10T12:00:00Z");
    assert!(cm.data.as_ref().unwrap().contains_key("2026-03.pool.aws"));

    // A GitOps sync deletes the queue...
    i.spend_record = Some(Arc::new(cm));
    let mut gone = i.clone();
    gone.queues.clear();
    l.turn(&gone, Some(&c), noon() + minutes(1));
    // ...and applies it again, with no status; a new job waits to burst.
    let (mut again, c) = world(json!({}));
    again.spend_record = i.spend_record.clone();
    again.jobs.push(job("more").build());
    let t = l.turn(&again, Some(&c), noon() + minutes(2));
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let usd = q["spend"]["thisMonthUSD"].as_f64().unwrap();
    // From the ledger's 12:00 pair on: 1.134 USD + two minutes, not two minutes from zero.
    assert!(
        (usd - (1.0 + 0.8048 * 12.0 / 60.0)).abs() < 0.0002,
        "thisMonthUSD {usd}"
    );
    let more = status_of(&t, StatusKind::GpuJob, "more").expect("job status");
    assert_eq!(more["decision"]["reason"], "BudgetExhausted", "{more}");
    assert!(launches(&t).is_empty());

    // Without the ledger the same queue starts from zero and the job launches: what the
    // ledger is for.
    let (mut forgetful_world, c) = world(json!({}));
    forgetful_world.jobs.push(job("more").build());
    let t = Loop::new().turn(&forgetful_world, Some(&c), noon() + minutes(2));
    assert_eq!(launches(&t).len(), 1);
}

/// Queue `q` whose budget counts private time (or not); job `busy` on private node `a` (pool
/// `onprem` at 2 USD per GPU-hour) since 11:00; no cloud.
fn private_world(counts_private: bool) -> Inputs {
    let spec = json!({"budget": {"monthlyUSD": 100, "countsPrivate": counts_private}});
    let busy = job("busy")
        .status(json!({"phase": "Running", "startedAt": "2026-03-10T11:00:00Z"}))
        .build();
    let onprem: Arc<spillway_api::ComputePool> = from(json!({
        "metadata": {"name": "onprem", "generation": 1},
        "spec": {"private": {"nodeSelector": {"pool": "onprem"}, "gpuCostPerHour": 2.0}}}));
    Inputs {
        queues: vec![queue("q", spec)],
        pools: vec![onprem],
        nodes: vec![node("a", "onprem", 1)],
        pods: vec![pod(&busy, 0, 0, "a", "Running")],
        jobs: vec![busy],
        ..Inputs::default()
    }
}

#[test]
fn a_budget_that_counts_private_time_bills_private_jobs_at_their_pools_price() {
    let mut l = Loop::new();
    let i = private_world(true);
    // The account opens at noon (no status): billed from then on, not from 11:00.
    let first = l.turn(&i, None, noon());
    let t = l.turn(&i, None, noon() + minutes(30));
    let q = status_of(&t, StatusKind::GpuQueue, "q").unwrap_or_else(|| {
        panic!(
            "queue status: {:?} then {:?}",
            status_of(&first, StatusKind::GpuQueue, "q"),
            kinds(&t)
        )
    });
    let spend = &q["spend"];
    assert!(
        (spend["thisMonthUSD"].as_f64().unwrap() - 1.0).abs() < 1e-6,
        "{q}"
    );
    assert_eq!(spend["hourlyUSD"].as_f64(), Some(2.0), "{q}");

    let mut l = Loop::new();
    let i = private_world(false);
    l.turn(&i, None, noon());
    let t = l.turn(&i, None, noon() + minutes(30));
    let spend = status_of(&t, StatusKind::GpuQueue, "q").and_then(|q| q.get("spend").cloned());
    let usd = spend
        .as_ref()
        .and_then(|s| s["thisMonthUSD"].as_f64())
        .unwrap_or(0.0);
    assert_eq!(usd, 0.0, "{spend:?}");
}

/// The ledger is kept whenever something is billed, cloud or not: a queue whose budget counts
/// private time, applied again with no status, goes on from the ledger.
#[test]
fn without_a_cloud_a_queue_billed_for_private_time_keeps_its_month_when_applied_again() {
    let mut l = recorded();
    let i = private_world(true);
    l.turn(&i, None, noon());
    let t = l.turn(&i, None, noon() + minutes(30));
    let cm = ledger_of(&t).expect("the ledger is written without a cloud");
    let entry: serde_json::Value =
        serde_json::from_str(&cm.data.as_ref().unwrap()["2026-03.queue.q"]).unwrap();
    assert!(
        (entry["usd"].as_f64().unwrap() - 1.0).abs() < 1e-6,
        "{entry}"
    );
    // Deleted and applied again: no status, the ledger only.
    let mut gone = i.clone();
    gone.queues.clear();
    gone.spend_record = Some(Arc::new(cm.clone()));
    l.turn(&gone, None, noon() + minutes(31));
    let mut again = private_world(true);
    again.spend_record = Some(Arc::new(cm));
    let t = l.turn(&again, None, noon() + minutes(60));
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let usd = q["spend"]["thisMonthUSD"].as_f64().unwrap();
    assert!(usd >= 1.0 - 1e-6, "the month went on from the ledger: {q}");
}
