//! Verifying a workload token: the same checks for `spillway token verify` and for services
//! that link this crate. Strict by default: only ES256 and RS256, a `kid` that the JWKS
//! publishes with a matching key type, no header that points elsewhere for keys, the issuer and
//! one of the audiences required, `exp` required, 30 s of clock leeway.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{DecodingKey, Validation, decode};
use serde_json::Value;
use spillway_core::{ErrorCategory, Time};

use crate::token::Claims;

/// The longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECONDS: i64 = 30;

/// Why a token was refused: one clear reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the token is {0} bytes long; at most {MAX_TOKEN_BYTES} are accepted")]
    TooLarge(usize),
    #[error("the token is not a JWS in compact form: {0}")]
    Malformed(String),
    #[error("the header's alg {0:?} is not accepted (only ES256 and RS256)")]
    AlgorithmNotAccepted(String),
    #[error("the header carries {0:?}, which is not accepted (keys come from the JWKS only)")]
    ForbiddenHeader(String),
    #[error("the header has no kid")]
    MissingKid,
    #[error("no key {0:?} in the JWKS")]
    UnknownKid(String),
    #[error("key {kid:?} does not allow {alg} (it is a {key} key)")]
    AlgorithmMismatch {
        kid: String,
        alg: String,
        key: String,
    },
    #[error("the signature does not verify")]
    BadSignature,
    #[error("the token has no {0:?} claim")]
    MissingClaim(&'static str),
    #[error("the token expired at {exp} (now {now})")]
    Expired { exp: i64, now: i64 },
    #[error("the token is not valid before {nbf} (now {now})")]
    NotYetValid { nbf: i64, now: i64 },
    #[error("the issuer is {found:?}, not {expected:?}")]
    WrongIssuer { found: String, expected: String },
    #[error("the audience {found:?} does not include {expected:?}")]
    WrongAudience {
        found: Vec<String>,
        expected: String,
    },
    #[error("the JWKS cannot be read: {0}")]
    BadJwks(String),
}

impl VerifyError {
    /// Always invalid input: the token (or the JWKS) must change.
    pub fn category(&self) -> ErrorCategory {
        ErrorCategory::InvalidInput
    }
}

/// What a verifier accepts.
#[derive(Clone, Debug)]
pub struct Verifier {
    pub jwks: JwkSet,
    pub issuer: String,
    pub audience: String,
}

impl Verifier {
    /// A verifier over a JWKS document.
    pub fn new(jwks_json: &[u8], issuer: &str, audience: &str) -> Result<Verifier, VerifyError> {
        let jwks: JwkSet =
            serde_json::from_slice(jwks_json).map_err(|e| VerifyError::BadJwks(e.to_string()))?;
        Ok(Verifier {
            jwks,
            issuer: issuer.to_string(),
            audience: audience.to_string(),
        })
    }

    /// The token's claims if it passes every check at `now`.
    pub fn verify(&self, token: &str, now: Time) -> Result<Claims, VerifyError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(VerifyError::TooLarge(token.len()));
        }
        let parts: Vec<&str> = token.split('.').collect();
        if parts.len() != 3 {
            return Err(VerifyError::Malformed(format!(
                "{} parts, not 3",
                parts.len()
            )));
        }
        let header: Value = URL_SAFE_NO_PAD
            .decode(parts[0])
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| VerifyError::Malformed("the header is not base64url JSON".into()))?;
        let alg = header["alg"].as_str().unwrap_or_default().to_string();
        let jwt_alg = match alg.as_str() {
            "ES256" => jsonwebtoken::Algorithm::ES256,
            "RS256" => jsonwebtoken::Algorithm::RS256,
            _ => return Err(VerifyError::AlgorithmNotAccepted(alg)),
        };
        for field in ["jku", "x5u", "x5c", "jwk", "crit"] {
            if header.get(field).is_some() {
                return Err(VerifyError::ForbiddenHeader(field.into()));
            }
        }
        let kid = header["kid"]
            .as_str()
            .ok_or(VerifyError::MissingKid)?
            .to_string();
        let jwk = self
            .jwks
            .find(&kid)
            .ok_or_else(|| VerifyError::UnknownKid(kid.clone()))?;
        check_key(jwk, &kid, &alg)?;
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| VerifyError::BadJwks(format!("key {kid:?}: {e}")))?;
        // The signature with jsonwebtoken; the time claims below, against `now`.
        let mut validation = Validation::new(jwt_alg);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let data = decode::<Value>(token, &key, &validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => VerifyError::BadSignature,
            _ => VerifyError::Malformed(e.to_string()),
        })?;
        check_claims(&data.claims, self, now)?;
        serde_json::from_value(data.claims)
            .map_err(|e| VerifyError::Malformed(format!("the claims: {e}")))
    }
}

/// The key must be of the header's family, and allow its algorithm if it names one.
fn check_key(jwk: &Jwk, kid: &str, alg: &str) -> Result<(), VerifyError> {
    let family = match &jwk.algorithm {
        AlgorithmParameters::EllipticCurve(_) => "EC",
        AlgorithmParameters::RSA(_) => "RSA",
        AlgorithmParameters::OctetKey(_) => "oct",
        AlgorithmParameters::OctetKeyPair(_) => "OKP",
        _ => "unknown",
    };
    let named = jwk.common.key_algorithm.map(|a| match a {
        KeyAlgorithm::ES256 => "ES256",
        KeyAlgorithm::RS256 => "RS256",
        _ => "other",
    });
    let fits = matches!((family, alg), ("EC", "ES256") | ("RSA", "RS256"))
        && named.is_none_or(|n| n == alg);
    if fits {
        Ok(())
    } else {
        Err(VerifyError::AlgorithmMismatch {
            kid: kid.to_string(),
            alg: alg.to_string(),
            key: named
                .map(|n| format!("{family} {n}"))
                .unwrap_or(family.into()),
        })
    }
}

fn check_claims(claims: &Value, v: &Verifier, now: Time) -> Result<(), VerifyError> {
    let now_s = now.as_millis().div_euclid(1000);
    let number = |name: &'static str| claims.get(name).and_then(Value::as_i64);
    let exp = number("exp").ok_or(VerifyError::MissingClaim("exp"))?;
    if exp + LEEWAY_SECONDS <= now_s {
        return Err(VerifyError::Expired { exp, now: now_s });
    }
    if let Some(nbf) = number("nbf")
        && nbf - LEEWAY_SECONDS > now_s
    {
        return Err(VerifyError::NotYetValid { nbf, now: now_s });
    }
    let iss = claims
        .get("iss")
        .and_then(Value::as_str)
        .ok_or(VerifyError::MissingClaim("iss"))?;
    if iss != v.issuer {
        return Err(VerifyError::WrongIssuer {
            found: iss.into(),
            expected: v.issuer.clone(),
        });
    }
    let aud: Vec<String> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
        _ => return Err(VerifyError::MissingClaim("aud")),
    };
    if !aud.contains(&v.audience) {
        return Err(VerifyError::WrongAudience {
            found: aud,
            expected: v.audience.clone(),
        });
    }
    if claims.get("sub").and_then(Value::as_str).is_none() {
        return Err(VerifyError::MissingClaim("sub"));
    }
    Ok(())
}
