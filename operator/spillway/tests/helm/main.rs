//! The Helm chart (charts/spillway) with real Helm 3 and Helm 4: lint, render, refuse bad
//! values (this file); install, run, upgrade and uninstall against the test API server
//! (install.rs); the getting-started guide run as written (getting_started.rs).

mod getting_started;
mod history;
mod install;
mod modes;
mod privilege;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use spillway_tests::helm::{Helm, chart_dir, text};

/// `helm template` of the chart with `args`, as parsed objects.
fn render(helm: &Helm, args: &[&str]) -> Vec<Value> {
    let chart = chart_dir().display().to_string();
    let mut all = vec![
        "template",
        "spillway",
        chart.as_str(),
        "--namespace",
        "spillway-system",
        "--kube-version",
        spillway_tests::cluster::CURRENT,
    ];
    all.extend_from_slice(args);
    let out = helm.run(&all);
    assert!(
        out.status.success(),
        "helm {} template: {}",
        helm.major,
        text(&out)
    );
    let yaml = String::from_utf8(out.stdout).expect("UTF-8");
    spillway_api::manifests::documents(&yaml)
        .into_iter()
        .filter_map(|d| serde_saphyr::from_str::<Option<Value>>(d.text).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            let have: Vec<String> = objects
                .iter()
                .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
                .collect();
            panic!("no {kind} {name} in {have:?}")
        })
}

