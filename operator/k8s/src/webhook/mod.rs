//! The validating admission webhook every replica serves (`--webhook-addr`, path `/validate`):
//! Spillway's five kinds are checked at `kubectl apply` by the operator's own rules
//! ([`review`]), with the reason, instead of being reported after the fact.
//!
//! TLS: the certificate comes from one Secret of the operator's namespace, which the replicas
//! read every minute and serve from as soon as it changes. With `self_signed` the operator
//! makes and renews that Secret itself ([`certs`]) and keeps the webhook configuration's
//! `caBundle` current (trusting a new CA before serving from it); otherwise something else
//! (cert-manager) writes the Secret and the `caBundle`, and the operator only reads it.

pub mod certs;
pub mod mutate;
pub mod pods;
pub mod review;
#[cfg(test)]
mod serving_tests;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::reflector::{ObjectRef, Store};
use spillway_api::{Environment, GpuJob, GpuQueue, job::JobPhase};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::rustls;

use crate::labels;
use crate::metrics::Metrics;
use crate::serve::{BodyError, Limits, Refusal};

/// The webhook's settings.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub addr: SocketAddr,
    /// The operator's namespace, where the certificate's Secret is.
    pub namespace: String,
    /// The certificate's Secret.
    pub secret: String,
    /// The serving certificate's host names (DNS names or IP addresses) when self-signed.
    pub hosts: Vec<String>,
    /// The operator makes and renews the certificate and keeps the `caBundle` current.
    pub self_signed: bool,
    /// The serving certificate's lifetime when self-signed.
    pub lifetime: Duration,
    /// The ValidatingWebhookConfiguration whose `caBundle` is kept current (self-signed only).
    pub configuration: Option<String>,
}

/// The largest AdmissionReview read. The API server stores objects of at most 1.5 MiB (etcd's
/// request limit), and an update's review carries the object and the old object beside a
/// small envelope; a Spillway object is a few KiB.
pub const MAX_REVIEW_BYTES: usize = 3 * 1024 * 1024 + 64 * 1024;

/// Reviews read and answered at once per replica; one more waits up to [`QUEUE_WAIT`] for its
/// turn and is then answered 503 (the configuration's `failurePolicy` decides). At this many,
/// the largest bodies and their parsed copies stay well under the replica's memory limit.
const REVIEWS_AT_ONCE: usize = 16;
const QUEUE_WAIT: Duration = Duration::from_secs(2);

/// The serving certificate, swapped in place when the Secret changes.
#[derive(Debug, Default)]
pub struct Resolver {
    current: RwLock<Option<(Vec<u8>, Arc<rustls::sign::CertifiedKey>)>>,
}

impl Resolver {
    /// Serves `cert` (PEM chain) and `key` (PEM) from now on; a no-op when they are the ones
    /// served already.
    pub fn load(&self, cert: &[u8], key: &[u8]) -> Result<bool, String> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let mut fingerprint = cert.to_vec();
        fingerprint.extend_from_slice(key);
        if let Ok(g) = self.current.read()
            && g.as_ref().is_some_and(|(f, _)| *f == fingerprint)
        {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("tls.crt: {e}"))?;
        if chain.is_empty() {
            return Err("tls.crt holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("tls.key: {e}"))?;
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| format!("tls.key: {e}"))?;
        let certified = Arc::new(rustls::sign::CertifiedKey::new(chain, signing));
        if let Ok(mut g) = self.current.write() {
            *g = Some((fingerprint, certified));
        }
        Ok(true)
    }

    fn served(&self) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.current
            .read()
            .ok()
            .and_then(|g| g.as_ref().map(|(_, k)| k.clone()))
    }
}

impl rustls::server::ResolvesServerCert for Resolver {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.served()
    }
}

/// What the webhook reads of the cluster: the watch caches every replica keeps.
#[derive(Clone)]
pub struct CacheLookup {
    pub queues: Store<DeserializeGuard<GpuQueue>>,
    pub namespaces: Store<Namespace>,
    pub jobs: Store<DeserializeGuard<GpuJob>>,
    pub pools: Store<DeserializeGuard<spillway_api::ComputePool>>,
    /// What the pods of labelled workloads get besides their job's ([`pods`]).
    pub pod_settings: pods::PodSettings,
}

impl pods::PodLookup for CacheLookup {
    fn job(&self, namespace: &str, name: &str) -> Option<Arc<GpuJob>> {
        let j = self.jobs.get(&ObjectRef::new(name).within(namespace))?;
        j.0.as_ref().ok().map(|j| Arc::new(j.clone()))
    }

    fn queue(&self, name: &str) -> Option<Arc<GpuQueue>> {
        review::Lookup::queue(self, name)
    }

    fn pool(&self, name: &str) -> Option<Arc<spillway_api::ComputePool>> {
        let p = self.pools.get(&ObjectRef::new(name))?;
        p.0.as_ref().ok().map(|p| Arc::new(p.clone()))
    }

