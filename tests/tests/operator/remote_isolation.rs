//! Teams isolated from each other in another cluster: two home namespaces' jobs share the
//! pool's namespace there (with the same job name), and team A's jobs try to reach team B's
//! token and the worker's credential, and fail, while each job's own token works.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use spillway_api::GpuJob;
use spillway_api::job::JobPhase;
use spillway_tests::cluster::TestCluster;
use spillway_tests::operator::{RunningOperator, eventually, serial, test_settings};
use spillway_tests::workload::{self, WAIT};

use crate::remote::Worker;
use crate::world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_there_reaches_neither_another_teams_token_nor_the_worker_credential() {
    let _turn = serial().await;
    let w = World::new("op-iso").await;
    let cluster = TestCluster::shared().await;
    let team_b = cluster
        .namespace(&w.client, "op-iso-b")
        .await
        .expect("team B's namespace");
    let dc = Worker::install(&w, "iso", 1.0, 3, 8).await;
    let queue = format!("{}-burst", w.ns);
    w.create_queue(
        &queue,
        json!({"namespaces": [w.ns, team_b], "burst": {"enabled": true, "maxWait": "0s", "pools": [dc.pool]}}),
    )
    .await;
    let identity = spillway_tests::operator::test_identity(&w.ns, 600, 3600).expect("identity");
    let (jwks_addr, issuer) = (identity.addr.expect("addr"), identity.issuer.clone());
    let mut settings = test_settings("op-iso");
    settings.identity = Some(identity);
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");

    // The same job name in two home namespaces: both run there, each with its own pods.
    let jobs_b: Api<GpuJob> = Api::namespaced(w.client.clone(), &team_b);
    workload::submit(&jobs_b, "train", &queue, json!({"gpusPerReplica": 8}), None).await;
    w.submit_to("train", &queue, json!({"gpusPerReplica": 8}), None)
        .await;
    let b = workload::wait_phase(&jobs_b, "train", JobPhase::Running).await;
    let a = w.wait_phase("train", JobPhase::Running).await;
    let pods_a = dc.wait_running(&a, 1).await;
    let pods_b = dc.wait_running(&b, 1).await;
    assert_ne!(pods_a[0].name_any(), pods_b[0].name_any());

    // Each job's own token: in a Secret of its own there, verified by the home JWKS, naming
    // its own home namespace.
    let (code, _, jwks) = spillway_tests::operator::http_get(jwks_addr, "/openid/v1/jwks")
        .await
        .expect("JWKS");
    assert_eq!(code, 200);
    let verifier =
        spillway_identity::Verifier::new(jwks.as_bytes(), &issuer, "spillway").expect("verifier");
    for (job, ns) in [(&a, &w.ns), (&b, &team_b)] {
        let token = eventually(WAIT, "the job's token there", || async {
            dc.token_of(job).await
        })
        .await;
        let claims = verifier
            .verify(&token, spillway_k8s::clock::now())
            .expect("verifies");
        assert!(
            claims
                .sub
                .starts_with(&format!("system:serviceaccount:{ns}:")),
            "{}",
            claims.sub
        );
    }
    // Its pod mounts only its own Secret, runs as that namespace's default account there and
    // carries no token of that cluster.
    let spec = pods_a[0].spec.clone().expect("spec");
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert!(
        spec.service_account_name
            .as_deref()
            .is_none_or(|s| s == "default")
    );
    let secrets: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
        .collect();
    assert_eq!(
        secrets,
        [format!(
            "spillway-token-{}",
            a.metadata.uid.clone().unwrap_or_default()
        )]
    );

    // Team A asks for team B's token Secret, the worker's token, or the worker's account: a
    // job whose template names a Secret never goes there (it waits, saying why), and one naming
    // the worker's ServiceAccount runs there as the namespace's default account.
    let b_secret = format!(
        "spillway-token-{}",
        b.metadata.uid.clone().unwrap_or_default()
    );
    let worker_token = format!("{}-spillway-worker-token", dc.ns);
    for (name, volume) in [("steal-b", &b_secret), ("steal-worker", &worker_token)] {
        w.submit_to(
            name,
            &queue,
            json!({"gpusPerReplica": 8, "template": {"spec": {
                "containers": [{"name": "t", "image": "x",
                    "volumeMounts": [{"name": "loot", "mountPath": "/loot"}]}],
                "volumes": [{"name": "loot", "secret": {"secretName": volume}}]}}}),
            None,
        )
        .await;
        let message = eventually(WAIT, &format!("{name} to wait saying why"), || async {
            let j = w.job(name).await;
            let d = j.status.and_then(|s| s.decision).ok_or("no decision")?;
            let m = d.message.unwrap_or_default();
            if m.contains("cannot run in another cluster") {
                Ok(m)
            } else {
                Err(m)
            }
        })
        .await;
        assert!(message.contains("a Secret volume"), "{message}");
        let j = w.job(name).await;
        assert!(dc.pods_of(&j).await.is_empty(), "{name} went there");
    }
    // The worker chart's ServiceAccount (the release is named after the jobs' namespace).
    let worker_account = format!("{}-spillway", dc.ns);
    w.submit_to(
        "impostor",
        &queue,
        json!({"gpusPerReplica": 8, "template": {"spec": {
            "serviceAccountName": worker_account,
            "containers": [{"name": "t", "image": "x"}]}}}),
        None,
    )
    .await;
    let impostor = w.wait_phase("impostor", JobPhase::Running).await;
    let there = dc.wait_running(&impostor, 1).await;
    let spec = there[0].spec.clone().expect("spec");
    assert!(
        spec.service_account_name
            .as_deref()
            .is_none_or(|s| s == "default"),
        "{spec:?}"
    );
    assert_eq!(spec.automount_service_account_token, Some(false));
    // The worker's account is not in the jobs' namespace at all: no pod there can run as it.
    let as_worker: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "as-worker"},
        "spec": {"serviceAccountName": worker_account,
                 "containers": [{"name": "c", "image": "x"}]},
    }))
    .expect("pod");
    let refused = Api::<Pod>::namespaced(dc.admin.clone(), &dc.ns)
        .create(&PostParams::default(), &as_worker)
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("serviceaccount")),
        "{refused:?}"
    );
    assert_ne!(dc.system, dc.ns);

    // The pool is deleted while its jobs run there: the operator keeps watching that place
    // until the pods it made there are gone, and deletes them; the jobs are planned again.
    Api::<spillway_api::ComputePool>::all(w.client.clone())
        .delete(&dc.pool, &DeleteParams::default())
        .await
        .expect("delete the pool");
    eventually(WAIT, "the pods there deleted after the pool", || async {
        let left = Api::<Pod>::namespaced(dc.admin.clone(), &dc.ns)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;
    for name in ["train", "steal-b", "steal-worker", "impostor"] {
        let _ = w.jobs().delete(name, &DeleteParams::default()).await;
    }
    let _ = jobs_b.delete("train", &DeleteParams::default()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    op.stop().await.expect("clean stop");
    dc.remove(&w).await;
}
