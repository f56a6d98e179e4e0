//! Telemetry: the same wiring in every pod, private or cloud, but for where it runs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::json;

use super::fixtures::*;
use crate::actions::Action;
use crate::telemetry::{self, Placement, PodTelemetry, TraceParent};
use crate::turn::{Turn, TurnSettings};

fn pods(t: &Turn) -> Vec<Pod> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { pod, .. } => Some((**pod).clone()),
            _ => None,
        })
        .collect()
}

/// The first container's env: name -> literal value (or `<from FIELD>`).
fn env(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| {
            let v = e.value.clone().unwrap_or_else(|| {
                let f = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.clone())
                    .unwrap_or_default();
                format!("<from {f}>")
            });
            (e.name.clone(), v)
        })
        .collect()
}

fn attrs(value: &str) -> BTreeMap<String, String> {
    value
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_private_pod_gets_resource_attributes_service_name_endpoint_and_the_jobs_trace() {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"telemetry": {"otlpEndpoint": "http://queue-collector:4317"}}),
    )];
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let t = Loop::new().turn(&i, None, noon());
    let e = env(&pods(&t)[0]);
    assert_eq!(e["OTEL_SERVICE_NAME"], "train");
    assert_eq!(
        e["OTEL_EXPORTER_OTLP_ENDPOINT"],
        "http://queue-collector:4317"
    );
    assert_eq!(e["SPILLWAY_POD_NAME"], "<from metadata.name>");
    assert_eq!(e["SPILLWAY_NODE_NAME"], "<from spec.nodeName>");
    let a = attrs(&e["OTEL_RESOURCE_ATTRIBUTES"]);
    assert_eq!(a["spillway.job"], "train");
    assert_eq!(a["spillway.queue"], "q");
    assert_eq!(a["spillway.environment"], "private");
    assert_eq!(a["spillway.pool"], "onprem");
    assert_eq!(a["k8s.namespace.name"], NS);
    assert_eq!(a["k8s.pod.name"], "$(SPILLWAY_POD_NAME)");
    assert!(!a.contains_key("cloud.provider"));
    let trace = TraceParent::derive("uid-train");
    assert_eq!(e["TRACEPARENT"], trace.header());
    // The trace context is written on the job, once.
    let annotate = t
        .actions
        .iter()
        .filter(|a| {
            matches!(a, Action::Annotate { key, value, .. }
            if key == telemetry::TRACEPARENT_ANNOTATION && *value == trace.header())
        })
        .count();
    assert_eq!(annotate, 1);
}

#[test]
fn a_jobs_own_trace_context_and_the_templates_own_values_win() {
    let mut i = cluster();
    i.pools = vec![
        serde_json::from_value::<spillway_api::ComputePool>(json!({
        "metadata": {"name": "onprem"},
        "spec": {"private": {"nodeSelector": {"pool": "onprem"}},
                 "telemetry": {"otlpEndpoint": "http://pool-collector:4317"}}}))
        .map(std::sync::Arc::new)
        .unwrap(),
    ];
    i.nodes = vec![node("a", "onprem", 8)];
    let outer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut j = job("train");
    j.0["metadata"]["annotations"] = json!({"spillway.io/traceparent": outer});
    j.0["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        {"name": "OTEL_SERVICE_NAME", "value": "trainer"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=vision,spillway.pool=mine"},
    ]);
    i.jobs = vec![j.build()];
    let t = Loop::with(TurnSettings {
        pod_otlp_endpoint: Some("http://default:4317".into()),
        ..TurnSettings::default()
    })
    .turn(&i, None, noon());
    let e = env(&pods(&t)[0]);
    assert_eq!(e["OTEL_SERVICE_NAME"], "trainer");
    assert_eq!(
        e["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://pool-collector:4317",
        "the pool's wins"
    );
    assert_eq!(e["TRACEPARENT"], outer);
    let a = attrs(&e["OTEL_RESOURCE_ATTRIBUTES"]);
    assert_eq!(a["team"], "vision");
    assert_eq!(a["spillway.pool"], "mine", "their keys are kept");
    assert_eq!(a["spillway.job"], "train", "ours added for the others");
    assert!(
        !t.actions
            .iter()
            .any(|a| matches!(a, Action::Annotate { .. }))
    );
}

