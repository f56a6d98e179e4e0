//! The CRDs' CEL rules (`x-kubernetes-validations`), evaluated as the API server evaluates them:
//! each rule at its place in the schema, with `self` the value there and `oldSelf` its value
//! before an update (transition rules run only on updates), numbers typed by the schema.
//!
//! API servers from 1.25 check these rules themselves, and `tests/tests/crd_rules.rs` applies
//! the same cases (`cel/cases.rs`) to a real one; here they are evaluated in milliseconds, with
//! every rule broken by at least one case, every object the repository ships passing them all,
//! and what a rule refuses at creation refused by the operator's own validation too
//! (`spillway_api::validate`, which the admission webhook and the `Invalid` condition report).

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use serde_json::{Value, json};
use spillway_api::validate;

#[path = "cel/cases.rs"]
mod cases;
use cases::{Case, cases};

/// The schema of `kind` as JSON.
fn schema_of(kind: &str) -> Value {
    let crd = spillway_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD of kind {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("a schema");
    serde_json::to_value(schema).expect("schema as JSON")
}

/// A JSON value as CEL sees it under `schema`: `number` fields are doubles even when written
/// as `3`, `integer` fields are ints.
fn to_cel(schema: &Value, value: &Value) -> cel::Value {
    let ty = schema.get("type").and_then(Value::as_str);
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (ty, n.as_i64()) {
            (Some("integer"), Some(i)) => cel::Value::Int(i),
            (Some("number"), _) | (_, None) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            (_, Some(i)) => cel::Value::Int(i),
        },
        Value::String(s) => cel::Value::String(s.clone().into()),
        Value::Array(items) => {
            let item = schema.get("items").cloned().unwrap_or(json!({}));
            cel::Value::List(
                items
                    .iter()
                    .map(|v| to_cel(&item, v))
                    .collect::<Vec<_>>()
                    .into(),
            )
        }
        Value::Object(map) => {
            let fields: HashMap<String, cel::Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), to_cel(&field_schema(schema, k), v)))
                .collect();
            cel::Value::from(fields)
        }
    }
}

/// The schema of field `key` of an object under `schema`.
fn field_schema(schema: &Value, key: &str) -> Value {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
        .cloned()
        .unwrap_or(json!({}))
}

/// The item of `old` a list item corresponds to: for a list of type `map`, the one with the
/// same keys (the API server correlates no other list's items).
fn old_item<'a>(schema: &Value, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

/// Every rule broken in `value` (an update when `old` is given): (path, message).
fn broken(schema: &Value, value: &Value, old: Option<&Value>, path: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if value.is_null() {
        return out;
    }
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().expect("a rule");
        let transition = text.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let program = cel::Program::compile(text)
            .unwrap_or_else(|e| panic!("rule {text:?} at {path:?} does not compile: {e}"));
        let mut context = cel::Context::default();
        context.add_variable_from_value("self", to_cel(schema, value));
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", to_cel(schema, old));
        }
        match program.execute(&context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => out.push((
                path.to_string(),
                rule["message"].as_str().unwrap_or(text).to_string(),
            )),
            other => panic!("rule {text:?} at {path:?} on {value}: {other:?}"),
        }
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let old = old.and_then(|o| o.get(k));
                out.extend(broken(&field_schema(schema, k), v, old, &at));
            }
        }
        Value::Array(items) => {
            let item_schema = schema.get("items").cloned().unwrap_or(json!({}));
            for (i, v) in items.iter().enumerate() {
                let old = old_item(schema, v, old);
                out.extend(broken(&item_schema, v, old, &format!("{path}[{i}]")));
            }
        }
        _ => {}
    }
    out
}

/// `value` with the schema's defaults filled in, as the API server stores and validates it.
fn with_defaults(schema: &Value, value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if let (None, Some(d)) = (map.get(k), sub.get("default")) {
                        out.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, v) in map {
                out.insert(k.clone(), with_defaults(&field_schema(schema, k), v));
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let item = schema.get("items").cloned().unwrap_or(json!({}));
            Value::Array(items.iter().map(|v| with_defaults(&item, v)).collect())
        }
        other => other.clone(),
    }
}

