//! The attack matrix: each hostile token is built here, by hand where the library would not
//! make it, and must be refused for the right reason.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{EncodingKey, Header};
use proptest::prelude::*;
use serde_json::{Value, json};
use spillway_core::{Duration, Time};
use spillway_identity::documents::jwks;
use spillway_identity::token::{Request, Workload, issue, subject};
use spillway_identity::{Algorithm, KeyRing, SigningKey, Verifier, VerifyError};

const ISSUER: &str = "https://spillway.example.com";
const AUDIENCE: &str = "sts.amazonaws.com";

fn now() -> Time {
    Time::from_millis(1_800_000_000_000)
}

/// A ring whose one key has signed since ten hours before `now`.
fn ring(alg: Algorithm) -> KeyRing {
    let since = now() - Duration::from_secs(10 * 3600);
    KeyRing {
        keys: vec![SigningKey::generate(alg, since, since).expect("key")],
    }
}

fn request() -> Request<'static> {
    Request {
        issuer: ISSUER,
        subject: subject("team", Some("trainer")),
        audiences: vec![AUDIENCE.into()],
        workload: Workload {
            job: "train".into(),
            queue: "research".into(),
            environment: "cloud".into(),
            pool: "aws".into(),
        },
        lifetime: Duration::from_secs(3600),
    }
}

fn verifier(ring: &KeyRing) -> Verifier {
    let doc = serde_json::to_vec(&jwks(ring).expect("jwks")).expect("json");
    Verifier::new(&doc, ISSUER, AUDIENCE).expect("verifier")
}

fn token(ring: &KeyRing, at: Time) -> String {
    issue(ring, request(), at).expect("token").token
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("json"))
}

/// Splits a token into (header JSON, claims JSON, signature text).
fn parts(token: &str) -> (Value, Value, String) {
    let p: Vec<&str> = token.split('.').collect();
    let dec = |s: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(s).unwrap()).unwrap();
    (dec(p[0]), dec(p[1]), p[2].to_string())
}

fn kid(ring: &KeyRing) -> String {
    ring.keys[0].kid.clone()
}

#[test]
fn valid_es256_and_rs256_tokens_verify_with_their_claims() {
    for alg in [Algorithm::ES256, Algorithm::RS256] {
        let r = ring(alg);
        let claims = verifier(&r)
            .verify(&token(&r, now()), now())
            .expect("valid");
        assert_eq!(claims.iss, ISSUER);
        assert_eq!(claims.sub, "system:serviceaccount:team:trainer");
        assert_eq!(claims.aud.0, vec![AUDIENCE.to_string()]);
        assert_eq!(claims.spillway.environment, "cloud");
        assert_eq!(claims.exp - claims.iat, 3600);
        let (header, _, _) = parts(&token(&r, now()));
        assert_eq!(header["alg"], alg.as_str());
        assert_eq!(header["kid"], kid(&r));
    }
}

#[test]
fn alg_none_is_refused() {
    let r = ring(Algorithm::ES256);
    let (_, claims, _) = parts(&token(&r, now()));
    let forged = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT", "kid": kid(&r)})),
        b64(&claims)
    );
    assert_eq!(
        verifier(&r).verify(&forged, now()),
        Err(VerifyError::AlgorithmNotAccepted("none".into()))
    );
}

#[test]
fn hs256_signed_with_the_public_key_as_secret_is_refused() {
    let r = ring(Algorithm::ES256);
    let (_, claims, _) = parts(&token(&r, now()));
    // The classic confusion: the public key (as published) used as an HMAC secret.
    let public = serde_json::to_vec(&r.keys[0].public_jwk().unwrap()).unwrap();
    let mut header = Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(kid(&r));
    let forged = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    assert_eq!(
        verifier(&r).verify(&forged, now()),
        Err(VerifyError::AlgorithmNotAccepted("HS256".into()))
    );
}

