//! The issuer's key rotation through the running operator: a new key is published before it
//! signs, the JWKS holds both keys during the overlap, and tokens of both verify.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;
use spillway_api::job::JobPhase;
use spillway_identity::Verifier;
use spillway_tests::operator::{
    RunningOperator, eventually, http_get, serial, test_identity, test_settings,
};

use crate::world::World;

/// (token, kid, when read) of a job's token in the namespace's tokens Secret.
async fn token(w: &World, job: &str) -> Result<(String, String, spillway_core::Time), String> {
    let s = Api::<Secret>::namespaced(w.client.clone(), &w.ns)
        .get_opt(&spillway_k8s::identity::tokens_secret_name(job))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no tokens Secret yet")?;
    let t = s
        .data
        .and_then(|d| d.get(job).cloned())
        .ok_or(format!("no {job} key"))?;
    let token = String::from_utf8(t.0).map_err(|e| e.to_string())?;
    Ok((token.clone(), kid_of(&token)?, spillway_k8s::clock::now()))
}

/// The `kid` in a JWT's header.
fn kid_of(token: &str) -> Result<String, String> {
    use base64::Engine;
    let header = token.split('.').next().unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    v["kid"]
        .as_str()
        .map(str::to_string)
        .ok_or(format!("no kid in {v}"))
}

async fn kids(addr: std::net::SocketAddr) -> Result<(Vec<String>, String), String> {
    let (code, _, body) = http_get(addr, "/openid/v1/jwks")
        .await
        .map_err(|e| e.to_string())?;
    if code != 200 {
        return Err(format!("HTTP {code}: {body}"));
    }
    let doc: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let kids = doc["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| k["kid"].as_str().map(str::to_string))
        .collect();
    Ok((kids, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_published_before_it_signs_and_tokens_of_both_verify() {
    let _turn = serial().await;
    let w = World::new("op-rotate").await;
    w.nodes(1, 8, None).await;
    // Tokens live 10 s (refreshed every 8 s); a key signs for 16 s, so the next one is made
    // 6 s after the first and signs from 16 s.
    let identity = test_identity(&w.ns, 10, 16).expect("identity settings");
    let (addr, issuer) = (identity.addr.expect("addr"), identity.issuer.clone());
    let mut settings = test_settings("op-rotate");
    settings.identity = Some(identity);
    let op = RunningOperator::start_with(w.client.clone(), None, settings)
        .await
        .expect("operator");
    w.submit("long", json!({}), None).await;
    w.wait_phase("long", JobPhase::Running).await;
    let wait = Duration::from_secs(60);
    let first = eventually(wait, "a first token", || token(&w, "long")).await;
    let (both, jwks) = eventually(wait, "two keys in the JWKS", || async {
        let (kids, body) = kids(addr).await?;
        if kids.len() == 2 {
            Ok((kids, body))
        } else {
            Err(format!("{kids:?}"))
        }
    })
    .await;
    assert!(
        both.contains(&first.1),
        "the signing key is published: {both:?}"
    );
    let next_kid = both
        .iter()
        .find(|k| **k != first.1)
        .cloned()
        .expect("a second key");
    // Published before it signs: the token still names the first key.
    let still = token(&w, "long").await.expect("token");
    assert_eq!(still.1, first.1, "the new key does not sign yet");
    let second = eventually(wait, "a token signed by the new key", || async {
        let t = token(&w, "long").await?;
        if t.1 == next_kid {
            Ok(t)
        } else {
            Err(format!("signed by {}", t.1))
        }
    })
    .await;
    let (now_kids, now_jwks) = kids(addr).await.expect("jwks");
    assert!(
        now_kids.contains(&first.1) && now_kids.contains(&second.1),
        "both keys stay published during the overlap: {now_kids:?}"
    );
    for doc in [&jwks, &now_jwks] {
        let v = Verifier::new(doc.as_bytes(), &issuer, "spillway").expect("verifier");
        if doc == &jwks {
            v.verify(&first.0, first.2)
                .expect("the first key's token verifies");
        } else {
            v.verify(&first.0, first.2)
                .expect("the first key's token still verifies");
            v.verify(&second.0, second.2)
                .expect("the new key's token verifies");
        }
    }
    op.stop().await.expect("clean stop");
}
