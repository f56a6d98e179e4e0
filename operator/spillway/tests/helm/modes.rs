//! Worker mode's render (only what the home operator needs in the other cluster) and the
//! values the chart refuses, with both Helms.

use std::collections::BTreeMap;

use spillway_tests::helm::{Helm, chart_dir, text};

use super::{kinds, one, render, rules, strings};

/// Where a rule applies, its resources, resource names and verbs.
type Grant<'a> = (String, Vec<&'a str>, Vec<&'a str>, Vec<&'a str>);

#[test]
fn worker_mode_installs_only_what_the_home_operator_needs_there() {
    let chart = chart_dir().display().to_string();
    for helm in Helm::all() {
        let out = helm.run(&[
            "lint",
            "--strict",
            &chart,
            "--set",
            "mode=worker",
            "--set",
            "worker.namespace=gpu-jobs",
        ]);
        assert!(
            out.status.success(),
            "helm {} lint: {}",
            helm.major,
            text(&out)
        );
        let objects = render(
            &helm,
            &["--set", "mode=worker", "--set", "worker.namespace=gpu-jobs"],
        );
        let want: BTreeMap<String, usize> = [
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Secret",
            "ServiceAccount",
        ]
        .into_iter()
        .map(|k| (k.to_string(), 1))
        .collect();
        assert_eq!(kinds(&objects), want, "no operator, CRD-less, nothing else");
        let mut all: Vec<Grant> = rules(&objects)
            .into_iter()
            .map(|(at, r)| {
                (
                    format!("{at} {}", strings(&r["apiGroups"]).join(",")),
                    strings(&r["resources"]),
                    strings(&r["resourceNames"]),
                    strings(&r["verbs"]),
                )
            })
            .collect();
        all.sort();
        assert_eq!(
            all,
            [
                (
                    "cluster ".to_string(),
                    vec!["nodes"],
                    vec![],
                    vec!["list", "watch"]
                ),
                (
                    "namespace gpu-jobs ".to_string(),
                    vec!["pods"],
                    vec![],
                    vec!["get", "list", "watch", "create", "delete"]
                ),
                (
                    "namespace gpu-jobs ".to_string(),
                    vec!["secrets"],
                    vec![],
                    vec!["create", "patch", "delete"]
                ),
                (
                    "namespace gpu-jobs batch".to_string(),
                    vec!["jobs"],
                    vec![],
                    vec!["get", "list", "watch", "create", "delete"]
                ),
            ]
        );
        let token = one(&objects, "Secret", "spillway-worker-token");
        assert_eq!(token["type"], "kubernetes.io/service-account-token");
        assert_eq!(
            token["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            "spillway"
        );
        assert_eq!(token["metadata"]["namespace"], "spillway-system");
        for binding in ["RoleBinding", "ClusterRoleBinding"] {
            let b = one(&objects, binding, "spillway-worker");
            assert_eq!(b["subjects"][0]["name"], "spillway");
            assert_eq!(b["subjects"][0]["namespace"], "spillway-system");
        }
        // The worker's own ServiceAccount and token never share the jobs' namespace.
        let chart = chart_dir().display().to_string();
        for (args, why) in [
            (vec!["--set", "mode=worker"], "worker.namespace"),
            (
                vec![
                    "--set",
                    "mode=worker",
                    "--set",
                    "worker.namespace=spillway-system",
                ],
                "is the release namespace",
            ),
        ] {
            let mut all = vec![
                "template",
                "spillway",
                chart.as_str(),
                "--namespace",
                "spillway-system",
                "--kube-version",
                spillway_tests::cluster::CURRENT,
            ];
            all.extend(args);
            let out = helm.run(&all);
            assert!(
                !out.status.success(),
                "Helm {} rendered {all:?}",
                helm.major
            );
            assert!(text(&out).contains(why), "{}", text(&out));
        }
    }
}

#[test]
fn bad_values_are_refused_with_the_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "replicas=-1"], "replicas"),
        (&["--set", "mode=both"], "mode"),
        (
            &["--set", "rbac.clusterPoolSecrets[0].namespace=platform"],
            "name",
        ),
        (&["--set", "replicaCount=2"], "replicaCount"),
        (&["--set", "identity.algorithm=HS256"], "algorithm"),
        (
            &["--set", "identity.tokenLifetime=forever"],
            "tokenLifetime",
        ),
        (&["--set", "telemetry.protocol=udp"], "protocol"),
        (&["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (
            &["--set", "aws.joinApiServer=http://api:6443"],
            "joinApiServer",
        ),
        (
            &["--set", "rbac.jobNamespaces[0]=Not_A_Namespace"],
            "jobNamespaces",
        ),
        (
            &["--set", "leaderElection.renewDeadline=20"],
            "renewDeadline must be shorter",
        ),
        (
            &["--set", "leaderElection.enabled=false"],
            "replicas > 1 needs leaderElection",
        ),
        (
            &["--set", "webhook.port=8443"],
            "webhook.port 8443 is also identity.port",
        ),
        (&["--set", "webhook.failurePolicy=Retry"], "failurePolicy"),
        (&["--set", "webhook.timeoutSeconds=60"], "timeoutSeconds"),
    ];
    for helm in Helm::all() {
        let chart = chart_dir().display().to_string();
        for (args, why) in cases {
            let mut all = vec![
                "template",
                "spillway",
                chart.as_str(),
                "--kube-version",
                spillway_tests::cluster::CURRENT,
            ];
            all.extend_from_slice(args);
            let out = helm.run(&all);
            assert!(
                !out.status.success(),
                "Helm {} accepted {args:?}",
                helm.major
            );
            let t = text(&out);
            assert!(
                t.contains(why),
                "Helm {} refused {args:?} without naming {why:?}: {t}",
                helm.major
            );
        }
        // One replica may run without an election.
        let chart = chart_dir().display().to_string();
        let ok = helm.run(&[
            "template",
            "spillway",
            &chart,
            "--kube-version",
            spillway_tests::cluster::CURRENT,
            "--set",
            "replicas=1",
            "--set",
            "leaderElection.enabled=false",
        ]);
        assert!(ok.status.success(), "{}", text(&ok));
        // A server older than the oldest supported release is refused, and says which.
        let old = helm.run(&["template", "spillway", &chart, "--kube-version", "1.33.5"]);
        assert!(
            !old.status.success(),
            "Helm {} rendered for 1.33",
            helm.major
        );
        assert!(text(&old).contains(">=1.34.0-0"), "{}", text(&old));
    }
}