#[test]
fn a_cloud_pod_carries_its_region_zone_and_instance() {
    let mut i = cluster();
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s"}}),
    )];
    i.pools.push(aws_pool("aws", json!({})));
    i.nodes = vec![cloud_node("ip-1", "aws", 1, "i-0abc")];
    i.jobs = vec![job("train").build()];
    let mut c = cloud();
    c.instance("i-0abc", "aws", "team/other#0", "g6.xlarge", noon());
    let t = Loop::new().turn(&i, Some(&c), noon());
    let created = pods(&t);
    assert_eq!(created.len(), 1, "{:?}", kinds(&t));
    let a = attrs(&env(&created[0])["OTEL_RESOURCE_ATTRIBUTES"]);
    assert_eq!(a["spillway.environment"], "cloud");
    assert_eq!(a["cloud.provider"], "aws");
    assert_eq!(a["cloud.region"], "us-east-1");
    assert_eq!(a["cloud.availability_zone"], "us-east-1a");
    assert_eq!(a["host.id"], "i-0abc");
}

/// The keys and variables that may differ between a job's private and cloud pods.
const WHERE: &[&str] = &[
    "spillway.environment",
    "spillway.pool",
    "cloud.provider",
    "cloud.platform",
    "cloud.region",
    "cloud.availability_zone",
    "host.id",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the template sets, a job's private pod and cloud pod differ only in the
    /// environment-specific keys (and the endpoint their pools name).
    #[test]
    fn private_and_cloud_pods_differ_only_where_they_run(
        user_service in proptest::option::of("[a-z]{1,8}"),
        user_attrs in proptest::collection::btree_map("[a-z]{1,6}(\\.[a-z]{1,6})?", "[a-z0-9]{1,6}", 0..4),
        own_endpoint in proptest::option::of("http://[a-z]{1,8}:4317"),
        replicas in 1u32..4,
    ) {
        let mut j = job("train").replicas(replicas);
        let mut vars = Vec::new();
        if let Some(s) = &user_service {
            vars.push(json!({"name": "OTEL_SERVICE_NAME", "value": s}));
        }
        if !user_attrs.is_empty() {
            let v = user_attrs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            vars.push(json!({"name": "OTEL_RESOURCE_ATTRIBUTES", "value": v}));
        }
        if let Some(e) = &own_endpoint {
            vars.push(json!({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": e}));
        }
        j.0["spec"]["template"]["spec"]["containers"][0]["env"] = json!(vars);
        let job = j.build();
        let build = |placement: &Placement, endpoint: &str| {
            let mut pod = crate::pods::replica_pod(&job, 0, 0, "n", None);
            telemetry::inject(&mut pod, &PodTelemetry {
                service_name: "train".into(),
                endpoint: Some(endpoint.into()),
                traceparent: TraceParent::derive("uid-train").header(),
                attributes: telemetry::attributes(&job, placement),
            });
            env(&pod)
        };
        let private = build(&Placement { environment: "private", pool: "onprem".into(), cloud: None, cluster: None },
                            "http://onprem:4317");
        let cloud = build(&Placement { environment: "cloud", pool: "aws".into(),
                                       cloud: Some(("us-east-1".into(), "us-east-1a".into(), "i-1".into())), cluster: None },
                          "http://aws:4317");
        let names: std::collections::BTreeSet<&String> = private.keys().chain(cloud.keys()).collect();
        for name in names {
            let (p, c) = (private.get(name), cloud.get(name));
            if p == c {
                continue;
            }
            match name.as_str() {
                "OTEL_EXPORTER_OTLP_ENDPOINT" => prop_assert!(own_endpoint.is_none()),
                "OTEL_RESOURCE_ATTRIBUTES" => {
                    let (pa, ca) = (attrs(p.unwrap()), attrs(c.unwrap()));
                    let keys: std::collections::BTreeSet<&String> = pa.keys().chain(ca.keys()).collect();
                    for k in keys {
                        if pa.get(k) != ca.get(k) {
                            prop_assert!(WHERE.contains(&k.as_str()), "{k} differs");
                            prop_assert!(!user_attrs.contains_key(k), "the user's {k} was changed");
                        }
                    }
                }
                other => prop_assert!(false, "{other} differs: {p:?} / {c:?}"),
            }
        }
        let merged = attrs(&private["OTEL_RESOURCE_ATTRIBUTES"]);
        for (k, v) in &user_attrs {
            prop_assert_eq!(merged.get(k), Some(v));
        }
    }
}
