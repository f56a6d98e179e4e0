//! The OIDC discovery document and the JWKS, as the issuer serves and publishes them.

use jsonwebtoken::jwk::JwkSet;
use serde_json::{Value, json};

use crate::Error;
use crate::keys::KeyRing;

/// Where the discovery document is served, under the issuer URL.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// Where the JWKS is served, under the issuer URL (the same path as Kubernetes' own issuer).
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// The JWKS URL of an issuer.
pub fn jwks_uri(issuer: &str) -> String {
    format!("{}{JWKS_PATH}", issuer.trim_end_matches('/'))
}

/// The OpenID Connect discovery document: what AWS IAM, Vault and other verifiers read to
/// find the keys.
pub fn openid_configuration(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "jwks_uri": jwks_uri(issuer),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256", "RS256"],
        "claims_supported": ["iss", "sub", "aud", "iat", "nbf", "exp", "jti", "spillway.io"],
    })
}

/// The public keys of every key in the ring (pending, signing and retiring alike).
pub fn jwks(ring: &KeyRing) -> Result<JwkSet, Error> {
    let keys = ring
        .keys
        .iter()
        .map(|k| k.public_jwk())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(JwkSet { keys })
}