fn kinds(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for o in objects {
        *m.entry(o["kind"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    m
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Every port list entry without a `protocol`, as a path (server-side apply, which Helm 4 uses,
/// refuses a port without one: it is a key of the list).
fn ports_without_protocol(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{path}.{k}");
                if k == "ports" {
                    for (i, port) in child.as_array().into_iter().flatten().enumerate() {
                        if port.get("protocol").is_none() {
                            out.push(format!("{p}[{i}]"));
                        }
                    }
                } else {
                    ports_without_protocol(child, &p, out);
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                ports_without_protocol(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn assert_ports_have_protocols(objects: &[Value]) {
    let mut missing = Vec::new();
    for o in objects {
        if o["kind"] == "ServiceMonitor" {
            continue; // its endpoints name a port; no list of ports
        }
        let at = format!("{}/{}", o["kind"], o["metadata"]["name"]);
        ports_without_protocol(o, &at, &mut missing);
    }
    assert!(missing.is_empty(), "ports without a protocol: {missing:?}");
}

/// Every rule of every (Cluster)Role rendered, with where it applies.
fn rules(objects: &[Value]) -> Vec<(String, &Value)> {
    objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .flat_map(|o| {
            let at = match o["kind"].as_str() {
                Some("ClusterRole") => "cluster".to_string(),
                _ => format!(
                    "namespace {}",
                    o["metadata"]["namespace"].as_str().unwrap_or("")
                ),
            };
            o["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |r| (at.clone(), r))
        })
        .collect()
}

#[test]
fn lint_strict_passes_with_both_helms_and_both_values_files() {
    let chart = chart_dir().display().to_string();
    let full = chart_dir()
        .join("ci/full-values.yaml")
        .display()
        .to_string();
    for helm in Helm::all() {
        for args in [
            vec!["lint", "--strict", &chart],
            vec!["lint", "--strict", &chart, "-f", &full],
        ] {
            let out = helm.run(&args);
            assert!(
                out.status.success(),
                "helm {} {args:?}: {}",
                helm.major,
                text(&out)
            );
            assert!(text(&out).contains("0 chart(s) failed"), "{}", text(&out));
        }
    }
}

#[test]
fn the_default_render_is_hardened_and_least_privilege() {
    for helm in Helm::all() {
        let objects = render(&helm, &[]);
        assert_ports_have_protocols(&objects);
        let k = kinds(&objects);
        for (kind, n) in [
            ("Deployment", 1),
            ("ServiceAccount", 1),
            ("ClusterRole", 1),
            ("ClusterRoleBinding", 1),
            ("Role", 2),
            ("RoleBinding", 2),
            ("Service", 3),
            ("PodDisruptionBudget", 1),
            ("Lease", 1),
            ("Secret", 2),
            ("ValidatingWebhookConfiguration", 1),
        ] {
            assert_eq!(
                k.get(kind),
                Some(&n),
                "{kind} with Helm {}: {k:?}",
                helm.major
            );
        }
        assert!(
            !k.contains_key("ServiceMonitor") && !k.contains_key("NetworkPolicy"),
            "{k:?}"
        );

        let d = one(&objects, "Deployment", "spillway");
        assert_eq!(d["spec"]["replicas"], 2);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "spillway");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(
            strings(&c["securityContext"]["capabilities"]["drop"]),
            ["ALL"]
        );
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        for r in ["cpu", "memory"] {
            assert!(c["resources"]["requests"][r].is_string(), "requests.{r}");
            assert!(c["resources"]["limits"][r].is_string(), "limits.{r}");
        }
        let args = strings(&c["args"]);
        assert_eq!(args[0], "operator");
        // Every flag the chart passes is one the binary knows.
        let help = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["operator", "--help"])
            .output()
            .expect("spillway operator --help");
        let help = String::from_utf8_lossy(&help.stdout);
        for a in &args[1..] {
            let flag = a.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")),
                "{flag} is not a flag of `spillway operator`"
            );
        }
        for want in [
            "--leader-elect=true",
            "--leader-election-namespace=spillway-system",
            "--leader-election-id=spillway",
            "--identity-keys-secret=spillway-identity-keys",
            "--identity-issuer=https://spillway-identity.spillway-system.svc",
            "--spend-ledger=spillway-spend",
            "--indicator-ledger=spillway-indicators",
            "--webhook=true",
            "--webhook-secret=spillway-webhook-tls",
            "--webhook-self-signed=true",
            "--webhook-host=spillway-webhook.spillway-system.svc",
            "--webhook-configuration=spillway",
        ] {
            assert!(args.contains(&want), "{want} in {args:?}");
        }
        let pdb = one(&objects, "PodDisruptionBudget", "spillway");
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["spec"]["minAvailable"], 1);
        let metrics = one(&objects, "Service", "spillway-metrics");
        assert_eq!(metrics["spec"]["ports"][0]["port"], 8080);
        let issuer = one(&objects, "Service", "spillway-identity");
        assert_eq!(issuer["spec"]["ports"][0]["targetPort"], "identity");

        // Least privilege: no wildcards, and every grant on Secrets held to Spillway's own
        // names (the issuer's keys, the tokens Secret), but the bootstrap tokens' create in
        // kube-system (their names are random; create returns only what it made).
        for (at, r) in rules(&objects) {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !strings(&r[field]).contains(&"*"),
                    "a wildcard in {at}: {r}"
                );
            }
            if !strings(&r["resources"]).contains(&"secrets") {
                continue;
            }
            let names = strings(&r["resourceNames"]);
            let verbs = strings(&r["verbs"]);
            let tokens: Vec<String> = spillway_k8s::identity::tokens_secret_names().collect();
            let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
            match (at.as_str(), names.as_slice()) {
                ("namespace kube-system", []) => {
                    assert_eq!(verbs, ["create"], "bootstrap tokens: create only: {r}")
                }
                ("cluster", n) if *n == *tokens => {
                    assert_eq!(verbs, ["create", "patch"], "{r}")
                }
                ("namespace spillway-system", ["spillway-identity-keys"]) => {}
                ("namespace spillway-system", ["spillway-webhook-tls"]) => {
                    assert_eq!(verbs, ["get", "patch"], "{r}")
                }
                _ => panic!("a grant on Secrets beyond Spillway's own, in {at}: {r}"),
            }
        }
        // The bootstrap tokens' create in kube-system is held by an admission policy to
        // expiring tokens of Spillway's group, made by the operator's own ServiceAccount.
        let policy = one(
            &objects,
            "ValidatingAdmissionPolicy",
            "spillway-bootstrap-tokens",
        );
        let condition = policy["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        assert!(
            condition.contains("system:serviceaccount:spillway-system:spillway"),
            "{condition}"
        );
        let rule = policy["spec"]["validations"][0]["expression"]
            .as_str()
            .unwrap();
        // The group, base64-encoded as CEL sees a Secret's data.
        assert!(
            rule.contains("c3lzdGVtOmJvb3RzdHJhcHBlcnM6c3BpbGx3YXk=")
                && rule.contains("expiration")
        );
        let binding = one(
            &objects,
            "ValidatingAdmissionPolicyBinding",
            "spillway-bootstrap-tokens",
        );
        assert_eq!(binding["spec"]["validationActions"][0], "Deny");
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "kube-system"
        );
        // The objects the operator keeps state in belong to the release.
        assert_eq!(
            one(&objects, "Lease", "spillway")["metadata"]["namespace"],
            "spillway-system"
        );
        // The spend and indicator ledgers outlive the release (a reinstall must not reset
        // budgets or history), and the operator reads and patches those two ConfigMaps only.
        for name in ["spillway-spend", "spillway-indicators"] {
            let ledger = one(&objects, "ConfigMap", name);
            assert_eq!(
                ledger["metadata"]["annotations"]["helm.sh/resource-policy"],
                "keep"
            );
        }
        // Without bursting there is still spend (cluster pools, private time a budget counts):
        // the spend ledger and its grant stay.
        let private_only = render(&helm, &["--set", "aws.enabled=false"]);
        one(&private_only, "ConfigMap", "spillway-spend");
        assert!(
            rules(&private_only)
                .iter()
                .any(|(_, r)| strings(&r["resourceNames"]).contains(&"spillway-spend")),
            "the spend ledger's grant without aws"
        );
        let configmap_rules: Vec<_> = rules(&objects)
            .into_iter()
            .filter(|(_, r)| strings(&r["resources"]).contains(&"configmaps"))
            .collect();
        assert_eq!(configmap_rules.len(), 1, "{configmap_rules:?}");
        let (at, r) = &configmap_rules[0];
        assert_eq!(at, "namespace spillway-system");
        assert_eq!(
            strings(&r["resourceNames"]),
            ["spillway-indicators", "spillway-spend"]
        );
        assert_eq!(strings(&r["verbs"]), ["get", "list", "watch", "patch"]);
        // The webhook: only Spillway's kinds reach it, and an operator that is down blocks
        // nothing by default; the operator may change this one configuration's caBundle only.
        let hook = &one(&objects, "ValidatingWebhookConfiguration", "spillway")["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["timeoutSeconds"], 5);
        assert_eq!(strings(&hook["rules"][0]["apiGroups"]), ["spillway.io"]);
        assert_eq!(
            strings(&hook["rules"][0]["operations"]),
            ["CREATE", "UPDATE"]
        );
        assert_eq!(hook["clientConfig"]["service"]["name"], "spillway-webhook");
        // The mutating one (integrations): labelled batch Jobs (no JobSet CRD here), at /mutate.
        let hold = &one(&objects, "MutatingWebhookConfiguration", "spillway")["webhooks"][0];
        assert_eq!(hold["clientConfig"]["service"]["path"], "/mutate");
        assert_eq!(strings(&hold["rules"][0]["apiGroups"]), ["batch"]);
        assert_eq!(strings(&hold["rules"][0]["resources"]), ["jobs"]);
        assert_eq!(
            hold["objectSelector"]["matchExpressions"][0],
            json!({"key": "spillway.io/queue", "operator": "Exists"})
        );
        assert_eq!(hold["failurePolicy"], "Ignore");
        // Labelled plain pods: held by a webhook of their own, which fails closed.
        let pods = &one(&objects, "MutatingWebhookConfiguration", "spillway")["webhooks"][1];
        assert_eq!(pods["name"], "hold-pod.spillway.io");
        assert_eq!(pods["failurePolicy"], "Fail");
        assert_eq!(
            pods["objectSelector"]["matchExpressions"],
            json!([{"key": "spillway.io/queue", "operator": "Exists"},
                   {"key": "spillway.io/job-uid", "operator": "DoesNotExist"}])
        );
        let inject = &one(&objects, "MutatingWebhookConfiguration", "spillway")["webhooks"][2];
        assert_eq!(strings(&inject["rules"][0]["resources"]), ["pods"]);
        assert_eq!(strings(&inject["rules"][0]["operations"]), ["CREATE"]);
        assert_eq!(
            inject["objectSelector"]["matchExpressions"][0],
            json!({"key": "spillway.io/job-uid", "operator": "Exists"})
        );
        assert_eq!(
            one(&objects, "Service", "spillway-webhook")["spec"]["ports"][0]["targetPort"],
            "webhook"
        );
        let webhook_rules: Vec<_> = rules(&objects)
            .into_iter()
            .filter(|(_, r)| strings(&r["apiGroups"]).contains(&"admissionregistration.k8s.io"))
            .collect();
        assert_eq!(webhook_rules.len(), 1, "{webhook_rules:?}");
        assert_eq!(strings(&webhook_rules[0].1["resourceNames"]), ["spillway"]);
        assert_eq!(strings(&webhook_rules[0].1["verbs"]), ["get", "patch"]);
        let keys = one(&objects, "Secret", "spillway-identity-keys");
        assert!(
            keys.get("data").is_none_or(Value::is_null),
            "the chart writes no keys: {keys}"
        );
    }
}

#[test]
fn every_setting_renders_where_it_should() {
    let full = chart_dir()
        .join("ci/full-values.yaml")
        .display()
        .to_string();
    for helm in Helm::all() {
        let objects = render(&helm, &["-f", &full]);
        assert_ports_have_protocols(&objects);
        let k = kinds(&objects);
        assert_eq!(k.get("ServiceMonitor"), Some(&1), "{k:?}");
        assert_eq!(k.get("NetworkPolicy"), Some(&1), "{k:?}");
        let d = one(&objects, "Deployment", "gpu-scheduler");
        assert_eq!(d["spec"]["replicas"], 3);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "spillway-operator");
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "registry.example.com/platform/spillway:0.1.0");
        let args = strings(&c["args"]);
        for want in [
            "--metrics-addr=0.0.0.0:9090",
            "--lease-duration=20",
            "--cluster-name=research-prod",
            "--join-api-server=https://api.research-prod.example.com:6443",
            "--catalog=/etc/spillway/catalog/catalog.csv",
            "--policy-dir=/etc/spillway/policies",
            "--identity-addr=0.0.0.0:9443",
            "--identity-issuer=https://oidc.research-prod.example.com",
            "--identity-audience=sts.amazonaws.com",
            "--identity-algorithm=RS256",
            "--identity-tls-cert=/etc/spillway/tls/tls.crt",
            "--pod-otlp-endpoint=http://otel-agent.observability:4317",
        ] {
            assert!(args.contains(&want), "{want} in {args:?}");
        }
        let env: BTreeMap<&str, &str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
            .collect();
        assert_eq!(env.get("AWS_REGION"), Some(&"us-east-1"));
        assert_eq!(
            env.get("AWS_ENDPOINT_URL_EC2"),
            Some(&"https://ec2.us-east-1.amazonaws.com")
        );
        assert_eq!(
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
            Some(&"http://otel-collector.observability:4317")
        );
        assert_eq!(env.get("RUST_LOG"), Some(&"spillway_k8s=debug,info"));
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], "spillway-aws");
        let sa = one(&objects, "ServiceAccount", "spillway-operator");
        assert!(sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_string());

        // The catalog and the policies are what the operator can read.
        let catalog = one(&objects, "ConfigMap", "gpu-scheduler-catalog");
        let rows = spillway_core::catalog::parse(catalog["data"]["catalog.csv"].as_str().unwrap())
            .expect("the example catalog parses");
        assert_eq!(rows.len(), 2);
        let policies = one(&objects, "ConfigMap", "gpu-scheduler-policies");
        let dir = std::env::temp_dir().join(spillway_tests::unique_name("chart-policies"));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, body) in policies["data"].as_object().unwrap() {
            std::fs::write(dir.join(file), body.as_str().unwrap()).unwrap();
        }
        let lint = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["policy", "lint", &dir.display().to_string()])
            .output()
            .expect("policy lint");
        assert!(lint.status.success(), "{}", text(&lint));
        std::fs::remove_dir_all(&dir).unwrap();

        // Pods created and token Secrets written only in the namespaces named, not
        // cluster-wide; the operator told which.
        for (at, r) in rules(&objects) {
            if strings(&r["resources"]).contains(&"secrets") {
                assert_ne!(
                    at, "cluster",
                    "with rbac.jobNamespaces no cluster-wide Secret rule: {r}"
                );
            }
            if at == "cluster" && strings(&r["resources"]).contains(&"pods") {
                assert_eq!(
                    strings(&r["verbs"]),
                    ["get", "list", "watch"],
                    "with rbac.jobNamespaces pods are only seen cluster-wide: {r}"
                );
            }
        }
        for ns in ["research", "clinical"] {
            let role = objects
                .iter()
                .find(|o| {
                    o["kind"] == "Role"
                        && o["metadata"]["name"] == "gpu-scheduler-jobs"
                        && o["metadata"]["namespace"] == ns
                })
                .unwrap_or_else(|| panic!("no jobs Role in {ns}"));
            assert_eq!(strings(&role["rules"][0]["resources"]), ["pods"]);
            // Patch: pod groups (a default integration) are run by patching their pods.
            assert_eq!(
                strings(&role["rules"][0]["verbs"]),
                ["create", "delete", "patch"]
            );
        }
        let args = strings(
            &one(&objects, "Deployment", "gpu-scheduler")["spec"]["template"]["spec"]["containers"]
                [0]["args"],
        );
        assert!(
            args.contains(&"--job-namespaces=research,clinical"),
            "{args:?}"
        );

        // The cluster pools' kubeconfigs: each read by name in its namespace, nothing else.
        let mut kubeconfigs: Vec<(String, Vec<&str>, Vec<&str>)> = rules(&objects)
            .into_iter()
            .filter(|(_, r)| {
                strings(&r["resourceNames"])
                    .iter()
                    .any(|n| n.ends_with("kubeconfig"))
            })
            .map(|(at, r)| (at, strings(&r["resourceNames"]), strings(&r["verbs"])))
            .collect();
        kubeconfigs.sort();
        assert_eq!(
            kubeconfigs,
            [
                (
                    "namespace platform".to_string(),
                    vec!["partner-kubeconfig"],
                    vec!["get"]
                ),
                (
                    "namespace spillway-system".to_string(),
                    vec!["dc2-kubeconfig"],
                    vec!["get"]
                ),
            ]
        );

        // The webhook's certificate from cert-manager: the operator only reads its Secret and
        // may not touch the configuration; cert-manager injects the caBundle.
        for want in ["--webhook-addr=0.0.0.0:9444", "--webhook-self-signed=false"] {
            assert!(args.contains(&want), "{want} in {args:?}");
        }
        let cert = one(&objects, "Certificate", "gpu-scheduler-webhook");
        assert_eq!(cert["spec"]["secretName"], "gpu-scheduler-webhook-tls");
        assert_eq!(cert["spec"]["issuerRef"]["kind"], "ClusterIssuer");
        assert_eq!(cert["spec"]["issuerRef"]["name"], "platform-ca");
        assert!(!k.contains_key("Issuer"), "{k:?}");
        let config = one(&objects, "ValidatingWebhookConfiguration", "gpu-scheduler");
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "spillway-system/gpu-scheduler-webhook"
        );
        assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail");
        assert_eq!(config["webhooks"][0]["timeoutSeconds"], 10);
        let mutating = one(&objects, "MutatingWebhookConfiguration", "gpu-scheduler");
        let policies: Vec<(&str, &str)> = (mutating["webhooks"].as_array().into_iter())
            .flatten()
            .map(|w| {
                let text = |k: &str| w[k].as_str().unwrap_or_default();
                (text("name"), text("failurePolicy"))
            })
            .collect();
        assert_eq!(
            policies,
            [
                ("hold.spillway.io", "Fail"),
                ("hold-pod.spillway.io", "Ignore"),
                ("inject.spillway.io", "Fail")
            ]
        );
        assert!(
            !rules(&objects)
                .iter()
                .any(|(_, r)| strings(&r["apiGroups"]).contains(&"admissionregistration.k8s.io")),
            "no caBundle rights with cert-manager"
        );
        let tls_rule = rules(&objects)
            .into_iter()
            .find(|(_, r)| strings(&r["resourceNames"]) == ["gpu-scheduler-webhook-tls"])
            .expect("the certificate's Secret");
        assert_eq!(strings(&tls_rule.1["verbs"]), ["get"]);
        assert!(
            !objects
                .iter()
                .any(|o| o["kind"] == "Secret"
                    && o["metadata"]["name"] == "gpu-scheduler-webhook-tls"),
            "cert-manager makes the Secret"
        );
    }
}

