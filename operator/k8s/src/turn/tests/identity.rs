//! Identity: the issuer's keys, a token in every running job's pods, refresh and rotation.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use serde_json::json;
use spillway_core::{Duration, Time};
use spillway_identity::{Algorithm, KeyRing, Schedule, Verifier};

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::identity::{IdentityConfig, ring_of};
use crate::turn::{Turn, TurnSettings};

/// The tokens Secret of a job named `train` (its name's shard).
const TRAIN_SECRET: &str = "spillway-tokens-9";

const ISSUER: &str = "https://spillway-identity.spillway-system.svc";

fn config() -> IdentityConfig {
    IdentityConfig {
        issuer: ISSUER.into(),
        audiences: vec!["spillway".into(), "sts.amazonaws.com".into()],
        schedule: Schedule {
            token_lifetime: Duration::from_secs(3600),
            rotation: Duration::from_secs(7 * 24 * 3600),
            algorithm: Algorithm::ES256,
        },
        namespace: "spillway-system".into(),
        secret: "spillway-identity-keys".into(),
        addr: None,
        tls: None,
    }
}

fn with_identity() -> Loop {
    Loop::with(TurnSettings {
        identity: Some(config()),
        ..TurnSettings::default()
    })
}

/// The Secrets a turn writes, by name.
fn secrets(t: &Turn) -> Vec<Secret> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplySecret(s) => Some((*s.0).clone()),
            _ => None,
        })
        .collect()
}

fn secret(t: &Turn, name: &str) -> Option<Secret> {
    secrets(t)
        .into_iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
}

/// The token of job `train` in a namespace's tokens Secret.
fn token_of(s: &Secret) -> String {
    String::from_utf8(s.data.as_ref().unwrap()["train"].0.clone()).unwrap()
}

fn pods(t: &Turn) -> Vec<Pod> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { pod, .. } => Some((**pod).clone()),
            _ => None,
        })
        .collect()
}

fn verifier(ring: &KeyRing, audience: &str) -> Verifier {
    let doc = serde_json::to_vec(&spillway_identity::documents::jwks(ring).unwrap()).unwrap();
    Verifier::new(&doc, ISSUER, audience).unwrap()
}

/// A cluster whose issuer's keys exist (written by an earlier turn at `at`).
fn cluster_with_keys(at: Time) -> (crate::world::Inputs, KeyRing) {
    let mut l = with_identity();
    let t = l.turn(&cluster(), None, at);
    let keys = secret(&t, "spillway-identity-keys").expect("the first turn makes keys");
    let ring = ring_of(&keys).unwrap();
    let mut i = cluster();
    i.identity_keys = Some(Arc::new(keys));
    (i, ring)
}

#[test]
fn an_empty_keys_secret_made_by_the_chart_is_filled_without_touching_its_labels() {
    let mut i = cluster();
    i.identity_keys = Some(Arc::new(Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("spillway-identity-keys".into()),
            namespace: Some("spillway-system".into()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "Helm".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        ..Secret::default()
    }));
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let keys = secret(&t, "spillway-identity-keys").expect("keys written into the empty Secret");
    assert_eq!(ring_of(&keys).unwrap().keys.len(), 1);
    let labels = keys.metadata.labels.unwrap_or_default();
    assert!(
        !labels.contains_key("app.kubernetes.io/managed-by"),
        "our apply must not take the chart's label over: {labels:?}"
    );
}

