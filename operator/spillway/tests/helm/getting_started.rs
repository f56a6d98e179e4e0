//! docs/getting-started.md, run as written: every `sh` block in order, with the real Helm 3 and
//! its kubectl, `kubectl-spillway` on the PATH, against the test API server.
//!
//! What the harness plays (and the guide says so): the GPU node `gpu-node-1` (the fake
//! kubelet), the operator's pods (the operator runs as a local process with the chart's
//! ServiceAccount token and arguments as soon as the chart is installed), EC2 (moto) and the
//! machines that boot in it (`BootingMachines`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use spillway_tests::cluster::TestCluster;
use spillway_tests::helm::{Helm, text};
use spillway_tests::kubelet::{FakeKubelet, FakeNode};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::MotoServer;

use super::install::{LocalOperator, release_objects, serial, service_account_kubeconfig};

/// The `sh` blocks of a Markdown file, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_guide_has_the_steps_the_test_relies_on() {
    let guide = std::fs::read_to_string(repo_root().join("docs/getting-started.md")).unwrap();
    let blocks = sh_blocks(&guide);
    assert!(blocks.len() >= 5, "{blocks:?}");
    assert!(blocks[0].contains("helm install spillway charts/spillway"));
    assert!(blocks.iter().any(|b| b.contains("helm uninstall spillway")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getting_started_runs_as_written() {
    let _turn = serial().await;
    let helm = Helm::v3();
    let cluster = TestCluster::shared().await;
    let client = cluster.client().await.expect("client");
    spillway_tests::operator::clean_up_earlier_tests(&client, &["helm"]).await;
    let moto = MotoServer::shared().await;
    // aws-pool.yaml names an instance profile; moto refuses launches with one it does not know.
    moto.create_instance_profile("spillway-gpu-node")
        .expect("instance profile");
    let kubelet = Arc::new(FakeKubelet::start(client.clone()));
    kubelet
        .register(FakeNode::gpu("gpu-node-1", 8).model("A100"))
        .await
        .expect("gpu-node-1");
    // The chart's default aws.clusterName is `spillway`.
    let machines = BootingMachines::start(
        moto.ec2_client().await,
        kubelet.clone(),
        "spillway".into(),
        Some(Duration::from_secs(2)),
    );

    // `kubectl-spillway` beside the test's kubectl and helm.
    let dir = std::env::temp_dir().join(spillway_tests::unique_name("getting-started"));
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_spillway"),
        bin_dir.join("kubectl-spillway"),
    )
    .unwrap();
    let path = format!(
        "{}:{}:{}",
        helm.dir.display(),
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // The operator, as soon as the chart has made its ServiceAccount and Deployment.
    let operator: Arc<Mutex<Option<LocalOperator>>> = Arc::default();
    let mut started = {
        let operator = operator.clone();
        let client = client.clone();
        let dir = dir.clone();
        tokio::spawn(async move {
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "spillway-system");
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), "spillway-system");
            loop {
                if matches!(sas.get_opt("spillway").await, Ok(Some(_)))
                    && matches!(deployments.get_opt("spillway").await, Ok(Some(_)))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let kc =
                service_account_kubeconfig(cluster, &client, "spillway-system", "spillway", &dir)
                    .await;
            let op = LocalOperator::start(&client, "spillway-system", "spillway", &kc, &dir).await;
            *operator.lock().unwrap() = Some(op);
        })
    };

    let guide = std::fs::read_to_string(repo_root().join("docs/getting-started.md")).unwrap();
    let mut transcript = String::new();
    for (i, block) in sh_blocks(&guide).into_iter().enumerate() {
        let env_path = path.clone();
        let kubeconfig = cluster.kubeconfig.clone();
        let home = dir.join("home");
        let script = block.clone();
        let out = tokio::task::spawn_blocking(move || {
            let mut cmd = Command::new("bash");
            cmd.args(["-euo", "pipefail", "-c", &script])
                .current_dir(repo_root())
                .env("PATH", env_path)
                .env("KUBECONFIG", kubeconfig);
            for (var, sub) in [
                ("HELM_CACHE_HOME", "cache"),
                ("HELM_CONFIG_HOME", "config"),
                ("HELM_DATA_HOME", "data"),
            ] {
                cmd.env(var, home.join(sub));
            }
            cmd.output().expect("bash")
        })
        .await
        .unwrap();
        let t = text(&out);
        transcript.push_str(&format!("$ {}{t}\n", block));
        if !out.status.success() {
            let log = operator
                .lock()
                .unwrap()
                .as_ref()
                .map(|o| o.log_tail())
                .unwrap_or_else(|| "(operator not started)".into());
            let jobs = Command::new(helm.kubectl())
                .args(["get", "gpujobs,gpuqueues,computepools", "-A", "-o", "yaml"])
                .env("KUBECONFIG", &cluster.kubeconfig)
                .output()
                .map(|o| text(&o))
                .unwrap_or_default();
            panic!(
                "block {i} of docs/getting-started.md failed:\n{block}\n{t}\n--- transcript so far ---\n{transcript}\n--- operator log ---\n{log}\n--- objects ---\n{jobs}"
            );
        }
        if i == 0 {
            // The operator runs before anything is submitted.
            tokio::time::timeout(Duration::from_secs(60), &mut started)
                .await
                .expect("the operator started after the install")
                .expect("operator task");
            transcript
                .push_str("# (the test starts the operator with the chart's ServiceAccount)\n");
        }
    }
    eprintln!("--- docs/getting-started.md as run ---\n{transcript}");

    // What the guide says happens, happened.
    for want in [
        "StartPrivate",
        "FitsPrivate",
        "StartCloud",
        "NoPrivateCapacity",
        "p4d.24xlarge",
        "team-defaults/big-gangs-wait-longer: applied",
        "TOTAL   jobs $",
        "cohort-analysis",
        "release \"spillway\" uninstalled",
    ] {
        assert!(transcript.contains(want), "{want:?} not in:\n{transcript}");
    }
    let op = operator.lock().unwrap().take().expect("operator");
    op.stop();
    drop(machines);
    let left = release_objects(&client, "spillway").await;
    assert!(left.is_empty(), "left after uninstall: {left:?}");
    let _ = kubelet.remove("gpu-node-1").await;
    let _ = std::fs::remove_dir_all(&dir);
}
