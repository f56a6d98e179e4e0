//! `spillway operator`: runs the controllers against a cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use spillway_k8s::{Election, Metrics, OperatorConfig, Settings};
use tokio::sync::watch;

/// Run the Spillway operator: watch GpuJobs and friends, decide, and run the jobs.
#[derive(Args, Debug)]
pub struct OperatorArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Also load BurstPolicy files from this directory (for example a mounted ConfigMap);
    /// re-read every resync period. A cluster BurstPolicy of the same name wins.
    #[arg(long, value_name = "DIR")]
    pub policy_dir: Option<PathBuf>,
    /// Elect a leader through a Lease so that several replicas can run, one active.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, value_name = "NS")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, value_name = "NAME", default_value = "spillway-operator")]
    pub leader_election_id: String,
    /// How long a leader's Lease lasts without renewal before another replica may take it,
    /// in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub lease_duration: u64,
    /// How long the leader keeps trying to renew its Lease before it stops acting, in seconds
    /// (shorter than --lease-duration).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub renew_deadline: u64,
    /// How often the leader renews its Lease and the others try to take it, in seconds
    /// (shorter than --renew-deadline).
    #[arg(long, value_name = "SECONDS", default_value_t = 2)]
    pub retry_period: u64,
    /// Burst to the cloud (false: ComputePools with `aws` get no offerings and no cloud call is
    /// made).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub cloud: bool,
    /// The value of the `spillway.io/cluster` tag on this cluster's cloud instances. Spillway
    /// lists, adopts and garbage-collects only instances with this tag: give every cluster
    /// sharing an AWS account its own.
    #[arg(long, value_name = "NAME", default_value = "spillway")]
    pub cluster_name: String,
    /// Price catalog (SkyPilot CSV: InstanceType, AcceleratorName, AcceleratorCount, ...,
    /// Price, SpotPrice, Region, AvailabilityZone); default: the bundled us-east-1 catalog.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// How often cloud instances are listed, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub cloud_poll: u64,
    /// A cloud instance whose node has not joined after this many seconds is terminated and
    /// its need planned again.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub join_timeout: u64,
    /// A cloud instance of this cluster that no need wants and no node runs on is terminated
    /// after this many seconds (it may be a launch whose response was lost, or a need that
    /// went away).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub gc_grace: u64,
    /// An offering whose launch failed for lack of capacity is skipped for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub capacity_cooldown: u64,
    /// The API server URL launched machines join through (default: the kubeconfig's server).
    #[arg(long, value_name = "URL")]
    pub join_api_server: Option<String>,
    /// The cluster CA (PEM) launched machines trust (default: the kubeconfig's CA).
    #[arg(long, value_name = "FILE")]
    pub join_ca_file: Option<PathBuf>,
    /// A full decision cycle at least this often, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub resync: u64,
    /// The OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`) of pods whose ComputePool and
    /// GpuQueue name none (default: the operator's own `OTEL_EXPORTER_OTLP_ENDPOINT`, if set).
    #[arg(long, value_name = "URL")]
    pub pod_otlp_endpoint: Option<String>,
    /// Prometheus' base URL, to read each running job's GPU utilization from dcgm-exporter's
    /// series (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, else `DCGM_FI_DEV_GPU_UTIL`). Unset: not read.
    #[arg(long, value_name = "URL")]
    pub prometheus_url: Option<String>,
    /// A file holding a bearer token for Prometheus (read at each query).
    #[arg(long, value_name = "FILE")]
    pub prometheus_bearer_token_file: Option<PathBuf>,
    /// Seconds between utilization queries of Prometheus.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub utilization_interval: u64,
    /// The only namespaces whose GpuJobs this operator runs (comma-separated; the chart's
    /// `rbac.jobNamespaces`, where its Roles let it create pods). A GpuJob elsewhere is
    /// `Invalid` and never placed. Empty: every namespace.
    #[arg(long, value_name = "NS,...", value_delimiter = ',')]
    pub job_namespaces: Vec<String>,
    /// The kinds of workload queued and run when labelled `spillway.io/queue: <GpuQueue>`
    /// (comma-separated, Kueue's names: `batch/job`, `pod`, `jobset.x-k8s.io/jobset`,
    /// `trainer.kubeflow.org/trainjob`, `ray.io/rayjob`; empty: only GpuJobs). A kind the cluster does not serve is skipped with a log line (docs/workloads.md).
    #[arg(
        long,
        value_name = "KIND,...",
        value_delimiter = ',',
        default_value = "batch/job,pod,jobset.x-k8s.io/jobset,trainer.kubeflow.org/trainjob,ray.io/rayjob"
    )]
    pub integrations: Vec<String>,
    /// Issue workload identity tokens to every GpuJob's pods and serve the issuer.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub identity: bool,
    /// Address of the identity issuer's OIDC discovery document and JWKS.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    pub identity_addr: SocketAddr,
    /// The issuer URL: the `iss` of every token (default: the in-cluster Service,
    /// https://spillway-identity.NAMESPACE.svc). Verifiers fetch
    /// ISSUER/.well-known/openid-configuration.
    #[arg(long, value_name = "URL")]
    pub identity_issuer: Option<String>,
    /// An audience of the tokens (repeatable); a GpuQueue may narrow them.
    #[arg(long = "identity-audience", value_name = "AUD", default_values_t = ["spillway".to_string()])]
    pub identity_audiences: Vec<String>,
    /// How long a token is valid (refreshed at 80 %), such as `1h`.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub identity_token_lifetime: String,
    /// How long a signing key signs before the next one takes over, such as `7d`.
    #[arg(long, value_name = "DURATION", default_value = "7d")]
    pub identity_key_rotation: String,
    /// Algorithm of new signing keys: ES256 or RS256.
    #[arg(long, value_name = "ALG", default_value = "ES256")]
    pub identity_algorithm: String,
    /// TLS certificate (PEM chain) of the issuer's endpoint; with --identity-tls-key it serves
    /// HTTPS.
    #[arg(long, value_name = "FILE", requires = "identity_tls_key")]
    pub identity_tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of the issuer's endpoint.
    #[arg(long, value_name = "FILE", requires = "identity_tls_cert")]
    pub identity_tls_key: Option<PathBuf>,
    /// Name of the Secret that keeps the issuer's signing keys, in the operator's namespace
    /// ($POD_NAMESPACE, else the leader election namespace).
    #[arg(long, value_name = "NAME", default_value = "spillway-identity-keys")]
    pub identity_keys_secret: String,
    /// Name of the ConfigMap, in the operator's namespace, that keeps each queue's and cloud
    /// pool's month of spend besides their status, so a queue deleted and applied again keeps
    /// it (docs/operations.md). Empty: status only.
    #[arg(long, value_name = "NAME", default_value = "spillway-spend")]
    pub spend_ledger: String,
    /// Name of the ConfigMap, in the operator's namespace, that keeps each queue's indicators
    /// (time to start, GPU-hours, recovery, cost per run) by day for 31 days, so a restart or
    /// failover loses none (docs/indicators.md). Empty: memory and status only.
    #[arg(long, value_name = "NAME", default_value = "spillway-indicators")]
    pub indicator_ledger: String,
    /// Serve the validating admission webhook (every replica) on --webhook-addr.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub webhook: bool,
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9443")]
    pub webhook_addr: SocketAddr,
    /// The Secret (in the operator's namespace) holding the webhook's certificate.
    #[arg(long, value_name = "NAME", default_value = "spillway-webhook-tls")]
    pub webhook_secret: String,
    /// Make and renew the webhook's certificate (and its CA) and keep the caBundle of
    /// --webhook-configuration current. False: another (cert-manager) writes both.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub webhook_self_signed: bool,
    /// A host name (or IP address) the serving certificate is for, such as
    /// `spillway-webhook.spillway-system.svc`; repeat for more.
    #[arg(long = "webhook-host", value_name = "HOST")]
    pub webhook_hosts: Vec<String>,
    /// How long a self-made serving certificate is valid (renewed with a third left), such as
    /// `90d`. Its CA lives ten times as long.
    #[arg(long, value_name = "DURATION", default_value = "90d")]
    pub webhook_cert_lifetime: String,
    /// The ValidatingWebhookConfiguration whose caBundle a self-signing operator keeps current.
    #[arg(long, value_name = "NAME", default_value = "spillway")]
    pub webhook_configuration: String,
}