#[test]
fn the_first_turn_makes_the_keys_and_signs_nothing_before_they_are_stored() {
    let mut i = cluster();
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let keys = secret(&t, "spillway-identity-keys").expect("keys");
    assert_eq!(keys.metadata.namespace.as_deref(), Some("spillway-system"));
    assert_eq!(ring_of(&keys).unwrap().keys.len(), 1);
    assert!(
        secret(&t, TRAIN_SECRET).is_none(),
        "not signed with unstored keys"
    );
    // The pod is created anyway, mounting the token (the kubelet waits for it).
    let pod = &pods(&t)[0];
    let spec = pod.spec.as_ref().unwrap();
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "spillway-identity")
        .expect("the identity volume");
    let source = volume.secret.as_ref().unwrap();
    assert_eq!(source.secret_name.as_deref(), Some(TRAIN_SECRET));
    let items = source.items.as_ref().unwrap();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("train", "token")
    );
    let c = &spec.containers[0];
    assert!(c.volume_mounts.iter().flatten().any(|m| {
        m.mount_path == "/var/run/secrets/spillway.io/identity" && m.read_only == Some(true)
    }));
    assert!(
        c.env
            .iter()
            .flatten()
            .any(|e| e.name == "SPILLWAY_IDENTITY_TOKEN_FILE"
                && e.value.as_deref() == Some("/var/run/secrets/spillway.io/identity/token"))
    );
    // Once stored, the running job gets its token.
    let mut i2 = i.clone();
    i2.identity_keys = Some(Arc::new(keys));
    let t = l.turn(&i2, None, noon() + Duration::from_secs(1));
    assert!(secret(&t, TRAIN_SECRET).is_some(), "{:?}", kinds(&t));
}

#[test]
fn a_running_job_gets_a_token_that_verifies_with_its_claims_and_is_refreshed_at_80_percent() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.nodes = vec![node("a", "onprem", 8)];
    let mut j = job("train").status(json!({"phase": "Running"}));
    j.0["spec"]["template"]["spec"]["serviceAccountName"] = json!("trainer");
    let j = j.build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running")];
    i.jobs = vec![j];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let s = secret(&t, TRAIN_SECRET).expect("the namespace's tokens Secret");
    assert_eq!(s.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        s.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["train"],
        "one key per running job"
    );
    let claims = verifier(&ring, "spillway")
        .verify(&token_of(&s), noon())
        .expect("verifies");
    assert_eq!(claims.iss, ISSUER);
    assert_eq!(claims.sub, "system:serviceaccount:team:trainer");
    assert_eq!(claims.spillway.environment, "private");
    assert_eq!(claims.spillway.pool, "onprem");
    assert_eq!(claims.spillway.queue, "q");
    assert_eq!(claims.aud.0, vec!["spillway", "sts.amazonaws.com"]);
    assert!(format!("{:?}", t.actions).contains("(data hidden)"));
    assert!(
        !format!("{:?}", t.actions).contains(&token_of(&s)),
        "never printed"
    );

    assert!(secret(&l.turn(&i, None, noon() + minutes(47)), TRAIN_SECRET).is_none());
    let t = l.turn(&i, None, noon() + minutes(48));
    assert!(secret(&t, TRAIN_SECRET).is_some(), "refreshed at 80 %");
    assert!(t.wake.is_some_and(|w| w <= noon() + minutes(48 + 48)));

    // Finished: its key is taken out of the Secret within the removal wait (no token is
    // issued there meanwhile), and no more refreshes.
    i.pods = vec![pod(&i.jobs[0], 0, 0, "a", "Succeeded")];
    let ended = noon() + minutes(50);
    let t = l.turn(&i, None, ended);
    assert!(
        secret(&t, TRAIN_SECRET).is_none(),
        "waits for a write to ride on"
    );
    let removal = ended + crate::turn::identity::REMOVAL_WAIT;
    assert!(t.wake.is_some_and(|w| w <= removal), "{:?}", t.wake);
    let before = removal - Duration::from_millis(1);
    assert!(secret(&l.turn(&i, None, before), TRAIN_SECRET).is_none());
    let s = secret(&l.turn(&i, None, removal), TRAIN_SECRET).expect("the Secret without the key");
    assert!(
        s.data.as_ref().is_none_or(|d| d.is_empty()),
        "{:?}",
        s.data.as_ref().map(|d| d.keys().collect::<Vec<_>>())
    );
    assert!(secret(&l.turn(&i, None, noon() + minutes(200)), TRAIN_SECRET).is_none());
}

