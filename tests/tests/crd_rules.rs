//! The CRDs' CEL rules (`x-kubernetes-validations`) enforced by the real API server, with no
//! operator and no webhook running: every case of `operator/api/tests/cel/cases.rs` (which the
//! unit tests evaluate in-process) is created, or created and then updated, and the server's
//! answer must be exactly the case's: refused with each expected message naming its field, or
//! stored.

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::{Value, json};
use spillway_tests::cluster::TestCluster;

#[path = "../../operator/api/tests/cel/cases.rs"]
mod cases;
use cases::{Case, cases};

fn api(client: &Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "GpuJob" => "gpujobs",
        "GpuQueue" => "gpuqueues",
        "ComputePool" => "computepools",
        "Dataset" => "datasets",
        "BurstPolicy" => "burstpolicies",
        other => panic!("unknown kind {other}"),
    };
    let gvk = GroupVersionKind::gvk("spillway.io", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    if kind == "GpuJob" {
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

fn named(mut object: Value, name: &str) -> Value {
    object["metadata"] = json!({"name": name});
    object
}

/// Creates the case's object (after its `old` object, whose status is written through the
/// status subresource as the operator writes it, for an update) and returns the server's
/// refusal, if any.
async fn apply(client: &Client, ns: &str, name: &str, case: &Case) -> Result<(), String> {
    let api = api(client, case.kind, ns);
    let mut object = named(case.object.clone(), name);
    if let Some(old) = &case.old {
        let old = named(old.clone(), name);
        api.create(
            &PostParams::default(),
            &serde_json::from_value(old.clone()).expect("object"),
        )
        .await
        .unwrap_or_else(|e| panic!("{}: {}: the old object: {e}", case.kind, case.what));
        if let Some(status) = old.get("status") {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {}: the old status: {e}", case.kind, case.what));
        }
        let current = api.get(name).await.expect("the old object");
        object["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
        api.replace(
            name,
            &PostParams::default(),
            &serde_json::from_value(object).expect("object"),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    } else {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(object).expect("object"),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

/// Where the schema's structure refuses an object before any CEL rule is evaluated (the server
/// then skips the rules: "some validation rules were not checked because the object was
/// invalid"), what it says instead.
fn refused_by_the_schema_first(case: &Case) -> Option<&'static str> {
    match (case.kind, case.what) {
        // A pool is a `oneOf` of private, aws and cluster: one with none fails that first.
        ("ComputePool", "neither private nor aws") => {
            Some("must validate one and only one schema (oneOf)")
        }
        _ => None,
    }
}

#[tokio::test]
async fn the_api_server_refuses_what_each_rule_refuses_and_stores_the_rest() {
    let (cluster, client) = TestCluster::with_crds().await;
    let ns = cluster
        .namespace(&client, "crd-rules")
        .await
        .expect("namespace");
    let mut failures = Vec::new();
    let mut refused = 0;
    for (i, case) in cases().iter().enumerate() {
        // Cluster-scoped kinds share one name space: each case its own name.
        let name = format!("{ns}-{i}");
        let got = apply(&client, &ns, &name, case).await;
        match (&got, case.refusals) {
            (Ok(()), []) => {}
            (Ok(()), want) => failures.push(format!(
                "{}: {}: stored, but the rules refuse it with {want:?}",
                case.kind, case.what
            )),
            (Err(e), []) => failures.push(format!(
                "{}: {}: refused, but no rule refuses it: {e}",
                case.kind, case.what
            )),
            (Err(e), want) => {
                refused += 1;
                let want: &[&str] = if let Some(earlier) = refused_by_the_schema_first(case) {
                    if !e.contains(earlier) {
                        failures.push(format!(
                            "{}: {}: refused, but not by the schema's {earlier:?}: {e}",
                            case.kind, case.what
                        ));
                    }
                    &[]
                } else {
                    want
                };
                for message in want {
                    // The unit tests' form is `path: message`; the server says
                    // `path: Invalid value: "...": message` (or `path: Invalid value: ...`).
                    let named = e.contains(message)
                        || message
                            .split_once(": ")
                            .is_some_and(|(path, text)| e.contains(path) && e.contains(text));
                    if !named {
                        failures.push(format!(
                            "{}: {}: refused without naming {message:?}: {e}",
                            case.kind, case.what
                        ));
                    }
                }
            }
        }
        let _ = api(&client, case.kind, &ns)
            .delete(&name, &DeleteParams::default())
            .await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        refused >= 10,
        "the cases break the rules ({refused} refused)"
    );
}
