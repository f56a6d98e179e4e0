//! Cloud spend survives restarts: the time no operator ran is billed exactly once.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuQueue};
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// g6.xlarge on demand in the bundled catalog, USD per hour.
const PRICE: f64 = 0.8048;

fn secs(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

/// The queue's and the pool's (thisMonthUSD, accruedThrough in Unix seconds).
async fn pairs(w: &World) -> Result<((f64, f64), (f64, f64)), String> {
    let q = Api::<GpuQueue>::all(w.client.clone())
        .get(&w.queue)
        .await
        .map_err(|e| e.to_string())?;
    let p = Api::<ComputePool>::all(w.client.clone())
        .get(&w.aws_pool)
        .await
        .map_err(|e| e.to_string())?;
    let qs = q.status.and_then(|s| s.spend).ok_or("no queue spend")?;
    let ps = p.status.ok_or("no pool status")?;
    Ok((
        (
            qs.this_month_usd,
            qs.accrued_through
                .as_ref()
                .map(secs)
                .ok_or("no accruedThrough")?,
        ),
        (
            ps.this_month_usd.ok_or("no pool thisMonthUSD")?,
            ps.accrued_through
                .as_ref()
                .map(secs)
                .ok_or("no pool accruedThrough")?,
        ),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_after_a_restart_bills_the_gap_exactly_once() {
    let _turn = serial().await;
    let w = World::new("aws-spend", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("paid", json!({}), None).await;
    let job = w.wait_phase("paid", JobPhase::Running).await;
    let instance = job.status.unwrap_or_default().nodes[0].clone();
    let described = w
        .ec2
        .describe_instances()
        .instance_ids(&instance)
        .send()
        .await
        .expect("describe");
    let launched = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find_map(|i| i.launch_time())
        .map(|t| t.as_secs_f64())
        .expect("EC2 reports the launch time");
    eventually(WAIT, "a first spend record", || async {
        let ((_, q_through), _) = pairs(&w).await?;
        if q_through > launched {
            Ok(())
        } else {
            Err(format!("through {q_through} launched {launched}"))
        }
    })
    .await;

    // The operator dies and nothing runs for 20 s while the instance does.
    op.kill();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let restarted = Instant::now();
    let restarted_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let op = w.operator().await;
    let ((q_usd, q_through), (p_usd, p_through)) =
        eventually(WAIT, "spend written by the new operator", || async {
            let pairs = pairs(&w).await?;
            let ((_, q), (_, p)) = pairs;
            if q >= restarted_unix && p >= restarted_unix {
                Ok(pairs)
            } else {
                Err(format!("{pairs:?} before the restart at {restarted_unix}"))
            }
        })
        .await;
    eprintln!(
        "spend after {:.1} s down: queue {q_usd} USD through {q_through}, pool {p_usd} USD through {p_through}",
        restarted.elapsed().as_secs_f64() + 20.0
    );
    // Every second of the instance's life up to accruedThrough, billed once: within one
    // second's worth (and the status's rounding to 0.0001 USD, once per write).
    let second = PRICE / 3600.0;
    for (what, usd, through) in [("queue", q_usd, q_through), ("pool", p_usd, p_through)] {
        let expected = PRICE * (through - launched) / 3600.0;
        assert!(
            (usd - expected).abs() <= second + 0.0002,
            "{what}: {usd} USD recorded, {expected} USD for {:.1} s at {PRICE}/h",
            through - launched
        );
    }
    op.stop().await.expect("clean stop");
}

/// The queue's entry of this month in the spend ledger, in USD.
async fn recorded_usd(w: &World) -> Result<f64, String> {
    let cm = Api::<ConfigMap>::namespaced(w.client.clone(), &w.ns)
        .get(World::SPEND_LEDGER)
        .await
        .map_err(|e| e.to_string())?;
    let data = cm.data.unwrap_or_default();
    let suffix = format!(".queue.{}", w.queue);
    let (_, v) = data
        .iter()
        .find(|(k, _)| k.ends_with(&suffix))
        .ok_or(format!("no *{suffix} in {data:?}"))?;
    let v: serde_json::Value = serde_json::from_str(v).map_err(|e| e.to_string())?;
    v["usd"].as_f64().ok_or(format!("no usd in {v}"))
}

/// A GitOps sync deletes the queue and applies it again mid-month: its spend comes back from
/// the ledger, and the monthly budget that one run nearly spent still holds the next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_applied_again_mid_month_keeps_its_spend_and_its_budget_holds() {
    let _turn = serial().await;
    // One 10 s estimate of a g6.xlarge (0.0022 USD) fits in 0.005; a 20 s run, with the boot and
    // the idle timeout around it, spends more than what is left.
    let w = World::new("aws-ledger", json!({"budget": {"monthlyUSD": 0.005}})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("paid", json!({"estimatedRuntime": "10s"}), Some(20))
        .await;
    w.wait_phase("paid", JobPhase::Succeeded).await;
    let spent = eventually(WAIT, "the run's spend in the ledger", || async {
        let usd = recorded_usd(&w).await?;
        if usd > 0.005 - 0.8048 * 10.0 / 3600.0 {
            Ok(usd)
        } else {
            Err(format!("{usd} USD recorded"))
        }
    })
    .await;

    let queues = Api::<GpuQueue>::all(w.client.clone());
    let mut q = queues.get(&w.queue).await.expect("queue");
    queues
        .delete(&w.queue, &Default::default())
        .await
        .expect("delete the queue");
    eventually(WAIT, "the queue gone", || async {
        match queues.get_opt(&w.queue).await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    q.metadata = kube::api::ObjectMeta {
        name: Some(w.queue.clone()),
        ..Default::default()
    };
    q.status = None;
    queues
        .create(&Default::default(), &q)
        .await
        .expect("apply the queue again");
    w.submit("more", json!({"estimatedRuntime": "10s"}), Some(20))
        .await;
    let usd = eventually(WAIT, "the queue's spend back from the ledger", || async {
        let q = queues.get(&w.queue).await.map_err(|e| e.to_string())?;
        let usd = q
            .status
            .and_then(|s| s.spend)
            .map(|s| s.this_month_usd)
            .ok_or("no spend yet")?;
        if usd >= spent - 0.0001 {
            Ok(usd)
        } else {
            Err(format!("{usd} USD in status, {spent} recorded"))
        }
    })
    .await;
    eventually(WAIT, "the next job held by the budget", || async {
        let j = w.jobs().get("more").await.map_err(|e| e.to_string())?;
        let reason = j
            .status
            .and_then(|s| s.decision)
            .and_then(|d| d.reason)
            .unwrap_or_default();
        if reason == "BudgetExhausted" {
            Ok(())
        } else {
            Err(format!("reason {reason:?}"))
        }
    })
    .await;
    let instances = w
        .ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:spillway.io/cluster")
                .values(&w.cluster_tag)
                .build(),
        )
        .send()
        .await
        .expect("describe");
    let launched = instances
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .count();
    assert_eq!(launched, 1, "only the first run launched ({usd} USD spent)");
    op.stop().await.expect("clean stop");
}
