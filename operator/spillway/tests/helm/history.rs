//! Indicators, chargeback and replay end to end, with the chart's operator (its arguments and
//! least-privilege Role) bursting to moto: three jobs run (one private, two in the cloud), the
//! queue's `status.indicators` count them and survive a restart of the operator (the ledger),
//! `kubectl spillway report` (table, CSV, JSON, HTML in Chromium) and `export-trace` tell them,
//! `spillway simulate` replays the export to the same split and about the same cost, and every
//! expression of the chart's Grafana dashboard and PrometheusRule is evaluated by a real
//! Prometheus that recorded the restarted operator's series while it ran a fourth job and a
//! fifth whose GPU use a stand-in for dcgm-exporter reports through a second Prometheus (the
//! rules checked by promtool first).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};
use spillway_api::job::JobPhase;
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_tests::cluster::TestCluster;
use spillway_tests::helm::{Helm, chart_dir, text};
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::MotoServer;
use spillway_tests::operator::eventually;
use spillway_tests::prometheus::{Prometheus, metric_names, promtool};
use spillway_tests::workload::{self, WAIT};

use super::install::{
    LocalOperator, create, release_objects, serial, service_account_kubeconfig, wait_phase,
};

/// How long each of the three jobs runs: past the 60 s an instance is billed at least, so the
/// replay's cost is comparable.
const RUN_SECONDS: u32 = 62;

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("run spillway")
}

