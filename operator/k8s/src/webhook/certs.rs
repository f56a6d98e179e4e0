//! The webhook's own certificates: a CA the API server trusts through the webhook
//! configuration's `caBundle`, and a serving certificate it signs for the webhook's host names.
//!
//! Both live in one Secret of the operator's namespace (the keys of a `kubernetes.io/tls`
//! Secret, `tls.crt`, `tls.key` and `ca.crt`, plus `ca.key`; the chart creates it empty), so
//! every replica serves the same certificate. The
//! serving certificate is renewed when a third of its lifetime is left or its host names
//! changed; the CA lives ten serving lifetimes and is replaced when two are left, the old CA
//! staying in `ca.crt` (the bundle) until it expires, so a replica still serving a certificate
//! of the old CA stays trusted. Validity times are kept in annotations: nothing here parses
//! X.509.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The CA's common name.
const CA_NAME: &str = "spillway-webhook-ca";
pub const NOT_AFTER: &str = "spillway.io/not-after";
pub const CA_NOT_AFTER: &str = "spillway.io/ca-not-after";
pub const PREVIOUS_CA_NOT_AFTER: &str = "spillway.io/previous-ca-not-after";
pub const HOSTS: &str = "spillway.io/hosts";
/// How many serving lifetimes a CA lives.
const CA_LIFETIMES: i64 = 10;

/// The CA, the serving certificate and their validity (Unix seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Material {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub ca_not_after: i64,
    /// The CA before the last rotation, trusted until it expires.
    pub previous_ca: Option<(String, i64)>,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: i64,
    pub hosts: Vec<String>,
}

/// Why certificates could not be made or read.
#[derive(Debug, thiserror::Error)]
#[error("webhook certificate: {0}")]
pub struct CertError(pub String);

fn err(e: impl std::fmt::Display) -> CertError {
    CertError(e.to_string())
}

fn at(unix: i64) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(err)
}

fn ca_params(not_before: i64, not_after: i64) -> Result<CertificateParams, CertError> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = at(not_before)?;
    p.not_after = at(not_after)?;
    Ok(p)
}

