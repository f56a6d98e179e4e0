//! `spillway`: one binary for the operator, the simulator, the policy tools and the kubectl
//! plugin (installed as `kubectl-spillway`).
//!
//! This crate only wires the layers below it together; it holds no scheduling logic. The
//! `cluster` feature (on by default) adds the operator and the kubectl plugin; without it the
//! binary is the simulator and the offline policy tools, with no Kubernetes client, AWS SDK or
//! async runtime.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod explain;
#[cfg(feature = "cluster")]
mod identity_cmd;
#[cfg(feature = "cluster")]
mod kubectl;
#[cfg(feature = "cluster")]
mod operator_cmd;
mod policy_cmd;
mod replay_jobs;
mod simulate;

#[derive(Parser, Debug)]
#[command(
    name = "spillway",
    version,
    about = "Private-first GPU scheduling that bursts to the cloud"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Explain the decision for one job, offline, with every rule evaluated.
    Explain(Box<explain::ExplainArgs>),
    /// Queues and pools at a glance (from the cluster).
    #[cfg(feature = "cluster")]
    Status(kubectl::overview::StatusArgs),
    /// GpuJobs with where they run and why (from the cluster).
    #[cfg(feature = "cluster")]
    Jobs(kubectl::jobs::JobsArgs),
    /// GpuQueues: quota, jobs, GPUs in use, spend against budget (from the cluster).
    #[cfg(feature = "cluster")]
    Queues(kubectl::overview::QueuesArgs),
    /// ComputePools: nodes, GPUs, instances, spend, launch health (from the cluster).
    #[cfg(feature = "cluster")]
    Pools(kubectl::overview::PoolsArgs),
    /// What GPUs have cost: queues' and cloud pools' spend this month, jobs' accrued cost.
    #[cfg(feature = "cluster")]
    Cost(kubectl::cost::CostArgs),
    /// Chargeback: per namespace and queue, GPU-hours, cost and indicators over a window.
    #[cfg(feature = "cluster")]
    Report(kubectl::report::ReportArgs),
    /// The cluster's finished jobs as a `spillway simulate` trace, on stdout.
    #[cfg(feature = "cluster")]
    ExportTrace(kubectl::export::ExportTraceArgs),
    /// What each pool's GPUs come with (driver, CUDA, GPU, kernel, runtime), drift flagged.
    #[cfg(feature = "cluster")]
    Parity(kubectl::parity::ParityArgs),
    /// Run the operator (the controllers) against a cluster.
    #[cfg(feature = "cluster")]
    Operator(Box<operator_cmd::OperatorArgs>),
    /// Work with BurstPolicy files.
    Policy {
        #[command(subcommand)]
        command: policy_cmd::PolicyCommand,
    },
    /// Replay a GPU trace with no cluster and no cloud, comparing strategies.
    Simulate(Box<simulate::SimulateArgs>),
    /// Workload tokens: verify one against an issuer's JWKS.
    #[cfg(feature = "cluster")]
    Token {
        #[command(subcommand)]
        command: identity_cmd::TokenCommand,
    },
    /// The workload identity issuer: publish its documents as static files.
    #[cfg(feature = "cluster")]
    Identity {
        #[command(subcommand)]
        command: identity_cmd::IdentityCommand,
    },
    /// Print the CustomResourceDefinitions of all Spillway kinds (the YAML in crds/).
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Write the field reference (Markdown, one page per kind and an index) into this
        /// directory (docs/reference in the repository).
        #[arg(long, value_name = "DIR")]
        reference: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Simulate(args) => simulate::run(*args),
        Command::Policy { command } => Ok(policy_cmd::run(command)),
        #[cfg(feature = "cluster")]
        Command::Explain(args) if explain::is_live(&args) => {
            Ok(kubectl::explain::explain_live(&args))
        }
        Command::Explain(args) => Ok(explain::run(*args)),
        #[cfg(feature = "cluster")]
        Command::Operator(args) => operator_cmd::run(*args),
        #[cfg(feature = "cluster")]
        Command::Status(args) => Ok(kubectl::run(|| kubectl::overview::status(args))),
        #[cfg(feature = "cluster")]
        Command::Jobs(args) => Ok(kubectl::run(|| kubectl::jobs::jobs(args))),
        #[cfg(feature = "cluster")]
        Command::Queues(args) => Ok(kubectl::run(|| kubectl::overview::queues(args))),
        #[cfg(feature = "cluster")]
        Command::Pools(args) => Ok(kubectl::run(|| kubectl::overview::pools(args))),
        #[cfg(feature = "cluster")]
        Command::Cost(args) => Ok(kubectl::run(|| kubectl::cost::cost(args))),
        #[cfg(feature = "cluster")]
        Command::Parity(args) => Ok(kubectl::run(|| kubectl::parity::run(args))),
        #[cfg(feature = "cluster")]
        Command::Report(args) => Ok(kubectl::run(|| kubectl::report::run(args))),
        #[cfg(feature = "cluster")]
        Command::ExportTrace(args) => Ok(kubectl::run(|| kubectl::export::run(args))),
        #[cfg(feature = "cluster")]
        Command::Token { command } => identity_cmd::token(command),
        #[cfg(feature = "cluster")]
        Command::Identity { command } => identity_cmd::identity(command),
        Command::Crds { out, reference } => {
            match reference {
                Some(dir) => write_reference(&dir)?,
                None => crds(out)?,
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A Kubernetes client configuration from `--kubeconfig`/`--context`, else the standard places.
#[cfg(feature = "cluster")]
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await.context(
            "no kubeconfig found (pass --kubeconfig, set KUBECONFIG, or run in a cluster)",
        )?,
    })
}

/// A Kubernetes client from `--kubeconfig`/`--context`, else the standard places.
#[cfg(feature = "cluster")]
pub async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(
        kube_config(kubeconfig, context).await?,
    )?)
}

fn crds(out: Option<PathBuf>) -> anyhow::Result<()> {
    match out {
        None => print!("{}", spillway_api::crds_yaml()?),
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in spillway_api::crds() {
                let path = dir.join(spillway_api::crd_file_name(&crd));
                std::fs::write(&path, spillway_api::crd_yaml(&crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}

fn write_reference(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let crds = spillway_api::crds();
    let mut files = vec![(
        "README.md".to_string(),
        spillway_api::reference::index(&crds),
    )];
    for crd in &crds {
        files.push((
            spillway_api::reference::file_name(crd),
            spillway_api::reference::markdown(crd),
        ));
    }
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
