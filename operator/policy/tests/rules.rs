//! Rules changing real decisions of the core.

use std::path::Path;

use spillway_api::manifests::Manifests;
use spillway_core::*;
use spillway_policy::PolicyEngine;

fn engine(yaml: &str) -> PolicyEngine {
    let m = Manifests::parse_str(Path::new("policy.yaml"), yaml).expect("policy parses");
    let policies: Vec<_> = m.policies.into_iter().map(|p| p.object).collect();
    PolicyEngine::compile(&policies).expect("policy compiles")
}

fn policy(rules: &str) -> String {
    format!(
        "apiVersion: spillway.io/v1alpha1\nkind: BurstPolicy\nmetadata: {{name: p}}\nspec:\n  rules:\n{rules}"
    )
}

fn offering(
    instance_type: &str,
    gpus: u32,
    capacity: CapacityType,
    price: f64,
    region: &str,
) -> Offering {
    Offering {
        facts: Default::default(),
        pool: "aws".into(),
        instance_type: instance_type.into(),
        gpu_model: GpuModel::normalize("A100"),
        gpus,
        capacity_type: capacity,
        region: region.into(),
        zone: format!("{region}a"),
        hourly_price: price,
        unavailable_until: None,
        gpu_memory_gib: 0.0,
        recent_interruptions: 0,
        efa: Default::default(),
        environment: Environment::Cloud,
    }
}

/// A full private node, a bursting queue (15m), two offerings; one 8-GPU job queued at 0.
fn snapshot() -> Snapshot {
    let mut q = Queue::new("research");
    q.burst.enabled = true;
    let mut job = Job::new("ml/train", "research", 8, Time::from_millis(0));
    job.priority = 5;
    Snapshot {
        queues: vec![q],
        pools: vec![Pool::private("onprem"), Pool::cloud("aws", "us-east-1")],
        nodes: vec![Node {
            facts: Default::default(),
            name: "n1".into(),
            pool: "onprem".into(),
            gpu_model: Some(GpuModel::normalize("A100")),
            gpus: 8,
            free_gpus: 0,
            schedulable: true,
            releasing_gpus: 0,
            instance_id: None,
            idle_since: None,
            domains: Vec::new(),
        }],
        offerings: vec![
            offering(
                "p4d.24xlarge",
                8,
                CapacityType::OnDemand,
                21.96,
                "us-east-1",
            ),
            offering(
                "p4de.24xlarge",
                8,
                CapacityType::OnDemand,
                27.45,
                "us-west-2",
            ),
        ],
        jobs: vec![job],
        ..Default::default()
    }
}

fn at_min(m: i64) -> Time {
    Time::from_millis(m * 60_000)
}

#[test]
fn a_forbid_rule_keeps_a_job_private() {
    let s = snapshot();
    let plan = decide(&s, &NoPolicy, at_min(20));
    assert_eq!(
        plan.launches.len(),
        1,
        "without rules the job bursts after 15 minutes"
    );

    let e = engine(&policy(
        "  - name: low-priority-stays\n    when: job.priority < 10\n    forbid: cloud\n",
    ));
    let plan = decide(&s, &e, at_min(20));
    let d = plan.decision("ml/train").unwrap();
    assert_eq!(
        (d.outcome, d.reason),
        (Outcome::Wait, Reason::ForbiddenByPolicy)
    );
    assert_eq!(d.rule.as_deref(), Some("p/low-priority-stays"));
    assert!(plan.launches.is_empty());
}

#[test]
fn the_first_matching_max_wait_wins() {
    let s = snapshot();
    let rules = "  - name: urgent\n    when: job.priority >= 5 && waited > 60.0\n    maxWait: 2m\n  - name: everyone\n    maxWait: 1h\n";
    let e = engine(&policy(rules));
    let plan = decide(&s, &e, at_min(3));
    let d = plan.decision("ml/train").unwrap();
    assert_eq!(
        (d.outcome, d.reason),
        (Outcome::StartCloud, Reason::MaxWaitExceeded)
    );
    assert_eq!(d.rule.as_deref(), Some("p/urgent"));
    // Before a minute of waiting `urgent` does not apply, and `everyone` says an hour.
    let plan = decide(&s, &e, at_min(0));
    assert_eq!(plan.decision("ml/train").unwrap().outcome, Outcome::Wait);
}

