//! The operator's own telemetry: traces over OTLP, configured by the standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc` or `http/protobuf`), `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`), off when no endpoint is set.
//!
//! A collector that is down never slows or breaks scheduling: a finished span goes into a
//! bounded queue (never blocking), a background task exports batches with a timeout, and what
//! the queue cannot take or the collector refuses is dropped and counted
//! (`spillway_telemetry_spans_total{result}`).
//!
//! The metrics `/metrics` shows are pushed over OTLP too (`OTEL_METRIC_EXPORT_INTERVAL`,
//! default 60 s), as observable counters and gauges with the same names and labels.
//!
//! Spans about a GpuJob ([`SpanRecord`], from the turn) join the job's trace: their parent is
//! the job's trace context (`spillway.io/traceparent`), and when the job ends its root span is
//! emitted with exactly that context's ids, from queued to finished.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use spillway_core::Time;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::metrics::Metrics;
use crate::telemetry::TraceParent;

/// The tracer type of the `tracing` bridge.
pub use opentelemetry_sdk::trace::SdkTracer;

/// The instrumentation scope of Spillway's spans.
pub const SCOPE: &str = "spillway";
/// Spans waiting for export at most; more are dropped.
const QUEUE: usize = 4096;
/// Spans per export call at most.
const BATCH: usize = 512;
/// How long spans wait to fill a batch.
const LINGER: Duration = Duration::from_millis(500);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// An attribute value of a span record.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
}

/// A span about a GpuJob, as a turn asks for it.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    /// The job's trace.
    pub trace: TraceParent,
    /// `true` for the job's root span: it takes the trace context's own ids.
    pub root: bool,
    pub name: &'static str,
    pub start: Time,
    pub end: Time,
    pub attributes: Vec<(&'static str, Value)>,
    /// Ends with an error status, with this description.
    pub error: Option<String>,
}

fn system_time(t: Time) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.as_millis().max(0) as u64)
}

/// The remote context of a job's trace, for its spans' parent.
pub fn context_of(trace: &TraceParent) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(trace.trace_id),
        SpanId::from_bytes(trace.span_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

thread_local! {
    /// Ids the next root span takes (set only around [`record`] of a job's root span).
    static FORCED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a job's root span, which takes its trace context's ids.
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        FORCED
            .with(Cell::get)
            .map(|f| f.0)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        FORCED
            .with(Cell::get)
            .map(|f| f.1)
            .unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Emits a span record through the global tracer provider (a no-op without telemetry).
pub fn record(r: &SpanRecord) {
    let tracer = opentelemetry::global::tracer(SCOPE);
    let attributes: Vec<KeyValue> = r
        .attributes
        .iter()
        .map(|(k, v)| match v {
            Value::Str(s) => KeyValue::new(*k, s.clone()),
            Value::Int(i) => KeyValue::new(*k, *i),
            Value::Float(f) => KeyValue::new(*k, *f),
        })
        .collect();
    let builder = tracer
        .span_builder(r.name)
        .with_kind(SpanKind::Internal)
        .with_start_time(system_time(r.start))
        .with_attributes(attributes);
    let mut span = if r.root {
        FORCED.with(|f| {
            f.set(Some((
                TraceId::from_bytes(r.trace.trace_id),
                SpanId::from_bytes(r.trace.span_id),
            )))
        });
        let span = builder.start_with_context(&tracer, &Context::new());
        FORCED.with(|f| f.set(None));
        span
    } else {
        builder.start_with_context(&tracer, &context_of(&r.trace))
    };
    if let Some(e) = &r.error {
        span.set_status(Status::error(e.clone()));
    }
    span.end_with_timestamp(system_time(r.end));
}

/// A bounded, never-blocking export queue in front of an exporter.
#[derive(Debug)]
struct Queue {
    tx: mpsc::Sender<Message>,
    metrics: Arc<Metrics>,
}

#[derive(Debug)]
enum Message {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(Message::Span(Box::new(span))).is_err() {
            self.metrics.telemetry_spans("dropped", 1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

async fn export_loop<E: SpanExporter + 'static>(
    exporter: E,
    mut rx: mpsc::Receiver<Message>,
    metrics: Arc<Metrics>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    loop {
        let mut flushed: Option<oneshot::Sender<()>> = None;
        let first = rx.recv().await;
        match first {
            None => return,
            Some(Message::Span(s)) => batch.push(*s),
            Some(Message::Flush(done)) => flushed = Some(done),
        }
        let deadline = tokio::time::Instant::now() + LINGER;
        while flushed.is_none() && batch.len() < BATCH {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Message::Span(s))) => batch.push(*s),
                Ok(Some(Message::Flush(done))) => flushed = Some(done),
                Ok(None) | Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let n = batch.len() as u64;
            let spans = std::mem::take(&mut batch);
            match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await {
                Ok(Ok(())) => metrics.telemetry_spans("exported", n),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, spans = n, "span export failed; spans dropped");
                    metrics.telemetry_spans("failed", n);
                }
                Err(_) => {
                    tracing::debug!(spans = n, "span export timed out; spans dropped");
                    metrics.telemetry_spans("failed", n);
                }
            }
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
    }
}

/// The operator's telemetry while it runs; flushes on [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: SdkTracerProvider,
    flush: mpsc::Sender<Message>,
    /// The metrics the Prometheus endpoint shows, pushed over OTLP too.
    meters: Option<SdkMeterProvider>,
}

