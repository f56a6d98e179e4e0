//! `spillway policy lint`: every problem in policy files, located as compilers locate them.
//!
//! Checks: YAML syntax and wrong types (through the manifest loader), unknown or misspelt fields
//! (against the CRD schema, with a "did you mean"), semantic rules of [`spillway_api::validate`]
//! (duplicate rule names, bad durations...), CEL syntax of `when` and `offeringFilter` (at the
//! line and column inside the expression), and rules that can never take effect because an
//! earlier rule that always applies sets the same value.

use std::fmt;
use std::path::{Path, PathBuf};

use spillway_api::manifests::{self, Manifests};

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Error,
}

/// One finding: `file:line:col: severity: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub severity: Severity,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(
            f,
            "{}:{}:{}: {sev}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// Each kind's OpenAPI schema, from the CRDs (generated once: they do not change).
fn schemas() -> &'static std::collections::HashMap<String, serde_json::Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, serde_json::Value>> =
        std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        spillway_api::crds()
            .into_iter()
            .filter_map(|crd| {
                let schema = crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok())?;
                Some((crd.spec.names.kind.clone(), schema))
            })
            .collect()
    })
}

/// Lints one file's text.
pub fn lint_str(file: &Path, text: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for doc in manifests::documents(text) {
        let value: serde_json::Value = match serde_saphyr::from_str(doc.text) {
            Ok(v) => v,
            Err(e) => {
                let m = manifests::yaml_error(file, &doc, &e);
                out.push(diag(file, m.line, m.column, Severity::Error, m.message));
                continue;
            }
        };
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if let Some(schema) = schemas().get(kind) {
            unknown_fields(file, &doc, &value, schema, "", &mut out);
        }
    }
    // Types, validation and everything the loader checks.
    if let Err(errors) = Manifests::parse_str(file, text) {
        for e in errors.0 {
            let (line, column) =
                locate_field_error(text, e.line, &e.message).unwrap_or((e.line, e.column));
            if !out
                .iter()
                .any(|d| d.line == line && d.severity == Severity::Error)
            {
                out.push(diag(&e.file, line, column, Severity::Error, e.message));
            }
        }
    }
    // Expressions and shadowing, on every BurstPolicy that parses, valid or not.
    for doc in manifests::documents(text) {
        let Ok(p) = serde_saphyr::from_str::<spillway_api::BurstPolicy>(doc.text) else {
            continue;
        };
        if p.metadata.name.is_none() {
            continue;
        }
        let pname = p.metadata.name.clone().unwrap_or_default();
        for rule in &p.spec.rules {
            for (field, src) in [
                ("when", &rule.when),
                ("offeringFilter", &rule.offering_filter),
            ] {
                let Some(src) = src.as_deref().filter(|s| !s.trim().is_empty()) else {
                    continue;
                };
                if let Err(e) = check_expression(src, field) {
                    let (line, col) = locate_value(doc.text, doc.first_line, &rule.name, field);
                    let (dl, dc) = e.position;
                    let line = line + dl.saturating_sub(1);
                    let col = if dl <= 1 { col + dc } else { dc + 1 };
                    out.push(diag(
                        file,
                        line,
                        col,
                        Severity::Error,
                        format!(
                            "BurstPolicy {pname} rule {}: {field}: {}",
                            rule.name, e.message
                        ),
                    ));
                }
            }
        }
        shadowed(
            file,
            doc.text,
            doc.first_line,
            &pname,
            &p.spec.rules,
            &mut out,
        );
    }
    out.sort_by_key(|d| (d.line, d.column));
    out
}

fn diag(
    file: &Path,
    line: usize,
    column: usize,
    severity: Severity,
    message: String,
) -> Diagnostic {
    Diagnostic {
        file: file.to_path_buf(),
        line,
        column,
        severity,
        message,
    }
}

pub(crate) struct ExprError {
    /// Line and column inside the expression (1-based line, 0-based column).
    pub(crate) position: (usize, usize),
    pub(crate) message: String,
}

/// The one compile path of the operator ([`crate::PolicyEngine::compile`]), with its 1-based
/// column made 0-based for locating inside the file.
fn check_expression(src: &str, field: &'static str) -> Result<(), ExprError> {
    crate::check_expression(field, src).map_err(|e| {
        let (line, column) = e.position.unwrap_or((1, 1));
        ExprError {
            position: (line, column.saturating_sub(1)),
            message: e.message,
        }
    })
}

