//! The decision core stays pure: no async runtime, Kubernetes client or AWS SDK may enter its
//! dependency tree (docs/development.md: decide, then act).

use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "kube",
    "kube-client",
    "kube-runtime",
    "k8s-openapi",
    "aws-config",
    "aws-sdk-ec2",
    "aws-smithy-runtime",
    "hyper",
    "reqwest",
    "spillway-api",
    "spillway-k8s",
    "spillway-aws",
    "spillway-cloud",
    "spillway-sim",
    "spillway-policy",
    "spillway-identity",
];

#[test]
fn core_depends_on_no_io_crate() {
    check_pure("spillway-core", FORBIDDEN);
}

/// The identity crate is pure too (keys, tokens and verification; the operator does the I/O),
/// and below the operator.
#[test]
fn identity_depends_on_no_io_crate() {
    let forbidden: Vec<&str> = FORBIDDEN
        .iter()
        .copied()
        .filter(|c| *c != "spillway-identity")
        .collect();
    check_pure("spillway-identity", &forbidden);
}

fn check_pure(package: &str, forbidden: &[&str]) {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--package",
            package,
            "--edges",
            "normal,build",
            "--all-features",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains(&package), "cargo tree listed: {tree}");
    let bad: Vec<&&str> = crates.iter().filter(|c| forbidden.contains(c)).collect();
    assert!(
        bad.is_empty(),
        "{package} must stay pure, but depends on {bad:?}"
    );
}

/// Within every crate, imports point one way: no two modules use each other, directly or
/// through a ring (`scripts/import-circles.py` finds them; a shared name goes to the lower
/// module it belongs to).
#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/import-circles.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .output()
        .expect("run scripts/import-circles.py");
    assert!(
        output.status.success(),
        "import circles:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
