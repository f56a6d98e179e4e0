//! Leadership and the HTTP endpoints.

use std::time::Duration;

use k8s_openapi::jiff;
use kube::Api;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_tests::operator::{RunningOperator, eventually, serial};
use spillway_tests::workload::WAIT;

use crate::world::World;

/// Quick leader election for tests: a 4 s lease, a 3 s renew deadline, a 1 s retry period.
fn election(ns: &str, identity: &str) -> spillway_k8s::Election {
    spillway_k8s::Election {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
        ..spillway_k8s::Election::new(ns, "spillway-operator", identity)
    }
}

/// Who holds the test's Lease.
async fn holder(w: &World) -> Result<Option<String>, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    Api::<Lease>::namespaced(w.client.clone(), &w.ns)
        .get_opt("spillway-operator")
        .await
        .map_err(|e| e.to_string())
        .map(|l| l.and_then(|l| l.spec?.holder_identity))
}

/// When the current holder of the test's Lease acquired it.
async fn lease_acquired(w: &World) -> jiff::Timestamp {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = Api::<Lease>::namespaced(w.client.clone(), &w.ns)
        .get("spillway-operator")
        .await
        .expect("lease");
    lease
        .spec
        .and_then(|s| s.acquire_time)
        .expect("acquireTime")
        .0
}