/// The verbs of the rules (by where they apply) on `resource`.
fn verbs_on<'a>(objects: &'a [serde_json::Value], resource: &str) -> Vec<(String, Vec<&'a str>)> {
    rules(objects)
        .into_iter()
        .filter(|(_, r)| strings(&r["resources"]).contains(&resource))
        .map(|(at, r)| (at, strings(&r["verbs"])))
        .collect()
}

#[test]
fn train_and_ray_jobs_render_only_where_the_cluster_serves_them() {
    let kinds = [
        (
            "trainer.kubeflow.org/v1alpha1/TrainJob",
            "trainer.kubeflow.org/trainjob",
            "trainer.kubeflow.org",
            "trainjobs",
        ),
        ("ray.io/v1/RayJob", "ray.io/rayjob", "ray.io", "rayjobs"),
    ];
    for helm in Helm::all() {
        for (api, integration, group, resource) in kinds {
            // Not served: no grant on them, no webhook rule for them.
            let plain = render(&helm, &[]);
            assert!(verbs_on(&plain, resource).is_empty(), "Helm {}", helm.major);
            // Served: seen, held and run everywhere.
            let only = format!("integrations={{{integration}}}");
            let served = render(&helm, &["--api-versions", api, "--set", &only]);
            assert_eq!(
                verbs_on(&served, resource),
                [("cluster".to_string(), vec!["get", "list", "watch", "patch"])]
            );
            let hold = &one(&served, "MutatingWebhookConfiguration", "spillway")["webhooks"][0];
            assert_eq!(hold["name"], "hold.spillway.io");
            assert_eq!(strings(&hold["rules"][0]["apiGroups"]), [group]);
            assert_eq!(strings(&hold["rules"][0]["resources"]), [resource]);
            let deployment = one(&served, "Deployment", "spillway");
            let args = strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
            let flag = format!("--integrations={integration}");
            assert!(args.contains(&flag.as_str()), "{args:?}");
            // A TrainJob's pods may need pinning (gated like a JobSet's); a RayJob's are
            // placed by their template alone.
            let pod_patch = (verbs_on(&served, "pods").iter()).any(|(_, v)| v.contains(&"patch"));
            assert_eq!(pod_patch, resource == "trainjobs", "{resource}");
        }
    }
}

