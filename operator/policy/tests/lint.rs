//! `spillway policy lint` finds each kind of mistake at its exact file:line:col.

use std::path::Path;

use spillway_policy::lint::{Severity, lint_str};

const HEAD: &str =
    "apiVersion: spillway.io/v1alpha1\nkind: BurstPolicy\nmetadata:\n  name: p\nspec:\n  rules:\n";

/// Lints HEAD + `rules` and returns `line:col: severity: message` strings.
fn lint(rules: &str) -> Vec<String> {
    lint_str(Path::new("p.yaml"), &format!("{HEAD}{rules}"))
        .into_iter()
        .map(|d| {
            let sev = if d.severity == Severity::Error {
                "error"
            } else {
                "warning"
            };
            format!("{}:{}: {sev}: {}", d.line, d.column, d.message)
        })
        .collect()
}

#[track_caller]
fn expect_one(rules: &str, at: &str, needle: &str) {
    let found = lint(rules);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with(at), "expected {at}, got {}", found[0]);
    assert!(
        found[0].contains(needle),
        "expected {needle:?} in {}",
        found[0]
    );
}

#[test]
fn a_clean_policy_has_no_findings() {
    assert_eq!(
        lint("  - name: a\n    when: job.priority > 1\n    maxWait: 5m\n"),
        Vec::<String>::new()
    );
}

#[test]
fn misspelt_field_with_a_suggestion() {
    expect_one(
        "  - name: a\n    whne: job.priority > 1\n",
        "8:5: error",
        "did you mean `when`",
    );
    expect_one(
        "  - name: a\n    maxwait: 5m\n",
        "8:5: error",
        "did you mean `maxWait`",
    );
}

#[test]
fn cel_syntax_error_inside_the_expression() {
    expect_one(
        "  - name: a\n    when: job.priority > > 1\n",
        "8:26: error",
        "CEL syntax error",
    );
    expect_one(
        "  - name: a\n    offeringFilter: offering.hourlyPrice <\n",
        "8:43: error",
        "offeringFilter",
    );
}

#[test]
fn wrong_type() {
    expect_one("  - name: a\n    maxHourlyCost: lots\n", "8:20: error", "");
}

#[test]
fn yaml_syntax() {
    let found = lint("  - name: a\n    when: [unclosed\n");
    assert!(
        !found.is_empty() && found[0].contains("error"),
        "{found:#?}"
    );
    assert!(
        found[0].starts_with('8') || found[0].starts_with('9'),
        "{found:#?}"
    );
}

#[test]
fn duplicate_rule_name_at_the_second_rule() {
    expect_one(
        "  - name: a\n    forbid: cloud\n  - name: a\n    forbid: private\n",
        "9:5: error",
        "duplicate rule name",
    );
}

#[test]
fn bad_duration() {
    expect_one(
        "  - name: a\n    maxWait: five minutes\n",
        "8:5: error",
        "maxWait",
    );
}

#[test]
fn contradictory_rule() {
    expect_one(
        "  - name: a\n    forbid: cloud\n    require: cloud\n",
        "7:5: error",
        "forbids and requires",
    );
}

#[test]
fn restricted_cannot_be_allowed() {
    expect_one(
        "  - name: a\n    allowClassifications: [Restricted]\n",
        "8:5: error",
        "never leaves",
    );
}

#[test]
fn unknown_enum_value() {
    expect_one("  - name: a\n    forbid: moon\n", "8:13: error", "");
}

#[test]
fn shadowed_rule_is_a_warning() {
    expect_one(
        "  - name: all\n    maxWait: 15m\n  - name: urgent\n    when: job.priority > 5\n    maxWait: 1m\n",
        "11:5: warning",
        "never applies",
    );
}

#[test]
fn absurdly_deep_expression() {
    let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
    expect_one(
        &format!("  - name: a\n    when: {deep}\n"),
        "8:11: error",
        "nests deeper",
    );
}

#[test]
fn unknown_variable_with_a_suggestion() {
    expect_one(
        "  - name: a\n    when: jbo.totalGpus > 8\n    forbid: cloud\n",
        "8:11: error",
        "unknown variable `jbo`; did you mean `job`?",
    );
}

#[test]
fn unknown_field_of_a_variable() {
    // The column points at the field, past a macro's own variable and a string literal.
    expect_one(
        "  - name: a\n    when: 'job.datasets.exists(d, d.classification == \"job.x\") && queue.pendingJob > 4'\n    forbid: cloud\n",
        "8:73: error",
        "`queue` has no field `pendingJob`; did you mean `pendingJobs`?",
    );
}

#[test]
fn offering_is_only_set_in_offering_filters() {
    expect_one(
        "  - name: a\n    when: offering.gpus > 1\n    forbid: cloud\n",
        "8:11: error",
        "`offering` is only set in `offeringFilter`",
    );
    assert_eq!(
        lint("  - name: a\n    offeringFilter: offering.gpus > 1 && job.totalGpus > 0\n"),
        Vec::<String>::new()
    );
}

#[test]
fn comparisons_of_mismatched_types() {
    expect_one(
        "  - name: a\n    when: 'job.totalGpus > \"8\"'\n    forbid: cloud\n",
        "8:28: error",
        "`job.totalGpus` is int but is compared with a string literal",
    );
    expect_one(
        "  - name: a\n    when: waited >= true\n    forbid: cloud\n",
        "8:21: error",
        "`waited` is double but is compared with a bool literal",
    );
    assert_eq!(
        lint(
            "  - name: a\n    when: 'job.totalGpus > 8 && waited >= 60.0 && job.placement == \"Auto\" && job.restartable == true'\n    forbid: cloud\n"
        ),
        Vec::<String>::new()
    );
}
