//! The executor's failure paths, with scripted effects (no API server).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use super::*;
use crate::actions::{Note, StatusKind, StatusPatch};
use crate::error::api_error;

/// Effects that answer from a script per key and record every call.
#[derive(Default)]
struct Scripted {
    answers: Mutex<HashMap<String, VecDeque<Result<(), Error>>>>,
    calls: Mutex<Vec<(String, Instant)>>,
    abandoned: Mutex<Vec<String>>,
    delay: Duration,
    refuse: Mutex<Vec<String>>,
}

impl Scripted {
    fn answer(&self, key: &str, r: Result<(), Error>) {
        self.answers
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .push_back(r);
    }

    fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn abandoned(&self) -> Vec<String> {
        self.abandoned.lock().unwrap().clone()
    }
}

impl Effects for Scripted {
    fn accept(&self, action: &Action) -> bool {
        !self.refuse.lock().unwrap().contains(&label(action))
    }

    fn run<'a>(&'a self, action: &'a Action, fence: &'a Fence) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            fence.check()?;
            let key = label(action);
            self.calls
                .lock()
                .unwrap()
                .push((key.clone(), Instant::now()));
            self.answers
                .lock()
                .unwrap()
                .get_mut(&key)
                .and_then(|q| q.pop_front())
                .unwrap_or(Ok(()))
        })
    }

    fn abandon(&self, action: &Action) {
        self.abandoned.lock().unwrap().push(label(action));
    }
}

/// A status write's label includes its body's generation marker, so tests can tell writes
/// of one object apart.
fn label(action: &Action) -> String {
    match action {
        Action::ApplyStatus(p) => format!("{}#{}", p.name, p.body["n"]),
        Action::Cordon { node } => format!("cordon {node}"),
        Action::DeleteNode { node, .. } => format!("delete {node}"),
        other => other.key().to_string(),
    }
}

fn status(name: &str, n: u32) -> Action {
    Action::ApplyStatus(StatusPatch {
        kind: StatusKind::GpuQueue,
        namespace: None,
        name: name.into(),
        body: serde_json::json!({ "n": n }),
    })
}

fn event(name: &str) -> Action {
    Action::Publish(Note {
        regarding: k8s_openapi::api::core::v1::ObjectReference {
            name: Some(name.into()),
            ..Default::default()
        },
        warning: false,
        reason: "Test".into(),
        action: "Test".into(),
        note: "a test".into(),
    })
}

fn quick() -> ExecutorSettings {
    ExecutorSettings {
        max_in_flight: 4,
        retry: RetryPolicy {
            base: Duration::from_millis(5),
            cap: Duration::from_millis(20),
            attempts: 4,
        },
        crash: None,
    }
}

fn executor(
    effects: Arc<Scripted>,
    fence: Fence,
) -> (Executor, mpsc::UnboundedReceiver<Failure>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let (e, rx) = Executor::new(effects, &quick(), fence, metrics.clone());
    (e, rx, metrics)
}