#[test]
fn a_stopped_jobs_key_goes_out_with_the_next_token_issued_in_its_secret() {
    let (mut i, _) = cluster_with_keys(noon());
    i.nodes = vec![node("a", "onprem", 8)];
    // Another job whose name hashes to the same Secret as `train`.
    let other = (0..)
        .map(|k| format!("other-{k}"))
        .find(|n| crate::identity::tokens_secret_name(n) == TRAIN_SECRET)
        .unwrap();
    let train = job("train").status(json!({"phase": "Running"})).build();
    i.pods = vec![pod(&train, 0, 0, "a", "Running")];
    i.jobs = vec![train];
    let mut l = with_identity();
    assert!(secret(&l.turn(&i, None, noon()), TRAIN_SECRET).is_some());

    i.pods = vec![pod(&i.jobs[0], 0, 0, "a", "Succeeded")];
    assert!(secret(&l.turn(&i, None, noon() + minutes(1)), TRAIN_SECRET).is_none());
    // The other starts before the removal wait is over: one write issues its token and takes
    // the finished job's key out.
    let o = job(&other).status(json!({"phase": "Running"})).build();
    i.pods.push(pod(&o, 0, 0, "a", "Running"));
    i.jobs.push(o);
    let t = l.turn(&i, None, noon() + minutes(1) + Duration::from_secs(10));
    let s = secret(&t, TRAIN_SECRET).expect("the other's token");
    assert_eq!(
        s.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
        [&other],
        "the finished job's key is gone"
    );
    assert_eq!(secrets(&t).len(), 1, "{:?}", kinds(&t));
    // Nothing left to take out: no write when the wait would have ended.
    let t = l.turn(&i, None, noon() + minutes(2));
    assert!(secret(&t, TRAIN_SECRET).is_none());
}

#[test]
fn a_write_that_was_to_take_keys_out_is_made_again_after_a_failure_that_may_pass() {
    let (mut i, _) = cluster_with_keys(noon());
    i.nodes = vec![node("a", "onprem", 8)];
    let train = job("train").status(json!({"phase": "Running"})).build();
    i.pods = vec![pod(&train, 0, 0, "a", "Running")];
    i.jobs = vec![train];
    let mut l = with_identity();
    l.turn(&i, None, noon());
    i.pods = vec![pod(&i.jobs[0], 0, 0, "a", "Succeeded")];
    l.turn(&i, None, noon() + minutes(1));
    let at = noon() + minutes(1) + crate::turn::identity::REMOVAL_WAIT;
    let t = l.turn(&i, None, at);
    let written = secret(&t, TRAIN_SECRET).expect("the removal");
    let fail = |l: &mut Loop, code: u16, reason: &str| {
        l.state.feedback(&crate::executor::Failure {
            action: Action::ApplySecret(crate::actions::SecretApply(Box::new(written.clone()))),
            error: crate::error::api_error(code, reason, "the write failed"),
        });
    };
    // The API server is unavailable: written again at the next turn, though no job runs there.
    fail(&mut l, 503, "ServiceUnavailable");
    let t = l.turn(&i, None, at + Duration::from_secs(1));
    let s = secret(&t, TRAIN_SECRET).expect("written again");
    assert!(s.data.as_ref().is_none_or(|d| d.is_empty()));
    assert!(secret(&l.turn(&i, None, at + Duration::from_secs(2)), TRAIN_SECRET).is_none());
    // The namespace is gone: not asked again (at every turn it would only fail again).
    fail(&mut l, 404, "NotFound");
    let t = l.turn(&i, None, at + Duration::from_secs(3));
    assert!(secret(&t, TRAIN_SECRET).is_none(), "{:?}", kinds(&t));
}

