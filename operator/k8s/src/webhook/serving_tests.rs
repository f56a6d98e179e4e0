//! The webhook served over TLS as the API server reaches it, with clients that do not behave:
//! idle connections, slow bodies, bodies too large.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector;
use rustls_pki_types::pem::PemObject;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{CacheLookup, Resolver, certs};
use crate::metrics::Metrics;
use crate::serve::Limits;

/// The chart's `webhook.timeoutSeconds`: the API server gives up on a review after this.
const API_SERVER_TIMEOUT: Duration = Duration::from_secs(5);

const LIMITS: Limits = Limits {
    max_connections: 512,
    handshake: Duration::from_secs(2),
    header_read: Duration::from_secs(2),
    body_read: Duration::from_secs(2),
    lifetime: Duration::from_secs(60),
};

/// A webhook serving a fresh self-signed certificate, and a TLS connector trusting it.
async fn webhook() -> (std::net::SocketAddr, tokio_rustls::TlsConnector) {
    let now = crate::clock::now().as_millis() / 1000;
    let m = certs::renewed(None, &["127.0.0.1".to_string()], 90 * 86_400, now)
        .unwrap()
        .unwrap();
    let resolver = Arc::new(Resolver::default());
    resolver
        .load(m.cert_pem.as_bytes(), m.key_pem.as_bytes())
        .unwrap();
    let world = CacheLookup {
        queues: reflector::store().0,
        namespaces: reflector::store().0,
        jobs: reflector::store().0,
        pools: reflector::store().0,
        pod_settings: Default::default(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(super::serve(
        listener,
        resolver,
        world,
        Arc::new(Metrics::default()),
        LIMITS,
    ));
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for ca in rustls_pki_types::CertificateDer::pem_slice_iter(m.bundle().as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (addr, tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn review() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "spillway.io", "version": "v1alpha1", "kind": "GpuJob"},
            "resource": {"group": "spillway.io", "version": "v1alpha1", "resource": "gpujobs"},
            "name": "j", "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": "j", "namespace": "ml"},
                "spec": {"queue": "research", "gpusPerReplica": 1,
                    "template": {"spec": {"containers": [{"name": "t", "image": "busybox"}]}}}},
            "oldObject": null, "dryRun": false,
        },
    }))
    .unwrap()
}

/// Sends `head` (and `body`) over TLS and reads the whole answer (the request says
/// `Connection: close`).
async fn post(
    addr: std::net::SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    head: &str,
    body: &[u8],
) -> std::io::Result<String> {
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut s = tls.connect(name, tcp).await?;
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn head(length: usize) -> String {
    format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_answered_while_300_idle_clients_hold_connections() {
    let (addr, tls) = webhook().await;
    // 300 clients that connect and say nothing, not even a TLS hello.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let body = review();
    let answer = tokio::time::timeout(
        API_SERVER_TIMEOUT,
        post(addr, &tls, &head(body.len()), &body),
    )
    .await
    .expect("answered within the API server's timeout")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("705ab4f5-6393-11e8-b7cc-42010a800002"),
        "{answer}"
    );
    // The idle clients are let go once the handshake deadline passes.
    let mut buf = [0u8; 16];
    for s in idle.iter_mut().take(10) {
        let read = tokio::time::timeout(LIMITS.handshake * 3, s.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "an idle client was kept past the handshake deadline: {read:?}"
        );
    }
}

#[tokio::test]
async fn a_review_too_large_is_refused_unread_and_a_slow_one_is_cut_off() {
    let (addr, tls) = webhook().await;
    // Says it will send 4 MiB: refused at once, before a byte of it arrives.
    let answer = tokio::time::timeout(
        API_SERVER_TIMEOUT,
        post(addr, &tls, &head(4 * 1024 * 1024), b""),
    )
    .await
    .expect("answered at once")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // Sends a few bytes of its body and then nothing: cut off at the body's deadline.
    let body = review();
    let answer = tokio::time::timeout(
        LIMITS.body_read * 3,
        post(addr, &tls, &head(body.len()), &body[..10]),
    )
    .await
    .expect("cut off at the body's deadline")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}