pub fn run(args: OperatorArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let metrics = Arc::new(Metrics::default());
        // Traces over OTLP when the standard OTEL_* variables name an endpoint.
        let telemetry = spillway_k8s::otel::Telemetry::from_env(metrics.clone())?;
        init_logging(telemetry.as_ref().map(|t| t.tracer()));
        if telemetry.is_some() {
            tracing::info!("exporting traces over OTLP");
        }
        let kube_config =
            crate::kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        let join = join_config(&args, &kube_config)?;
        let client = kube::Client::try_from(kube_config)?;
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "spillway".into());
            format!("{host}-{}", std::process::id())
        });
        let election = args.leader_elect.then(|| Election {
            lease_duration: Duration::from_secs(args.lease_duration),
            renew_deadline: Duration::from_secs(args.renew_deadline),
            retry_period: Duration::from_secs(args.retry_period),
            ..Election::new(
                &args
                    .leader_election_namespace
                    .clone()
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| "default".into()),
                &args.leader_election_id,
                &identity,
            )
        });
        if let Some(e) = &election {
            e.check().map_err(|why| {
                anyhow::anyhow!("--lease-duration, --renew-deadline, --retry-period: {why}")
            })?;
        }
        let catalog_text = match &args.catalog {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?,
            None => spillway_k8s::cloud::DEFAULT_CATALOG.to_string(),
        };
        let catalog = spillway_core::catalog::parse(&catalog_text).map_err(|e| {
            anyhow::anyhow!(
                "{}:{e}",
                args.catalog
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "bundled catalog".into())
            )
        })?;
        let factory: spillway_k8s::cloud::ProviderFactory = Arc::new(|region: String| {
            Box::pin(async move {
                let p = spillway_aws::Ec2Provider::from_env(&region, Default::default()).await;
                Arc::new(p) as Arc<dyn spillway_cloud::CloudProvider>
            })
        });
        let cloud = spillway_k8s::cloud::CloudConfig {
            cluster: args.cluster_name.clone(),
            factory,
            catalog,
            poll: Duration::from_secs(args.cloud_poll.max(1)),
            join_timeout: Duration::from_secs(args.join_timeout.max(1)),
            gc_grace: Duration::from_secs(args.gc_grace.max(1)),
            capacity_cooldown: Duration::from_secs(args.capacity_cooldown),
            join,
            notices: Some(Arc::new(|region: String| {
                Box::pin(async move {
                    let q = spillway_aws::SqsQueue::from_env(&region, Default::default()).await;
                    Arc::new(q) as Arc<dyn spillway_cloud::notices::NoticeQueue>
                })
            })),
        };
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        let issuer = args
            .identity
            .then(|| identity_config(&args, &namespace))
            .transpose()?;
        let webhook = args
            .webhook
            .then(|| webhook_config(&args, &namespace))
            .transpose()?;
        let config = OperatorConfig {
            webhook,
            metrics_addr: args.metrics_addr,
            election,
            controller: Settings {
                policy_dir: args.policy_dir.clone(),
                resync: Duration::from_secs(args.resync.max(1)),
                instance: identity,
                cloud: args.cloud.then_some(cloud),
                identity: issuer,
                job_namespaces: (!args.job_namespaces.is_empty())
                    .then(|| Arc::new(args.job_namespaces.iter().cloned().collect())),
                integrations: (args.integrations.iter())
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
                pod_otlp_endpoint: args
                    .pod_otlp_endpoint
                    .clone()
                    .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
                    .filter(|e| !e.trim().is_empty()),
                spend_record: (!args.spend_ledger.is_empty()).then(|| {
                    spillway_k8s::spend_record::RecordRef {
                        namespace: namespace.clone(),
                        name: args.spend_ledger.clone(),
                    }
                }),
                indicator_record: (!args.indicator_ledger.is_empty()).then(|| {
                    spillway_k8s::spend_record::RecordRef {
                        namespace: namespace.clone(),
                        name: args.indicator_ledger.clone(),
                    }
                }),
                utilization: args
                    .prometheus_url
                    .clone()
                    .filter(|u| !u.trim().is_empty())
                    .map(|url| spillway_k8s::utilization::UtilizationConfig {
                        prometheus_url: url,
                        bearer_token_file: args.prometheus_bearer_token_file.clone(),
                        every: Duration::from_secs(args.utilization_interval.max(5)),
                    }),
                ..Settings::default()
            },
        };
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            let _ = shutdown_tx.send(true);
        });
        let result = spillway_k8s::run(client, config, metrics, shutdown_rx).await;
        if let Some(t) = telemetry {
            t.shutdown().await;
        }
        result?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The identity issuer's settings from the flags.