#[test]
fn a_queue_narrows_the_audiences_and_names_an_aws_role() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.queues = vec![queue(
        "q",
        json!({"identity": {"audiences": ["sts.amazonaws.com"],
                            "awsRoleArn": "arn:aws:iam::123456789012:role/trainer"}}),
    )];
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let env: Vec<(String, String)> = pods(&t)[0].spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert!(env.contains(&(
        "AWS_ROLE_ARN".into(),
        "arn:aws:iam::123456789012:role/trainer".into()
    )));
    assert!(env.contains(&(
        "AWS_WEB_IDENTITY_TOKEN_FILE".into(),
        "/var/run/secrets/spillway.io/identity/token".into()
    )));
    let s = secret(&t, TRAIN_SECRET).expect("token");
    let claims = verifier(&ring, "sts.amazonaws.com")
        .verify(&token_of(&s), noon())
        .unwrap();
    assert_eq!(claims.aud.0, vec!["sts.amazonaws.com"]);
    assert!(
        verifier(&ring, "spillway")
            .verify(&token_of(&s), noon())
            .is_err()
    );
}

#[test]
fn an_audience_the_issuer_does_not_offer_makes_the_queue_invalid() {
    let (mut i, _) = cluster_with_keys(noon());
    i.queues = vec![queue("q", json!({"identity": {"audiences": ["vault"]}}))];
    i.nodes = vec![node("a", "onprem", 8)];
    i.jobs = vec![job("train").build()];
    let t = with_identity().turn(&i, None, noon());
    let q = status_of(&t, StatusKind::GpuQueue, "q").expect("queue status");
    let (status, _, message) = condition(&q, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("spec.identity.audiences[0]"), "{message}");
    assert!(creates(&t).is_empty());
}

#[test]
fn the_users_own_env_and_mounts_win_and_an_event_says_so() {
    let (mut i, _) = cluster_with_keys(noon());
    i.nodes = vec![node("a", "onprem", 8)];
    let mut j = job("train");
    j.0["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "SPILLWAY_IDENTITY_TOKEN_FILE", "value": "/mine"}]);
    i.jobs = vec![j.build()];
    let t = with_identity().turn(&i, None, noon());
    let created = pods(&t);
    let c = &created[0].spec.as_ref().unwrap().containers[0];
    let mine: Vec<_> = c
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == "SPILLWAY_IDENTITY_TOKEN_FILE")
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].value.as_deref(), Some("/mine"));
    assert!(events(&t).contains(&("train".into(), "IdentityNotInjected".into(), true)));
}

#[test]
fn keys_rotate_on_schedule_and_a_new_key_is_published_a_lifetime_before_it_signs() {
    let (i, ring) = cluster_with_keys(noon());
    let first = ring.keys[0].kid.clone();
    let mut l = with_identity();
    // Six days and 23 hours later the next key is due.
    let due = noon() + Duration::from_secs(7 * 24 * 3600 - 3600);
    assert!(
        secret(
            &l.turn(&i, None, due - minutes(1)),
            "spillway-identity-keys"
        )
        .is_none()
    );
    let t = l.turn(&i, None, due);
    let next = ring_of(&secret(&t, "spillway-identity-keys").expect("rotated")).unwrap();
    assert_eq!(next.keys.len(), 2);
    assert_eq!(
        next.signer(due).unwrap().kid,
        first,
        "the old key still signs"
    );
    let second = next.keys[1].clone();
    assert_eq!(second.activates, due + Duration::from_secs(3600));
    // Written once, not again while the write is on its way.
    assert!(
        secret(
            &l.turn(&i, None, due + minutes(1)),
            "spillway-identity-keys"
        )
        .is_none()
    );
}