#[test]
fn caps_regions_and_offering_filters_restrict_offerings() {
    let mut s = snapshot();
    s.offerings[0].hourly_price = 30.0; // us-east-1 is now the dearer one
    let e = engine(&policy("  - name: east-only\n    regions: [us-east-1]\n"));
    let plan = decide(&s, &e, at_min(20));
    assert_eq!(plan.launches[0].offering.region, "us-east-1");

    let e = engine(&policy("  - name: cap\n    maxHourlyCost: 28\n"));
    let plan = decide(&s, &e, at_min(20));
    assert_eq!(plan.launches[0].offering.instance_type, "p4de.24xlarge");

    let e = engine(&policy(
        "  - name: cheap-only\n    offeringFilter: offering.hourlyPrice < 20.0\n",
    ));
    let plan = decide(&s, &e, at_min(20));
    let d = plan.decision("ml/train").unwrap();
    assert_eq!(
        (d.outcome, d.reason),
        (Outcome::Wait, Reason::NoFittingOffering)
    );
    assert_eq!(d.rule.as_deref(), Some("p/cheap-only"));
}

#[test]
fn confidential_data_needs_an_allowing_rule() {
    let mut s = snapshot();
    s.datasets = vec![Dataset {
        name: "contracts".into(),
        classification: Classification::Confidential,
        cloud_regions: vec![],
        remote_locations: vec![],
        size_gib: 10.0,
        egress_usd_per_gib: 0.0,
    }];
    s.jobs[0].datasets = vec!["contracts".into()];
    let plan = decide(&s, &NoPolicy, at_min(20));
    assert_eq!(
        plan.decision("ml/train").unwrap().reason,
        Reason::ConfidentialData
    );
    let rules = "  - name: confidential-east\n    when: job.datasets.exists(d, d.classification == 'Confidential')\n    allowClassifications: [Confidential]\n    regions: [us-east-1]\n";
    let e = engine(&policy(rules));
    let plan = decide(&s, &e, at_min(20));
    assert_eq!(plan.launches.len(), 1);
    assert_eq!(plan.launches[0].offering.region, "us-east-1");
}

#[test]
fn a_failing_expression_does_not_apply_and_is_counted() {
    let s = snapshot();
    // Read by index: a dotted `job.noSuchField` is refused when the rule compiles.
    let rules = "  - name: broken\n    when: job['noSuchField'] > 3\n    forbid: cloud\n";
    let e = engine(&policy(rules));
    let plan = decide(&s, &e, at_min(20));
    assert_eq!(
        plan.launches.len(),
        1,
        "the broken rule does not forbid anything"
    );
    assert!(e.runtime_errors().get("p/broken").copied().unwrap_or(0) >= 1);
}

#[test]
fn syntax_errors_name_the_policy_rule_and_field() {
    let m = Manifests::parse_str(
        Path::new("p.yaml"),
        &policy("  - name: typo\n    when: job.priority >\n  - name: ok\n    when: 'true'\n"),
    )
    .unwrap();
    let policies: Vec<_> = m.policies.into_iter().map(|p| p.object).collect();
    let errs = PolicyEngine::compile(&policies)
        .err()
        .expect("does not compile");
    assert_eq!(errs.len(), 1);
    assert_eq!((errs[0].rule.as_str(), errs[0].field), ("typo", "when"));
    let long = "x".repeat(5000);
    let m = Manifests::parse_str(
        Path::new("p.yaml"),
        &policy(&format!("  - name: long\n    when: {long}\n")),
    )
    .unwrap();
    let policies: Vec<_> = m.policies.into_iter().map(|p| p.object).collect();
    let errs = PolicyEngine::compile(&policies).err().expect("too long");
    assert!(errs[0].message.contains("limit"), "{}", errs[0]);
}

#[test]
fn an_engine_knows_whether_its_rules_read_the_clock() {
    let static_rule = policy("  - name: big\n    when: job.totalGpus >= 8\n    maxWait: 1h\n");
    assert!(!engine(&static_rule).reads_clock());
    assert!(!PolicyEngine::empty().reads_clock());
    for when in ["waited > 600.0", "now > 0.0 && job.totalGpus > 1"] {
        let clocked = policy(&format!(
            "  - name: late\n    when: {when}\n    maxWait: 1h\n"
        ));
        assert!(engine(&clocked).reads_clock(), "{when}");
    }
}

#[test]
fn repatriate_never_keeps_matching_cloud_jobs_where_they_are() {
    let e = engine(&policy(
        "    - name: big-stay\n      when: job.totalGpus >= 8\n      repatriate: never\n    - name: rest-move\n      repatriate: whenCheaper\n",
    ));
    // A restartable 8-GPU job running in the cloud, a free private node, an instance.
    let mut s = snapshot();
    s.nodes[0].free_gpus = 8;
    s.jobs[0].restartable = true;
    s.jobs[0].estimated_runtime = Some(Duration::from_secs(4 * 3600));
    s.jobs[0].state = JobState::Running {
        nodes: vec!["c1".into()],
        started_at: at_min(0),
        environment: Environment::Cloud,
    };
    let mut cloud = s.nodes[0].clone();
    cloud.name = "c1".into();
    cloud.pool = "aws".into();
    cloud.free_gpus = 0;
    s.nodes.push(cloud);
    s.instances.push(Instance {
        id: "i-1".into(),
        pool: "aws".into(),
        instance_type: "p4d.24xlarge".into(),
        capacity_type: CapacityType::OnDemand,
        zone: "us-east-1a".into(),
        gpus: 8,
        hourly_price: 32.77,
        need: "ml/train#0".into(),
        queue: "research".into(),
        node: Some("c1".into()),
        launched_at: at_min(0),
    });
    assert!(decide(&s, &e, at_min(30)).moves.is_empty());
    // The same job with 4 GPUs per replica is not matched by the first rule: it moves.
    s.jobs[0].gpus_per_replica = 4;
    s.jobs[0].replicas = 1;
    let plan = decide(&s, &e, at_min(30));
    assert_eq!(plan.moves.len(), 1, "{:?}", plan.decisions);
}