/// A new CA valid from `now` (an hour back, for clocks a little behind).
fn new_ca(now: i64, lifetime: i64) -> Result<(String, String, i64), CertError> {
    let key = KeyPair::generate().map_err(err)?;
    let not_after = now + lifetime * CA_LIFETIMES;
    let cert = ca_params(now - 3600, not_after)?
        .self_signed(&key)
        .map_err(err)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// A serving certificate for `hosts` (DNS names, or IP addresses) signed by the CA.
fn new_leaf(
    ca_key_pem: &str,
    hosts: &[String],
    now: i64,
    lifetime: i64,
) -> Result<(String, String, i64), CertError> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(err)?;
    let issuer = Issuer::new(ca_params(now, now)?, ca_key);
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        hosts
            .first()
            .map(String::as_str)
            .unwrap_or("spillway-webhook"),
    );
    p.distinguished_name = dn;
    p.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => h.clone().try_into().map(SanType::DnsName).map_err(err),
        })
        .collect::<Result<_, _>>()?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.not_before = at(now - 3600)?;
    let not_after = now + lifetime;
    p.not_after = at(not_after)?;
    let key = KeyPair::generate().map_err(err)?;
    let cert = p.signed_by(&key, &issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// What to write, if anything: `None` while the current material holds. `lifetime` is the
/// serving certificate's, in seconds.
pub fn renewed(
    current: Option<&Material>,
    hosts: &[String],
    lifetime: i64,
    now: i64,
) -> Result<Option<Material>, CertError> {
    let lifetime = lifetime.max(60);
    let (ca_pem, ca_key_pem, ca_not_after, previous_ca) = match current {
        Some(m) if m.ca_not_after - now > 2 * lifetime => (
            m.ca_pem.clone(),
            m.ca_key_pem.clone(),
            m.ca_not_after,
            m.previous_ca.clone().filter(|(_, until)| *until > now),
        ),
        _ => {
            let (pem, key, until) = new_ca(now, lifetime)?;
            let previous = current
                .filter(|m| m.ca_not_after > now)
                .map(|m| (m.ca_pem.clone(), m.ca_not_after));
            (pem, key, until, previous)
        }
    };
    if let Some(m) = current
        && m.ca_pem == ca_pem
        && m.previous_ca == previous_ca
        && m.hosts == hosts
        && m.not_after - now > lifetime / 3
    {
        return Ok(None);
    }
    let (cert_pem, key_pem, not_after) = new_leaf(&ca_key_pem, hosts, now, lifetime)?;
    Ok(Some(Material {
        ca_pem,
        ca_key_pem,
        ca_not_after,
        previous_ca,
        cert_pem,
        key_pem,
        not_after,
        hosts: hosts.to_vec(),
    }))
}

impl Material {
    /// The PEM bundle the API server trusts: the CA, then the previous one while it lives.
    pub fn bundle(&self) -> String {
        let mut out = self.ca_pem.clone();
        if let Some((pem, _)) = &self.previous_ca {
            out.push_str(pem);
        }
        out
    }

    /// The Secret's data and annotations.
    pub fn to_secret(&self, namespace: &str, name: &str) -> Secret {
        let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
        let mut data = BTreeMap::from([
            ("tls.crt".to_string(), bytes(&self.cert_pem)),
            ("tls.key".to_string(), bytes(&self.key_pem)),
            ("ca.crt".to_string(), bytes(&self.bundle())),
            ("ca.key".to_string(), bytes(&self.ca_key_pem)),
            ("current-ca.crt".to_string(), bytes(&self.ca_pem)),
        ]);
        let mut annotations = BTreeMap::from([
            (NOT_AFTER.to_string(), self.not_after.to_string()),
            (CA_NOT_AFTER.to_string(), self.ca_not_after.to_string()),
            (HOSTS.to_string(), self.hosts.join(",")),
        ]);
        if let Some((pem, until)) = &self.previous_ca {
            data.insert("previous-ca.crt".into(), bytes(pem));
            annotations.insert(PREVIOUS_CA_NOT_AFTER.into(), until.to_string());
        }
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                annotations: Some(annotations),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        }
    }

    /// The material of a Secret this module wrote; `None` for one it did not (or a broken one,
    /// which is then made again).
    pub fn from_secret(secret: &Secret) -> Option<Material> {
        let data = secret.data.as_ref()?;
        let text = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        let notes = secret.metadata.annotations.as_ref()?;
        let number = |k: &str| notes.get(k).and_then(|v| v.parse::<i64>().ok());
        let previous_ca = match (text("previous-ca.crt"), number(PREVIOUS_CA_NOT_AFTER)) {
            (Some(pem), Some(until)) => Some((pem, until)),
            _ => None,
        };
        Some(Material {
            ca_pem: text("current-ca.crt")?,
            ca_key_pem: text("ca.key")?,
            ca_not_after: number(CA_NOT_AFTER)?,
            previous_ca,
            cert_pem: text("tls.crt")?,
            key_pem: text("tls.key")?,
            not_after: number(NOT_AFTER)?,
            hosts: notes
                .get(HOSTS)?
                .split(',')
                .filter(|h| !h.is_empty())
                .map(String::from)
                .collect(),
        })
    }
}

/// The serving certificate and key of any `kubernetes.io/tls` Secret (one this module wrote,
/// or cert-manager's): `(tls.crt, tls.key)`.
pub fn serving_pair(secret: &Secret) -> Option<(Vec<u8>, Vec<u8>)> {
    let data = secret.data.as_ref()?;
    Some((
        data.get("tls.crt")?.0.clone(),
        data.get("tls.key")?.0.clone(),
    ))
}