/// Blanks out string literals (keeping lengths and newlines), so names inside them are not
/// taken for variables.
fn mask_strings(src: &str) -> Vec<char> {
    let mut out: Vec<char> = src.chars().collect();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in out.iter_mut() {
        match quote {
            Some(q) => {
                let this = *c;
                if !escaped && this == q {
                    quote = None;
                } else if this != '\n' {
                    *c = ' ';
                }
                escaped = !escaped && this == '\\';
            }
            None if *c == '"' || *c == '\'' => quote = Some(*c),
            None => {}
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// (line, 0-based column) of char index `i` in `chars`.
fn position(chars: &[char], i: usize) -> (usize, usize) {
    let before = &chars[..i];
    let line = 1 + before.iter().filter(|c| **c == '\n').count();
    let col = before.iter().rev().take_while(|c| **c != '\n').count();
    (line, col)
}

/// Root identifiers at their positions: a name not preceded by `.` or a name character.
fn roots(chars: &[char]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if (chars[i].is_ascii_alphabetic() || chars[i] == '_')
            && (i == 0 || (!is_ident(chars[i - 1]) && chars[i - 1] != '.'))
        {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            out.push((start, chars[start..i].iter().collect()));
        } else {
            i += 1;
        }
    }
    out
}

/// Names bound by macros (`list.exists(d, ...)`, `all`, `map`, `filter`, `exists_one`).
fn macro_bound(chars: &[char]) -> Vec<String> {
    let text: String = chars.iter().collect();
    let mut out = Vec::new();
    for m in [".exists(", ".all(", ".map(", ".filter(", ".exists_one("] {
        for (at, _) in text.match_indices(m) {
            let rest = &text[at + m.len()..];
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| is_ident(*c))
                .collect();
            if !name.is_empty()
                && rest.trim_start()[name.len()..]
                    .trim_start()
                    .starts_with(',')
            {
                out.push(name);
            }
        }
    }
    out
}

/// Unknown variables, variables read where they are not set, and unknown fields of the map
/// variables, at their positions in the expression.
pub(crate) fn check_names(src: &str, field: &str, program: &cel::Program) -> Result<(), ExprError> {
    use crate::variables::{VARIABLES, variable};
    let chars = mask_strings(src);
    let bound = macro_bound(&chars);
    let roots = roots(&chars);
    let known: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    let references = program.references();
    for name in references.variables() {
        if bound.iter().any(|b| b == name) {
            continue;
        }
        let at = roots
            .iter()
            .find(|(_, n)| n == name)
            .map(|(i, _)| position(&chars, *i))
            .unwrap_or((1, 0));
        match variable(name) {
            None => {
                let hint = closest(name, &known)
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_default();
                return Err(ExprError {
                    position: at,
                    message: format!(
                        "unknown variable `{name}`{hint} (variables: {})",
                        known.join(", ")
                    ),
                });
            }
            Some(v) if v.only_in.is_some_and(|only| only != field) => {
                return Err(ExprError {
                    position: at,
                    message: format!(
                        "`{name}` is only set in `{}`, not in `{field}`",
                        v.only_in.unwrap_or_default()
                    ),
                });
            }
            Some(_) => {}
        }
    }
    // Scalar variables compared with a literal of another type.
    for (i, name) in &roots {
        if let Some(v) = variable(name).filter(|v| v.fields.is_empty())
            && !bound.iter().any(|b| b == name)
            && let Some(e) = type_clash(&chars, i + name.chars().count(), v.ty, name)
        {
            return Err(e);
        }
    }
    // `job.x`, `queue.x`, `offering.x`: x must be a field of the variable.
    for (i, name) in &roots {
        let Some(v) = variable(name).filter(|v| !v.fields.is_empty()) else {
            continue;
        };
        if bound.iter().any(|b| b == name) {
            continue;
        }
        let mut j = i + name.chars().count();
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        if chars.get(j) != Some(&'.') {
            continue;
        }
        j += 1;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        let start = j;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        let member: String = chars[start..j].iter().collect();
        if member.is_empty() {
            continue;
        }
        if let Some(f) = v.fields.iter().find(|f| f.name == member) {
            if let Some(e) = type_clash(&chars, j, f.ty, &format!("{name}.{member}")) {
                return Err(e);
            }
            continue;
        }
        let fields: Vec<&str> = v.fields.iter().map(|f| f.name).collect();
        let hint = closest(&member, &fields)
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(ExprError {
            position: position(&chars, start),
            message: format!("`{name}` has no field `{member}`{hint}"),
        });
    }
    Ok(())
}

/// A comparison of `what` (of CEL type `ty`) with a literal of another kind, starting at char
/// `j` (just after `what`): `job.totalGpus > "8"`, `job.restartable == 1`, `waited > "10m"`.
fn type_clash(chars: &[char], mut j: usize, ty: &str, what: &str) -> Option<ExprError> {
    let skip = |j: &mut usize| {
        while *j < chars.len() && chars[*j].is_whitespace() {
            *j += 1;
        }
    };
    skip(&mut j);
    let rest: String = chars[j..chars.len().min(j + 2)].iter().collect();
    let op_len = if ["==", "!=", "<=", ">="].contains(&rest.as_str()) {
        2
    } else if rest.starts_with('<') || rest.starts_with('>') {
        1
    } else {
        return None;
    };
    j += op_len;
    skip(&mut j);
    let at = j;
    let c = *chars.get(j)?;
    let literal = if c == '"' || c == '\'' {
        "string"
    } else if c.is_ascii_digit()
        || (c == '-' && chars.get(j + 1).is_some_and(|d| d.is_ascii_digit()))
    {
        "number"
    } else {
        let word: String = chars[j..].iter().take_while(|c| is_ident(**c)).collect();
        match word.as_str() {
            "true" | "false" => "bool",
            _ => return None,
        }
    };
    let field_kind = match ty {
        "int" | "double" => "number",
        "string" => "string",
        "bool" => "bool",
        _ => return None,
    };
    (field_kind != literal).then(|| ExprError {
        position: position(chars, at),
        message: format!("`{what}` is {ty} but is compared with a {literal} literal"),
    })
}

/// For a validation message about `spec.rules[i].field`, the line and column of that field
/// (or of the rule) in the document starting at `first_line`.
fn locate_field_error(text: &str, first_line: usize, message: &str) -> Option<(usize, usize)> {
    let at = message.find("spec.rules[")?;
    let rest = &message[at + "spec.rules[".len()..];
    let index: usize = rest[..rest.find(']')?].parse().ok()?;
    let field = rest[rest.find(']')? + 1..].strip_prefix('.').map(|f| {
        f.split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or("")
    });
    let doc = manifests::documents(text)
        .into_iter()
        .find(|d| d.first_line == first_line)?;
    let lines: Vec<&str> = doc.text.lines().collect();
    let rules_at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("rules:"))?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let item_indent = lines
        .iter()
        .skip(rules_at + 1)
        .find(|l| l.trim_start().starts_with("- "))
        .map(|l| indent(l))?;
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .skip(rules_at + 1)
        .take_while(|(_, l)| l.trim().is_empty() || indent(l) >= item_indent)
        .filter(|(_, l)| indent(l) == item_indent && l.trim_start().starts_with("- "))
        .map(|(i, _)| i)
        .collect();
    let start = *starts.get(index)?;
    let end = starts.get(index + 1).copied().unwrap_or(lines.len());
    if let Some(field) = field.filter(|f| !f.is_empty()) {
        for (i, l) in lines.iter().enumerate().take(end).skip(start) {
            let t = l.trim_start().trim_start_matches("- ");
            if t.starts_with(&format!("{field}:")) {
                return Some((doc.first_line + i, l.len() - t.len() + 1));
            }
        }
    }
    Some((doc.first_line + start, item_indent + 3))
}

