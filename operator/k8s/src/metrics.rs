//! Prometheus metrics in the text exposition format, without a metrics library: a handful of
//! families with bounded label sets (queues and pools are configuration; outcomes and reasons
//! are the core's closed enums).

mod families;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Histogram buckets of one decision cycle, seconds.
const CYCLE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
use crate::indicators::{COST_BOUNDS, SECONDS_BOUNDS};

/// The histogram families: name, help, bounds. [`Inner::hists`] holds them in this order.
const HISTOGRAMS: [(&str, &str, &[f64]); 5] = [
    (
        "spillway_job_wait_seconds",
        "Seconds from entering the queue to starting, per queue (every start).",
        SECONDS_BOUNDS,
    ),
    (
        "spillway_reconcile_duration_seconds",
        "Duration of one decision cycle (snapshot, decide, plan dispatch).",
        CYCLE_BUCKETS,
    ),
    (
        "spillway_time_to_start_seconds",
        "Seconds from entering the queue to the first start, by queue and the environment it started in.",
        SECONDS_BOUNDS,
    ),
    (
        "spillway_recovery_seconds",
        "Seconds from a failure (lost node, spot reclaim, lost instance) to the job running again, by queue and environment.",
        SECONDS_BOUNDS,
    ),
    (
        "spillway_run_cost_usd",
        "Accrued cost of each finished run (succeeded or failed), USD, by queue.",
        COST_BOUNDS,
    ),
];
const JOB_WAIT: usize = 0;
const RECONCILE: usize = 1;
const TIME_TO_START: usize = 2;
const RECOVERY: usize = 3;
const RUN_COST: usize = 4;