#[test]
fn a_job_that_moves_gets_a_new_token_for_its_new_place() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.pools.push(aws_pool("aws", json!({})));
    i.nodes = vec![node("a", "onprem", 8), cloud_node("ip-1", "aws", 1, "i-1")];
    let j = job("train")
        .restartable()
        .status(json!({"phase": "Running"}))
        .build();
    i.pods = vec![pod(&j, 0, 0, "a", "Running")];
    i.jobs = vec![j.clone()];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let private = token_of(&secret(&t, TRAIN_SECRET).unwrap());
    // Requeued and running again on the cloud node (attempt 1).
    let moved = job("train")
        .restartable()
        .status(json!({"phase": "Running", "restarts": 1}))
        .build();
    i.pods = vec![pod(&moved, 1, 0, "ip-1", "Running")];
    i.jobs = vec![moved];
    let t = l.turn(&i, None, noon() + minutes(5));
    let cloud = token_of(&secret(&t, TRAIN_SECRET).expect("a new token"));
    let v = verifier(&ring, "spillway");
    let (a, b) = (
        v.verify(&private, noon()).unwrap(),
        v.verify(&cloud, noon() + minutes(5)).unwrap(),
    );
    assert_eq!(
        (a.iss.clone(), a.sub.clone()),
        (b.iss.clone(), b.sub.clone())
    );
    assert_eq!(a.spillway.environment, "private");
    assert_eq!(b.spillway.environment, "cloud");
    assert_eq!(b.spillway.pool, "aws");
}

/// A job in a cluster pool gets the same issuer and subject, `environment: remote` and the
/// pool in its claims, from a tokens Secret written in that cluster's namespace.
#[test]
fn a_job_in_another_cluster_gets_its_token_there_with_the_same_issuer_and_subject() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.queues = vec![queue(
        "q",
        json!({"burst": {"enabled": true, "maxWait": "0s"}}),
    )];
    i.pools.push(cluster_pool("dc2", 1.0));
    i.remote = vec![crate::remote::RemoteCluster {
        pool: "dc2".into(),
        state: crate::remote::RemoteState::Connected,
        nodes: vec![remote_node("gpu-1", 8)],
        pods: Vec::new(),
        jobs: Vec::new(),
        jobs_problem: None,
        jobs_known: true,
        retiring: false,
    }];
    let mut j = job("train");
    j.0["spec"]["template"]["spec"]["serviceAccountName"] = json!("trainer");
    i.jobs = vec![j.build()];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    assert!(secret(&t, TRAIN_SECRET).is_none(), "nothing at home");
    let (pool, s) = t
        .actions
        .iter()
        .find_map(|a| match a {
            Action::ApplyRemoteSecret { pool, secret } => Some((pool.clone(), (*secret.0).clone())),
            _ => None,
        })
        .expect("the job's token Secret there");
    assert_eq!(pool, "dc2");
    assert_eq!(s.metadata.namespace.as_deref(), Some("spillway-jobs"));
    assert_eq!(s.metadata.name.as_deref(), Some("spillway-token-uid-train"));
    assert_eq!(
        s.metadata.labels.as_ref().unwrap()[crate::labels::HOME_CLUSTER_LABEL],
        HOME
    );
    let key = "token".to_string();
    let token = String::from_utf8(s.data.as_ref().unwrap()[&key].0.clone()).unwrap();
    let claims = verifier(&ring, "spillway")
        .verify(&token, noon())
        .expect("verifies with the home JWKS");
    assert_eq!(claims.iss, ISSUER);
    assert_eq!(claims.sub, "system:serviceaccount:team:trainer");
    assert_eq!(claims.spillway.environment, "remote");
    assert_eq!(claims.spillway.pool, "dc2");
    // The pod there mounts that key.
    let (_, pod) = remote_creates(&t).remove(0);
    let volume = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0]
        .secret
        .clone()
        .unwrap();
    assert_eq!(
        volume.secret_name.as_deref(),
        Some("spillway-token-uid-train")
    );
    assert_eq!(volume.items.unwrap()[0].key, key);
    // Running as that namespace's default account there, with no token of that cluster.
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.service_account_name, None);
    assert_eq!(spec.automount_service_account_token, Some(false));
    // It finishes: its Secret there goes.
    i.remote[0].pods = vec![seen_there(&pod, "Succeeded")];
    let t = l.turn(&i, None, noon() + minutes(5));
    assert!(
        t.actions.iter().any(|a| matches!(a,
        Action::DeleteRemoteSecret { name, .. } if name == "spillway-token-uid-train")),
        "{:?}",
        kinds(&t)
    );
}

