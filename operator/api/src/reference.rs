//! The field reference (`docs/reference/`), generated from the CRDs' schemas: every field with
//! its type, constraints, default and doc comment. `spillway crds --reference DIR` writes it; a
//! test fails when the checked-in copy drifts from the code.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The reference page of one kind: `<kind, lowercase>.md`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.md", crd.spec.names.kind.to_ascii_lowercase())
}

/// One line of prose from a (possibly wrapped) description, safe in a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The type of a schema, as a reader says it: `string`, `integer (int32)`, `[]string`,
/// `map[string]string`, `object`.
fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "integer or string".into();
    }
    let t = schema["type"].as_str().unwrap_or("");
    match t {
        "array" => format!("[]{}", type_of(&schema["items"])),
        "object" if schema["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&schema["additionalProperties"]))
        }
        "object"
            if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) =>
        {
            "object (any fields)".into()
        }
        "" => "any".into(),
        t => match schema["format"].as_str() {
            Some(f) => format!("{t} ({f})"),
            None => t.to_string(),
        },
    }
}

/// Constraints worth a reader's eye: the allowed values, bounds, patterns.
fn constraints(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = schema["enum"].as_array() {
        let names: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("`{s}`"),
                other => format!("`{other}`"),
            })
            .collect();
        out.push(format!("one of {}", names.join(", ")));
    }
    for (key, word) in [
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("minLength", "length at least"),
        ("maxLength", "length at most"),
        ("minItems", "at least items:"),
        ("maxItems", "at most items:"),
    ] {
        if let Some(v) = schema.get(key).filter(|v| !v.is_null()) {
            out.push(format!("{word} {v}"));
        }
    }
    if let Some(p) = schema["pattern"].as_str() {
        out.push(format!("pattern `{}`", p.replace('|', "\\|")));
    }
    if let Some(p) = schema["items"]["pattern"].as_str() {
        out.push(format!("each item matches `{}`", p.replace('|', "\\|")));
    }
    match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => out.push("items unique".into()),
        Some("map") => {
            let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|k| format!("`{k}`"))
                .collect();
            out.push(format!("unique by {}", keys.join(" and ")));
        }
        _ => {}
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(m) = rule["message"].as_str() {
            out.push(format!("rule: {}", cell(m)));
        }
    }
    out
}

/// What the `rule:` constraints are, once per page.
const RULES_NOTE: &str = "Constraints marked `rule:` are CEL validation rules (`x-kubernetes-validations`), which the API server checks (every supported version); the admission webhook refuses the same, and the operator reports what a `rule:` refuses in an object stored before the rule existed as its `Invalid` condition (docs/operations.md, \"Kubernetes versions, and what is refused when\").\n\n";

struct Row {
    path: String,
    required: bool,
    type_: String,
    default: String,
    description: String,
}

fn walk(schema: &Value, path: &str, required: bool, rows: &mut Vec<Row>) {
    let mut description = cell(schema["description"].as_str().unwrap_or(""));
    let more = constraints(schema);
    if !more.is_empty() {
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str(&format!("({})", more.join("; ")));
    }
    rows.push(Row {
        path: path.to_string(),
        required,
        type_: type_of(schema),
        default: match schema.get("default") {
            None | Some(Value::Null) => String::new(),
            Some(v) => format!("`{v}`"),
        },
        description,
    });
    let (children, prefix) =
        if schema["type"] == "array" && schema["items"]["properties"].is_object() {
            (&schema["items"], format!("{path}[]"))
        } else if schema["additionalProperties"]["properties"].is_object() {
            (&schema["additionalProperties"], format!("{path}.*"))
        } else {
            (schema, path.to_string())
        };
    let needed: Vec<&str> = children["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = children["properties"].as_object() {
        for (name, child) in props {
            walk(
                child,
                &format!("{prefix}.{name}"),
                needed.contains(&name.as_str()),
                rows,
            );
        }
    }
}