    fn settings(&self) -> &pods::PodSettings {
        &self.pod_settings
    }
}

impl review::Lookup for CacheLookup {
    fn queue(&self, name: &str) -> Option<Arc<GpuQueue>> {
        let q = self.queues.get(&ObjectRef::new(name))?;
        q.0.as_ref().ok().map(|q| Arc::new(q.clone()))
    }

    fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.get(&ObjectRef::new(name))
    }

    fn cloud_readers(&self, dataset: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .jobs
            .state()
            .iter()
            .filter_map(|g| g.0.as_ref().ok())
            .filter(|j| j.spec.datasets.iter().any(|d| d == dataset))
            .filter(|j| {
                j.status.as_ref().is_some_and(|s| {
                    s.environment == Some(Environment::Cloud)
                        && matches!(s.phase, Some(JobPhase::Provisioning | JobPhase::Running))
                })
            })
            .map(|j| {
                format!(
                    "{}/{}",
                    j.metadata.namespace.as_deref().unwrap_or_default(),
                    j.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// What one review came to, for the metrics: the kind and `allowed`, `warned` or `refused`.
pub type Outcome = (String, &'static str);

/// The answer to one AdmissionReview (a body the API server sent).
pub fn answer(body: &[u8], world: &dyn review::Lookup) -> Result<(Vec<u8>, Outcome), String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e| format!("an AdmissionReview without a request: {e}"))?;
    let mut response = AdmissionResponse::from(&request);
    let mut result = "allowed";
    if matches!(request.operation, Operation::Create | Operation::Update)
        && request.kind.group == spillway_api::GROUP
        && let Some(object) = &request.object
    {
        let to_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        let old = request.old_object.as_ref().map(to_json);
        let verdict = review::review(&request.kind.kind, &to_json(object), old.as_ref(), world);
        if !verdict.refusals.is_empty() {
            tracing::info!(kind = %request.kind.kind, name = %request.name, namespace = ?request.namespace, reason = %verdict.message(), "admission refused");
            response = response.deny(verdict.message());
            result = "refused";
        }
        if !verdict.warnings.is_empty() {
            response.warnings = Some(verdict.warnings);
            if result == "allowed" {
                result = "warned";
            }
        }
    }
    let out = serde_json::to_vec(&response.into_review()).map_err(|e| e.to_string())?;
    Ok((out, (request.kind.kind.clone(), result)))
}

fn respond(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle<B>(
    req: Request<B>,
    world: CacheLookup,
    metrics: Arc<Metrics>,
    limits: Limits,
    at_once: Arc<Semaphore>,
) -> Response<Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mutate = match req.uri().path() {
        "/validate" => false,
        "/mutate" => true,
        _ => {
            return respond(
                StatusCode::NOT_FOUND,
                br#"{"error":"POST /validate or /mutate"}"#.to_vec(),
            );
        }
    };
    if req.method() != Method::POST {
        return respond(
            StatusCode::NOT_FOUND,
            br#"{"error":"POST /validate or /mutate"}"#.to_vec(),
        );
    }
    let Ok(Ok(_turn)) = tokio::time::timeout(QUEUE_WAIT, at_once.acquire_owned()).await else {
        return respond(
            StatusCode::SERVICE_UNAVAILABLE,
            br#"{"error":"too many reviews at once"}"#.to_vec(),
        );
    };
    let body = match crate::serve::read_body(req.into_body(), MAX_REVIEW_BYTES, "webhook", &limits)
        .await
    {
        Ok(b) => b,
        Err(BodyError::Refused(Refusal::TooLarge)) => {
            return respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    r#"{{"error":"an AdmissionReview of more than {MAX_REVIEW_BYTES} bytes"}}"#
                )
                .into_bytes(),
            );
        }
        Err(BodyError::Refused(_)) => {
            return respond(
                StatusCode::REQUEST_TIMEOUT,
                br#"{"error":"the review did not arrive in time"}"#.to_vec(),
            );
        }
        Err(BodyError::Failed(e)) => {
            return respond(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": e }).to_string().into_bytes(),
            );
        }
    };
    let answered = if mutate {
        mutate::answer(&body, &world)
    } else {
        answer(&body, &world)
    };
    match answered {
        Ok((out, (kind, result))) => {
            metrics.webhook_review(&kind, result);
            respond(StatusCode::OK, out)
        }
        Err(e) => {
            metrics.webhook_review("", "malformed");
            respond(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"error": e}).to_string().into_bytes(),
            )
        }
    }
}