#[tokio::test]
async fn a_transient_failure_is_retried_until_it_succeeds() {
    let fx = Arc::new(Scripted::default());
    fx.answer("q#1", Err(api_error(500, "InternalError", "etcd is slow")));
    fx.answer("q#1", Err(api_error(429, "TooManyRequests", "slow down")));
    let (mut ex, mut failures, metrics) = executor(fx.clone(), Fence::open());
    ex.submit(status("q", 1));
    assert!(ex.drain(Duration::from_secs(5)).await);
    assert_eq!(fx.calls(), vec!["q#1", "q#1", "q#1"]);
    assert!(failures.try_recv().is_err(), "no failure reported");
    let text = metrics.render();
    assert!(text.contains(r#"spillway_actions_total{kind="apply_status",result="ok"} 1"#));
    assert!(text.contains(r#"spillway_action_retries_total{kind="apply_status"} 2"#));
    assert!(
        text.contains(
            r#"spillway_action_errors_total{kind="apply_status",category="transient"} 2"#
        )
    );
}

#[tokio::test]
async fn retries_are_capped_then_the_failure_is_reported() {
    let fx = Arc::new(Scripted::default());
    for _ in 0..10 {
        fx.answer("q#1", Err(api_error(503, "ServiceUnavailable", "down")));
    }
    let (mut ex, mut failures, _) = executor(fx.clone(), Fence::open());
    ex.submit(status("q", 1));
    ex.drain(Duration::from_secs(5)).await;
    assert_eq!(fx.calls().len(), 4, "the policy's four attempts");
    let f = failures.try_recv().expect("reported");
    assert!(matches!(f.action, Action::ApplyStatus(_)));
    assert_eq!(f.error.status_code(), Some(503));
    assert_eq!(fx.abandoned(), vec!["q#1"]);
}

/// One retry layer per call: a cloud call's SDK retried it already, so a throttled or
/// otherwise transient cloud error goes back to the loop after one attempt, while the same
/// action's Kubernetes half (deleting the Node) is retried here.
#[tokio::test]
async fn a_cloud_error_is_not_retried_on_top_of_the_sdks_retries() {
    let fx = Arc::new(Scripted::default());
    let terminate = Action::Terminate {
        instance: "i-1".into(),
        node: None,
        why: "idle".into(),
    };
    let key = label(&terminate);
    for _ in 0..3 {
        fx.answer(
            &key,
            Err(Error::Cloud(spillway_cloud::CloudError::from_code(
                "RequestLimitExceeded",
                "slow down",
            ))),
        );
    }
    fx.answer("q#1", Err(api_error(429, "TooManyRequests", "slow down")));
    let (mut ex, mut failures, _) = executor(fx.clone(), Fence::open());
    ex.submit(terminate);
    ex.submit(status("q", 1));
    ex.drain(Duration::from_secs(5)).await;
    let calls = fx.calls();
    assert_eq!(
        calls.iter().filter(|c| **c == key).count(),
        1,
        "one attempt of the throttled cloud call: {calls:?}"
    );
    assert_eq!(
        calls.iter().filter(|c| *c == "q#1").count(),
        2,
        "the API write is retried: {calls:?}"
    );
    let f = failures.try_recv().expect("reported to the loop");
    assert!(matches!(f.action, Action::Terminate { .. }));
    assert!(failures.try_recv().is_err());
}

#[tokio::test]
async fn an_error_no_retry_can_fix_is_reported_at_once() {
    let fx = Arc::new(Scripted::default());
    fx.answer("q#1", Err(api_error(403, "Forbidden", "no RBAC")));
    fx.answer("p#1", Err(api_error(422, "Invalid", "bad status")));
    let (mut ex, mut failures, _) = executor(fx.clone(), Fence::open());
    ex.submit(status("q", 1));
    ex.submit(status("p", 1));
    ex.drain(Duration::from_secs(5)).await;
    assert_eq!(fx.calls().len(), 2, "one attempt each");
    let mut categories = vec![
        failures.try_recv().unwrap().error.category(),
        failures.try_recv().unwrap().error.category(),
    ];
    categories.sort();
    assert_eq!(
        categories,
        vec![
            spillway_core::ErrorCategory::InvalidInput,
            spillway_core::ErrorCategory::Permission
        ]
    );
}

#[tokio::test]
async fn backoff_waits_longer_between_later_attempts_within_the_cap() {
    let policy = RetryPolicy {
        base: Duration::from_millis(100),
        cap: Duration::from_millis(250),
        attempts: 10,
    };
    for retry in 0..10 {
        let d = policy.backoff(retry);
        assert!(d <= Duration::from_millis(250), "capped: {d:?}");
        assert!(
            d <= Duration::from_millis(100) * (1 << retry),
            "grows: {d:?}"
        );
    }
}

#[tokio::test]
async fn a_newer_status_write_ends_the_retries_of_an_older_one() {
    let fx = Arc::new(Scripted {
        delay: Duration::from_millis(10),
        ..Scripted::default()
    });
    for _ in 0..10 {
        fx.answer("q#1", Err(api_error(500, "InternalError", "x")));
    }
    let (mut ex, mut failures, _) = executor(fx.clone(), Fence::open());
    ex.submit(status("q", 1));
    tokio::time::sleep(Duration::from_millis(15)).await;
    ex.submit(status("q", 2));
    ex.drain(Duration::from_secs(5)).await;
    let calls = fx.calls();
    assert_eq!(calls.last().map(String::as_str), Some("q#2"), "{calls:?}");
    assert!(
        calls.iter().filter(|c| *c == "q#1").count() < 4,
        "stopped retrying: {calls:?}"
    );
    assert!(failures.try_recv().is_err(), "superseded is not a failure");
}

#[tokio::test]
async fn actions_of_one_object_land_in_issue_order() {
    let fx = Arc::new(Scripted {
        delay: Duration::from_millis(3),
        ..Scripted::default()
    });
    fx.answer("cordon n1", Err(api_error(500, "InternalError", "once")));
    let (mut ex, _, _) = executor(fx.clone(), Fence::open());
    ex.submit(Action::Cordon { node: "n1".into() });
    ex.submit(Action::DeleteNode {
        node: "n1".into(),
        why: "test".into(),
    });
    ex.drain(Duration::from_secs(5)).await;
    assert_eq!(
        fx.calls(),
        vec!["cordon n1", "cordon n1", "delete n1"],
        "the delete waits for the cordon's retry"
    );
}

#[tokio::test]
async fn calls_in_flight_are_bounded() {
    let fx = Arc::new(Scripted {
        delay: Duration::from_millis(30),
        ..Scripted::default()
    });
    let (mut ex, _, _) = executor(fx.clone(), Fence::open());
    let started = Instant::now();
    for i in 0..8 {
        ex.submit(event(&format!("e{i}")));
    }
    ex.drain(Duration::from_secs(5)).await;
    // Four at a time: two rounds of 30 ms at least.
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert_eq!(fx.calls().len(), 8);
}

#[tokio::test]
async fn work_already_in_flight_is_not_started_twice() {
    let fx = Arc::new(Scripted::default());
    fx.refuse.lock().unwrap().push("cordon n1".into());
    let (mut ex, _, metrics) = executor(fx.clone(), Fence::open());
    ex.submit(Action::Cordon { node: "n1".into() });
    ex.drain(Duration::from_secs(1)).await;
    assert!(fx.calls().is_empty());
    assert!(
        metrics
            .render()
            .contains(r#"spillway_actions_total{kind="cordon",result="skipped"} 1"#)
    );
}

#[tokio::test]
async fn losing_leadership_cancels_every_action_not_yet_sent() {
    let fx = Arc::new(Scripted {
        delay: Duration::from_millis(50),
        ..Scripted::default()
    });
    for _ in 0..10 {
        fx.answer("q#1", Err(api_error(500, "InternalError", "x")));
    }
    let (leading_tx, leading_rx) = watch::channel(true);
    let (mut ex, mut failures, metrics) = executor(fx.clone(), Fence::new(leading_rx));
    ex.submit(status("q", 1)); // will be backing off
    for i in 0..8 {
        ex.submit(event(&format!("e{i}"))); // four wait for a permit
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    leading_tx.send_replace(false);
    let lost_at = Instant::now();
    // Whatever was mid-call finishes its sleep; nothing is sent after the fence dropped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after: Vec<String> = fx
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at > lost_at)
        .map(|(k, _)| k.clone())
        .collect();
    assert!(after.is_empty(), "sent after losing the lease: {after:?}");
    ex.submit(status("q", 2));
    ex.drain(Duration::from_secs(1)).await;
    assert!(fx.calls().iter().all(|c| c != "q#2"), "nothing new starts");
    assert!(failures.try_recv().is_err(), "cancelled, not failed");
    assert!(
        metrics
            .render()
            .contains(r#"spillway_actions_total{kind="publish_event",result="cancelled"} 8"#),
        "{}",
        metrics.render()
    );
}

/// The crash seam: held kinds are never sent; after the chosen kind succeeds nothing more is.
#[tokio::test]
async fn a_crash_at_an_exact_instant_sends_nothing_after_it_and_nothing_held() {
    let fx = Arc::new(Scripted::default());
    let metrics = Arc::new(Metrics::default());
    let crash = Crash::new(vec![ActionKind::ApplyStatus], ActionKind::Publish);
    let settings = ExecutorSettings {
        crash: Some(crash.clone()),
        ..quick()
    };
    let (mut ex, _failures) = Executor::new(fx.clone(), &settings, Fence::open(), metrics);
    ex.submit(status("q", 1));
    ex.submit(event("first"));
    tokio::time::timeout(Duration::from_secs(5), crash.fired.notified())
        .await
        .expect("fired after the event");
    ex.submit(event("second"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fx.calls().len(),
        1,
        "only the first event: {:?}",
        fx.calls()
    );
    assert!(fx.calls()[0].starts_with("Event"), "{:?}", fx.calls());
}
