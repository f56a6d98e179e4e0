//! GPU utilization from Prometheus: every minute or so the operator asks Prometheus' HTTP API
//! for dcgm-exporter's series, averaged over the last 10 minutes per pod, and keeps the
//! answer for the turns ([`Samples`]). Nothing here decides: the turn writes each running
//! job's `status.utilization` and applies its queue's idle policy (`turn/utilization.rs`).
//!
//! Which series: `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (the ratio of time the graphics engine was
//! active, 0-1; the better measure on GPUs that report profiling fields: A100, H100 and later)
//! wins where a pod has it; otherwise `DCGM_FI_DEV_GPU_UTIL` (percent of time any kernel ran,
//! which reads 100 for a GPU running one tiny kernel in a loop). Pods are told by the
//! `namespace` and `pod` labels dcgm-exporter sets, or `exported_namespace` and `exported_pod`
//! when the scrape renamed them (the target's own labels won).
//!
//! A failed query keeps nothing stale: the samples are dropped and the failure kept (with
//! when it began), so jobs keep running, their utilization is simply not updated, and the
//! queues say why.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_core::Time;
use tokio::sync::Notify;

/// The profiling field: the graphics engine's active ratio (0-1).
pub const GR_ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
/// The device field: percent of time a kernel ran (0-100).
pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";

/// Where and how often utilization is read.
#[derive(Clone, Debug)]
pub struct UtilizationConfig {
    /// Prometheus' base URL (`http://prometheus.monitoring:9090`).
    pub prometheus_url: String,
    /// A file holding a bearer token for Prometheus, read at each query (so a rotated token
    /// is picked up).
    pub bearer_token_file: Option<PathBuf>,
    /// How often Prometheus is asked.
    pub every: Duration,
}

/// One pod's GPU use.
#[derive(Clone, Debug, PartialEq)]
pub struct PodUse {
    /// Mean over the pod's GPUs and the last 10 minutes, 0-100.
    pub percent: f64,
    /// [`GR_ENGINE_ACTIVE`] or [`GPU_UTIL`].
    pub source: &'static str,
}

/// What the last query said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples {
    /// When the last query that answered was asked (`None`: none answered yet, or the latest
    /// failed).
    pub at: Option<Time>,
    /// Per (namespace, pod).
    pub pods: HashMap<(String, String), PodUse>,
    /// Why the latest query failed, and since when queries fail.
    pub error: Option<(String, Time)>,
}

use crate::https::Https;

/// One series of an instant vector: its labels and value.
pub type Point = (BTreeMap<String, String>, f64);

/// The reader, shared by its poller and the loop.
pub struct Utilization {
    pub config: UtilizationConfig,
    client: Client<Https, Empty<&'static [u8]>>,
    samples: Mutex<Arc<Samples>>,
}

impl Utilization {
    /// A reader of `config.prometheus_url` (http, or https trusting the system's CAs).
    pub fn new(config: UtilizationConfig) -> Result<Arc<Utilization>, String> {
        let connector = crate::https::connector(Vec::new())?;
        let _: http::Uri = config
            .prometheus_url
            .parse()
            .map_err(|e| format!("--prometheus-url {:?}: {e}", config.prometheus_url))?;
        Ok(Arc::new(Utilization {
            config,
            client: Client::builder(TokioExecutor::new()).build(connector),
            samples: Mutex::default(),
        }))
    }

    /// What the last query said.
    pub fn samples(&self) -> Arc<Samples> {
        self.samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Asks Prometheus for both fields and keeps the answer; a failure drops the samples and
    /// keeps why.
    pub async fn refresh(&self, now: Time) -> Result<(), String> {
        let result = async {
            let active = self.query(&promql(GR_ENGINE_ACTIVE)).await?;
            let util = self.query(&promql(GPU_UTIL)).await?;
            Ok::<_, String>(pods(&active, &util))
        }
        .await;
        let mut s = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(pods) => {
                *s = Arc::new(Samples {
                    at: Some(now),
                    pods,
                    error: None,
                });
                Ok(())
            }
            Err(e) => {
                let since = s.error.as_ref().map_or(now, |(_, t)| *t);
                *s = Arc::new(Samples {
                    at: None,
                    pods: HashMap::new(),
                    error: Some((e.clone(), since)),
                });
                Err(e)
            }
        }
    }

    /// One instant query; its vector's (labels, value) pairs.
    async fn query(&self, promql: &str) -> Result<Vec<Point>, String> {
        let base = self.config.prometheus_url.trim_end_matches('/');
        let q: String = form_urlencoded::byte_serialize(promql.as_bytes()).collect();
        let uri: http::Uri = format!("{base}/api/v1/query?query={q}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let mut req = http::Request::get(uri);
        if let Some(path) = &self.config.bearer_token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the bearer token {}: {e}", path.display()))?;
            req = req.header("Authorization", format!("Bearer {}", token.trim()));
        }
        let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(15), self.client.request(req))
            .await
            .map_err(|_| format!("Prometheus at {base} did not answer within 15 s"))?
            .map_err(|e| format!("Prometheus at {base}: {e}"))?;
        let status = response.status();
        let body = tokio::time::timeout(Duration::from_secs(15), response.into_body().collect())
            .await
            .map_err(|_| format!("Prometheus at {base} did not finish its answer within 15 s"))?
            .map_err(|e| format!("Prometheus at {base}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(format!(
                "Prometheus at {base} answered {status}: {}",
                text.chars().take(200).collect::<String>()
            ));
        }
        parse_vector(&body)
    }
}