#[test]
fn two_thousand_running_jobs_of_a_namespace_spread_their_tokens_over_sixteen_small_secrets() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.nodes = (0..250)
        .map(|n| node(&format!("n{n}"), "onprem", 8))
        .collect();
    for k in 0..2000 {
        let j = job(&format!("job-{k:04}"))
            .status(json!({"phase": "Running"}))
            .build();
        i.pods
            .push(pod(&j, 0, 0, &format!("n{}", k / 8), "Running"));
        i.jobs.push(j);
    }
    let t = with_identity().turn(&i, None, noon());
    let written = secrets(&t);
    let tokens: Vec<&Secret> = written
        .iter()
        .filter(|s| crate::identity::is_tokens_secret(s.metadata.name.as_deref().unwrap()))
        .collect();
    assert_eq!(tokens.len(), 16, "each of the sixteen written once");
    let mut keys = 0;
    for s in &tokens {
        let name = s.metadata.name.as_deref().unwrap();
        let data = s.data.as_ref().unwrap();
        for (job, token) in data {
            assert_eq!(crate::identity::tokens_secret_name(job), name, "{job}");
            let token = String::from_utf8(token.0.clone()).unwrap();
            let claims = verifier(&ring, "spillway").verify(&token, noon()).unwrap();
            assert_eq!(&claims.spillway.job, job);
        }
        keys += data.len();
        // What the API server stores: base64 of each value, well under its 1 MiB.
        let bytes: usize = data.iter().map(|(k, v)| k.len() + v.0.len() * 4 / 3).sum();
        // (About 800 bytes a token: 125 of them, an eighth of the limit.)
        assert!(bytes < 128 * 1024, "{name}: {bytes} bytes");
    }
    assert_eq!(keys, 2000);
}

#[test]
fn pods_that_mount_the_first_tokens_secret_keep_it_while_they_run() {
    let (mut i, ring) = cluster_with_keys(noon());
    i.nodes = vec![node("a", "onprem", 8)];
    let j = job("train").status(json!({"phase": "Running"})).build();
    // Made by a release that kept one tokens Secret per namespace.
    let mut p = (*pod(&j, 0, 0, "a", "Running")).clone();
    p.spec.as_mut().unwrap().volumes = Some(vec![
        serde_json::from_value(json!({"name": "spillway-identity",
            "secret": {"secretName": "spillway-tokens", "items": [{"key": "train", "path": "token"}]}}))
        .unwrap(),
    ]);
    i.pods = vec![Arc::new(p)];
    i.jobs = vec![j];
    let mut l = with_identity();
    let t = l.turn(&i, None, noon());
    let s = secret(&t, "spillway-tokens").expect("the Secret its pods mount");
    verifier(&ring, "spillway")
        .verify(&token_of(&s), noon())
        .unwrap();
    assert!(secret(&t, TRAIN_SECRET).is_none(), "not its name's shard");

    // Its next attempt's pods are made with its name's shard, and its token moves there.
    let t = l.turn(&i, None, noon() + minutes(48));
    assert!(
        secret(&t, "spillway-tokens").is_some(),
        "refreshed where mounted"
    );
    i.jobs = vec![
        job("train")
            .status(json!({"phase": "Running", "restarts": 1}))
            .build(),
    ];
    i.pods = vec![pod(&i.jobs[0], 1, 0, "a", "Running")];
    let t = l.turn(&i, None, noon() + minutes(49));
    let old = secret(&t, "spillway-tokens").expect("its key taken out of the old Secret");
    assert!(old.data.as_ref().is_none_or(|d| d.is_empty()));
    assert!(secret(&t, TRAIN_SECRET).is_some(), "{:?}", kinds(&t));
}
