//! Bursting: the cheapest instance, budgets, restricted data, capacity errors, throttling.

use std::time::Duration;

use aws_sdk_ec2::types::InstanceStateName;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, Dataset, GpuQueue};
use spillway_tests::faults::FaultProxy;
use spillway_tests::moto::MotoServer;
use spillway_tests::operator::{eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::{World, create, decode_base64};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_past_max_wait_bursts_to_the_cheapest_instance_and_scales_down() {
    let _turn = serial().await;
    let w = World::new("aws-burst", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("burst", json!({}), Some(3)).await;

    let job = w.wait_phase("burst", JobPhase::Running).await;
    let st = job.status.clone().unwrap_or_default();
    assert_eq!(
        st.environment,
        Some(spillway_api::Environment::Cloud),
        "{st:?}"
    );
    assert_eq!(st.pool.as_deref(), Some(w.aws_pool.as_str()));
    let instances = w.instances().await;
    assert_eq!(
        instances.len(),
        1,
        "one instance for the need: {instances:?}"
    );
    let (id, itype, _, need) = instances[0].clone();
    assert_eq!(
        itype, "g6.xlarge",
        "the cheapest fitting type (L4 at $0.80/h vs A10G at $2.45/h)"
    );
    assert_eq!(need, format!("{}/burst#0", w.ns));
    assert_eq!(st.nodes, vec![id.clone()], "its pod runs on the new node");
    // The machine got user data that joins it with a bootstrap token made for the launch,
    // and the token is deleted once the node has joined.
    let attr = w
        .ec2
        .describe_instance_attribute()
        .instance_id(&id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    let user_data = decode_base64(attr.user_data().and_then(|u| u.value()).unwrap_or_default());
    assert!(
        user_data.contains(&format!("server: '{}'", w.api_server)),
        "{user_data}"
    );
    assert!(
        user_data.contains(&format!("spillway.io/pool={}", w.aws_pool)),
        "{user_data}"
    );
    let token_id = user_data
        .split("token: '")
        .nth(1)
        .and_then(|t| t.split('.').next())
        .expect("a token in the user data")
        .to_string();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(w.client.clone(), "kube-system");
    // The token expires at the join timeout (60 s here): the operator only creates it, and
    // Kubernetes' token cleaner deletes it once expired (the chart install test waits for that).
    let token = secrets
        .get(&format!("bootstrap-token-{token_id}"))
        .await
        .expect("the bootstrap token");
    let expiration = token
        .data
        .as_ref()
        .and_then(|d| d.get("expiration"))
        .and_then(|e| String::from_utf8(e.0.clone()).ok())
        .and_then(|e| e.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .expect("an RFC 3339 expiration");
    let created = token
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    let lifetime = expiration.as_second() - created.as_second();
    assert!(
        (55..=61).contains(&lifetime),
        "the token lives the join timeout, not {lifetime} s"
    );
    // Spend: the queue's rate and the pool's instances in status, the counter in metrics.
    eventually(WAIT, "queue and pool spend", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let p = Api::<ComputePool>::all(w.client.clone())
            .get(&w.aws_pool)
            .await
            .map_err(|e| e.to_string())?;
        let rate = q.status.and_then(|s| s.spend).map(|s| s.hourly_usd);
        let pool = p.status.map(|s| (s.instances, s.hourly_usd));
        if rate == Some(0.8048) && pool == Some((Some(1), Some(0.8048))) {
            Ok(())
        } else {
            Err(format!("{rate:?} {pool:?}"))
        }
    })
    .await;

    // It completes; the node goes idle and is terminated after the pool's idleTimeout (3 s).
    let done = w.wait_phase("burst", JobPhase::Succeeded).await;
    assert!(
        done.status
            .and_then(|s| s.cost)
            .map(|c| c.accrued_usd)
            .unwrap_or(0.0)
            > 0.0
    );
    w.wait_terminated(&id).await;
    eventually(WAIT, "its node to be deleted", || async {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(w.client.clone());
        match nodes.get_opt(&id).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    let (_, metrics) = op.get("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("spillway_cloud_calls_total{call=\"launch\",result=\"ok\"} 1"),
        "{metrics}"
    );
    // Cordoned once, before its instance went (the node outliving its instance is not
    // retired again as an orphan).
    let cordons: u32 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("spillway_api_writes_total{kind=\"node-cordon\",result=\"ok\"} ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert_eq!(
        cordons, 1,
        "the node was cordoned once, before its instance went: {metrics}"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_data_never_launches_and_orphans_are_collected() {
    let _turn = serial().await;
    let w = World::new("aws-restricted", json!({"maxWait": "1s"})).await;
    let dataset = format!("{}-patients", w.ns);
    create(
        Api::<Dataset>::all(w.client.clone()),
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
            "metadata": {"name": dataset},
            "spec": {"classification": "Restricted", "locations": [{"environment": "private"}]},
        }),
    )
    .await;
    // An orphan: tagged for this cluster, wanted by no need. And an instance that is not
    // Spillway's at all.
    let run = |tags: Vec<(&str, String)>| {
        let mut spec = aws_sdk_ec2::types::TagSpecification::builder()
            .resource_type(aws_sdk_ec2::types::ResourceType::Instance);
        for (k, v) in tags {
            spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build());
        }
        w.ec2
            .run_instances()
            .image_id(&w.ami)
            .instance_type(aws_sdk_ec2::types::InstanceType::G6Xlarge)
            .min_count(1)
            .max_count(1)
            .tag_specifications(spec.build())
            .send()
    };
    let orphan = run(vec![
        ("spillway.io/cluster", w.cluster_tag.clone()),
        ("spillway.io/need", format!("{}/gone#0", w.ns)),
        ("spillway.io/job", format!("{}/gone", w.ns)),
        ("spillway.io/pool", w.aws_pool.clone()),
    ])
    .await
    .expect("orphan")
    .instances()[0]
        .instance_id()
        .unwrap_or_default()
        .to_string();
    let foreign = run(vec![("team", "web".to_string())])
        .await
        .expect("foreign")
        .instances()[0]
        .instance_id()
        .unwrap_or_default()
        .to_string();

    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("sensitive", json!({"datasets": [dataset]}), None)
        .await;
    let job = eventually(WAIT, "the RestrictedData decision", || async {
        let j = w.jobs().get("sensitive").await.map_err(|e| e.to_string())?;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        match d.as_ref().and_then(|d| d.reason.as_deref()) {
            Some("RestrictedData") => Ok(j),
            _ => Err(format!("{d:?}")),
        }
    })
    .await;
    assert_eq!(job.status.and_then(|s| s.phase), Some(JobPhase::Queued));

    // The orphan goes once past its grace period (5 s); the foreign instance stays.
    eventually(WAIT, "the orphan to be terminated", || async {
        let list = w.instances().await;
        match list.iter().find(|i| i.0 == orphan) {
            Some((_, _, state, _)) if state == "terminated" || state == "shutting-down" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Well past maxWait: still no instance for the Restricted job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mine: Vec<_> = w
        .instances()
        .await
        .into_iter()
        .filter(|i| i.3.contains("sensitive"))
        .collect();
    assert!(mine.is_empty(), "a Restricted job launched {mine:?}");
    let foreign_state = w
        .ec2
        .describe_instances()
        .instance_ids(&foreign)
        .send()
        .await
        .expect("describe")
        .reservations()[0]
        .instances()[0]
        .state()
        .and_then(|s| s.name())
        .cloned();
    assert_eq!(
        foreign_state,
        Some(InstanceStateName::Running),
        "never touch others' instances"
    );
    let list = w.jobs().list(&ListParams::default()).await.expect("jobs");
    assert_eq!(list.items.len(), 2);
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_budget_is_below_one_instance_never_launches() {
    let _turn = serial().await;
    let w = World::new("aws-budget", json!({"budget": {"hourlyUSD": 0.5}})).await;
    let op = w.operator().await;
    w.fill_private_gpu().await;
    w.submit("thrifty", json!({}), None).await;
    eventually(WAIT, "the BudgetExhausted decision", || async {
        let j = w.jobs().get("thrifty").await.map_err(|e| e.to_string())?;
        let d = j.status.as_ref().and_then(|s| s.decision.clone());
        match d.as_ref().and_then(|d| d.reason.as_deref()) {
            Some("BudgetExhausted") => Ok(()),
            _ => Err(format!("{d:?}")),
        }
    })
    .await;
    eventually(WAIT, "the queue's BudgetExhausted condition", || async {
        let q = Api::<GpuQueue>::all(w.client.clone())
            .get(&w.queue)
            .await
            .map_err(|e| e.to_string())?;
        let c = q
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "BudgetExhausted");
        match &c {
            Some(c) if c.status == "True" && c.message.starts_with("1 job(s) wait") => Ok(()),
            _ => Err(format!("{c:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        w.instances().await.is_empty(),
        "no instance within a $0.50/h budget"
    );
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_on_the_cheapest_offering_launches_the_next_one() {
    let _turn = serial().await;
    let w = World::new("aws-capacity", json!({})).await;
    let moto = MotoServer::shared().await;
    let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
    // More failures than the SDK's attempts (3): the operator sees the error.
    proxy.fail(
        "RunInstances",
        Some("InstanceType=g6.xlarge"),
        500,
        "InsufficientInstanceCapacity",
        10,
    );
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator_via(&proxy).await;
    w.fill_private_gpu().await;
    w.submit("flexible", json!({}), None).await;
    let job = w.wait_phase("flexible", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0].1, "g5.8xlarge", "the next cheapest offering");
    assert_eq!(
        job.status.unwrap_or_default().nodes,
        vec![instances[0].0.clone()]
    );
    let (calls, failed) = proxy.calls("RunInstances");
    assert!(
        failed >= 3 && calls == failed + 1,
        "{calls} RunInstances, {failed} failed"
    );
    w.wait_warning("LaunchFailed", "InsufficientInstanceCapacity")
        .await;
    op.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_storm_backs_off_and_launches_once() {
    let _turn = serial().await;
    let w = World::new("aws-throttle", json!({})).await;
    let moto = MotoServer::shared().await;
    let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
    proxy.fail("RunInstances", None, 400, "RequestLimitExceeded", 5);
    proxy.fail("DescribeInstances", None, 400, "RequestLimitExceeded", 5);
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator_via(&proxy).await;
    w.fill_private_gpu().await;
    w.submit("patient", json!({}), None).await;
    w.wait_phase("patient", JobPhase::Running).await;
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "no duplicate launch: {instances:?}");
    let (calls, failed) = proxy.calls("RunInstances");
    assert_eq!(
        (calls, failed),
        (6, 5),
        "five throttled attempts, then one that went through"
    );
    op.stop().await.expect("clean stop");
}

/// One retry layer per call. During a 60 s account-wide `RequestLimitExceeded` storm (every
/// EC2 call throttled, with a 1.5 s `x-amz-retry-after` hint) each logical call — one SDK
/// operation, known at the proxy by its `amz-sdk-invocation-id` — sends at most its budget of
/// requests (`CALL_ATTEMPTS`) and waits the server's hint between them; the executor adds no
/// retries on top, the loop decides again instead. After the storm the burst launches once, the
/// job runs and finishes, and its idle instance is terminated through a second storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_storm_costs_each_call_at_most_its_budget_and_everything_completes() {
    use spillway_tests::faults::Effect;
    const STORM: Duration = Duration::from_secs(60);
    const HINT: Duration = Duration::from_millis(1500);
    let throttled = || Effect::Fail {
        status: 503,
        code: "RequestLimitExceeded".into(),
    };
    let _turn = serial().await;
    let w = World::new("aws-storm", json!({})).await;
    let moto = MotoServer::shared().await;
    let proxy = FaultProxy::start(&moto.endpoint).await.expect("proxy");
    proxy.retry_after(HINT);
    proxy.storm(None, None, 100, throttled(), STORM);
    let storm_over = std::time::Instant::now() + STORM;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let op = w.operator_via(&proxy).await;
    w.fill_private_gpu().await;
    w.submit("patient", json!({}), Some(2)).await;
    eventually(
        STORM + WAIT,
        "the job to run once the storm is over",
        || async {
            let j = w.jobs().get("patient").await.map_err(|e| e.to_string())?;
            let phase = j.status.and_then(|s| s.phase);
            match phase {
                Some(JobPhase::Running | JobPhase::Succeeded) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        std::time::Instant::now() >= storm_over,
        "ran during the storm?"
    );
    let instances = w.instances().await;
    assert_eq!(instances.len(), 1, "no duplicate launch: {instances:?}");
    let id = instances[0].0.clone();
    w.wait_phase("patient", JobPhase::Succeeded).await;
    // The idle instance is terminated through a shorter storm.
    proxy.storm(None, None, 100, throttled(), Duration::from_secs(10));
    w.wait_terminated(&id).await;
    op.stop().await.expect("clean stop");

    let invocations = proxy.invocations();
    let throttled_calls = proxy.counts("").failed;
    assert!(
        throttled_calls >= 10,
        "the storms throttled {throttled_calls} requests"
    );
    for action in ["RunInstances", "DescribeInstances", "TerminateInstances"] {
        assert!(
            invocations.iter().any(|i| i.action == action),
            "no {action} seen: {invocations:?}"
        );
    }
    for i in &invocations {
        assert!(
            i.requests.len() <= crate::world::CALL_ATTEMPTS as usize,
            "{} ({}) sent {} requests, over its budget of {}",
            i.action,
            i.id,
            i.requests.len(),
            crate::world::CALL_ATTEMPTS
        );
        for pair in i.requests.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= HINT - Duration::from_millis(100),
                "{} retried after {gap:?}, before the server's hint of {HINT:?}",
                i.action
            );
        }
    }
    let retried = invocations.iter().filter(|i| i.requests.len() > 1).count();
    assert!(retried > 0, "some call was retried by the SDK");
}
