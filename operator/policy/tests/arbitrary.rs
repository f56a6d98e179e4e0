//! Arbitrary expressions never panic or hang the loader or the evaluator.

use proptest::prelude::*;
use spillway_api::BurstPolicy;
use spillway_core::*;
use spillway_policy::PolicyEngine;

fn policy_with(when: &str) -> BurstPolicy {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "BurstPolicy", "metadata": {"name": "fuzz"},
        "spec": {"rules": [{"name": "r", "when": when, "forbid": "cloud"}]},
    }))
    .expect("policy JSON")
}

fn evaluate(engine: &PolicyEngine) {
    let mut q = Queue::new("q");
    q.burst.enabled = true;
    let snapshot = Snapshot {
        queues: vec![q],
        pools: vec![Pool::cloud("aws", "us-east-1")],
        jobs: vec![Job::new("ns/j", "q", 1, Time::from_millis(0))],
        ..Default::default()
    };
    let _ = decide(&snapshot, engine, Time::from_millis(3_600_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_text_never_panics(src in ".{0,200}") {
        if let Ok(engine) = PolicyEngine::compile(&[policy_with(&src)]) {
            evaluate(&engine);
        }
    }

    #[test]
    fn expression_shaped_text_never_panics(
        parts in prop::collection::vec(prop::sample::select(vec![
            "job.priority", "job.totalGpus", "waited", "now", "queue.pendingJobs", "1", "2.5", "'x'",
            "true", " && ", " || ", " == ", " < ", " + ", " / ", "!", "-", "(", ")", "[", "]", ",",
            "job.datasets.exists(d, d.sizeGiB > 1.0)", "size(job.gpuModels)", "job.labels['a']",
            "has(job.estimatedRuntimeSeconds)", " ? ", " : ", "int(waited)", "1 / 0",
        ]), 0..40)
    ) {
        let src: String = parts.concat();
        if let Ok(engine) = PolicyEngine::compile(&[policy_with(&src)]) {
            evaluate(&engine);
        }
    }
}

#[test]
fn absurdly_deep_expressions_are_refused_with_a_reason() {
    let deep = format!("{}true{}", "(".repeat(500), ")".repeat(500));
    let errs = PolicyEngine::compile(&[policy_with(&deep)])
        .err()
        .expect("refused");
    assert!(errs[0].message.contains("nests deeper"), "{}", errs[0]);
    let bangs = format!("{}true", "!".repeat(1000));
    assert!(PolicyEngine::compile(&[policy_with(&bangs)]).is_err());
}