type Labels = Vec<(&'static str, String)>;

/// What a family is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One metric family: name, kind, help and its points (labels, value).
#[derive(Clone, Debug)]
pub struct Family(
    pub &'static str,
    pub Kind,
    pub &'static str,
    pub Vec<(Vec<(&'static str, String)>, f64)>,
);

/// Histogram count/sum family names, made once per process (a fixed, small set).
fn leak(name: String) -> &'static str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(Mutex::default);
    let mut names = names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.into_boxed_str());
    names.push(n);
    n
}

#[derive(Clone, Debug, Default)]
struct Histogram {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                self.buckets[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Inner {
    jobs: BTreeMap<Labels, f64>,
    queue_gpus: BTreeMap<Labels, f64>,
    gpu_utilization: BTreeMap<Labels, f64>,
    utilization_queries: BTreeMap<Labels, u64>,
    pool_gpus: BTreeMap<Labels, f64>,
    decisions: BTreeMap<Labels, u64>,
    api_writes: BTreeMap<Labels, u64>,
    /// The [`HISTOGRAMS`], in order.
    hists: [BTreeMap<Labels, Histogram>; 5],
    gpu_seconds: BTreeMap<Labels, f64>,
    queue_spend: BTreeMap<Labels, f64>,
    queue_budget: BTreeMap<Labels, f64>,
    queue_max_wait: BTreeMap<Labels, f64>,
    private_gpus: f64,
    leader: f64,
    policy_errors: BTreeMap<Labels, u64>,
    cloud_calls: BTreeMap<Labels, u64>,
    garbage: BTreeMap<Labels, u64>,
    /// The indicator ledger's size, bytes, and what was dropped to hold it to its budget.
    indicator_ledger_bytes: BTreeMap<Labels, f64>,
    indicator_ledger_dropped: BTreeMap<Labels, u64>,
    webhook: BTreeMap<Labels, u64>,
    decide_cycles: BTreeMap<Labels, u64>,
    job_views: BTreeMap<Labels, u64>,
    spot_interruptions: BTreeMap<Labels, u64>,
    interruption_notices: BTreeMap<Labels, u64>,
    environment_mismatches: BTreeMap<Labels, u64>,
    environment_drift: BTreeMap<Labels, f64>,
    spend: BTreeMap<Labels, f64>,
    actions: BTreeMap<Labels, u64>,
    action_errors: BTreeMap<Labels, u64>,
    action_retries: BTreeMap<Labels, u64>,
    actions_in_flight: f64,
    invalid_objects: BTreeMap<Labels, f64>,
    cache_objects: BTreeMap<Labels, f64>,
    runtime_tasks: f64,
    telemetry_spans: BTreeMap<Labels, u64>,
}

/// A queue's figures the alerts compare with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueGauges {
    pub queue: String,
    pub spend_this_month_usd: f64,
    pub budget_monthly_usd: Option<f64>,
    pub max_wait_seconds: Option<f64>,
}

/// The operator's metrics, shared by the controller and the HTTP server.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    /// Replaces the job gauge: count per (queue, phase).
    pub fn set_jobs(&self, counts: BTreeMap<(String, String), u64>) {
        self.with(|m| {
            m.jobs = counts
                .into_iter()
                .map(|((q, p), n)| (vec![("queue", q), ("phase", p)], n as f64))
                .collect();
        });
    }

    /// Replaces the GPU utilization gauge: per (queue, environment), the GPU-weighted mean
    /// activity (0..1) of the running jobs Prometheus reported on.
    pub fn set_gpu_utilization(&self, ratios: BTreeMap<(String, String), f64>) {
        self.with(|m| {
            m.gpu_utilization = ratios
                .into_iter()
                .map(|((q, e), r)| (vec![("queue", q), ("environment", e)], r))
                .collect();
        });
    }

    /// A utilization query of Prometheus answered (`ok`) or failed.
    pub fn utilization_query(&self, ok: bool) {
        self.with(|m| {
            *m.utilization_queries
                .entry(vec![("result", if ok { "ok" } else { "error" }.into())])
                .or_default() += 1
        });
    }

    /// Replaces the GPU gauges: in use per (queue, environment), and capacity/allocated per pool.
    pub fn set_gpus(
        &self,
        queue: BTreeMap<(String, String), u64>,
        pool: BTreeMap<(String, String), u64>,
    ) {
        self.with(|m| {
            m.queue_gpus = queue
                .into_iter()
                .map(|((q, e), n)| (vec![("queue", q), ("environment", e)], n as f64))
                .collect();
            m.pool_gpus = pool
                .into_iter()
                .map(|((p, s), n)| (vec![("pool", p), ("state", s)], n as f64))
                .collect();
        });
    }

    pub fn decision(&self, outcome: &str, reason: &str) {
        self.with(|m| {
            *m.decisions
                .entry(vec![("outcome", outcome.into()), ("reason", reason.into())])
                .or_default() += 1;
        });
    }

    pub fn api_write(&self, kind: &'static str, ok: bool) {
        self.with(|m| {
            *m.api_writes
                .entry(vec![
                    ("kind", kind.into()),
                    ("result", if ok { "ok" } else { "error" }.into()),
                ])
                .or_default() += 1;
        });
    }

    pub fn cloud_call(&self, call: &'static str, ok: bool) {
        self.with(|m| {
            *m.cloud_calls
                .entry(vec![
                    ("call", call.into()),
                    ("result", if ok { "ok" } else { "error" }.into()),
                ])
                .or_default() += 1;
        });
    }

    pub fn spend(&self, queue: &str, pool: &str, capacity_type: &str, usd: f64) {
        self.with(|m| {
            *m.spend
                .entry(vec![
                    ("queue", queue.into()),
                    ("pool", pool.into()),
                    ("capacity_type", capacity_type.into()),
                ])
                .or_default() += usd;
        });
    }

    /// A notice of the interruption queue about an instance of `pool`, of `kind`
    /// (`spot-interruption-warning`, `rebalance-recommendation`, `state-change`,
    /// `scheduled-change`).
    pub fn interruption_notice(&self, pool: &str, kind: &str) {
        self.with(|m| {
            *m.interruption_notices
                .entry(vec![("pool", pool.into()), ("kind", kind.into())])
                .or_default() += 1
        });
    }

    pub fn spot_interrupted(&self, pool: &str, instance_type: &str) {
        self.with(|m| {
            *m.spot_interruptions
                .entry(vec![
                    ("pool", pool.into()),
                    ("instance_type", instance_type.into()),
                ])
                .or_default() += 1
        });
    }

    /// A joined cloud node fell short of its pool's environment.
    pub fn environment_mismatch(&self, pool: &str) {
        self.with(|m| {
            *m.environment_mismatches
                .entry(vec![("pool", pool.into())])
                .or_default() += 1
        });
    }

    /// Replaces the drift gauge: per cloud or cluster pool compared with the private side,
    /// whether its driver branch or CUDA version differs.
    pub fn set_environment_drift(&self, drift: BTreeMap<String, bool>) {
        self.with(|m| {
            m.environment_drift = drift
                .into_iter()
                .map(|(p, d)| (vec![("pool", p)], if d { 1.0 } else { 0.0 }))
                .collect();
        });
    }

    /// The indicator ledger written: its size, and the days dropped to fit its budget by what
    /// they were (`gone_queue`, `old_day`, `least_active_queue`).
    pub fn indicator_ledger(&self, bytes: usize, dropped: [(&'static str, u64); 3]) {
        self.with(|m| {
            m.indicator_ledger_bytes.insert(Vec::new(), bytes as f64);
            for (part, n) in dropped {
                *m.indicator_ledger_dropped
                    .entry(vec![("part", part.into())])
                    .or_default() += n;
            }
        });
    }

    pub fn garbage(&self, kind: &'static str) {
        self.with(|m| *m.garbage.entry(vec![("kind", kind.into())]).or_default() += 1);
    }

    /// One admission review: `kind` (one of Spillway's five, else `other`) and `result`
    /// (`allowed`, `warned`, `refused`, `malformed`).
    pub fn webhook_review(&self, kind: &str, result: &'static str) {
        let kind = if spillway_api::KINDS.contains(&kind) {
            kind.to_string()
        } else {
            "other".to_string()
        };
        self.with(|m| {
            *m.webhook
                .entry(vec![("kind", kind), ("result", result.into())])
                .or_default() += 1
        });
    }

    /// One turn's decision cycle: `decided` in full, or `skipped` because nothing could
    /// change an outcome since the last.
    pub fn decide_cycle(&self, skipped: bool) {
        let result = if skipped { "skipped" } else { "decided" };
        self.with(|m| {
            *m.decide_cycles
                .entry(vec![("result", result.into())])
                .or_default() += 1
        });
    }

    /// One turn's job views: `derived` from the caches, or `kept` from the turn before
    /// because nothing they were derived from changed.
    pub fn job_views(&self, derived: usize, kept: usize) {
        self.with(|m| {
            for (result, n) in [("derived", derived), ("kept", kept)] {
                *m.job_views
                    .entry(vec![("result", result.into())])
                    .or_default() += n as u64;
            }
        });
    }

    fn observe(&self, family: usize, labels: Labels, v: f64) {
        self.with(|m| {
            m.hists[family]
                .entry(labels)
                .or_default()
                .observe(HISTOGRAMS[family].2, v);
        });
    }

    pub fn job_waited(&self, queue: &str, seconds: f64) {
        self.observe(JOB_WAIT, vec![("queue", queue.into())], seconds);
    }

    pub fn reconciled(&self, seconds: f64) {
        self.observe(RECONCILE, Vec::new(), seconds);
    }

    /// Makes the series of these queues (by environment) and cloud pools exist at zero before
    /// anything is observed, so rates and alerts on them have data from the start.
    pub fn init_series(
        &self,
        queues: &[String],
        environments: &[&'static str],
        cloud_pools: &[String],
    ) {
        self.with(|m| {
            for q in queues {
                for env in environments {
                    let labels = vec![("queue", q.clone()), ("environment", (*env).to_string())];
                    m.hists[TIME_TO_START].entry(labels.clone()).or_default();
                    m.hists[RECOVERY].entry(labels).or_default();
                }
                m.hists[RUN_COST]
                    .entry(vec![("queue", q.clone())])
                    .or_default();
            }
            for p in cloud_pools {
                m.environment_mismatches
                    .entry(vec![("pool", p.clone())])
                    .or_default();
            }
            if !cloud_pools.is_empty() {
                for call in ["launch", "terminate"] {
                    for result in ["ok", "error"] {
                        m.cloud_calls
                            .entry(vec![("call", call.into()), ("result", result.into())])
                            .or_default();
                    }
                }
            }
        });
    }

    /// A job's first start, `seconds` after it was queued.
    pub fn time_to_start(&self, queue: &str, environment: &str, seconds: f64) {
        let labels = vec![("queue", queue.into()), ("environment", environment.into())];
        self.observe(TIME_TO_START, labels, seconds);
    }

    /// A job running again `seconds` after a failure.
    pub fn recovery(&self, queue: &str, environment: &str, seconds: f64) {
        let labels = vec![("queue", queue.into()), ("environment", environment.into())];
        self.observe(RECOVERY, labels, seconds);
    }

    /// A finished run's accrued cost.
    pub fn run_cost(&self, queue: &str, usd: f64) {
        self.observe(RUN_COST, vec![("queue", queue.into())], usd);
    }

    /// Replaces the queue gauges the alerts compare with.
    pub fn set_queue_gauges(&self, queues: Vec<QueueGauges>) {
        self.with(|m| {
            m.queue_spend.clear();
            m.queue_budget.clear();
            m.queue_max_wait.clear();
            for g in queues {
                let l = vec![("queue", g.queue)];
                m.queue_spend.insert(l.clone(), g.spend_this_month_usd);
                if let Some(b) = g.budget_monthly_usd {
                    m.queue_budget.insert(l.clone(), b);
                }
                if let Some(w) = g.max_wait_seconds {
                    m.queue_max_wait.insert(l, w);
                }
            }
        });
    }

    /// The private pools' GPUs (every private node's).
    pub fn set_private_gpus(&self, gpus: u32) {
        self.with(|m| m.private_gpus = f64::from(gpus));
    }

    /// GPU-seconds a queue's jobs ran in a pool.
    pub fn gpu_seconds(&self, queue: &str, pool: &str, environment: &str, seconds: f64) {
        self.with(|m| {
            *m.gpu_seconds
                .entry(vec![
                    ("queue", queue.into()),
                    ("pool", pool.into()),
                    ("environment", environment.into()),
                ])
                .or_default() += seconds;
        });
    }

    pub fn set_leader(&self, leader: bool) {
        self.with(|m| m.leader = if leader { 1.0 } else { 0.0 });
    }

    pub fn set_policy_errors(&self, errors: BTreeMap<String, u64>) {
        self.with(|m| {
            m.policy_errors = errors
                .into_iter()
                .map(|(rule, n)| (vec![("rule", rule)], n))
                .collect();
        });
    }

    /// An action's end: `ok`, `failed` (given up), `cancelled` (fenced), `superseded` (a
    /// newer status replaced it) or `skipped` (the same work was in flight).
    pub fn action(&self, kind: crate::action_kind::ActionKind, result: &'static str) {
        self.with(|m| {
            *m.actions
                .entry(vec![
                    ("kind", kind.as_str().into()),
                    ("result", result.into()),
                ])
                .or_default() += 1;
        });
    }

    /// One failed attempt of an action, by its error's category.
    pub fn action_error(
        &self,
        kind: crate::action_kind::ActionKind,
        category: spillway_core::ErrorCategory,
    ) {
        self.with(|m| {
            *m.action_errors
                .entry(vec![
                    ("kind", kind.as_str().into()),
                    ("category", category.as_str().into()),
                ])
                .or_default() += 1;
        });
    }

    pub fn action_retried(&self, kind: crate::action_kind::ActionKind) {
        self.with(|m| {
            *m.action_retries
                .entry(vec![("kind", kind.as_str().into())])
                .or_default() += 1;
        });
    }

    pub fn set_actions_in_flight(&self, n: usize) {
        self.with(|m| m.actions_in_flight = n as f64);
    }

    /// Replaces the count of objects in the watch caches, per kind.
    pub fn set_cache_objects(&self, counts: BTreeMap<&'static str, usize>) {
        self.with(|m| {
            m.cache_objects = counts
                .into_iter()
                .map(|(k, n)| (vec![("kind", k.to_string())], n as f64))
                .collect();
        });
    }

    /// The tasks alive in the operator's async runtime.
    pub fn set_runtime_tasks(&self, n: usize) {
        self.with(|m| m.runtime_tasks = n as f64);
    }

    /// Replaces the count of invalid objects per kind (every kind listed, 0 included).
    pub fn set_invalid_objects(&self, counts: BTreeMap<&'static str, u64>) {
        self.with(|m| {
            m.invalid_objects = counts
                .into_iter()
                .map(|(k, n)| (vec![("kind", k.to_string())], n as f64))
                .collect();
        });
    }

    /// Spans of the operator's own telemetry: `exported`, `dropped` (the queue was full) or
    /// `failed` (the collector refused or did not answer).
    pub fn telemetry_spans(&self, result: &'static str, n: u64) {
        self.with(|m| {
            *m.telemetry_spans
                .entry(vec![("result", result.into())])
                .or_default() += n;
        });
    }

    /// Spans that ended with `result` so far (tests).
    pub fn telemetry_spans_total(&self, result: &str) -> u64 {
        self.with(|m| {
            m.telemetry_spans
                .iter()
                .filter(|(l, _)| l.iter().any(|(_, v)| v == result))
                .map(|(_, n)| n)
                .sum()
        })
    }

    /// Actions that ended with `result` so far, over every kind (tests).
    pub fn actions_total(&self, result: &str) -> u64 {
        self.with(|m| {
            m.actions
                .iter()
                .filter(|(l, _)| l.iter().any(|(k, v)| *k == "result" && v == result))
                .map(|(_, n)| n)
                .sum()
        })
    }

    /// Total API writes so far (tests use it to check that nothing loops).
    pub fn api_writes_total(&self) -> u64 {
        self.with(|m| m.api_writes.values().sum())
    }

    /// The counter and gauge families and the histograms' counts and sums, for OTLP.
    pub fn families(&self) -> Vec<Family> {
        self.with(|m| {
            let mut all = families::table(m);
            all.push(Family(
                "spillway_leader",
                Kind::Gauge,
                "1 while this replica is the leader.",
                vec![(Vec::new(), m.leader)],
            ));
            for (i, (name, help, _)) in HISTOGRAMS.iter().enumerate() {
                let hists = &m.hists[i];
                all.push(Family(
                    leak(format!("{name}_count")),
                    Kind::Counter,
                    help,
                    hists
                        .iter()
                        .map(|(l, h)| (l.clone(), h.count as f64))
                        .collect(),
                ));
                all.push(Family(
                    leak(format!("{name}_sum")),
                    Kind::Counter,
                    help,
                    hists.iter().map(|(l, h)| (l.clone(), h.sum)).collect(),
                ));
            }
            all
        })
    }

    /// The exposition, Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        self.with(|m| {
            let mut out = String::new();
            for Family(name, kind, help, points) in families::table(m) {
                header(&mut out, name, kind.as_str(), help);
                for (labels, v) in &points {
                    let _ = writeln!(out, "{name}{} {v}", label_text(labels, None));
                }
            }
            header(
                &mut out,
                "spillway_leader",
                "gauge",
                "1 while this replica is the leader.",
            );
            let _ = writeln!(out, "spillway_leader {}", m.leader);
            for (i, (name, help, bounds)) in HISTOGRAMS.iter().enumerate() {
                header(&mut out, name, "histogram", help);
                // The cycle's (no labels) is shown from the start, at zero.
                let empty = BTreeMap::from([(Vec::new(), Histogram::default())]);
                let series = match &m.hists[i] {
                    h if h.is_empty() && i == RECONCILE => &empty,
                    h => h,
                };
                for (labels, h) in series {
                    histogram(&mut out, name, labels, bounds, h);
                }
            }
            out
        })
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(labels: &Labels, extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn histogram(out: &mut String, name: &str, labels: &Labels, bounds: &[f64], h: &Histogram) {
    for (i, b) in bounds.iter().enumerate() {
        let n = h.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{name}_bucket{} {n}",
            label_text(labels, Some(("le", format!("{b}"))))
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{} {}",
        label_text(labels, Some(("le", "+Inf".into()))),
        h.count
    );
    let _ = writeln!(out, "{name}_sum{} {}", label_text(labels, None), h.sum);
    let _ = writeln!(out, "{name}_count{} {}", label_text(labels, None), h.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.job_waited("a", 3.0);
        m.job_waited("a", 100.0);
        let text = m.render();
        assert!(text.contains("spillway_job_wait_seconds_bucket{queue=\"a\",le=\"1\"} 0"));
        assert!(text.contains("spillway_job_wait_seconds_bucket{queue=\"a\",le=\"5\"} 1"));
        assert!(text.contains("spillway_job_wait_seconds_bucket{queue=\"a\",le=\"120\"} 2"));
        assert!(text.contains("spillway_job_wait_seconds_bucket{queue=\"a\",le=\"+Inf\"} 2"));
        assert!(text.contains("spillway_job_wait_seconds_count{queue=\"a\"} 2"));
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.decision("Wait", "Odd\"Reason");
        assert!(m.render().contains("reason=\"Odd\\\"Reason\""));
    }
}
