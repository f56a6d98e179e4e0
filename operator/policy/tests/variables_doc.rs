//! docs/policy.md carries the variables table generated from `spillway_policy::variables`.

#[test]
fn docs_policy_md_lists_the_variables_the_code_defines() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md");
    let doc = std::fs::read_to_string(path).expect("docs/policy.md");
    let begin = "<!-- variables:begin (generated: `spillway policy variables`) -->\n";
    let end = "<!-- variables:end -->";
    let start = doc.find(begin).expect("begin marker in docs/policy.md") + begin.len();
    let stop = doc[start..].find(end).expect("end marker") + start;
    assert_eq!(
        &doc[start..stop],
        spillway_policy::variables::markdown(),
        "docs/policy.md is out of date: replace its table with `cargo run -- policy variables`"
    );
}
