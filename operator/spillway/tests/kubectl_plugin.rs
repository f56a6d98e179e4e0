//! `kubectl spillway status|jobs|queues|pools|cost|parity|explain` (and `spillway operator`) against
//! the real control plane, with the fake kubelet for nodes.

use std::process::{Command, Output};
use std::time::Duration;

use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::json;
use spillway_tests::cluster::TestCluster;
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::operator::eventually;

fn run(bin: &std::path::Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("run")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn create(
    client: &kube::Client,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    obj: serde_json::Value,
) {
    let gvk = kube::core::GroupVersionKind::gvk("spillway.io", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(obj).expect("json");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_binary_and_kubectl_plugin() {
    let (cluster, client) = TestCluster::with_crds().await;
    let ns = cluster.namespace(&client, "plugin").await.expect("ns");
    let kubelet = FakeKubelet::start(client.clone());
    kubelet
        .register(FakeNode::gpu(format!("{ns}-n0"), 8).label("plugin-pool", &ns))
        .await
        .expect("node");
    create(
        &client,
        "GpuQueue",
        "gpuqueues",
        None,
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue",
            "metadata": {"name": ns}, "spec": {"weight": 2},
        }),
    )
    .await;
    create(
        &client,
        "ComputePool",
        "computepools",
        None,
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": format!("{ns}-pool")},
            "spec": {"private": {"nodeSelector": {"plugin-pool": ns}}},
        }),
    )
    .await;
    for (name, gpus) in [("fits", 4), ("waits", 8)] {
        create(
            &client,
            "GpuJob",
            "gpujobs",
            Some(&ns),
            json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"queue": ns, "gpusPerReplica": gpus,
                         "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            }),
        )
        .await;
    }

    // The real binary, as a platform team runs it locally.
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_spillway"));
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let identity_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    // The issuer over TLS, with a test CA and a certificate for 127.0.0.1 made here.
    let tls_dir = std::env::temp_dir().join(format!("spillway-tls-{}", std::process::id()));
    std::fs::create_dir_all(&tls_dir).expect("dir");
    let (ca, cert, key) = (
        tls_dir.join("ca.pem"),
        tls_dir.join("cert.pem"),
        tls_dir.join("key.pem"),
    );
    std::fs::write(
        tls_dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "1",
                "-subj",
                "/CN=spillway-test-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=spillway-identity",
                "-keyout",
                "key.pem",
                "-out",
                "leaf.csr",
            ],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "leaf.ext",
            "-out",
            "cert.pem",
        ],
    ] {
        let made = Command::new("openssl")
            .args(&args)
            .current_dir(&tls_dir)
            .output()
            .expect("openssl");
        assert!(made.status.success(), "openssl {args:?}: {}", text(&made));
    }
    let issuer = format!("https://127.0.0.1:{identity_port}");
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut operator = Command::new(&bin)
        .args([
            "operator",
            "--kubeconfig",
            &kubeconfig,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--leader-election-namespace",
            &ns,
            "--identity-addr",
            &format!("127.0.0.1:{identity_port}"),
            "--identity-issuer",
            &issuer,
            "--identity-tls-cert",
            &cert.display().to_string(),
            "--identity-tls-key",
            &key.display().to_string(),
        ])
        // A collector that is down: tracing must cost the scheduling nothing.
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{down}"),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start operator");

    // `kubectl-spillway` is the same binary under the plugin's name.
    let dir = std::env::temp_dir().join(format!("spillway-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = dir.join("kubectl-spillway");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(&bin, &plugin).expect("symlink");

    let jobs = eventually(Duration::from_secs(60), "jobs listing", || async {
        let out = run(
            &plugin,
            &["jobs", "-n", &ns, "--kubeconfig", &kubeconfig, "--wide"],
        );
        let t = text(&out);
        if out.status.success() && t.contains("FitsPrivate") && t.contains("Wait") {
            Ok(t)
        } else {
            Err(t)
        }
    })
    .await;
    let fits = jobs
        .lines()
        .find(|l| l.starts_with("fits"))
        .expect("fits row");
    for want in [
        "Running",
        "private",
        &format!("{ns}-pool"),
        "StartPrivate",
        "1x4",
    ] {
        assert!(fits.contains(want), "{want:?} in {fits:?}\n{jobs}");
    }
    assert!(jobs.starts_with("NAME"), "{jobs}");

    let status = eventually(Duration::from_secs(30), "queue status", || async {
        let t = text(&run(&plugin, &["status", "--kubeconfig", &kubeconfig]));
        let row = t
            .lines()
            .find(|l| l.starts_with(&ns))
            .map(str::to_string)
            .unwrap_or_default();
        // weight 2, 1 pending, 1 running, 4 private GPUs
        if row.split_whitespace().take(7).collect::<Vec<_>>()
            == [ns.as_str(), "2", "-", "1", "1", "4", "0"]
        {
            Ok(t)
        } else {
            Err(t)
        }
    })
    .await;
    assert!(
        status.contains("POOLS") && status.contains(&format!("{ns}-pool")),
        "{status}"
    );

    let out = run(
        &plugin,
        &[
            "explain",
            "gpujob",
            "waits",
            "-n",
            &ns,
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("Recorded decision: Wait"), "{t}");
    assert!(t.contains("If decided now:"), "{t}");
    assert!(t.contains("Rules: none"), "{t}");
    let out = run(
        &plugin,
        &[
            "explain",
            "gpujob/fits",
            "-n",
            &ns,
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    let t = text(&out);
    assert!(
        t.contains("Recorded decision: StartPrivate (FitsPrivate)"),
        "{t}"
    );
    let out = run(
        &plugin,
        &[
            "explain",
            "gpujob",
            "nope",
            "-n",
            &ns,
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "not found: exit 1");
    assert!(text(&out).contains("not found"), "{}", text(&out));
    // A labelled workload is explained through the GpuJob that stands for it.
    let out = run(
        &plugin,
        &[
            "explain",
            "jobset/nope",
            "-n",
            &ns,
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "not found: exit 1");
    assert!(
        text(&out).contains("gpujob \"jobset-nope\" not found"),
        "{}",
        text(&out)
    );
    let out = run(
        &plugin,
        &["explain", "deployment/x", "--kubeconfig", &kubeconfig],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("cannot explain"), "{}", text(&out));
    // A pod is explained through its group's GpuJob: one that is not there says so.
    let out = run(&plugin, &["explain", "pod/x", "--kubeconfig", &kubeconfig]);
    assert_eq!(out.status.code(), Some(1), "not found: exit 1");
    assert!(
        text(&out).contains("pod \"x\" not found in namespace \"default\""),
        "{}",
        text(&out)
    );

    // queues, pools, cost; -o json|yaml|wide; empty answers; exit codes.
    let kc = ["--kubeconfig", kubeconfig.as_str()];
    let out = run(&plugin, &[&["queues"][..], &kc].concat());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.starts_with("NAME   "), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with(&ns))
        .expect("the queue's row");
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "weight: {row}");
    assert!(row.contains("True"), "Ready: {row}");
    let out = run(&plugin, &[&["pools", "-o", "wide"][..], &kc].concat());
    let t = text(&out);
    let row = t
        .lines()
        .find(|l| l.starts_with(&format!("{ns}-pool")))
        .expect("pool row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..7], ["private", "1", "1", "0", "8", "4"], "{t}");
    assert!(t.lines().next().unwrap().contains("LAUNCH-HEALTHY"), "{t}");
    let out = run(
        &plugin,
        &[&["jobs", "-n", &ns, "-o", "json"][..], &kc].concat(),
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON List");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(list["items"][0]["metadata"]["name"], "fits");
    let out = run(&plugin, &[&["queues", "-o", "yaml"][..], &kc].concat());
    let yaml = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        yaml.contains("kind: List") && yaml.contains(&format!("name: {ns}")),
        "{yaml}"
    );
    let out = run(&plugin, &[&["cost", "--queue", &ns][..], &kc].concat());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("QUEUES (cloud spend this month, UTC)"), "{t}");
    assert!(!t.contains("CLOUD POOLS"), "{t}");
    assert!(
        t.lines()
            .any(|l| l.starts_with(&ns) && l.contains(" fits ")),
        "{t}"
    );
    let out = run(
        &plugin,
        &[&["cost", "--since", "7d", "-o", "json"][..], &kc].concat(),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cost JSON");
    assert_eq!(report["since"], "7d");
    assert!(report["totals"]["jobsAccruedUSD"].is_number(), "{report}");
    let out = run(&plugin, &[&["cost", "--since", "a week"][..], &kc].concat());
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad --since is a usage error: {}",
        text(&out)
    );
    let out = run(
        &plugin,
        &[&["cost", "--queue", "no-such-queue"][..], &kc].concat(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = run(&plugin, &[&["jobs", "-n", "kube-public"][..], &kc].concat());
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "No GpuJobs in namespace kube-public."
    );
    let out = run(
        &plugin,
        &["jobs", "--kubeconfig", "/nonexistent/kubeconfig"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = run(&plugin, &[&["jobs", "-o", "xml"][..], &kc].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // `parity` on a mixed cluster: the private node's driver (GPU feature discovery's labels)
    // against a cloud pool's promise, drift flagged.
    let gfd = json!({"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
                     "nvidia.com/cuda.driver.rev": "05", "nvidia.com/cuda.runtime.major": "12",
                     "nvidia.com/cuda.runtime.minor": "2",
                     "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"});
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            &format!("{ns}-n0"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": gfd}})),
        )
        .await
        .expect("label the node");
    create(
        &client,
        "ComputePool",
        "computepools",
        None,
        json!({
            "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
            "metadata": {"name": format!("{ns}-aws")},
            "spec": {"aws": {"region": "us-east-1", "amiId": "ami-12345678",
                             "instanceTypes": ["g6.xlarge"],
                             "environment": {"driverVersion": "550.54.15", "cudaVersion": "12.4"}}},
        }),
    )
    .await;
    let parity = eventually(Duration::from_secs(60), "parity", || async {
        let out = run(&plugin, &[&["parity"][..], &kc].concat());
        let t = text(&out);
        if out.status.success() && t.contains("yes: driver branch 550 here") {
            Ok(t)
        } else {
            Err(t)
        }
    })
    .await;
    let row = |name: &str| -> Vec<String> {
        parity
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {parity}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert!(parity.starts_with("POOL "), "{parity}");
    assert_eq!(
        row(&format!("{ns}-pool"))[1..],
        [
            "private",
            "nodes",
            "535.104.05",
            "12.2",
            "NVIDIA-A100-SXM4-80GB",
            "-",
            "fake",
            "fake://1",
            "-"
        ],
        "{parity}"
    );
    assert_eq!(
        row(&format!("{ns}-aws"))[1..6],
        ["aws", "image", "550.54.15", "12.4", "L4"],
        "{parity}"
    );
    assert!(
        parity.contains("yes: driver branch 550 here, 535 on private nodes; CUDA 12.4 here, 12.2 on private nodes"),
        "{parity}"
    );
    let out = run(&plugin, &[&["parity", "-o", "json"][..], &kc].concat());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("parity JSON");
    let aws = rows
        .as_array()
        .and_then(|r| r.iter().find(|p| p["pool"] == format!("{ns}-aws")))
        .expect("the aws row");
    assert_eq!(aws["type"], "aws");
    assert_eq!(aws["drift"].as_array().map(Vec::len), Some(2), "{aws}");
    assert_eq!(aws["environment"]["driverVersions"], json!(["550.54.15"]));

    // The running job's token verifies with `spillway token verify` against the JWKS the
    // operator serves; the wrong audience is refused with a reason and exit code 1.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let token = eventually(Duration::from_secs(60), "the token Secret", || async {
        let s = secrets
            .get_opt(&spillway_k8s::identity::tokens_secret_name("fits"))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        let t = s
            .data
            .and_then(|d| d.get("fits").cloned())
            .ok_or("no token")?;
        String::from_utf8(t.0).map_err(|e| e.to_string())
    })
    .await;
    let jwks = format!("{issuer}/openid/v1/jwks");
    let verify = |audience: &str| {
        run(
            &bin,
            &[
                "token",
                "verify",
                "--jwks",
                &jwks,
                "--cacert",
                &ca.display().to_string(),
                "--issuer",
                &issuer,
                "--audience",
                audience,
                &token,
            ],
        )
    };
    let ok = verify("spillway");
    assert!(ok.status.success(), "{}", text(&ok));
    let claims: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("the claims as JSON");
    assert_eq!(claims["sub"], format!("system:serviceaccount:{ns}:default"));
    assert_eq!(claims["spillway.io"]["environment"], "private");
    assert_eq!(claims["spillway.io"]["job"], "fits");
    let refused = verify("vault");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused).contains("token rejected: the audience"),
        "{}",
        text(&refused)
    );
    // Without the CA the endpoint's certificate is not trusted.
    let untrusted = run(
        &bin,
        &[
            "token",
            "verify",
            "--jwks",
            &jwks,
            "--issuer",
            &issuer,
            "--audience",
            "spillway",
            &token,
        ],
    );
    assert_eq!(untrusted.status.code(), Some(1));
    assert!(
        text(&untrusted).contains("cannot read the JWKS"),
        "{}",
        text(&untrusted)
    );
    // The same documents as static files, for a bucket.
    let out_dir = dir.join("issuer");
    let published = run(
        &bin,
        &[
            "identity",
            "publish",
            "--out",
            &out_dir.display().to_string(),
            "--issuer",
            &issuer,
            "--namespace",
            &ns,
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    assert!(published.status.success(), "{}", text(&published));
    let file = out_dir.join("openid/v1/jwks");
    let from_file = run(
        &bin,
        &[
            "token",
            "verify",
            "--jwks",
            &file.display().to_string(),
            "--issuer",
            &issuer,
            "--audience",
            "spillway",
            &token,
        ],
    );
    assert!(from_file.status.success(), "{}", text(&from_file));
    let discovery: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join(".well-known/openid-configuration")).expect("discovery"),
    )
    .expect("json");
    assert_eq!(discovery["jwks_uri"], jwks);

    // The traces it could not send are counted, and nothing else suffered.
    let metrics_addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let failed = eventually(
        Duration::from_secs(30),
        "failed span exports counted",
        || async {
            let (_, _, body) = spillway_tests::operator::http_get(metrics_addr, "/metrics")
                .await
                .map_err(|e| e.to_string())?;
            let line = body
                .lines()
                .find(|l| l.starts_with("spillway_telemetry_spans_total{result=\"failed\"}"))
                .map(str::to_string)
                .ok_or_else(|| "no failed exports yet".to_string())?;
            Ok(line)
        },
    )
    .await;
    assert!(!failed.ends_with(" 0"), "{failed}");

    // SIGTERM: a clean stop that releases the leader lease.
    let _ = Command::new("kill")
        .args(["-TERM", &operator.id().to_string()])
        .status();
    let status = operator.wait().expect("wait");
    assert!(status.success(), "operator exit: {status:?}");
}
