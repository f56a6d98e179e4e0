//! A real OTLP/gRPC receiver for the tests of one process, and the operator's telemetry
//! pointed at it.
//!
//! Both live on a runtime of their own (each `#[tokio::test]` has its own, which ends with the
//! test): the receiver (`fake-opentelemetry-collector`, a tonic server speaking the OTLP
//! protocol) and the operator's span exporter keep running for the whole process. What arrives
//! is kept; tests look up the spans of a trace.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use fake_opentelemetry_collector::ExportedSpan;
use spillway_k8s::Metrics;

struct Receiver {
    spans: Arc<Mutex<Vec<ExportedSpan>>>,
    /// Names of the metrics received (with at least one point).
    metric_names: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// The operator-side metrics of the exporter (spans exported, dropped, failed).
    pub metrics: Arc<Metrics>,
    pub endpoint: String,
}

static RECEIVER: OnceLock<Receiver> = OnceLock::new();

/// Starts the receiver and installs the operator's telemetry (global tracer provider and the
/// `tracing` bridge) once per process; returns the receiver's endpoint.
pub fn install() -> String {
    RECEIVER
        .get_or_init(|| {
            let spans: Arc<Mutex<Vec<ExportedSpan>>> = Arc::default();
            let metric_names: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
            let names = metric_names.clone();
            let metrics = Arc::new(Metrics::default());
            let (tx, rx) = std::sync::mpsc::channel();
            let (kept, m) = (spans.clone(), metrics.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("telemetry runtime");
                runtime.block_on(async move {
                    let mut server = fake_opentelemetry_collector::FakeCollectorServer::start()
                        .await
                        .expect("OTLP receiver");
                    let endpoint = server.endpoint();
                    let telemetry =
                        spillway_k8s::otel::Telemetry::grpc(&endpoint, Duration::from_secs(1), m)
                            .expect("telemetry");
                    install_bridge(telemetry.tracer());
                    let _ = tx.send(endpoint);
                    loop {
                        let got = server.exported_spans(1, Duration::from_millis(200)).await;
                        kept.lock().unwrap_or_else(|e| e.into_inner()).extend(got);
                        let pushed = server.exported_metrics(0, Duration::from_millis(10)).await;
                        let mut n = names.lock().unwrap_or_else(|e| e.into_inner());
                        for m in pushed.iter().flat_map(|e| e.metrics.iter()) {
                            if m.data.is_some() {
                                n.insert(m.name.clone());
                            }
                        }
                    }
                });
            });
            let endpoint = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the OTLP receiver started");
            Receiver {
                spans,
                metric_names,
                metrics,
                endpoint,
            }
        })
        .endpoint
        .clone()
}

fn install_bridge(tracer: spillway_k8s::otel::SdkTracer) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("spillway_k8s", tracing::Level::INFO)
                .with_target("spillway_aws", tracing::Level::INFO),
        );
    let _ = tracing_subscriber::registry().with(otel).try_init();
}

/// The exporter's counters (installed once per process).
pub fn metrics() -> Arc<Metrics> {
    install();
    RECEIVER
        .get()
        .map(|r| r.metrics.clone())
        .unwrap_or_default()
}

/// Names of the metrics pushed so far.
pub fn metric_names() -> std::collections::BTreeSet<String> {
    RECEIVER
        .get()
        .map(|r| {
            r.metric_names
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
        .unwrap_or_default()
}

/// Every span received so far of the trace `trace_id` (32 hex digits).
pub fn spans_of(trace_id: &str) -> Vec<ExportedSpan> {
    RECEIVER
        .get()
        .map(|r| {
            r.spans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Every span received so far named `name`.
pub fn spans_named(name: &str) -> Vec<ExportedSpan> {
    RECEIVER
        .get()
        .map(|r| {
            r.spans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|s| s.name == name)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the spans of `trace_id` satisfy `done`; returns them (or panics after
/// `timeout` with what arrived).
pub async fn wait_trace(
    trace_id: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[ExportedSpan]) -> bool,
) -> Vec<ExportedSpan> {
    let deadline = Instant::now() + timeout;
    loop {
        let spans = spans_of(trace_id);
        if done(&spans) {
            return spans;
        }
        if Instant::now() > deadline {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            panic!("timed out waiting for {what} in trace {trace_id}; received {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An attribute of a received span, as text (the receiver keeps the protocol's debug form,
/// `Some(AnyValue { value: Some(StringValue("x")) })`; this takes the value out).
pub fn attr(span: &ExportedSpan, key: &str) -> Option<String> {
    let raw = span.attributes.get(key)?;
    for (prefix, quoted) in [
        ("StringValue(\"", true),
        ("IntValue(", false),
        ("DoubleValue(", false),
        ("BoolValue(", false),
    ] {
        if let Some(start) = raw.find(prefix) {
            let rest = &raw[start + prefix.len()..];
            let end = if quoted {
                rest.find("\")")
            } else {
                rest.find(')')
            }?;
            return Some(rest[..end].replace("\\\"", "\""));
        }
    }
    Some(raw.clone())
}