/// The query of one field: its 10-minute mean per pod.
pub fn promql(field: &str) -> String {
    format!(
        "avg by (namespace, pod, exported_namespace, exported_pod) (avg_over_time({field}[10m]))"
    )
}

/// A Prometheus instant-query answer's vector.
pub fn parse_vector(body: &[u8]) -> Result<Vec<Point>, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Data {
        result_type: String,
        result: Vec<Sample>,
    }
    #[derive(serde::Deserialize)]
    struct Sample {
        metric: BTreeMap<String, String>,
        value: (f64, String),
    }
    let a: Answer = serde_json::from_slice(body)
        .map_err(|e| format!("Prometheus' answer is not its query API's JSON: {e}"))?;
    if a.status != "success" {
        return Err(format!(
            "Prometheus refused the query: {}",
            a.error.unwrap_or(a.status)
        ));
    }
    let data = a.data.ok_or("Prometheus' answer has no data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "Prometheus answered a {}, not a vector",
            data.result_type
        ));
    }
    Ok(data
        .result
        .into_iter()
        .filter_map(|p| {
            let v: f64 = p.value.1.parse().ok()?;
            v.is_finite().then_some((p.metric, v))
        })
        .collect())
}

/// The pod a series is about: dcgm-exporter's labels, renamed by the scrape or not.
fn pod_of(labels: &BTreeMap<String, String>) -> Option<(String, String)> {
    let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    match (get("exported_namespace"), get("exported_pod")) {
        (Some(ns), Some(pod)) => Some((ns, pod)),
        _ => Some((get("namespace")?, get("pod")?)),
    }
}

/// Each pod's use: the engine-active ratio (as percent) where it has one, else its device
/// utilization; several series of one pod (several exporters) are averaged.
pub fn pods(active: &[Point], util: &[Point]) -> HashMap<(String, String), PodUse> {
    let mut sums: HashMap<(String, String), (f64, u32, &'static str)> = HashMap::new();
    for (series, scale, source) in [(active, 100.0, GR_ENGINE_ACTIVE), (util, 1.0, GPU_UTIL)] {
        let mut these: HashMap<(String, String), (f64, u32)> = HashMap::new();
        for (labels, v) in series {
            if let Some(key) = pod_of(labels) {
                let e = these.entry(key).or_default();
                e.0 += (v * scale).clamp(0.0, 100.0);
                e.1 += 1;
            }
        }
        for (key, (sum, n)) in these {
            sums.entry(key).or_insert((sum, n, source));
        }
    }
    sums.into_iter()
        .map(|(k, (sum, n, source))| {
            (
                k,
                PodUse {
                    percent: sum / f64::from(n.max(1)),
                    source,
                },
            )
        })
        .collect()
}

/// Asks Prometheus every `config.every`, counting answers and failures, and turns the loop
/// after each answer.
pub async fn poll(
    u: Arc<Utilization>,
    metrics: Arc<crate::metrics::Metrics>,
    changed: Arc<Notify>,
) {
    loop {
        let r = u.refresh(crate::clock::now()).await;
        if let Err(e) = &r {
            tracing::warn!(error = %e, "cannot read GPU utilization from Prometheus");
        }
        metrics.utilization_query(r.is_ok());
        changed.notify_one();
        tokio::time::sleep(u.config.every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_activity_wins_and_renamed_labels_are_read() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"monitoring","pod":"dcgm-exporter-x","exported_namespace":"team","exported_pod":"a-0-0"},"value":[1.7e9,"0.42"]},
            {"metric":{"namespace":"team","pod":"b-0-0"},"value":[1.7e9,"NaN"]}]}}"#;
        let active = parse_vector(body).unwrap();
        assert_eq!(active.len(), 1, "NaN is no figure");
        let util = parse_vector(
            br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"team","pod":"a-0-0"},"value":[1.7e9,"97"]},
            {"metric":{"namespace":"team","pod":"b-0-0"},"value":[1.7e9,"3"]},
            {"metric":{"namespace":"team","pod":"b-0-0"},"value":[1.7e9,"5"]}]}}"#,
        )
        .unwrap();
        let p = pods(&active, &util);
        let a = &p[&("team".to_string(), "a-0-0".to_string())];
        assert!(
            (a.percent - 42.0).abs() < 1e-9 && a.source == GR_ENGINE_ACTIVE,
            "{a:?}"
        );
        let b = &p[&("team".to_string(), "b-0-0".to_string())];
        assert!(
            (b.percent - 4.0).abs() < 1e-9 && b.source == GPU_UTIL,
            "{b:?}"
        );
    }

    #[test]
    fn refusals_and_garbage_are_errors() {
        let e = parse_vector(br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#)
            .unwrap_err();
        assert!(e.contains("parse error"), "{e}");
        assert!(
            parse_vector(b"<html>")
                .unwrap_err()
                .contains("not its query API")
        );
        let m = parse_vector(br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#)
            .unwrap_err();
        assert!(m.contains("matrix"), "{m}");
    }
}
