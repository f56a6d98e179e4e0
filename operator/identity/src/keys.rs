//! Signing keys: generated with aws-lc-rs, kept as PKCS#8 (never logged: `Debug` hides them),
//! named by their RFC 7638 thumbprint, and published as public JWKs.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::jwk::{Jwk, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{DecodingKey, EncodingKey};
use serde::{Deserialize, Serialize};
use spillway_core::Time;

use crate::Error;

/// The signing algorithms the issuer offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algorithm {
    /// ECDSA on P-256 with SHA-256 (the default: small keys, small tokens).
    ES256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 on 2048-bit keys (for verifiers that only take RSA).
    RS256,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::ES256 => "ES256",
            Algorithm::RS256 => "RS256",
        }
    }

    pub fn parse(s: &str) -> Result<Algorithm, Error> {
        match s {
            "ES256" => Ok(Algorithm::ES256),
            "RS256" => Ok(Algorithm::RS256),
            other => Err(Error::Settings(format!(
                "signing algorithm {other:?} is not offered; use ES256 or RS256"
            ))),
        }
    }

    pub(crate) fn jwt(self) -> jsonwebtoken::Algorithm {
        match self {
            Algorithm::ES256 => jsonwebtoken::Algorithm::ES256,
            Algorithm::RS256 => jsonwebtoken::Algorithm::RS256,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One signing key and its place in the rotation.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct SigningKey {
    /// The key's id: its RFC 7638 SHA-256 thumbprint, base64url.
    pub kid: String,
    pub alg: Algorithm,
    /// When it was made.
    pub created: Time,
    /// From when it signs (it is published from `created`).
    pub activates: Time,
    /// The private key, PKCS#8 DER, base64 (standard alphabet) in the stored form.
    #[serde(with = "pkcs8")]
    pkcs8: Vec<u8>,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("created", &self.created)
            .field("activates", &self.activates)
            .field("pkcs8", &"(hidden)")
            .finish()
    }
}

mod pkcs8 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

impl SigningKey {
    /// A new key of `alg`, made at `now`, signing from `activates`.
    pub fn generate(alg: Algorithm, now: Time, activates: Time) -> Result<SigningKey, Error> {
        let pkcs8 = match alg {
            Algorithm::ES256 => {
                let pair = aws_lc_rs::signature::EcdsaKeyPair::generate(
                    &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                )
                .map_err(|_| Error::Crypto("cannot generate a P-256 key".into()))?;
                pair.to_pkcs8v1()
                    .map_err(|_| Error::Crypto("cannot serialise a P-256 key".into()))?
                    .as_ref()
                    .to_vec()
            }
            Algorithm::RS256 => {
                use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
                let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
                    .map_err(|_| Error::Crypto("cannot generate an RSA key".into()))?;
                let der: Pkcs8V1Der<'static> = pair
                    .as_der()
                    .map_err(|_| Error::Crypto("cannot serialise an RSA key".into()))?;
                der.as_ref().to_vec()
            }
        };
        let mut key = SigningKey {
            kid: String::new(),
            alg,
            created: now,
            activates,
            pkcs8,
        };
        key.kid = key
            .public_jwk_unnamed()?
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|e| Error::Crypto(format!("cannot take the key's thumbprint: {e}")))?;
        Ok(key)
    }

    /// The key for signing.
    pub(crate) fn encoding_key(&self) -> Result<EncodingKey, Error> {
        match self.alg {
            Algorithm::ES256 => Ok(EncodingKey::from_ec_der(&self.pkcs8)),
            // jsonwebtoken signs RSA with an RFC 8017 RSAPrivateKey, which PKCS#8 wraps.
            Algorithm::RS256 => Ok(EncodingKey::from_rsa_der(rsa_private_key(&self.pkcs8)?)),
        }
    }

    fn public_jwk_unnamed(&self) -> Result<Jwk, Error> {
        Jwk::from_encoding_key(&self.encoding_key()?, self.alg.jwt())
            .map_err(|e| Error::Crypto(format!("cannot derive the public key: {e}")))
    }

    /// The public key as a JWK: `kid`, `alg`, `use: sig`.
    pub fn public_jwk(&self) -> Result<Jwk, Error> {
        let mut jwk = self.public_jwk_unnamed()?;
        jwk.common.key_id = Some(self.kid.clone());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        Ok(jwk)
    }

    /// The public key for verifying (tests and the issuer's own checks).
    pub fn decoding_key(&self) -> Result<DecodingKey, Error> {
        DecodingKey::from_jwk(&self.public_jwk()?)
            .map_err(|e| Error::Crypto(format!("cannot use the public key: {e}")))
    }
}

/// The RSAPrivateKey inside a PKCS#8 PrivateKeyInfo: `SEQUENCE { INTEGER, SEQUENCE, OCTET
/// STRING { RSAPrivateKey } }`.
fn rsa_private_key(pkcs8: &[u8]) -> Result<&[u8], Error> {
    let bad = || Error::Crypto("the stored RSA key is not PKCS#8".into());
    let (tag, body, _) = der_item(pkcs8).ok_or_else(bad)?;
    if tag != 0x30 {
        return Err(bad());
    }
    let (t1, _, rest) = der_item(body).ok_or_else(bad)?;
    let (t2, _, rest) = der_item(rest).ok_or_else(bad)?;
    let (t3, key, _) = der_item(rest).ok_or_else(bad)?;
    if (t1, t2, t3) != (0x02, 0x30, 0x04) {
        return Err(bad());
    }
    Ok(key)
}

/// One DER item: (tag, contents, what follows).
fn der_item(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *input.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((tag, input.get(header..end)?, input.get(end..)?))
}

/// The issuer's keys, as kept in its Secret (`keys.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyRing {
    pub keys: Vec<SigningKey>,
}

impl KeyRing {
    /// Parses the stored form.
    pub fn from_json(bytes: &[u8]) -> Result<KeyRing, Error> {
        let ring: KeyRing = serde_json::from_slice(bytes)
            .map_err(|e| Error::Keys(format!("keys.json does not parse: {e}")))?;
        for k in &ring.keys {
            k.encoding_key()?;
        }
        Ok(ring)
    }

    /// The stored form.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The key that signs at `now`: the latest activated one.
    pub fn signer(&self, now: Time) -> Option<&SigningKey> {
        self.keys
            .iter()
            .filter(|k| k.activates <= now)
            .max_by_key(|k| (k.activates, k.created))
    }

    pub fn get(&self, kid: &str) -> Option<&SigningKey> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

/// base64url without padding, as JWTs use it.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Standard base64, padded.
pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}
