//! The operator's side of workload identity: its settings, the Secrets it keeps (the issuer's
//! keys in its own namespace; in each namespace with running GpuJobs, the tokens Secrets
//! holding each running job's token under the job's name), and the issuer's HTTP endpoint
//! (OIDC discovery and JWKS), served by every replica from its watch cache.
//!
//! A namespace's tokens are spread over [`TOKEN_SHARDS`] Secrets of fixed names
//! ([`TOKENS_SECRET`], then `spillway-tokens-1` .. `-15`), a job's by a hash of its name
//! ([`tokens_secret_name`]), not one Secret per job, so that the chart can grant Secret writes
//! by name (`resourceNames`): the operator can create and patch those sixteen and no other
//! Secret of a job's namespace. Sixteen keep each Secret far below the API server's 1 MiB
//! limit with thousands of jobs running in one namespace, and make each write a sixteenth.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use spillway_identity::documents::{self, DISCOVERY_PATH, JWKS_PATH};
use spillway_identity::{KeyRing, Schedule};
use tokio::net::TcpListener;

use crate::error::Error;
use crate::labels;

/// Where every pod finds its token.
pub const TOKEN_DIR: &str = "/var/run/secrets/spillway.io/identity";
/// The token file.
pub const TOKEN_FILE: &str = "/var/run/secrets/spillway.io/identity/token";
/// The volume that carries it.
pub const VOLUME: &str = "spillway-identity";
/// The first of the Secrets, in each job namespace, holding the tokens of its running jobs
/// (key: the job's name); the others are named `spillway-tokens-1` .. `-15`.
pub const TOKENS_SECRET: &str = "spillway-tokens";
/// How many tokens Secrets a namespace's tokens are spread over. Fixed: a job's Secret is a
/// function of its name alone, so the pod webhook and every replica agree without asking.
pub const TOKEN_SHARDS: u64 = 16;
/// The file name of the token in the pods' volume.
pub const TOKEN_KEY: &str = "token";
/// The key of the key ring in the issuer's Secret.
pub const KEYS_KEY: &str = "keys.json";
/// On the tokens Secrets: what they are.
pub const IDENTITY_LABEL: &str = "spillway.io/identity";
/// How long the discovery document and the JWKS may be cached (well under a token lifetime,
/// which is how long a new key is published before it signs).
pub const CACHE_SECONDS: u32 = 300;

/// TLS for the issuer's endpoint.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How the operator issues identity tokens.
#[derive(Clone, Debug)]
pub struct IdentityConfig {
    /// The `iss` of every token, and the base URL of the discovery document.
    pub issuer: String,
    /// The audiences of tokens (a queue may narrow them).
    pub audiences: Vec<String>,
    pub schedule: Schedule,
    /// Where the issuer's keys Secret lives, and its name.
    pub namespace: String,
    pub secret: String,
    /// Where discovery and the JWKS are served; `None` serves nothing (tests).
    pub addr: Option<SocketAddr>,
    pub tls: Option<TlsFiles>,
}

/// Whether a keys Secret holds a key ring at all (the chart creates it empty).
pub fn holds_keys(secret: &Secret) -> bool {
    secret
        .data
        .as_ref()
        .is_some_and(|d| d.contains_key(KEYS_KEY))
}

/// The key ring a keys Secret holds.
pub fn ring_of(secret: &Secret) -> Result<KeyRing, spillway_identity::Error> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEYS_KEY))
        .ok_or_else(|| spillway_identity::Error::Keys(format!("no {KEYS_KEY} in the Secret")))?;
    KeyRing::from_json(&bytes.0)
}

/// The issuer's keys Secret holding `ring`.
pub fn keys_secret(config: &IdentityConfig, ring: &KeyRing) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(config.secret.clone()),
            namespace: Some(config.namespace.clone()),
            // Not `app.kubernetes.io/managed-by`: the chart creates this Secret empty and
            // keeps that label; an apply of ours would take it over.
            labels: Some(BTreeMap::from([(
                "spillway.io/identity".to_string(),
                "keys".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            KEYS_KEY.to_string(),
            ByteString(ring.to_json()),
        )])),
        ..Secret::default()
    }
}

/// The tokens Secret of the job named `job`: shard `fnv1a(job) % 16`, shard 0 being
/// [`TOKENS_SECRET`] and shard k `spillway-tokens-k`.
pub fn tokens_secret_name(job: &str) -> String {
    // FNV-1a, 64 bits: stable across releases and platforms (the std hasher is neither).
    let hash = job.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    shard_name(hash % TOKEN_SHARDS)
}

/// The name of tokens Secret `k` (0 .. [`TOKEN_SHARDS`]).
fn shard_name(k: u64) -> String {
    match k {
        0 => TOKENS_SECRET.into(),
        k => format!("{TOKENS_SECRET}-{k}"),
    }
}

/// Every tokens Secret's name, in shard order.
pub fn tokens_secret_names() -> impl Iterator<Item = String> {
    (0..TOKEN_SHARDS).map(shard_name)
}

/// Whether `name` is one of the tokens Secrets.
pub fn is_tokens_secret(name: &str) -> bool {
    tokens_secret_names().any(|n| n == name)
}

