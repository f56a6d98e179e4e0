//! The claims of a workload token and how they are signed.

use jsonwebtoken::{Header, encode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use spillway_core::{Duration, Time};

use crate::Error;
use crate::keys::{KeyRing, b64url};

/// What a token says about its workload, beyond the standard claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The GpuJob's name.
    pub job: String,
    /// Its GpuQueue.
    pub queue: String,
    /// `private` or `cloud`.
    pub environment: String,
    /// The ComputePool it runs in.
    pub pool: String,
}

/// One or more audiences (`aud` is a string when there is one, an array otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audience(pub Vec<String>);

impl Serialize for Audience {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Audience {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Audience, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(a) => Audience(vec![a]),
            OneOrMany::Many(v) => Audience(v),
        })
    }
}

/// The claims of a Spillway workload token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    /// `system:serviceaccount:<namespace>:<serviceAccountName>`.
    pub sub: String,
    pub aud: Audience,
    /// Seconds since the Unix epoch.
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    /// A unique id.
    pub jti: String,
    #[serde(rename = "spillway.io")]
    pub spillway: Workload,
}

/// The subject of a pod's token: the service account it runs as.
pub fn subject(namespace: &str, service_account: Option<&str>) -> String {
    let sa = service_account
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    format!("system:serviceaccount:{namespace}:{sa}")
}

/// What one token is for.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub issuer: &'a str,
    pub subject: String,
    pub audiences: Vec<String>,
    pub workload: Workload,
    pub lifetime: Duration,
}

/// A signed token and what it says.
#[derive(Clone, Debug)]
pub struct Issued {
    pub token: String,
    pub kid: String,
    pub claims: Claims,
}

/// Signs a token with the ring's signing key at `now`.
pub fn issue(ring: &KeyRing, request: Request<'_>, now: Time) -> Result<Issued, Error> {
    let key = ring
        .signer(now)
        .ok_or_else(|| Error::Keys("no signing key is active yet".into()))?;
    if request.audiences.is_empty() {
        return Err(Error::Settings(
            "a token needs at least one audience".into(),
        ));
    }
    let iat = now.as_millis().div_euclid(1000);
    let claims = Claims {
        iss: request.issuer.to_string(),
        sub: request.subject,
        aud: Audience(request.audiences),
        iat,
        nbf: iat,
        exp: iat + request.lifetime.as_secs() as i64,
        jti: random_id()?,
        spillway: request.workload,
    };
    let mut header = Header::new(key.alg.jwt());
    header.kid = Some(key.kid.clone());
    header.typ = Some("JWT".into());
    let token = encode(&header, &claims, &key.encoding_key()?)
        .map_err(|e| Error::Crypto(format!("cannot sign: {e}")))?;
    Ok(Issued {
        token,
        kid: key.kid.clone(),
        claims,
    })
}

/// 128 random bits, base64url.
fn random_id() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes).map_err(|_| Error::Crypto("no randomness".into()))?;
    Ok(b64url(&bytes))
}