#[test]
fn the_jobset_integration_renders_only_where_the_cluster_serves_jobsets() {
    let jobset_api = ["--api-versions", "jobset.x-k8s.io/v1alpha2/JobSet"];
    for helm in Helm::all() {
        let args = |objects: &[serde_json::Value]| -> Vec<String> {
            one(objects, "Deployment", "spillway")["spec"]["template"]["spec"]["containers"][0]
                ["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str())
                .filter(|a| a.starts_with("--integrations"))
                .map(str::to_string)
                .collect()
        };
        let webhooks = |objects: &[serde_json::Value]| -> Vec<String> {
            (one(objects, "MutatingWebhookConfiguration", "spillway")["webhooks"].as_array())
                .into_iter()
                .flatten()
                .map(|w| w["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        // No JobSet CRD: no grant on JobSets, no webhook rule for them. Plain pods (on by
        // default) are held by a webhook of their own that fails closed, and patched to run.
        let plain = render(&helm, &[]);
        assert!(
            verbs_on(&plain, "jobsets").is_empty(),
            "Helm {}",
            helm.major
        );
        let hold = &one(&plain, "MutatingWebhookConfiguration", "spillway")["webhooks"][0];
        assert_eq!(hold["rules"].as_array().map(Vec::len), Some(1));
        assert_eq!(args(&plain), ["--integrations=batch/job,pod"]);
        assert_eq!(
            webhooks(&plain),
            [
                "hold.spillway.io",
                "hold-pod.spillway.io",
                "inject.spillway.io"
            ]
        );
        let pod_hold = &one(&plain, "MutatingWebhookConfiguration", "spillway")["webhooks"][1];
        assert_eq!(pod_hold["failurePolicy"], "Fail");
        assert_eq!(strings(&pod_hold["rules"][0]["resources"]), ["pods"]);
        assert!(
            verbs_on(&plain, "pods")
                .iter()
                .any(|(_, v)| v.contains(&"patch")),
            "{:?}",
            verbs_on(&plain, "pods")
        );
        // Batch Jobs only: no pod patch, no pod webhook.
        let jobs_only = render(&helm, &["--set", "integrations={batch/job}"]);
        assert!(
            verbs_on(&jobs_only, "pods")
                .iter()
                .all(|(_, v)| !v.contains(&"patch")),
            "{:?}",
            verbs_on(&jobs_only, "pods")
        );
        assert_eq!(
            webhooks(&jobs_only),
            ["hold.spillway.io", "inject.spillway.io"]
        );
        // Plain pods only: no webhook for Jobs.
        let pods_only = render(&helm, &["--set", "integrations={pod}"]);
        assert_eq!(
            webhooks(&pods_only),
            ["hold-pod.spillway.io", "inject.spillway.io"]
        );

        // Served: JobSets seen, held and run everywhere; pods patched (pinning a gated pod).
        let mut jobsets_only = jobset_api.to_vec();
        jobsets_only.extend(["--set", "integrations={batch/job,jobset.x-k8s.io/jobset}"]);
        let served = render(&helm, &jobsets_only);
        assert_eq!(
            verbs_on(&served, "jobsets"),
            [("cluster".to_string(), vec!["get", "list", "watch", "patch"])]
        );
        assert!(
            verbs_on(&served, "pods")
                .iter()
                .any(|(_, v)| v.contains(&"patch")),
            "{:?}",
            verbs_on(&served, "pods")
        );
        let hold = &one(&served, "MutatingWebhookConfiguration", "spillway")["webhooks"][0];
        assert_eq!(strings(&hold["rules"][1]["apiGroups"]), ["jobset.x-k8s.io"]);
        assert_eq!(strings(&hold["rules"][1]["resources"]), ["jobsets"]);
        assert_eq!(
            args(&served),
            ["--integrations=batch/job,jobset.x-k8s.io/jobset"]
        );

        // With rbac.jobNamespaces: patched only there, through the namespace's Role.
        let mut held = jobset_api.to_vec();
        held.extend(["--set", "rbac.jobNamespaces[0]=ml"]);
        let held = render(&helm, &held);
        let grants = verbs_on(&held, "jobsets");
        assert!(
            grants.contains(&("cluster".to_string(), vec!["get", "list", "watch"]))
                && grants.contains(&("namespace ml".to_string(), vec!["patch"])),
            "{grants:?}"
        );
        assert!(
            verbs_on(&held, "pods").contains(&(
                "namespace ml".to_string(),
                vec!["create", "delete", "patch"]
            )),
            "{:?}",
            verbs_on(&held, "pods")
        );

        // None at all: GpuJobs only, no mutating webhook.
        let none = render(&helm, &["--set", "integrations=null"]);
        assert!(
            none.iter()
                .all(|o| o["kind"] != "MutatingWebhookConfiguration"),
            "Helm {}",
            helm.major
        );
    }
}