/// The messages of the rules `object` (of `kind`) breaks, created or updated from `old`,
/// each after the path of the value that breaks it (none for the object itself).
fn refusals(kind: &str, object: &Value, old: Option<&Value>) -> Vec<String> {
    let schema = schema_of(kind);
    let object = with_defaults(&schema, object);
    let old = old.map(|o| with_defaults(&schema, o));
    broken(&schema, &object, old.as_ref(), "")
        .into_iter()
        .map(|(path, message)| {
            if path.is_empty() {
                message
            } else {
                format!("{path}: {message}")
            }
        })
        .collect()
}

#[test]
fn each_case_is_refused_with_its_message_and_only_that() {
    for case in cases() {
        let got = refusals(case.kind, &case.object, case.old.as_ref());
        assert_eq!(got, case.refusals, "{}: {}", case.kind, case.what);
    }
}

/// The rules' (place, message) pairs of every CRD.
fn all_rules(schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.insert(
            rule["message"]
                .as_str()
                .expect("every rule has a message")
                .to_string(),
        );
        let _ = path;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            all_rules(sub, &format!("{path}.{k}"), out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = schema.get(key).filter(|s| s.is_object()) {
            all_rules(sub, path, out);
        }
    }
}

#[test]
fn every_rule_is_broken_by_some_case() {
    let mut rules = BTreeSet::new();
    for crd in spillway_api::crds() {
        all_rules(&schema_of(&crd.spec.names.kind), "", &mut rules);
    }
    let refused: Vec<&str> = cases()
        .iter()
        .flat_map(|c| c.refusals.iter().copied())
        .collect();
    let untested: Vec<&String> = rules
        .iter()
        .filter(|m| !refused.iter().any(|r| r.ends_with(m.as_str())))
        .collect();
    assert!(untested.is_empty(), "rules no case breaks: {untested:?}");
    assert!(rules.len() >= 10, "the CRDs carry their rules: {rules:?}");
}

/// What a rule refuses at creation, the operator's validation refuses too: on API servers
/// that do not run CEL (before 1.25) the webhook and the `Invalid` condition say the same.
#[test]
fn what_a_rule_refuses_validation_refuses() {
    for Case {
        kind,
        what,
        object,
        old,
        refusals,
    } in cases()
    {
        if old.is_some() || refusals.is_empty() {
            continue;
        }
        let spec = object["spec"].clone();
        let result = match kind {
            "GpuJob" => validate::gpu_job(&serde_json::from_value(spec).expect("spec")),
            "GpuQueue" => validate::gpu_queue(&serde_json::from_value(spec).expect("spec")),
            "ComputePool" => validate::compute_pool(&serde_json::from_value(spec).expect("spec")),
            "Dataset" => validate::dataset(&serde_json::from_value(spec).expect("spec")),
            "BurstPolicy" => validate::burst_policy(&serde_json::from_value(spec).expect("spec")),
            other => panic!("unknown kind {other}"),
        };
        assert!(
            result.is_err(),
            "{kind}: {what}: validation accepts what the rule refuses"
        );
    }
}

/// Every object in `examples/` and `policies/` (and every update of one to itself) passes.
#[test]
fn the_shipped_objects_pass_every_rule() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    for dir in [
        "examples/cluster",
        "examples/config",
        "examples/starburst-terms",
        "policies",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable");
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for doc in docs {
                let Some(kind) = doc.get("kind").and_then(Value::as_str) else {
                    continue;
                };
                if doc["apiVersion"]
                    .as_str()
                    .is_none_or(|v| !v.starts_with("spillway.io/"))
                {
                    continue;
                }
                let got = refusals(kind, &doc, None);
                assert!(got.is_empty(), "{}: {kind}: {got:?}", file.display());
                let got = refusals(kind, &doc, Some(&doc));
                assert!(
                    got.is_empty(),
                    "{}: {kind} updated to itself: {got:?}",
                    file.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "found the shipped objects ({checked})");
}
