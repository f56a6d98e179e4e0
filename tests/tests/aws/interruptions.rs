//! The interruption queue end to end: moto's SQS carrying messages shaped exactly as
//! EventBridge sends them, moto's EC2, the real API server and the fake kubelet. A spot
//! warning stops the job in time and it runs again elsewhere; duplicates, foreign instances
//! and a leader killed between acting and deleting do nothing twice.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_k8s::action_kind::ActionKind;
use spillway_k8s::executor::Crash;
use spillway_tests::kubelet::STOP_SECONDS;
use spillway_tests::moto::{MotoServer, spot_warning};
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// A spot-only world whose pool reads a fresh queue (messages not deleted come back after
/// 2 s); returns it with the queue's URL.
async fn spot_world(prefix: &str) -> (World, String) {
    let w = World::new(prefix, json!({"capacityTypes": ["spot"]})).await;
    let sqs = MotoServer::shared().await.sqs_client().await;
    let url = sqs
        .create_queue()
        .queue_name(&w.ns)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "2",
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a queue URL")
        .to_string();
    w.patch_aws_pool(json!({"capacityTypes": ["spot"], "interruptionQueue": url}))
        .await;
    (w, url)
}

/// Sends `body` to the queue.
async fn send(url: &str, body: &str) {
    let sqs = MotoServer::shared().await.sqs_client().await;
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("SendMessage");
}

/// Messages in the queue, visible or in flight.
async fn in_queue(url: &str) -> Result<u64, String> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let sqs = MotoServer::shared().await.sqs_client().await;
    let r = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let count = |a: A| {
        r.attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(count(A::ApproximateNumberOfMessages) + count(A::ApproximateNumberOfMessagesNotVisible))
}

/// RFC 3339, `ago` before now: a warning sent then leaves `120 s - ago` before the loss.
fn time_ago(ago: Duration) -> String {
    let now = spillway_k8s::clock::now();
    spillway_k8s::clock::rfc3339(now - spillway_core::Duration::from_millis(ago.as_millis() as u64))
}

/// A restartable job whose pod takes 300 s to stop when asked (its grace period: 600 s).
async fn submit_slow_stopper(w: &World, name: &str) {
    w.submit(
        name,
        json!({"restartable": true, "template": {
            "metadata": {"annotations": {STOP_SECONDS: "300"}},
            "spec": {"terminationGracePeriodSeconds": 600,
                     "containers": [{"name": "train", "image": "pytorch:2"}]},
        }}),
        None,
    )
    .await;
}

/// The Events of reason `Interrupted` about `job`.
async fn interrupted_events(w: &World, job: &str) -> usize {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.client.clone(), &w.ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Interrupted")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_warning_stops_the_job_in_time_and_it_runs_again_elsewhere() {
    let _turn = serial().await;
    let (w, url) = spot_world("aws-notice").await;
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    submit_slow_stopper(&w, "checkpointing").await;
    let first = w
        .wait_phase("checkpointing", spillway_api::job::JobPhase::Running)
        .await;
    let instance = first.status.clone().unwrap_or_default().nodes[0].clone();

    // Sent 90 s ago: 30 s are left. The same message twice, and one about another
    // cluster's instance.
    let warning = spot_warning(&instance, &time_ago(Duration::from_secs(90)));
    send(&url, &warning).await;
    send(&url, &warning).await;
    send(
        &url,
        &spot_warning("i-0ffffffffffffffff", &time_ago(Duration::ZERO)),
    )
    .await;

    // The pod is asked to stop within what is left less the margin, not its 600 s.
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let grace = eventually(WAIT, "the pod asked to stop", || async {
        let p = pods
            .get_opt("checkpointing-0-0")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("gone before it was seen stopping")?;
        p.metadata
            .deletion_grace_period_seconds
            .ok_or_else(|| "not stopping yet".to_string())
    })
    .await;
    assert!((0..=20).contains(&grace), "grace {grace} s");
    let node: Node = Api::<Node>::all(w.client.clone())
        .get(&instance)
        .await
        .expect("the warned node");
    let spec = node.spec.unwrap_or_default();
    assert_eq!(spec.unschedulable, Some(true));
    let taint = spec
        .taints
        .unwrap_or_default()
        .into_iter()
        .find(|t| t.key == "spillway.io/interrupted")
        .expect("the interrupted taint");
    assert_eq!(
        (taint.value.as_deref(), taint.effect.as_str()),
        (Some("spot-interruption-warning"), "NoSchedule")
    );

    let job = w.jobs().get("checkpointing").await.expect("job");
    let cond = job
        .status
        .clone()
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Interrupted")
        .expect("Interrupted condition");
    assert_eq!(cond.reason, "SpotInterruptionWarning", "{cond:?}");
    assert!(cond.message.contains(&instance), "{}", cond.message);

    let again = w.wait_restarted("checkpointing").await;
    assert_ne!(again.status.unwrap_or_default().nodes[0], instance);
    w.wait_terminated(&instance).await;
    // Both deliveries of the warning consumed; the foreign one left in the queue.
    eventually(WAIT, "the warning consumed", || async {
        match in_queue(&url).await? {
            1 => Ok(()),
            n => Err(format!("{n} messages")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = w.jobs().get("checkpointing").await.expect("job");
    assert_eq!(
        job.status.unwrap_or_default().restarts,
        Some(1),
        "interrupted once"
    );
    assert_eq!(interrupted_events(&w, "checkpointing").await, 1);
    let (_, metrics) = op.get("/metrics").await.expect("metrics");
    let series = format!(
        "spillway_interruption_notices_total{{pool=\"{}\",kind=\"spot-interruption-warning\"}} 1\n",
        w.aws_pool
    );
    assert!(metrics.contains(&series), "{metrics}");
    drop(machines);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_between_acting_and_deleting_does_not_act_twice() {
    let _turn = serial().await;
    let (w, url) = spot_world("aws-notice-crash").await;
    let machines = w.boot_machines(Some(Duration::from_secs(1)));
    // Dies once it has terminated the warned instance, never having deleted the message.
    let crash = Crash::new(vec![ActionKind::DeleteNotice], ActionKind::Terminate);
    let op = w.operator_crashing(crash.clone()).await;
    w.fill_private_gpu().await;
    w.submit("checkpointing", json!({"restartable": true}), None)
        .await;
    let first = w
        .wait_phase("checkpointing", spillway_api::job::JobPhase::Running)
        .await;
    let instance = first.status.clone().unwrap_or_default().nodes[0].clone();
    send(
        &url,
        &spot_warning(&instance, &time_ago(Duration::from_secs(60))),
    )
    .await;
    tokio::time::timeout(WAIT, crash.fired.notified())
        .await
        .expect("the instance terminated");
    op.kill();
    assert_eq!(
        in_queue(&url).await.expect("queue"),
        1,
        "the message is still there"
    );

    let op = w.operator().await;
    eventually(WAIT, "the message deleted by the next leader", || async {
        match in_queue(&url).await? {
            0 => Ok(()),
            n => Err(format!("{n} messages")),
        }
    })
    .await;
    let again = w.wait_restarted("checkpointing").await;
    assert_ne!(again.status.unwrap_or_default().nodes[0], instance);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = w.jobs().get("checkpointing").await.expect("job");
    assert_eq!(
        job.status.unwrap_or_default().restarts,
        Some(1),
        "interrupted once"
    );
    assert_eq!(interrupted_events(&w, "checkpointing").await, 1);
    drop(machines);
    op.stop().await.expect("clean stop");
}