async fn wait_leader(w: &World, identity: &str) {
    eventually(WAIT, &format!("{identity} to lead"), || async {
        match holder(w).await? {
            Some(h) if h == identity => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Starts a standby and waits until its caches are synced.
async fn standby(w: &World, identity: &str) -> RunningOperator {
    let b = RunningOperator::start(w.client.clone(), Some(election(&w.ns, identity)))
        .await
        .expect("standby");
    eventually(WAIT, &format!("{identity} to be ready"), || async {
        match b.get("/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_and_handover_when_it_dies() {
    let _turn = serial().await;
    let w = World::new("op-leader").await;
    w.nodes(1, 8, None).await;
    let a = RunningOperator::start(w.client.clone(), Some(election(&w.ns, "replica-a")))
        .await
        .expect("a");
    wait_leader(&w, "replica-a").await;
    let b = standby(&w, "replica-b").await;
    w.submit("one", json!({}), None).await;
    w.wait_phase("one", JobPhase::Running).await;
    assert_eq!(
        b.metrics.api_writes_total(),
        0,
        "the standby writes nothing"
    );
    assert!(a.metrics.api_writes_total() > 0);
    assert!(
        b.get("/metrics")
            .await
            .expect("metrics")
            .1
            .contains("spillway_leader 0")
    );

    // The leader dies without releasing the lease; the standby takes over once it expires.
    a.kill();
    let killed = std::time::Instant::now();
    wait_leader(&w, "replica-b").await;
    let handover = killed.elapsed();
    // Lease 4 s, checks every 1 s: within the lease time plus two checks.
    assert!(
        handover < Duration::from_secs(7),
        "handover took {handover:?}"
    );
    w.submit("two", json!({}), None).await;
    w.wait_phase("two", JobPhase::Running).await;
    assert!(b.metrics.api_writes_total() > 0);

    // A clean stop releases the lease at once.
    b.stop().await.expect("clean stop");
    assert_eq!(holder(&w).await.expect("lease"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_and_metrics_pass_promtool() {
    let _turn = serial().await;
    let w = World::new("op-metrics").await;
    w.nodes(1, 8, None).await;
    let op = RunningOperator::start(w.client.clone(), None)
        .await
        .expect("operator");
    eventually(WAIT, "/readyz", || async {
        match op.get("/readyz").await {
            Ok((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(op.get("/healthz").await.expect("healthz").0, 200);
    assert_eq!(op.get("/nope").await.expect("404").0, 404);
    w.submit("measured", json!({}), Some(1)).await;
    w.wait_phase("measured", JobPhase::Succeeded).await;
    // While a second job runs, the first one's objects do not change: the turns keep its
    // view (the watch caches hand out the same objects until they change).
    w.submit("second", json!({}), Some(1)).await;
    w.wait_phase("second", JobPhase::Succeeded).await;
    let (code, body) = op.get("/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    let kept = body
        .lines()
        .find_map(|l| l.strip_prefix(r#"spillway_job_views_total{result="kept"} "#))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(kept.is_some_and(|k| k > 0.0), "no view kept:\n{body}");
    for family in [
        "spillway_jobs{",
        "spillway_job_wait_seconds_bucket{",
        "spillway_decisions_total{outcome=\"StartPrivate\",reason=\"FitsPrivate\"}",
        "spillway_reconcile_duration_seconds_count",
        "spillway_leader 1",
    ] {
        assert!(body.contains(family), "{family} missing from:\n{body}");
    }
    let promtool = std::env::var("SPILLWAY_PROMTOOL").unwrap_or_else(|_| {
        spillway_tests::cache_dir()
            .join("prometheus/usr/bin/promtool")
            .display()
            .to_string()
    });
    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{promtool}: {e}; run scripts/promtool.sh (scripts/test.sh does)")
        });
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    op.stop().await.expect("clean stop");
}

/// The leader is cut off from the API server (its requests vanish; what the server sends still
/// arrives, so it keeps seeing new jobs and keeps acting). At its renew deadline it stops
/// leading and cancels everything not yet sent, before the standby can take over; once the
/// partition heals nothing more arrives from it, and the standby places every job once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_at_its_renew_deadline_and_sends_nothing_after() {
    use spillway_tests::cluster::TestCluster;
    use spillway_tests::partition::Partition;
    use std::time::Instant;
    let _turn = serial().await;
    let w = World::new("op-fence").await;
    w.nodes(2, 8, None).await;
    let cluster = TestCluster::shared().await;
    let partition = Partition::start(&cluster.server_url)
        .await
        .expect("partition proxy");
    let a = RunningOperator::start(
        partition
            .client(cluster)
            .await
            .expect("client via the proxy"),
        Some(election(&w.ns, "replica-a")),
    )
    .await
    .expect("a");
    wait_leader(&w, "replica-a").await;
    let b = standby(&w, "replica-b").await;
    w.submit("before", json!({"gpusPerReplica": 2}), None).await;
    w.wait_phase("before", JobPhase::Running).await;

    partition.cut();
    let cut_wall = std::time::SystemTime::now();
    for i in 0..3 {
        w.submit(&format!("during-{i}"), json!({"gpusPerReplica": 2}), None)
            .await;
    }
    eventually(WAIT, "replica-a to stop leading", || async {
        if a.finished() {
            Ok(())
        } else {
            Err("still running".into())
        }
    })
    .await;
    let stopped_at = Instant::now();
    // The moment its run returned (recorded by the harness), not the moment this poll saw it.
    let a_ended = a.ended_at().expect("the run returned on its own");
    let took = a_ended.duration_since(cut_wall).unwrap_or_default();
    // Its last renewal was at most a retry period before the cut; the deadline is 3 s.
    assert!(
        took < Duration::from_secs(5),
        "stopped {took:?} after the cut"
    );
    let (_, metrics) = a.get("/metrics").await.unwrap_or_default();
    let a_result = a.stop().await;
    assert!(
        a_result
            .as_ref()
            .is_err_and(|e| e.to_string().contains("lost leadership")),
        "{a_result:?}"
    );
    assert!(
        metrics.is_empty() || metrics.contains("spillway_leader 0"),
        "not the leader any more"
    );

    // Its client's connections close a moment after its run returns (each sends a TLS
    // close as it goes): once they are gone, whatever arrives after the heal would be
    // something it held back.
    eventually(WAIT, "the old leader's connections to close", || async {
        match partition.open_connections() {
            0 => Ok(()),
            n => Err(format!("{n} still open")),
        }
    })
    .await;
    partition.heal();
    let healed_at = Instant::now();
    wait_leader(&w, "replica-b").await;
    // The standby may have taken over while the partition lasted (it is not cut off): what
    // matters is that it acquired the lease only after the old leader had stopped. Both times
    // are this machine's wall clock (the standby runs in this process).
    let acquired = lease_acquired(&w).await;
    let a_ended = jiff::Timestamp::try_from(a_ended).expect("a time after 1970");
    assert!(
        a_ended <= acquired,
        "it stopped ({a_ended}) before anyone could take over (replica-b acquired {acquired})"
    );
    for i in 0..3 {
        let job = w
            .wait_phase(&format!("during-{i}"), JobPhase::Running)
            .await;
        assert_eq!(
            job.status.and_then(|s| s.restarts),
            None,
            "placed once, by the new leader"
        );
        assert_eq!(w.pods_of(&format!("during-{i}")).await.len(), 1);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        partition.connections_after(stopped_at),
        0,
        "the old leader opened no connection after it stopped"
    );
    assert_eq!(
        partition.bytes_sent_after(healed_at),
        0,
        "nothing held back by the partition arrived later"
    );
    b.stop().await.expect("clean stop");
}