/// The operator compiles as `spillway policy lint` checks: a rule that parses but reads an
/// unknown variable, an unknown field or compares with a literal of another type never
/// compiles, with the same message and column lint prints.
#[test]
fn rules_lint_rejects_do_not_compile_and_say_what_lint_says() {
    use spillway_api::manifests::Manifests;
    use spillway_policy::lint::lint_str;
    for (when, says, column) in [
        ("jbo.totalGpus > 8", "unknown variable `jbo`", 1),
        ("job.totalGPUs > 8", "`job` has no field `totalGPUs`", 5),
        (
            "job.totalGpus > \"8\"",
            "compared with a string literal",
            17,
        ),
    ] {
        let yaml = policy(&format!(
            "  - name: r\n    when: '{when}'\n    forbid: cloud\n"
        ));
        let m = Manifests::parse_str(Path::new("policy.yaml"), &yaml).expect("parses");
        let policies: Vec<_> = m.policies.into_iter().map(|p| p.object).collect();
        let errors = match PolicyEngine::compile(&policies) {
            Ok(_) => panic!("{when:?} compiled"),
            Err(errors) => errors,
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert_eq!((e.rule.as_str(), e.field), ("r", "when"), "{e}");
        assert_eq!(e.position, Some((1, column)), "{e}");
        assert!(e.message.contains(says), "{e}");
        // Lint: the same message, at the expression's column in the file (`    when: '` is 11
        // characters before the expression).
        let lint = lint_str(Path::new("policy.yaml"), &yaml);
        let d = lint
            .iter()
            .find(|d| d.message.contains(says))
            .unwrap_or_else(|| panic!("lint of {when:?}: {lint:?}"));
        assert!(d.message.ends_with(&e.message), "{d} vs {e}");
        assert_eq!(d.column, 11 + column, "{d}");
    }
}

/// `snapshot()` with two cluster pools of one free 8-GPU node each: "near" ($2/GPU-h, in
/// dc-east) and "far" ($1/GPU-h, no location).
fn with_clusters() -> Snapshot {
    let mut s = snapshot();
    let mut near = Pool::cluster("near", 2.0);
    near.kind = PoolKind::Cluster {
        gpu_cost_per_hour: 2.0,
        location: Some("dc-east".into()),
    };
    s.pools.push(near);
    s.pools.push(Pool::cluster("far", 1.0));
    for pool in ["near", "far"] {
        let mut n = s.nodes[0].clone();
        n.name = format!("{pool}-1");
        n.pool = pool.into();
        n.free_gpus = 8;
        s.nodes.push(n);
    }
    s
}

#[test]
fn rules_see_cluster_pools_and_forbid_remote() {
    let s = with_clusters();
    let at = Time::from_millis(16 * 60_000);
    // Without rules: the cheapest cluster.
    let plan = decide(&s, &NoPolicy, at);
    assert_eq!(plan.starts[0].pool, "far");
    // An offering filter that names the pool kind and the pool.
    let e = engine(&policy(
        "  - name: only-near\n    when: 'true'\n    offeringFilter: \"offering.poolKind != 'cluster' || offering.pool == 'near'\"\n",
    ));
    let plan = decide(&s, &e, at);
    assert_eq!(plan.starts[0].pool, "near");
    assert_eq!(plan.starts[0].environment, Environment::Remote);
    // A region rule reads the pool's location.
    let e = engine(&policy(
        "  - name: east\n    when: 'true'\n    regions: [dc-east, us-east-1]\n",
    ));
    assert_eq!(decide(&s, &e, at).starts[0].pool, "near");
    // forbid: remote sends it to the cloud; forbid: cloud keeps it on the clusters.
    let e = engine(&policy(
        "  - name: no-remote\n    when: 'true'\n    forbid: remote\n",
    ));
    let plan = decide(&s, &e, at);
    assert!(plan.starts.is_empty());
    assert_eq!(plan.launches.len(), 1);
    let e = engine(&policy(
        "  - name: no-cloud\n    when: 'true'\n    forbid: cloud\n",
    ));
    assert_eq!(decide(&s, &e, at).starts[0].pool, "far");
}
