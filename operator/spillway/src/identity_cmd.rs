//! `spillway token verify` and `spillway identity publish`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use spillway_identity::Verifier;
use spillway_identity::documents::{self, DISCOVERY_PATH, JWKS_PATH};

/// `spillway token ...`
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Verify a workload token: exit 0 and print its claims, or exit 1 with the reason.
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The JWKS: an http(s) URL (the issuer's `/openid/v1/jwks`) or a file.
    #[arg(long, value_name = "URL|FILE")]
    pub jwks: String,
    /// The expected issuer (`iss`).
    #[arg(long, value_name = "ISS")]
    pub issuer: String,
    /// An audience the token must carry (`aud`).
    #[arg(long, value_name = "AUD")]
    pub audience: String,
    /// A CA bundle (PEM) to trust for an https JWKS URL, besides the system's.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// The token, or `-` (the default) to read it from standard input.
    #[arg(value_name = "TOKEN|-", default_value = "-")]
    pub token: String,
}

/// `spillway identity ...`
#[derive(Subcommand, Debug)]
pub enum IdentityCommand {
    /// Write the issuer's discovery document and JWKS as static files (for an S3 bucket or any
    /// static host that AWS STS and other verifiers can reach).
    Publish(PublishArgs),
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// Directory to write `.well-known/openid-configuration` and `openid/v1/jwks` into.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The issuer URL (where the files will be served from), as the operator's
    /// `--identity-issuer`.
    #[arg(long, value_name = "URL")]
    pub issuer: String,
    /// Namespace of the issuer's keys Secret (the operator's namespace).
    #[arg(long, value_name = "NS", default_value = "spillway-system")]
    pub namespace: String,
    /// Name of the issuer's keys Secret.
    #[arg(long, value_name = "NAME", default_value = "spillway-identity-keys")]
    pub secret: String,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

pub fn token(command: TokenCommand) -> anyhow::Result<ExitCode> {
    let TokenCommand::Verify(args) = command;
    let jwks = match read_jwks(&args) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("cannot read the JWKS {}: {e:#}", args.jwks);
            return Ok(ExitCode::FAILURE);
        }
    };
    let token = if args.token == "-" {
        let mut s = String::new();
        std::io::stdin()
            .take(64 * 1024)
            .read_to_string(&mut s)
            .context("reading the token from standard input")?;
        s.trim().to_string()
    } else {
        args.token.trim().to_string()
    };
    let verifier = match Verifier::new(&jwks, &args.issuer, &args.audience) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("token rejected: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    match verifier.verify(&token, spillway_k8s::clock::now()) {
        Ok(claims) => {
            println!("{}", serde_json::to_string_pretty(&claims)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("token rejected: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn read_jwks(args: &VerifyArgs) -> anyhow::Result<Vec<u8>> {
    if args.jwks.starts_with("http://") || args.jwks.starts_with("https://") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(fetch(&args.jwks, args.cacert.as_deref()))
    } else {
        std::fs::read(&args.jwks).with_context(|| format!("reading {}", args.jwks))
    }
}

/// GET `url` (http or https; the system's CAs and `cacert` trusted), with a 10 s limit.
pub async fn fetch(url: &str, cacert: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    let mut extra = Vec::new();
    if let Some(path) = cacert {
        for cert in CertificateDer::pem_file_iter(path)
            .with_context(|| format!("reading {}", path.display()))?
        {
            extra.push(cert.with_context(|| format!("reading {}", path.display()))?);
        }
    }
    let connector = spillway_k8s::https::connector(extra).map_err(|e| {
        anyhow::anyhow!(
            "{e} (from {})",
            cacert.map_or("the system".into(), |p| p.display().to_string())
        )
    })?;
    let client: Client<_, Empty<&'static [u8]>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not a URL"))?;
    let response = tokio::time::timeout(std::time::Duration::from_secs(10), client.get(uri))
        .await
        .context("no answer within 10 s")??;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        anyhow::bail!("HTTP {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body.to_vec())
}

pub fn identity(command: IdentityCommand) -> anyhow::Result<ExitCode> {
    let IdentityCommand::Publish(args) = command;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let secret = runtime.block_on(async {
        let client =
            crate::kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, &args.namespace);
        api.get_opt(&args.secret)
            .await
            .with_context(|| format!("reading Secret {}/{}", args.namespace, args.secret))
    })?;
    let Some(secret) = secret else {
        anyhow::bail!(
            "no Secret {}/{}: has the operator run with this namespace?",
            args.namespace,
            args.secret
        );
    };
    let ring = spillway_k8s::identity::ring_of(&secret)
        .with_context(|| format!("Secret {}/{}", args.namespace, args.secret))?;
    let jwks = serde_json::to_string_pretty(&documents::jwks(&ring)?)?;
    let discovery = serde_json::to_string_pretty(&documents::openid_configuration(&args.issuer))?;
    for (path, body) in [(DISCOVERY_PATH, discovery), (JWKS_PATH, jwks)] {
        let file = args.out.join(path.trim_start_matches('/'));
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&file, body).with_context(|| format!("writing {}", file.display()))?;
        println!("wrote {}", file.display());
    }
    println!(
        "{} key(s) published; serve {} as {} (Content-Type: application/json)",
        ring.keys.len(),
        args.out.display(),
        args.issuer
    );
    Ok(ExitCode::SUCCESS)
}
