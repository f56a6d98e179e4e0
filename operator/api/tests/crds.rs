//! `crds/`, the chart's `crds/` and the field reference `docs/reference/` hold exactly what the
//! code generates (regenerate with `cargo run -- crds --out crds`, `cargo run -- crds --out
//! charts/spillway/crds` and `cargo run -- crds --reference docs/reference`).

use std::path::PathBuf;

/// `dir` holds exactly the generated CRDs; `regenerate` says how to fix it.
fn check_generated(dir: &str, regenerate: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut expected_files = Vec::new();
    for crd in spillway_api::crds() {
        let name = spillway_api::crd_file_name(&crd);
        let want = spillway_api::crd_yaml(&crd).expect("CRD serialises");
        let path = dir.join(&name);
        let have = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `{regenerate}`", path.display()));
        assert!(
            have == want,
            "{} differs from the generated CRD; run `{regenerate}` and commit",
            path.display()
        );
        expected_files.push(name);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    expected_files.sort();
    assert_eq!(
        present,
        expected_files,
        "{} holds a file the code does not generate",
        dir.display()
    );
}

#[test]
fn checked_in_crds_match_the_code() {
    check_generated("../../crds", "cargo run -- crds --out crds");
}

/// The chart installs the same CRDs (Helm's `crds/` directory).
#[test]
fn the_charts_crds_match_the_code() {
    check_generated(
        "../../charts/spillway/crds",
        "cargo run -- crds --out charts/spillway/crds",
    );
}

/// docs/reference/ is what the code generates from the same schemas.
#[test]
fn the_field_reference_matches_the_code() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference");
    let crds = spillway_api::crds();
    let mut want = vec![(
        "README.md".to_string(),
        spillway_api::reference::index(&crds),
    )];
    for crd in &crds {
        want.push((
            spillway_api::reference::file_name(crd),
            spillway_api::reference::markdown(crd),
        ));
    }
    for (name, text) in &want {
        let path = dir.join(name);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            &have == text,
            "{} differs from the CRD schemas; run `cargo run -- crds --reference docs/reference` and commit",
            path.display()
        );
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    let mut names: Vec<String> = want.into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(
        present, names,
        "docs/reference holds a page the code does not generate"
    );
}

#[test]
fn crds_are_structural_and_named_as_the_spec_says() {
    let crds = spillway_api::crds();
    let names: Vec<(String, String, Vec<String>, String)> = crds
        .iter()
        .map(|c| {
            (
                c.spec.names.kind.clone(),
                c.spec.names.plural.clone(),
                c.spec.names.short_names.clone().unwrap_or_default(),
                c.spec.scope.clone(),
            )
        })
        .collect();
    let want = [
        ("BurstPolicy", "burstpolicies", "bp", "Cluster"),
        ("ComputePool", "computepools", "cpool", "Cluster"),
        ("Dataset", "datasets", "ds", "Cluster"),
        ("GpuJob", "gpujobs", "gj", "Namespaced"),
        ("GpuQueue", "gpuqueues", "gq", "Cluster"),
    ];
    for ((kind, plural, short, scope), got) in want.iter().zip(&names) {
        assert_eq!(got.0, *kind);
        assert_eq!(got.1, *plural);
        assert_eq!(got.2, vec![short.to_string()]);
        assert_eq!(got.3, *scope);
    }
    let job = crds
        .iter()
        .find(|c| c.spec.names.kind == "GpuJob")
        .expect("GpuJob CRD");
    let version = &job.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    let columns: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .expect("printer columns")
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Queue", "Phase", "Where", "Pool", "Wait", "Cost", "Reason", "Age"
        ]
    );
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    // Every property carries a description (it becomes `kubectl explain`), except the
    // standard apiVersion/kind/metadata the API server documents itself.
    for crd in &crds {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema JSON");
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        let mut missing = Vec::new();
        undocumented(spec, "spec", &mut missing);
        assert!(
            missing.is_empty(),
            "{}: fields without a doc comment: {missing:?}",
            crd.spec.names.kind
        );
    }
}

fn undocumented(schema: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
        for (name, sub) in props {
            let sub_path = format!("{path}.{name}");
            if sub.get("description").is_none() {
                out.push(sub_path.clone());
            }
            undocumented(sub, &sub_path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        undocumented(items, &format!("{path}[]"), out);
    }
}