/// The reference page of one kind, in Markdown.
pub fn markdown(crd: &CustomResourceDefinition) -> String {
    let names = &crd.spec.names;
    let version = &crd.spec.versions[0];
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let mut out = format!(
        "# {kind}\n\n<!-- Generated from the CRD schema by `spillway crds --reference docs/reference`; do not edit. -->\n\n",
        kind = names.kind
    );
    out.push_str(&format!(
        "`apiVersion: {}/{}`, {}{}.\n\n",
        crd.spec.group,
        version.name,
        if crd.spec.scope == "Namespaced" {
            "namespaced"
        } else {
            "cluster-scoped"
        },
        match names.short_names.as_deref() {
            Some(s) if !s.is_empty() => format!(
                "; `kubectl get {}` (or {})",
                names.plural,
                s.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => format!("; `kubectl get {}`", names.plural),
        }
    ));
    if let Some(d) = schema["description"].as_str() {
        out.push_str(&cell(d));
        out.push_str("\n\n");
    }
    if let Some(columns) = &version.additional_printer_columns {
        out.push_str("`kubectl get` columns: ");
        out.push_str(
            &columns
                .iter()
                .map(|c| format!("{} (`{}`)", c.name, c.json_path))
                .collect::<Vec<_>>()
                .join(", "),
        );
        out.push_str(".\n\n");
    }
    let object_rules: Vec<String> = schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["message"].as_str().map(cell))
        .collect();
    if !object_rules.is_empty() {
        out.push_str(&format!(
            "Rules on the whole object, checked on every update: {}.\n\n",
            object_rules.join("; ")
        ));
    }
    out.push_str(RULES_NOTE);
    for part in ["spec", "status"] {
        let Some(part_schema) = schema["properties"].get(part) else {
            continue;
        };
        out.push_str(&format!("## {part}\n\n"));
        if let Some(d) = part_schema["description"].as_str() {
            out.push_str(&cell(d));
            out.push_str("\n\n");
        }
        let mut rows = Vec::new();
        let needed: Vec<&str> = part_schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, child) in part_schema["properties"].as_object().into_iter().flatten() {
            walk(
                child,
                &format!("{part}.{name}"),
                needed.contains(&name.as_str()),
                &mut rows,
            );
        }
        out.push_str("| field | type | default | description |\n| --- | --- | --- | --- |\n");
        for r in rows {
            out.push_str(&format!(
                "| `{}`{} | {} | {} | {} |\n",
                r.path,
                if r.required { " (required)" } else { "" },
                r.type_,
                r.default,
                r.description
            ));
        }
        out.push('\n');
    }
    out
}

/// The index of the reference: one line per kind.
pub fn index(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# Reference\n\n<!-- Generated from the CRD schemas by `spillway crds --reference docs/reference`; do not edit. -->\n\nEvery field of every Spillway kind, with its type, constraints, default and meaning (the same\ntext `kubectl explain` prints). The concepts behind them: [../concepts.md](../concepts.md).\n\n| kind | scope | what |\n| --- | --- | --- |\n",
    );
    for crd in crds {
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.description.clone())
            .unwrap_or_default();
        out.push_str(&format!(
            "| [{kind}]({file}) | {scope} | {what} |\n",
            kind = crd.spec.names.kind,
            file = file_name(crd),
            scope = if crd.spec.scope == "Namespaced" {
                "namespaced"
            } else {
                "cluster"
            },
            what = cell(&schema)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_read_as_a_reader_says_them() {
        assert_eq!(
            type_of(&json!({"type": "array", "items": {"type": "string"}})),
            "[]string"
        );
        assert_eq!(
            type_of(&json!({"type": "object", "additionalProperties": {"type": "string"}})),
            "map[string]string"
        );
        assert_eq!(
            type_of(&json!({"type": "integer", "format": "int32"})),
            "integer (int32)"
        );
        assert_eq!(
            type_of(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
            "object (any fields)"
        );
    }

    #[test]
    fn every_field_of_every_kind_has_a_row_with_its_description() {
        for crd in crate::crds() {
            let page = markdown(&crd);
            assert!(page.contains("## spec"), "{}", crd.spec.names.kind);
            for line in page.lines().filter(|l| l.starts_with("| `")) {
                let cells: Vec<&str> = line.split(" | ").collect();
                assert!(
                    cells
                        .last()
                        .is_some_and(|d| d.trim_end_matches(" |").len() > 3),
                    "a field without a description in {}: {line}",
                    crd.spec.names.kind
                );
            }
        }
        let job = markdown(
            &crate::crds()
                .into_iter()
                .find(|c| c.spec.names.kind == "GpuJob")
                .unwrap(),
        );
        assert!(
            job.contains("| `spec.queue` (required) | string |"),
            "{job}"
        );
        assert!(job.contains("`spec.template`"), "{job}");
    }
}