/// The queue's indicators, once `check` holds of them.
async fn indicators(client: &kube::Client, queue: &str, check: impl Fn(&Value) -> bool) -> Value {
    let queues: Api<GpuQueue> = Api::all(client.clone());
    eventually(WAIT, "the queue's indicators", || async {
        let q = queues.get(queue).await.map_err(|e| e.to_string())?;
        let i = serde_json::to_value(q.status.and_then(|s| s.indicators)).unwrap_or_default();
        if check(&i) { Ok(i) } else { Err(i.to_string()) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indicators_chargeback_and_replay_tell_what_ran() {
    let _turn = serial().await;
    let helm = Helm::v3();
    let cluster = TestCluster::shared().await;
    let client = cluster.client().await.expect("client");
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let ns = cluster.namespace(&client, "history").await.expect("ns");
    let release = "hist".to_string();
    let fullname = format!("{release}-spillway");
    let dir = std::env::temp_dir().join(spillway_tests::unique_name("history"));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = chart_dir().display().to_string();
    // GPU use, as dcgm-exporter would report it, in a Prometheus the chart's operator reads.
    let dcgm = spillway_tests::dcgm::DcgmExporter::start()
        .await
        .expect("dcgm-exporter stand-in");
    let gpu_prometheus =
        Prometheus::start_with(&[&dcgm.addr.to_string()], None).expect("Prometheus of GPU use");
    let install = helm.run(&[
        "install",
        &release,
        &chart,
        "--namespace",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        &format!("aws.clusterName={ns}"),
        "--set",
        &format!("utilization.prometheusUrl=http://{}", gpu_prometheus.addr),
        "--set",
        "utilization.interval=5",
        "--set",
        "resync=5",
    ]);
    assert!(install.status.success(), "helm install: {}", text(&install));
    let sa_kubeconfig = service_account_kubeconfig(cluster, &client, &ns, &fullname, &dir).await;
    spillway_tests::operator::clean_up_earlier_tests(&client, &["history"]).await;
    let mut op = LocalOperator::start(&client, &ns, &fullname, &sa_kubeconfig, &dir).await;

    // The chart's rules, checked by promtool, and a Prometheus scraping this operator.
    let rendered = helm.run(&[
        "template",
        &release,
        &chart,
        "--namespace",
        &ns,
        "--kube-version",
        spillway_tests::cluster::CURRENT,
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.grafanaDashboard.enabled=true",
    ]);
    assert!(rendered.status.success(), "{}", text(&rendered));
    let objects: Vec<Value> =
        spillway_api::manifests::documents(&String::from_utf8_lossy(&rendered.stdout))
            .into_iter()
            .filter_map(|d| serde_saphyr::from_str::<Option<Value>>(d.text).expect("YAML"))
            .collect();
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("the PrometheusRule");
    let rules_file = dir.join("rules.yaml");
    std::fs::write(
        &rules_file,
        serde_json::to_string(&rule["spec"]).expect("rules"),
    )
    .unwrap();
    let check = Command::new(promtool().expect("promtool"))
        .args(["check", "rules"])
        .arg(&rules_file)
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "promtool check rules: {}",
        text(&check)
    );
    let dashboard: Value = serde_json::from_str(
        objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1"
            })
            .expect("the dashboard ConfigMap")["data"]["spillway.json"]
            .as_str()
            .expect("the dashboard JSON"),
    )
    .expect("the dashboard is JSON");

    // One private GPU, a queue with a budget that bursts after 2 s to g6.xlarge in moto.
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let ami = ec2.describe_images().send().await.expect("images").images()[0]
        .image_id()
        .unwrap()
        .to_string();
    let kubelet = Arc::new(FakeKubelet::start(client.clone()));
    let (private, aws) = (format!("{ns}-private"), format!("{ns}-aws"));
    kubelet
        .register(FakeNode::gpu(format!("{ns}-gpu-0"), 1).label("spillway.test/pool", &private))
        .await
        .expect("node");
    let machines = BootingMachines::start(
        ec2.clone(),
        kubelet.clone(),
        ns.clone(),
        Some(Duration::from_secs(1)),
    );
    let manifests = [
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": private},
               "spec": {"private": {"nodeSelector": {"spillway.test/pool": private}}}}),
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool", "metadata": {"name": aws},
               "spec": {"aws": {"region": "us-east-1", "amiId": ami, "instanceTypes": ["g6.xlarge"],
                                "capacityTypes": ["on-demand"]}, "idleTimeout": "3s"}}),
        json!({"apiVersion": "spillway.io/v1alpha1", "kind": "GpuQueue", "metadata": {"name": ns},
               "spec": {"namespaces": [ns], "burst": {"enabled": true, "maxWait": "2s", "pools": [aws]},
                        "budget": {"monthlyUSD": 100.0}}}),
    ];
    create(
        Api::<ComputePool>::all(client.clone()),
        manifests[0].clone(),
    )
    .await;
    create(
        Api::<ComputePool>::all(client.clone()),
        manifests[1].clone(),
    )
    .await;
    create(Api::<GpuQueue>::all(client.clone()), manifests[2].clone()).await;
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), &ns);
    for name in ["a", "b", "c"] {
        workload::submit(&jobs, name, &ns, json!({}), Some(RUN_SECONDS)).await;
    }
    for name in ["a", "b", "c"] {
        wait_phase(&jobs, name, JobPhase::Succeeded, &op).await;
    }
    let done = jobs.list(&ListParams::default()).await.unwrap().items;
    let cloud: Vec<&GpuJob> = done
        .iter()
        .filter(|j| {
            j.status.as_ref().and_then(|s| s.environment) == Some(spillway_api::Environment::Cloud)
        })
        .collect();
    assert_eq!(cloud.len(), 2, "one private, two burst: {done:?}");

    // The queue's indicators: three first starts, two of them in the cloud, three finished runs.
    let i = indicators(&client, &ns, |i| {
        i["last24h"]["timeToStartSeconds"]["count"] == 3
            && i["last24h"]["costPerRunUSD"]["count"] == 3
    })
    .await;
    let day = &i["last24h"];
    assert_eq!(day["burstShare"], 0.667, "{i}");
    assert_eq!(
        day["timeToStartSeconds"]["byEnvironment"]["cloud"]["count"], 2,
        "{i}"
    );
    for env in ["private", "cloud"] {
        let h = day["gpuHours"][env].as_f64().unwrap_or(0.0);
        assert!(h > 0.0, "{env} GPU-hours: {i}");
    }

    // A restart: the new operator takes the ledger up, so a fourth job adds to the three.
    op.stop();
    op = LocalOperator::start(&client, &ns, &fullname, &sa_kubeconfig, &dir).await;
    // From here on a Prometheus records this operator's series.
    let prometheus = Prometheus::start(&format!("127.0.0.1:{}", op.metrics_port), &rules_file)
        .expect("Prometheus");
    workload::submit(&jobs, "d", &ns, json!({}), Some(2)).await;
    wait_phase(&jobs, "d", JobPhase::Succeeded, &op).await;
    indicators(&client, &ns, |i| {
        i["last24h"]["timeToStartSeconds"]["count"] == 4
            && i["last30d"]["costPerRunUSD"]["count"] == 4
    })
    .await;
    // A fifth job, running, whose GPU is 40 % busy: its utilization series for the dashboard
    // and the alert (deleted before the chargeback below).
    workload::submit(&jobs, "e", &ns, json!({}), None).await;
    wait_phase(&jobs, "e", JobPhase::Running, &op).await;
    dcgm.set(vec![spillway_tests::dcgm::GpuUse {
        namespace: ns.clone(),
        pod: "e-0-0".into(),
        gpu: 0,
        util_percent: 93.0,
        engine_active: Some(0.4),
    }]);
    eventually(WAIT, "e's utilization", || async {
        let u = jobs
            .get("e")
            .await
            .map_err(|e| e.to_string())?
            .status
            .and_then(|s| s.utilization);
        match &u {
            Some(u) if (u.gpu_percent - 40.0).abs() < 1.0 => Ok(()),
            _ => Err(format!("{u:?}\n{}", op.log_tail())),
        }
    })
    .await;

    // Every expression of the dashboard returns series of this run; every alert evaluates and
    // reads only series this run has.
    prometheus
        .wait_scraped(5, WAIT)
        .await
        .expect("Prometheus scraped the operator");
    let mut exprs = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().expect("expr");
            exprs.push((p["title"].as_str().unwrap_or("").to_string(), e.to_string()));
        }
    }
    assert!(exprs.len() >= 14, "{exprs:?}");
    // (GPU-seconds are accrued every 10 s: a series may take that long to appear.)
    for (title, e) in &exprs {
        let expr = e.replace("$queue", ".*").replace("$__rate_interval", "1m");
        eventually(WAIT, &format!("{title}: {expr}"), || async {
            match prometheus.query(&expr).await {
                Ok(r) if !r.is_empty() => Ok(()),
                Ok(_) => Err(format!("nothing\n{}", prometheus.log_tail())),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }
    let alerts = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    assert!(alerts.len() >= 4);
    for a in alerts {
        let expr = a["expr"].as_str().expect("expr");
        prometheus
            .query(expr)
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", a["alert"]));
        for name in metric_names(expr) {
            let series = prometheus
                .query(&format!("{{__name__=\"{name}\"}}"))
                .await
                .expect("query");
            assert!(!series.is_empty(), "{}: no {name} in this run", a["alert"]);
        }
    }
    eventually(WAIT, "every rule evaluated without error", || async {
        let rules = prometheus.rules().await.map_err(|e| e.to_string())?;
        let healthy = rules.iter().filter(|r| r["health"] == "ok").count();
        if rules.len() == alerts.len() && healthy == rules.len() {
            Ok(())
        } else {
            Err(format!("{rules:?}"))
        }
    })
    .await;

    jobs.delete("e", &DeleteParams::default())
        .await
        .expect("delete e");
    eventually(WAIT, "e gone", || async {
        match jobs.get_opt("e").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Chargeback.
    let kc = ["--kubeconfig", kubeconfig.as_str()];
    let out = spillway(
        &[
            &["report", "--since", "1h", "-n", &ns, "-o", "json"][..],
            &kc,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let row = &report["namespaces"][0];
    assert_eq!(row["name"], ns.as_str(), "{report}");
    assert_eq!(
        (row["jobs"].as_u64(), row["finished"].as_u64()),
        (Some(4), Some(4)),
        "{report}"
    );
    assert_eq!(row["burstShare"], 0.5, "{report}");
    let recorded = report["recorded"]
        .as_array()
        .and_then(|r| r.iter().find(|q| q["queue"] == ns.as_str()))
        .expect("the operator's record of the queue");
    // Five first starts: e's too, though it is gone.
    assert_eq!(recorded["last30d"]["timeToStartSeconds"]["count"], 5);
    let out = spillway(
        &[
            &["report", "--since", "1h", "-n", &ns, "-o", "csv"][..],
            &kc,
        ]
        .concat(),
    );
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(csv.contains(&format!("namespace,{ns},4,4,")), "{csv}");
    let table = spillway(&[&["report", "--since", "1h", "-n", &ns][..], &kc].concat());
    assert!(
        text(&table).contains("RECORDED BY THE OPERATOR"),
        "{}",
        text(&table)
    );
    let html = dir.join("report");
    let out = spillway(
        &[
            &[
                "report",
                "--since",
                "5m",
                "-n",
                &ns,
                "--html",
                html.to_str().unwrap(),
            ][..],
            &kc,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    for chart in ["gpu-hours.svg", "cost.svg", "time-to-start.svg"] {
        assert!(html.join(chart).exists(), "{chart}");
    }
    spillway_tests::browser::check_in_browser(&html);

    // Replay: the export under the same manifests gives the same split and about the cost.
    let out = spillway(&[&["export-trace", "--since", "1h", "-n", &ns][..], &kc].concat());
    assert!(out.status.success(), "{}", text(&out));
    let trace = dir.join("last-hour.csv");
    std::fs::write(&trace, &out.stdout).unwrap();
    let config = dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    let yaml: Vec<String> = manifests
        .iter()
        .map(|m| serde_saphyr::to_string(m).expect("YAML"))
        .collect();
    std::fs::write(config.join("setup.yaml"), yaml.join("---\n")).unwrap();
    let out = spillway(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--private-gpus",
        "1x1",
        "--cloud-boot-delay",
        "2",
        "--strategy",
        "spillway",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let replay: Value = serde_json::from_slice::<Value>(&out.stdout).expect("JSON")[0].clone();
    assert_eq!(
        replay["jobs"],
        4,
        "{replay}\n{}",
        String::from_utf8_lossy(&std::fs::read(&trace).unwrap())
    );
    assert_eq!(replay["burst_jobs"], 2, "the recorded split: {replay}");
    let recorded_cost = Api::<GpuQueue>::all(client.clone())
        .get(&ns)
        .await
        .unwrap()
        .status
        .and_then(|s| s.spend)
        .map(|s| s.this_month_usd)
        .unwrap_or(0.0);
    let replayed = replay["cloud_cost_usd"].as_f64().unwrap_or(0.0);
    assert!(recorded_cost > 0.0);
    let ratio = replayed / recorded_cost;
    eprintln!(
        "replay: cloud ${replayed} against the recorded ${recorded_cost} ({ratio:.2}x), {} cloud jobs",
        replay["burst_jobs"]
    );
    assert!(
        (0.75..=1.25).contains(&ratio),
        "the replay's cloud cost ${replayed} against the recorded ${recorded_cost} ({ratio:.2}x)"
    );

    // Clean up: jobs, the release (its ledgers kept, then deleted), the nodes.
    jobs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    op.stop();
    drop(machines);
    let uninstall = helm.run(&[
        "uninstall",
        &release,
        "--namespace",
        &ns,
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(uninstall.status.success(), "{}", text(&uninstall));
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), &ns);
    for cm in ["spend", "indicators"] {
        let _ = configmaps
            .delete(&format!("{fullname}-{cm}"), &DeleteParams::default())
            .await;
    }
    let _ = kubelet.remove(&format!("{ns}-gpu-0")).await;
    let left: HashMap<String, ()> = release_objects(&client, &release)
        .await
        .into_iter()
        .map(|o| (o, ()))
        .collect();
    assert!(
        left.is_empty() || left.keys().all(|k| k.starts_with("ConfigMap")),
        "{left:?}"
    );
}