/// The tokens Secret a pod mounts for its identity, if it mounts one (pods made before the
/// tokens were spread over shards mount [`TOKENS_SECRET`], and keep it while they run).
pub fn mounted_tokens_secret(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    let volume = volumes.iter().find(|v| v.name == VOLUME)?;
    let name = volume.secret.as_ref()?.secret_name.as_deref()?;
    is_tokens_secret(name).then_some(name)
}

/// A namespace's tokens Secret `name` holding `tokens` (job name -> token): written whole by
/// server-side apply, so a job's key that is no longer sent (the job ended) is removed.
pub fn tokens_secret(namespace: &str, name: &str, tokens: &BTreeMap<String, String>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (IDENTITY_LABEL.to_string(), "tokens".to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    labels::FIELD_MANAGER.to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            tokens
                .iter()
                .map(|(job, token)| (job.clone(), ByteString(token.clone().into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// One job's token Secret `name` in another cluster's `namespace` (`tokens` holds its one key),
/// labelled with the home cluster's id.
pub fn remote_token_secret(
    namespace: &str,
    name: &str,
    tokens: &BTreeMap<String, String>,
    home: &str,
) -> Secret {
    let mut s = tokens_secret(namespace, name, tokens);
    s.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(labels::HOME_CLUSTER_LABEL.into(), home.into());
    s
}

fn respond(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::OK
        && let Ok(v) = http::HeaderValue::from_str(&format!("public, max-age={CACHE_SECONDS}"))
    {
        h.insert(http::header::CACHE_CONTROL, v);
    }
    r
}

/// The answer to one request of the issuer's endpoint.
pub fn route(path: &str, issuer: &str, ring: Option<KeyRing>) -> Response<Full<Bytes>> {
    match path {
        DISCOVERY_PATH => respond(
            StatusCode::OK,
            documents::openid_configuration(issuer).to_string(),
        ),
        JWKS_PATH => match ring.map(|r| documents::jwks(&r)) {
            Some(Ok(set)) => respond(
                StatusCode::OK,
                serde_json::to_string(&set).unwrap_or_default(),
            ),
            Some(Err(e)) => {
                tracing::error!(error = %e, "cannot publish the issuer's keys");
                respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    r#"{"error":"the issuer's keys cannot be read"}"#.into(),
                )
            }
            None => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"error":"no signing keys yet"}"#.into(),
            ),
        },
        _ => respond(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.into()),
    }
}

/// TLS for the endpoint from PEM files.
pub fn tls_acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, Error> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, path: &PathBuf, e: String| {
        Error::Settings(format!("{what} {}: {e}", path.display()))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad("--identity-tls-cert", &files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad("--identity-tls-cert", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "--identity-tls-cert",
            &files.cert,
            "no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad("--identity-tls-key", &files.key, e.to_string()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Settings(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            bad(
                "--identity-tls-cert/--identity-tls-key",
                &files.cert,
                e.to_string(),
            )
        })?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves discovery and the JWKS from the keys cache until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    issuer: String,
    keys: Store<Secret>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: crate::serve::Limits,
) {
    let issuer = Arc::new(issuer);
    crate::serve::accept_each(listener, "identity", limits, move |stream| {
        let (issuer, keys, tls) = (issuer.clone(), keys.clone(), tls.clone());
        async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let ring = keys.state().first().and_then(|s| match ring_of(s) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::error!(error = %e, "the issuer's keys Secret cannot be read");
                        None
                    }
                });
                let r = route(req.uri().path(), &issuer, ring);
                async move { Ok::<_, Infallible>(r) }
            });
            let http = crate::serve::http1(&limits);
            let result = match tls {
                Some(acceptor) => {
                    let Some(s) = crate::serve::tls(&acceptor, stream, "identity", &limits).await
                    else {
                        return;
                    };
                    http.serve_connection(TokioIo::new(s), service).await
                }
                None => http.serve_connection(TokioIo::new(stream), service).await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "identity endpoint: connection ended with an error");
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_tokens_secret_is_a_stable_function_of_its_name() {
        // Pinned: pods made by one release mount the Secret the next release writes.
        let names: Vec<String> = ["train", "a", "job-0001"]
            .iter()
            .map(|j| tokens_secret_name(j))
            .collect();
        assert_eq!(
            names,
            ["spillway-tokens-9", "spillway-tokens-12", "spillway-tokens"]
        );
        assert!(names.iter().all(|n| is_tokens_secret(n)));
    }

    #[test]
    fn ten_thousand_jobs_spread_evenly_over_sixteen_secrets() {
        let mut counts = BTreeMap::<String, u32>::new();
        for i in 0..10_000 {
            *counts
                .entry(tokens_secret_name(&format!("job-{i}")))
                .or_default() += 1;
        }
        assert_eq!(counts.len(), 16);
        let (min, max) = (counts.values().min(), counts.values().max());
        assert!(*min.unwrap() > 500 && *max.unwrap() < 750, "{counts:?}");
    }

    #[test]
    fn only_the_sixteen_names_are_tokens_secrets() {
        let all: Vec<String> = tokens_secret_names().collect();
        assert_eq!(all.len(), 16);
        assert_eq!(all[0], "spillway-tokens");
        assert_eq!(all[15], "spillway-tokens-15");
        for other in [
            "spillway-tokens-0",
            "spillway-tokens-16",
            "spillway-tokens-01",
            "x",
        ] {
            assert!(!is_tokens_secret(other), "{other}");
        }
    }
}