/// How often metrics are pushed: `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds), default 60 s.
fn metric_interval() -> Duration {
    std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(60))
}

/// Pushes every counter and gauge family of `metrics` (the same as `/metrics`) through
/// `exporter` every `interval`, as observable instruments that read the families when the SDK
/// collects.
fn meters<E: PushMetricExporter + 'static>(
    exporter: E,
    interval: Duration,
    resource: Resource,
    metrics: Arc<Metrics>,
) -> SdkMeterProvider {
    use opentelemetry::metrics::MeterProvider as _;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(interval)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_reader(reader)
        .build();
    let meter = provider.meter(SCOPE);
    for family in metrics.families() {
        let (name, kind, help) = (family.0, family.1, family.2);
        let m = metrics.clone();
        let observe = move |observer: &dyn opentelemetry::metrics::AsyncInstrument<f64>| {
            for f in m.families().into_iter().filter(|f| f.0 == name) {
                for (labels, value) in f.3 {
                    let attrs: Vec<KeyValue> = labels
                        .into_iter()
                        .map(|(k, v)| KeyValue::new(k, v))
                        .collect();
                    observer.observe(value, &attrs);
                }
            }
        };
        match kind {
            crate::metrics::Kind::Counter => {
                meter
                    .f64_observable_counter(name)
                    .with_description(help)
                    .with_callback(observe)
                    .build();
            }
            crate::metrics::Kind::Gauge => {
                meter
                    .f64_observable_gauge(name)
                    .with_description(help)
                    .with_callback(observe)
                    .build();
            }
        }
    }
    provider
}

impl Telemetry {
    /// From the standard variables; `None` when no OTLP endpoint is set or
    /// `OTEL_SDK_DISABLED=true`. Must be called inside a tokio runtime.
    pub fn from_env(metrics: Arc<Metrics>) -> Result<Option<Telemetry>, Error> {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
        if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
            || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        {
            return Ok(None);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .build()
            .map_err(|e| Error::Settings(format!("OTLP exporter: {e}")))?;
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .build()
            .map_err(|e| Error::Settings(format!("OTLP metric exporter: {e}")))?;
        Ok(Some(Telemetry::with_exporter(
            exporter,
            Some((metric_exporter, metric_interval())),
            metrics,
        )))
    }

    /// To an OTLP/gRPC endpoint (`http://host:4317`), whatever the variables say (tests).
    pub fn grpc(
        endpoint: &str,
        metric_interval: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Telemetry, Error> {
        use opentelemetry_otlp::WithExportConfig;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::Settings(format!("OTLP exporter: {e}")))?;
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::Settings(format!("OTLP metric exporter: {e}")))?;
        Ok(Telemetry::with_exporter(
            exporter,
            Some((metric_exporter, metric_interval)),
            metrics,
        ))
    }

    fn with_exporter<E: SpanExporter + 'static, M: PushMetricExporter + 'static>(
        mut exporter: E,
        metric_exporter: Option<(M, Duration)>,
        metrics: Arc<Metrics>,
    ) -> Telemetry {
        // The SDK's resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
        let mut resource = Resource::builder();
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            resource = resource.with_service_name("spillway-operator");
        }
        let resource = resource.build();
        exporter.set_resource(&resource);
        let meters = metric_exporter
            .map(|(e, interval)| meters(e, interval, resource.clone(), metrics.clone()));
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(export_loop(exporter, rx, metrics.clone()));
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_id_generator(Ids::default())
            .with_span_processor(Queue {
                tx: tx.clone(),
                metrics,
            })
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        Telemetry {
            provider,
            flush: tx,
            meters,
        }
    }

    /// A tracer for the `tracing` bridge (spans of the EC2 calls and the provisioning).
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer(SCOPE)
    }

    /// Exports what is queued (at most `timeout`).
    pub async fn flush(&self, timeout: Duration) {
        let (done, wait) = oneshot::channel();
        if self.flush.send(Message::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(timeout, wait).await;
        }
    }

    /// Exports what is queued (at most 5 s) and stops.
    pub async fn shutdown(self) {
        self.flush(Duration::from_secs(5)).await;
        let _ = self.provider.shutdown();
        if let Some(m) = self.meters {
            // The reader's last push runs on its own thread; do not block the runtime on it.
            let _ = tokio::task::spawn_blocking(move || m.shutdown()).await;
        }
    }
}