/// Serves the webhook over TLS until the task is dropped, within `limits`. Connections wait for
/// a certificate (the handshake fails, so the API server applies the configuration's
/// `failurePolicy`) until the keeper has loaded one.
pub async fn serve(
    listener: TcpListener,
    resolver: Arc<Resolver>,
    world: CacheLookup,
    metrics: Arc<Metrics>,
    limits: Limits,
) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = match rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_no_client_auth().with_cert_resolver(resolver),
        Err(e) => {
            tracing::error!(error = %e, "webhook: TLS cannot be set up; not serving");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let at_once = Arc::new(Semaphore::new(REVIEWS_AT_ONCE));
    crate::serve::accept_each(listener, "webhook", limits, move |stream| {
        let (acceptor, world, metrics) = (acceptor.clone(), world.clone(), metrics.clone());
        let at_once = at_once.clone();
        async move {
            let Some(stream) = crate::serve::tls(&acceptor, stream, "webhook", &limits).await
            else {
                return;
            };
            let service = service_fn(move |req| {
                let (world, metrics, at_once) = (world.clone(), metrics.clone(), at_once.clone());
                async move {
                    Ok::<_, Infallible>(handle(req, world, metrics, limits, at_once).await)
                }
            });
            if let Err(e) = crate::serve::http1(&limits)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "webhook: connection ended with an error");
            }
        }
    })
    .await
}

/// Keeps the certificate: every minute (or a tenth of its lifetime), reads the Secret, renews
/// it when self-signed and due, keeps the `caBundle` current and serves what the Secret holds.
pub async fn keep(client: Client, config: WebhookConfig, resolver: Arc<Resolver>) {
    let period = Duration::from_secs(60)
        .min(config.lifetime / 10)
        .max(Duration::from_secs(1));
    loop {
        let wait = match pass(&client, &config, &resolver).await {
            Ok(()) => period,
            Err(e) => {
                tracing::warn!(error = %e, secret = %format!("{}/{}", config.namespace, config.secret), "webhook certificate not kept this time");
                period.min(Duration::from_secs(10))
            }
        };
        tokio::time::sleep(wait).await;
    }
}

async fn pass(client: &Client, config: &WebhookConfig, resolver: &Resolver) -> Result<(), String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let mut secret = secrets
        .get_opt(&config.secret)
        .await
        .map_err(|e| e.to_string())?;
    if config.self_signed {
        let now = crate::clock::now().as_millis() / 1000;
        let held = secret.as_ref().and_then(certs::Material::from_secret);
        let lifetime = config.lifetime.as_secs() as i64;
        if let Some(new) = certs::renewed(held.as_ref(), &config.hosts, lifetime, now)
            .map_err(|e| e.to_string())?
        {
            // Trust the new CA before any replica serves a certificate it signed.
            if let Some(name) = &config.configuration {
                set_ca_bundle(client, name, &new.bundle()).await?;
            }
            let object = new.to_secret(&config.namespace, &config.secret);
            secrets
                .patch(
                    &config.secret,
                    &PatchParams::apply(labels::FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(secret = %config.secret, not_after = new.not_after, ca_rotated = held.as_ref().is_none_or(|h| h.ca_pem != new.ca_pem), "webhook certificate made");
            // Another replica may have written at the same moment: serve what was stored.
            secret = secrets
                .get_opt(&config.secret)
                .await
                .map_err(|e| e.to_string())?;
        }
        if let (Some(name), Some(m)) = (
            &config.configuration,
            secret.as_ref().and_then(certs::Material::from_secret),
        ) {
            set_ca_bundle(client, name, &m.bundle()).await?;
        }
    }
    match secret.as_ref().and_then(certs::serving_pair) {
        Some((cert, key)) => {
            if resolver.load(&cert, &key)? {
                tracing::info!(secret = %config.secret, "webhook serving certificate loaded");
            }
            Ok(())
        }
        None => Err(format!(
            "Secret {}/{} holds no tls.crt and tls.key yet",
            config.namespace, config.secret
        )),
    }
}

/// Sets every webhook's `caBundle` of the configurations named `name` (the validating one, and
/// the mutating one that holds labelled workloads) to `bundle` (PEM), when it is not that
/// already. A configuration that does not exist (yet) is left to be made.
async fn set_ca_bundle(client: &Client, name: &str, bundle: &str) -> Result<(), String> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let kinds = [
        kube::core::ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        kube::core::ApiResource::erase::<MutatingWebhookConfiguration>(&()),
    ];
    let want = base64_of(bundle.as_bytes());
    for (i, resource) in kinds.iter().enumerate() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
        let Some(current) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
            if i == 0 {
                tracing::warn!(configuration = %name, "ValidatingWebhookConfiguration not found; its caBundle is set once it exists");
            }
            continue;
        };
        let mut hooks = current.data["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if hooks
            .iter()
            .all(|h| h["clientConfig"]["caBundle"].as_str() == Some(want.as_str()))
        {
            continue;
        }
        for h in &mut hooks {
            h["clientConfig"]["caBundle"] = serde_json::Value::String(want.clone());
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "webhooks": hooks,
        });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(configuration = %name, kind = %resource.kind, "webhook caBundle updated");
    }
    Ok(())
}

/// Standard base64 with padding, as the API serves a `caBundle`.
fn base64_of(bytes: &[u8]) -> String {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}