#[test]
fn an_algorithm_the_key_does_not_allow_is_refused() {
    let r = ring(Algorithm::ES256);
    let attacker = ring(Algorithm::RS256);
    // RS256, signed with the attacker's RSA key, naming the issuer's EC key.
    let (mut h, c, sig) = parts(&token(&attacker, now()));
    h["kid"] = json!(kid(&r));
    let swapped = format!("{}.{}.{sig}", b64(&h), b64(&c));
    match verifier(&r).verify(&swapped, now()) {
        Err(VerifyError::AlgorithmMismatch { alg, .. }) => assert_eq!(alg, "RS256"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn expired_and_not_yet_valid_tokens_are_refused() {
    let r = ring(Algorithm::ES256);
    let old = token(&r, now() - Duration::from_secs(2 * 3600));
    assert!(matches!(
        verifier(&r).verify(&old, now()),
        Err(VerifyError::Expired { .. })
    ));
    let future = token(&r, now() + Duration::from_secs(600));
    assert!(matches!(
        verifier(&r).verify(&future, now()),
        Err(VerifyError::NotYetValid { .. })
    ));
    // Within the 30 s leeway both pass.
    let just = token(&r, now() - Duration::from_secs(3600 + 10));
    assert!(verifier(&r).verify(&just, now()).is_ok());
}

#[test]
fn the_wrong_issuer_or_audience_is_refused() {
    let r = ring(Algorithm::ES256);
    let t = token(&r, now());
    let mut v = verifier(&r);
    v.issuer = "https://elsewhere.example.com".into();
    assert!(matches!(
        v.verify(&t, now()),
        Err(VerifyError::WrongIssuer { .. })
    ));
    let mut v = verifier(&r);
    v.audience = "vault".into();
    assert!(matches!(
        v.verify(&t, now()),
        Err(VerifyError::WrongAudience { .. })
    ));
}

#[test]
fn an_unknown_kid_and_a_missing_kid_are_refused() {
    let r = ring(Algorithm::ES256);
    let stranger = ring(Algorithm::ES256);
    assert_eq!(
        verifier(&r).verify(&token(&stranger, now()), now()),
        Err(VerifyError::UnknownKid(kid(&stranger)))
    );
    let (mut h, c, sig) = parts(&token(&r, now()));
    h.as_object_mut().unwrap().remove("kid");
    let no_kid = format!("{}.{}.{sig}", b64(&h), b64(&c));
    assert_eq!(
        verifier(&r).verify(&no_kid, now()),
        Err(VerifyError::MissingKid)
    );
}

#[test]
fn a_payload_or_signature_changed_after_signing_is_refused() {
    let r = ring(Algorithm::ES256);
    let t = token(&r, now());
    let (h, mut c, sig) = parts(&t);
    c["spillway.io"]["environment"] = json!("private");
    let changed = format!("{}.{}.{sig}", t.split('.').next().unwrap(), b64(&c));
    assert_eq!(
        verifier(&r).verify(&changed, now()),
        Err(VerifyError::BadSignature)
    );
    let mut raw = URL_SAFE_NO_PAD.decode(&sig).unwrap();
    raw[10] ^= 0x01;
    let resigned = format!(
        "{}.{}.{}",
        b64(&h),
        t.split('.').nth(1).unwrap(),
        URL_SAFE_NO_PAD.encode(raw)
    );
    assert_eq!(
        verifier(&r).verify(&resigned, now()),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn a_token_over_16_kib_is_refused_before_anything_else() {
    let r = ring(Algorithm::ES256);
    let huge = "a".repeat(17 * 1024);
    assert_eq!(
        verifier(&r).verify(&huge, now()),
        Err(VerifyError::TooLarge(17 * 1024))
    );
}

#[test]
fn headers_that_point_elsewhere_for_keys_are_refused() {
    let r = ring(Algorithm::ES256);
    let (h, c, sig) = parts(&token(&r, now()));
    for (field, value) in [
        ("jku", json!("https://attacker.example.com/jwks")),
        ("x5u", json!("https://attacker.example.com/cert.pem")),
        ("crit", json!(["exp"])),
    ] {
        let mut hostile = h.clone();
        hostile[field] = value;
        let t = format!("{}.{}.{sig}", b64(&hostile), b64(&c));
        assert_eq!(
            verifier(&r).verify(&t, now()),
            Err(VerifyError::ForbiddenHeader(field.into())),
            "{field}"
        );
    }
}

#[test]
fn a_token_without_exp_is_refused() {
    let r = ring(Algorithm::ES256);
    let (_, mut c, _) = parts(&token(&r, now()));
    c.as_object_mut().unwrap().remove("exp");
    // Signed for real with the issuer's key: only the missing claim is wrong.
    let key = &r.keys[0];
    let mut header = Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let pkcs8 = serde_json::to_value(key).unwrap()["pkcs8"]
        .as_str()
        .map(|p| base64::engine::general_purpose::STANDARD.decode(p).unwrap())
        .unwrap();
    let t = jsonwebtoken::encode(&header, &c, &EncodingKey::from_ec_der(&pkcs8)).unwrap();
    assert_eq!(
        verifier(&r).verify(&t, now()),
        Err(VerifyError::MissingClaim("exp"))
    );
}

#[test]
fn a_key_of_the_ring_is_never_printed() {
    let r = ring(Algorithm::ES256);
    let stored = serde_json::to_value(&r.keys[0]).unwrap();
    let secret = stored["pkcs8"].as_str().unwrap().to_string();
    assert!(!format!("{:?}", r).contains(&secret));
    assert!(!format!("{:?}", r.keys[0]).contains(&secret));
    let jwks = serde_json::to_string(&jwks(&r).unwrap()).unwrap();
    assert!(
        !jwks.contains("\"d\""),
        "no private part in the JWKS: {jwks}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_single_byte_change_is_refused(at in 0usize..10_000, byte in any::<u8>()) {
        thread_local! {
            static CASE: (KeyRing, String) = {
                let r = ring(Algorithm::ES256);
                let t = token(&r, now());
                (r, t)
            };
        }
        CASE.with(|(r, t)| {
            let mut bytes = t.clone().into_bytes();
            let i = at % bytes.len();
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
            let changed = String::from_utf8_lossy(&bytes).into_owned();
            prop_assert!(verifier(r).verify(&changed, now()).is_err(), "accepted a change at {i}");
            Ok(())
        })?;
    }
}
