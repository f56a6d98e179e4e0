//! One identity on both sides: a private job and a burst job of the same queue both get a
//! token from the operator's issuer; both verify against the JWKS the running operator serves;
//! issuer and subject are the same and only the environment differs.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_identity::Verifier;
use spillway_tests::operator::{
    RunningOperator, eventually, http_get, serial, test_identity, test_settings,
};
use spillway_tests::workload::WAIT;

use crate::world::World;

async fn token(w: &World, job: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), &w.ns);
    eventually(WAIT, &format!("{job}'s token"), || async {
        let s = secrets
            .get_opt(&spillway_k8s::identity::tokens_secret_name(job))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        let t = s
            .data
            .and_then(|d| d.get(job).cloned())
            .ok_or("no token key")?;
        String::from_utf8(t.0).map_err(|e| e.to_string())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_and_burst_pods_carry_tokens_of_one_issuer() {
    let _turn = serial().await;
    let w = World::new("aws-identity", json!({})).await;
    let _machines = w.boot_machines(Some(Duration::from_secs(1)));
    let identity = test_identity(&w.ns, 600, 7 * 24 * 3600).expect("identity settings");
    let addr = identity.addr.expect("an address");
    let issuer = identity.issuer.clone();
    let mut settings = test_settings("aws-identity");
    settings.cloud = Some(w.cloud());
    settings.identity = Some(identity);
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    w.fill_private_gpu().await; // "blocker" runs on the private node
    w.submit("burst", json!({}), None).await;
    let burst = w.wait_phase("burst", JobPhase::Running).await;
    assert_eq!(
        burst.status.and_then(|s| s.environment),
        Some(spillway_api::Environment::Cloud)
    );

    // The issuer's documents, from the running operator.
    let (code, headers, discovery) = http_get(addr, "/.well-known/openid-configuration")
        .await
        .expect("discovery");
    assert_eq!(code, 200, "{discovery}");
    assert!(
        headers
            .to_lowercase()
            .contains("cache-control: public, max-age=300"),
        "{headers}"
    );
    let discovery: serde_json::Value = serde_json::from_str(&discovery).expect("json");
    assert_eq!(discovery["issuer"], issuer);
    assert_eq!(discovery["jwks_uri"], format!("{issuer}/openid/v1/jwks"));
    let (code, _, jwks) = http_get(addr, "/openid/v1/jwks").await.expect("jwks");
    assert_eq!(code, 200, "{jwks}");

    let verifier = Verifier::new(jwks.as_bytes(), &issuer, "spillway").expect("verifier");
    let now = spillway_k8s::clock::now();
    let private = verifier
        .verify(&token(&w, "blocker").await, now)
        .expect("the private job's token verifies");
    let cloud = verifier
        .verify(&token(&w, "burst").await, now)
        .expect("the burst job's token verifies");
    assert_eq!(private.iss, cloud.iss);
    assert_eq!(private.sub, cloud.sub);
    assert_eq!(
        private.sub,
        format!("system:serviceaccount:{}:default", w.ns)
    );
    assert_eq!(private.spillway.environment, "private");
    assert_eq!(cloud.spillway.environment, "cloud");
    assert_eq!(cloud.spillway.pool, w.aws_pool);

    // Both pods mount the token at the same path, with the same variable.
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    for job in ["blocker", "burst"] {
        let list = pods
            .list(&ListParams::default().labels(&format!("spillway.io/job={job}")))
            .await
            .expect("pods");
        let spec = list.items[0].spec.clone().expect("spec");
        let c = &spec.containers[0];
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == "/var/run/secrets/spillway.io/identity"
                    && m.read_only == Some(true))
        );
        assert!(
            c.env
                .iter()
                .flatten()
                .any(|e| e.name == "SPILLWAY_IDENTITY_TOKEN_FILE")
        );
        let secret = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "spillway-identity")
            .and_then(|v| v.secret.clone())
            .expect("the identity volume");
        assert_eq!(
            secret.secret_name,
            Some(spillway_k8s::identity::tokens_secret_name(job))
        );
        assert_eq!(secret.items.unwrap_or_default()[0].key, job);
    }
    op.stop().await.expect("clean stop");
}