/// Where the value of `field` of the rule named `rule` starts: (line, 1-based column).
fn locate_value(doc: &str, first_line: usize, rule: &str, field: &str) -> (usize, usize) {
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ").trim();
            t.strip_prefix("name:")
                .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == rule)
        })
        .unwrap_or(0);
    for (i, l) in lines.iter().enumerate().skip(start) {
        let t = l.trim_start().trim_start_matches("- ");
        if let Some(rest) = t.strip_prefix(&format!("{field}:")) {
            let key_col = l.len() - t.len();
            let value_off = rest.len() - rest.trim_start().len();
            let quote = usize::from(rest.trim_start().starts_with(['"', '\'']));
            return (
                first_line + i,
                key_col + field.len() + 1 + value_off + quote + 1,
            );
        }
    }
    (first_line + start, 1)
}

/// Reports keys the schema does not know, with the closest known name.
fn unknown_fields(
    file: &Path,
    doc: &manifests::Document<'_>,
    value: &serde_json::Value,
    schema: &serde_json::Value,
    path: &str,
    out: &mut Vec<Diagnostic>,
) {
    match value {
        serde_json::Value::Object(map) => {
            if schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(|v| v.as_bool())
                == Some(true)
            {
                return;
            }
            let props = schema.get("properties").and_then(|p| p.as_object());
            let extra = schema.get("additionalProperties");
            for (k, v) in map {
                let sub_path = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match props.and_then(|p| p.get(k)) {
                    Some(sub) => unknown_fields(file, doc, v, sub, &sub_path, out),
                    None if path.is_empty()
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") => {}
                    None => match extra {
                        Some(sub) if sub.is_object() => {
                            unknown_fields(file, doc, v, sub, &sub_path, out)
                        }
                        _ if props.is_none() => {}
                        _ => {
                            let known: Vec<&str> = props
                                .map(|p| p.keys().map(String::as_str).collect())
                                .unwrap_or_default();
                            let hint = closest(k, &known)
                                .map(|c| format!("; did you mean `{c}`?"))
                                .unwrap_or_default();
                            let (line, col) = locate_key(doc, k);
                            out.push(diag(
                                file,
                                line,
                                col,
                                Severity::Error,
                                format!("unknown field `{sub_path}`{hint}"),
                            ));
                        }
                    },
                }
            }
        }
        serde_json::Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    unknown_fields(file, doc, v, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The first line of the document where `key:` is a mapping key.
fn locate_key(doc: &manifests::Document<'_>, key: &str) -> (usize, usize) {
    for (i, l) in doc.text.lines().enumerate() {
        let t = l.trim_start().trim_start_matches("- ");
        if t.starts_with(&format!("{key}:")) {
            return (doc.first_line + i, l.len() - t.len() + 1);
        }
        if let Some(p) = l.find(&format!("{key}:"))
            && l[..p].ends_with(['{', ' ', ','])
        {
            return (doc.first_line + i, p + 1);
        }
    }
    (doc.first_line, 1)
}

/// The known name within edit distance 2 of `name`, if any.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| {
            (
                levenshtein(&name.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                *k,
            )
        })
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether a rule sets a given field.
type SetsField = fn(&spillway_api::policy::PolicyRule) -> bool;

/// Rules whose first-wins value can never apply because an earlier rule without `when` sets it.
fn shadowed(
    file: &Path,
    doc: &str,
    first_line: usize,
    policy: &str,
    rules: &[spillway_api::policy::PolicyRule],
    out: &mut Vec<Diagnostic>,
) {
    let always = |r: &spillway_api::policy::PolicyRule| {
        r.when
            .as_deref()
            .is_none_or(|w| w.trim().is_empty() || w.trim() == "true")
    };
    let fields: [(&str, SetsField); 3] = [
        ("maxWait", |r| r.max_wait.is_some()),
        ("require", |r| r.require.is_some()),
        ("waitMode", |r| r.wait_mode.is_some()),
    ];
    for (field, sets) in fields {
        let Some(first) = rules.iter().position(|r| always(r) && sets(r)) else {
            continue;
        };
        for later in rules.iter().skip(first + 1).filter(|r| sets(r)) {
            let (line, col) = locate_value(doc, first_line, &later.name, field);
            out.push(diag(
                file,
                line,
                col.saturating_sub(field.len() + 2).max(1),
                Severity::Warning,
                format!(
                    "BurstPolicy {policy} rule {}: its {field} never applies: rule {} always applies first and sets {field}",
                    later.name, rules[first].name
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::levenshtein;

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("whne", "when"), 2);
        assert_eq!(levenshtein("maxwait", "maxWait"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
    }
}
