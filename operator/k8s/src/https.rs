//! The HTTP(S) connector Spillway's own clients use (the Prometheus reader, `spillway identity
//! publish`): http or https, trusting the system's CAs and any given, rustls with aws-lc-rs,
//! HTTP/1.1.

use hyper_util::client::legacy::connect::HttpConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;

/// An http-or-https connector.
pub type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// A connector trusting the system's CAs and `extra`.
pub fn connector(extra: Vec<CertificateDer<'static>>) -> Result<Https, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system CA rustls cannot read is one fewer to trust, not a failure.
        let _ = roots.add(cert);
    }
    for cert in extra {
        roots.add(cert).map_err(|e| format!("adding a CA: {e}"))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build())
}
