//! The telemetry every GpuJob's pods get, the same on private and cloud nodes but for the
//! facts of where they run: OpenTelemetry resource attributes, the service name, the OTLP
//! endpoint their pool (or queue) can reach, and the job's trace context, so the workload's
//! spans join the job's trace.
//!
//! A job's trace context is kept on the job (`spillway.io/traceparent`), so it survives operator
//! restarts and failovers. A user who sets the annotation themselves (to join an outer trace, a
//! CI pipeline's for example) keeps theirs; otherwise it is derived from the job's uid.

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use kube::ResourceExt;
use spillway_api::GpuJob;

/// The annotation that carries a job's W3C trace context.
pub const TRACEPARENT_ANNOTATION: &str = "spillway.io/traceparent";

/// A W3C trace context (`traceparent`, version 00).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl TraceParent {
    /// Parses `00-<32 hex>-<16 hex>-<2 hex>`; all-zero ids are invalid.
    pub fn parse(s: &str) -> Option<TraceParent> {
        let parts: Vec<&str> = s.trim().split('-').collect();
        if parts.len() != 4 || parts[0] != "00" || parts[3].len() != 2 {
            return None;
        }
        let trace_id: [u8; 16] = hex(parts[1])?.try_into().ok()?;
        let span_id: [u8; 8] = hex(parts[2])?.try_into().ok()?;
        u8::from_str_radix(parts[3], 16).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, span_id })
    }

    /// The trace context of a job with this uid: stable, so every replica and every restart
    /// derive the same one.
    pub fn derive(uid: &str) -> TraceParent {
        let a = fnv(uid.as_bytes(), 0xcbf2_9ce4_8422_2325);
        let b = fnv(uid.as_bytes(), 0x8422_2325_cbf2_9ce4);
        let c = fnv(uid.as_bytes(), 0x0000_0100_0000_01b3).max(1);
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&a.to_be_bytes());
        trace_id[8..].copy_from_slice(&b.to_be_bytes());
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        TraceParent {
            trace_id,
            span_id: c.to_be_bytes(),
        }
    }

    /// The header form, sampled.
    pub fn header(&self) -> String {
        format!("00-{}-{}-01", to_hex(&self.trace_id), to_hex(&self.span_id))
    }
}

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    let mut h = seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2)
        || !s
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A job's trace context, and whether its annotation already says so.
pub fn of_job(job: &GpuJob) -> (TraceParent, bool) {
    match job
        .annotations()
        .get(TRACEPARENT_ANNOTATION)
        .and_then(|v| TraceParent::parse(v))
    {
        Some(tp) => (tp, true),
        None => (
            TraceParent::derive(job.metadata.uid.as_deref().unwrap_or_default()),
            false,
        ),
    }
}

/// What one pod's telemetry says.
#[derive(Clone, Debug, PartialEq)]
pub struct PodTelemetry {
    /// `OTEL_SERVICE_NAME` unless the template sets one: the job's name.
    pub service_name: String,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` unless the template sets one.
    pub endpoint: Option<String>,
    /// `TRACEPARENT`: the job's trace.
    pub traceparent: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`, in order; the template's own keys win.
    pub attributes: Vec<(String, String)>,
}

/// Where a pod runs, for its resource attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub environment: &'static str,
    pub pool: String,
    /// On a cloud node: (region, zone, instance id).
    pub cloud: Option<(String, String, String)>,
    /// In a cluster pool: the pool (`k8s.cluster.name`).
    pub cluster: Option<String>,
}

/// Resource attributes of a job's pod: the same keys in both environments, but for
/// `spillway.environment`, `spillway.pool`, `cloud.*`, `host.id` and, in a cluster pool,
/// `k8s.cluster.name`. The pod and node names
/// come from the downward API (`SPILLWAY_POD_NAME`, `SPILLWAY_NODE_NAME`).
pub fn attributes(job: &GpuJob, placement: &Placement) -> Vec<(String, String)> {
    let mut a = vec![
        ("spillway.job".to_string(), job.name_any()),
        ("spillway.queue".to_string(), job.spec.queue.clone()),
        (
            "spillway.environment".to_string(),
            placement.environment.to_string(),
        ),
        ("spillway.pool".to_string(), placement.pool.clone()),
        (
            "k8s.namespace.name".to_string(),
            job.namespace().unwrap_or_default(),
        ),
        ("k8s.pod.name".to_string(), format!("$({POD_NAME_VAR})")),
        ("k8s.node.name".to_string(), format!("$({NODE_NAME_VAR})")),
    ];
    if let Some((region, zone, instance)) = &placement.cloud {
        a.push(("cloud.provider".into(), "aws".into()));
        a.push(("cloud.platform".into(), "aws_ec2".into()));
        a.push(("cloud.region".into(), region.clone()));
        a.push(("cloud.availability_zone".into(), zone.clone()));
        a.push(("host.id".into(), instance.clone()));
    }
    if let Some(cluster) = &placement.cluster {
        a.push(("k8s.cluster.name".into(), cluster.clone()));
    }
    a
}