/// The keys of values.yaml, as dotted paths, each with whether a comment stands right above it.
fn value_keys(text: &str) -> Vec<(String, bool)> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    let mut commented = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            commented = false;
            continue;
        }
        if trimmed.starts_with('#') {
            commented = true;
            continue;
        }
        let indent = line.len() - trimmed.len();
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        if trimmed.starts_with('-') || key.contains(' ') {
            commented = false;
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        stack.push((indent, key.to_string()));
        out.push((path, commented));
        commented = false;
    }
    out
}

/// The schema's settings (objects with properties are walked into), as dotted paths.
fn schema_keys(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in schema["properties"].as_object().into_iter().flatten() {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        out.push(path.clone());
        if v["properties"].is_object() {
            schema_keys(v, &path, out);
        }
    }
}

#[test]
fn every_setting_is_commented_in_values_yaml_and_typed_in_the_schema() {
    let values = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let mut settings = Vec::new();
    schema_keys(&schema, "", &mut settings);
    let keys = value_keys(&values);
    for s in &settings {
        let found = keys.iter().find(|(k, _)| k == s);
        let Some((_, commented)) = found else {
            panic!(
                "{s} is in values.schema.json but not in values.yaml (give it its default there)"
            );
        };
        let parent_only = schema_parent(&schema, s);
        assert!(
            *commented || parent_only,
            "{s} has no comment in values.yaml"
        );
    }
    assert!(settings.len() > 40, "{settings:?}");
}

/// Whether `path` is an object of further settings (its children carry the comments).
fn schema_parent(schema: &Value, path: &str) -> bool {
    let mut v = schema;
    for part in path.split('.') {
        v = &v["properties"][part];
    }
    v["properties"].is_object()
}

#[test]
fn the_example_cluster_passes_policy_lint_and_its_own_policy_tests() {
    let dir = chart_dir()
        .join("../../examples/cluster")
        .display()
        .to_string();
    for command in ["lint", "test"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["policy", command, &dir])
            .output()
            .expect("spillway policy");
        assert!(
            out.status.success(),
            "policy {command} {dir}: {}",
            text(&out)
        );
    }
}