fn identity_config(
    args: &OperatorArgs,
    namespace: &str,
) -> anyhow::Result<spillway_k8s::identity::IdentityConfig> {
    let duration = |flag: &str, v: &str| {
        spillway_core::Duration::parse(v).map_err(|e| anyhow::anyhow!("{flag} {v:?}: {e}"))
    };
    let schedule = spillway_identity::Schedule {
        token_lifetime: duration("--identity-token-lifetime", &args.identity_token_lifetime)?,
        rotation: duration("--identity-key-rotation", &args.identity_key_rotation)?,
        algorithm: spillway_identity::Algorithm::parse(&args.identity_algorithm)
            .map_err(|e| anyhow::anyhow!("--identity-algorithm: {e}"))?,
    };
    schedule.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    let issuer = args
        .identity_issuer
        .clone()
        .unwrap_or_else(|| format!("https://spillway-identity.{namespace}.svc"));
    if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
        anyhow::bail!("--identity-issuer {issuer:?} must be an https:// URL");
    }
    Ok(spillway_k8s::identity::IdentityConfig {
        issuer: issuer.trim_end_matches('/').to_string(),
        audiences: args.identity_audiences.clone(),
        schedule,
        namespace: namespace.to_string(),
        secret: args.identity_keys_secret.clone(),
        addr: Some(args.identity_addr),
        tls: match (&args.identity_tls_cert, &args.identity_tls_key) {
            (Some(cert), Some(key)) => Some(spillway_k8s::identity::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        },
    })
}