/// The variables the attributes refer to.
pub const POD_NAME_VAR: &str = "SPILLWAY_POD_NAME";
pub const NODE_NAME_VAR: &str = "SPILLWAY_NODE_NAME";

/// `k=v,k2=v2` with `,`, `=` and `%` in values percent-encoded (the OpenTelemetry format).
pub fn encode_attributes(attrs: &[(String, String)]) -> String {
    let enc = |s: &str| {
        s.replace('%', "%25")
            .replace(',', "%2C")
            .replace('=', "%3D")
    };
    attrs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The keys of an `OTEL_RESOURCE_ATTRIBUTES` value.
fn keys_of(value: &str) -> Vec<String> {
    value
        .split(',')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
        .collect()
}

/// Adds the job's telemetry to every container (init containers too). The template's own
/// `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_ENDPOINT` and `TRACEPARENT` win; its own
/// `OTEL_RESOURCE_ATTRIBUTES` keeps its keys and gets ours for the keys it does not set (one
/// that comes from a `valueFrom` is kept as it is).
pub fn inject(pod: &mut Pod, t: &PodTelemetry) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in containers {
        inject_into(c, t);
    }
}

fn field_ref(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn literal(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        value_from: None,
    }
}

fn inject_into(c: &mut Container, t: &PodTelemetry) {
    let vars = c.env.get_or_insert_with(Vec::new);
    // The downward-API variables first: later ones may refer to them as $(NAME).
    let mut front = Vec::new();
    for (name, path) in [
        (POD_NAME_VAR, "metadata.name"),
        (NODE_NAME_VAR, "spec.nodeName"),
    ] {
        if !vars.iter().any(|v| v.name == name) {
            front.push(field_ref(name, path));
        }
    }
    vars.splice(0..0, front);
    let has = |vars: &Vec<EnvVar>, name: &str| vars.iter().any(|v| v.name == name);
    if !has(vars, "OTEL_SERVICE_NAME") {
        vars.push(literal("OTEL_SERVICE_NAME", t.service_name.clone()));
    }
    if let Some(endpoint) = &t.endpoint
        && !has(vars, "OTEL_EXPORTER_OTLP_ENDPOINT")
    {
        vars.push(literal("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()));
    }
    if !has(vars, "TRACEPARENT") {
        vars.push(literal("TRACEPARENT", t.traceparent.clone()));
    }
    match vars
        .iter_mut()
        .find(|v| v.name == "OTEL_RESOURCE_ATTRIBUTES")
    {
        None => vars.push(literal(
            "OTEL_RESOURCE_ATTRIBUTES",
            encode_attributes(&t.attributes),
        )),
        Some(v) => {
            if let Some(own) = v.value.as_mut() {
                let theirs = keys_of(own);
                let ours: Vec<(String, String)> = t
                    .attributes
                    .iter()
                    .filter(|(k, _)| !theirs.contains(k))
                    .cloned()
                    .collect();
                if !ours.is_empty() {
                    let sep = if own.trim().is_empty() { "" } else { "," };
                    *own = format!("{own}{sep}{}", encode_attributes(&ours));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_bad_ones_are_refused() {
        let tp = TraceParent::derive("8f3b1c2a-0000-4000-8000-000000000001");
        assert_eq!(TraceParent::parse(&tp.header()), Some(tp));
        assert_eq!(
            tp,
            TraceParent::derive("8f3b1c2a-0000-4000-8000-000000000001")
        );
        assert_ne!(tp, TraceParent::derive("another"));
        for bad in [
            "",
            "00-00000000000000000000000000000000-0000000000000001-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        assert!(
            TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").is_some()
        );
    }

    #[test]
    fn values_are_percent_encoded() {
        let a = vec![("k".to_string(), "a,b=c%".to_string())];
        assert_eq!(encode_attributes(&a), "k=a%2Cb%3Dc%25");
    }
}
