//! The kubectl plugin (`kubectl spillway ...`, also `spillway ...`): queues, pools and jobs as
//! kubectl-style tables or as JSON/YAML, what the cluster has cost, and one decision explained
//! from the live cluster.
//!
//! Exit codes, the same for every command: 0 when the answer was printed (an empty list is an
//! answer, said on stderr as kubectl does); 1 when the cluster could not be read or a named
//! object does not exist; 2 for bad usage (an unknown flag, a malformed `--since`).

pub mod chargeback;
pub mod cost;
pub mod explain;
pub mod export;
pub mod history;
pub mod jobs;
pub mod overview;
pub mod parity;
pub mod report;
pub mod report_html;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kube::Client;
use serde::Serialize;

/// Where the cluster is.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Which namespaces (for namespaced kinds).
#[derive(Args, Debug, Clone)]
pub struct ScopeArgs {
    /// Namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
}

/// Whose jobs, for reports over the cluster: every namespace unless one is named.
#[derive(Args, Debug, Clone)]
pub struct JobScopeArgs {
    /// Namespace of the jobs (default: every namespace; `-A` says the same).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Every namespace (the default).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
}

impl JobScopeArgs {
    /// The GpuJobs of this scope.
    pub async fn jobs(&self, client: Client) -> Result<Vec<spillway_api::GpuJob>, Failure> {
        let api = match &self.namespace {
            Some(ns) => kube::Api::namespaced(client, ns),
            None => kube::Api::all(client),
        };
        Ok(api.list(&kube::api::ListParams::default()).await?.items)
    }
}

/// How to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    #[default]
    Table,
    /// Aligned columns, with more of them.
    Wide,
    /// The objects (or the report) as JSON.
    Json,
    /// The objects (or the report) as YAML.
    Yaml,
}

/// `-o`.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What went wrong, by exit code.
pub enum Failure {
    /// The cluster could not be read, or the object is not there (1).
    Cluster(anyhow::Error),
    /// The arguments are wrong (2).
    Usage(String),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Cluster(e.into())
    }
}

/// Runs a command on a small runtime and maps its failure to an exit code.
pub fn run<F>(f: impl FnOnce() -> F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), Failure>>,
{
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(f()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Cluster(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
    }
}

pub async fn client(c: &ClusterArgs) -> Result<Client, Failure> {
    Ok(crate::kube_client(c.kubeconfig.as_deref(), c.context.as_deref()).await?)
}

/// Rows under headers, columns padded as kubectl pads them (three spaces between).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let mut l = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.into_iter().enumerate() {
            if i == last {
                l.push_str(&c);
            } else {
                let pad = widths[i].saturating_sub(c.chars().count());
                l.push_str(&c);
                l.push_str(&" ".repeat(pad + 3));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
    out
}

/// A `List` of objects, as `kubectl get -o json|yaml` prints one.
pub fn print_objects<T: Serialize>(items: &[T], format: Format) -> Result<(), Failure> {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    });
    print_value(&list, format)
}

/// A value as JSON or YAML.
pub fn print_value<T: Serialize>(value: &T, format: Format) -> Result<(), Failure> {
    match format {
        Format::Yaml => print!(
            "{}",
            serde_saphyr::to_string(value).map_err(|e| anyhow::anyhow!("{e}"))?
        ),
        _ => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

/// Age as kubectl prints it (`45s`, `12m`, `5h`, `3d`).
pub fn age(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    let Some(t) = t else {
        return "<unknown>".into();
    };
    let secs = k8s_openapi::jiff::Timestamp::now()
        .duration_since(t.0)
        .as_secs()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A value or `-`.
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// Dollars with cents.
pub fn usd(v: f64) -> String {
    format!("{v:.2}")
}

/// The status and reason of a condition, as `True` / `False (Reason)`.
pub fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> String {
    match conditions.iter().find(|c| c.type_ == type_) {
        None => "-".into(),
        Some(c) if c.status == "True" => "True".into(),
        Some(c) => format!("{} ({})", c.status, c.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell_and_lines_not_trailed() {
        let t = table(
            &["NAME", "GPUS"],
            &[
                vec!["a".into(), "8".into()],
                vec!["long-name".into(), "16".into()],
            ],
        );
        assert_eq!(t, "NAME        GPUS\na           8\nlong-name   16\n");
    }

    #[test]
    fn a_condition_reads_true_or_its_reason() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        let c = |status: &str, reason: &str| Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        };
        assert_eq!(condition(&[c("True", "Valid")], "Ready"), "True");
        assert_eq!(
            condition(&[c("False", "Invalid")], "Ready"),
            "False (Invalid)"
        );
        assert_eq!(condition(&[], "Ready"), "-");
    }
}