/// The admission webhook's settings from the flags.
fn webhook_config(
    args: &OperatorArgs,
    namespace: &str,
) -> anyhow::Result<spillway_k8s::webhook::WebhookConfig> {
    let lifetime = spillway_core::Duration::parse(&args.webhook_cert_lifetime).map_err(|e| {
        anyhow::anyhow!(
            "--webhook-cert-lifetime {:?}: {e}",
            args.webhook_cert_lifetime
        )
    })?;
    let lifetime = std::time::Duration::from_millis(lifetime.as_millis());
    if args.webhook_self_signed && lifetime < Duration::from_secs(60) {
        anyhow::bail!("--webhook-cert-lifetime must be at least 1m");
    }
    if args.webhook_self_signed && args.webhook_hosts.is_empty() {
        anyhow::bail!(
            "--webhook-host is needed with --webhook-self-signed: the name the API server calls the webhook by, such as spillway-webhook.{namespace}.svc"
        );
    }
    Ok(spillway_k8s::webhook::WebhookConfig {
        addr: args.webhook_addr,
        namespace: namespace.to_string(),
        secret: args.webhook_secret.clone(),
        hosts: args.webhook_hosts.clone(),
        self_signed: args.webhook_self_signed,
        lifetime,
        configuration: (args.webhook_self_signed && !args.webhook_configuration.is_empty())
            .then(|| args.webhook_configuration.clone()),
    })
}

/// Where launched machines find the API server: flags, else the kubeconfig.
fn join_config(
    args: &OperatorArgs,
    config: &kube::Config,
) -> anyhow::Result<Option<spillway_k8s::bootstrap::JoinConfig>> {
    let api_server = args.join_api_server.clone().unwrap_or_else(|| {
        config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string()
    });
    let ca_pem = match &args.join_ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?,
        ),
        None => config
            .root_cert
            .as_ref()
            .map(|ders| spillway_k8s::bootstrap::pem(ders)),
    };
    match ca_pem {
        Some(ca_pem) => Ok(Some(spillway_k8s::bootstrap::JoinConfig {
            api_server,
            ca_pem,
        })),
        None => {
            tracing::warn!(
                "no cluster CA known (pass --join-ca-file): AMI pools launch without bootstrap user data"
            );
            Ok(None)
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Logs to stderr (`RUST_LOG`, default `info`); with telemetry, Spillway's own spans (the
/// provisioning of a job and its EC2 calls) also go to the OTLP exporter.
fn init_logging(tracer: Option<spillway_k8s::otel::SdkTracer>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let otel = tracer.map(|t| {
        tracing_opentelemetry::layer().with_tracer(t).with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("spillway_k8s", tracing::Level::INFO)
                .with_target("spillway_aws", tracing::Level::INFO),
        )
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
}
