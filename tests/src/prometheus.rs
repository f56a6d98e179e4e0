//! A real Prometheus server (Debian's, beside the promtool `scripts/promtool.sh` fetches;
//! `SPILLWAY_PROMTOOL` names that promtool) scraping a test's operator every second, with the
//! chart's alerting rules loaded, and its HTTP query API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::process::{Server, free_port, temp_dir};

/// promtool, from `SPILLWAY_PROMTOOL`.
pub fn promtool() -> anyhow::Result<PathBuf> {
    let p = std::env::var_os("SPILLWAY_PROMTOOL").context(
        "SPILLWAY_PROMTOOL is not set: run the tests with scripts/test.sh (scripts/promtool.sh)",
    )?;
    Ok(PathBuf::from(p))
}

/// A Prometheus server of the test.
pub struct Prometheus {
    pub addr: SocketAddr,
    server: Server,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`host:port`, path `/metrics`) every second and
    /// evaluating `rules` (a rule file) every second.
    pub fn start(target: &str, rules: &Path) -> anyhow::Result<Prometheus> {
        Prometheus::start_with(&[target], Some(rules))
    }

    /// Starts Prometheus scraping each of `targets` every second, with `rules` if any.
    pub fn start_with(targets: &[&str], rules: Option<&Path>) -> anyhow::Result<Prometheus> {
        let tool = promtool()?;
        let bin = tool.with_file_name("prometheus");
        anyhow::ensure!(bin.exists(), "no prometheus beside {}", tool.display());
        let dir = temp_dir("prometheus")?;
        let config = dir.join("prometheus.yml");
        let rule_files = rules
            .map(|r| format!("rule_files:\n  - {}\n", r.display()))
            .unwrap_or_default();
        let targets = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}scrape_configs:\n  - job_name: spillway\n    static_configs:\n      - targets: [{targets}]\n",
            ),
        )?;
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let server = Server::start(
            &dir,
            "prometheus",
            &bin,
            &[
                format!("--config.file={}", config.display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address={addr}"),
            ],
            &[],
        )?;
        Ok(Prometheus { addr, server })
    }

    pub fn log_tail(&self) -> String {
        self.server.log_tail(4000)
    }

    /// Kills the server (as a crash): what an unreachable Prometheus is.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.server.crash()
    }

    /// `GET path` of the API, its JSON.
    async fn get(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        let (code, _, body) = crate::operator::http_get(self.addr, path).await?;
        // The server answers chunked: the JSON is the line that starts with `{`.
        let json = body
            .lines()
            .find(|l| l.trim_start().starts_with('{'))
            .unwrap_or("");
        let v: serde_json::Value =
            serde_json::from_str(json).with_context(|| format!("{path}: HTTP {code}: {body}"))?;
        Ok(v)
    }

    /// Evaluates `expr` now: its result vector, or the server's error.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let v = self
            .get(&format!("/api/v1/query?query={}", encode(expr)))
            .await?;
        anyhow::ensure!(v["status"] == "success", "{expr}: {v}");
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// The loaded rules, as `/api/v1/rules` lists them.
    pub async fn rules(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let v = self.get("/api/v1/rules").await?;
        Ok(v["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Waits until Prometheus answers and has scraped the target at least `n` times.
    pub async fn wait_scraped(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        loop {
            if let Ok(r) = self.query("count_over_time(up[5m])").await
                && r.first()
                    .and_then(|s| s["value"][1].as_str())
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|c| c >= n as f64)
            {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() < timeout,
                "Prometheus did not scrape {n} times in {timeout:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The metric names an expression reads (`spillway_…`).
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("spillway_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        if !out.contains(&name) {
            out.push(name);
        }
        rest = &tail[end..];
    }
    out
}
