//! The counter and gauge families of [`super::Metrics`]: name, kind, help and points.

use std::collections::BTreeMap;

use super::{Family, Inner, Kind, Labels};

/// What the endpoints refused in this process, every endpoint and reason shown (at zero too).
fn refusals() -> Vec<(Labels, f64)> {
    use crate::serve::{ENDPOINTS, Refusal, refused};
    ENDPOINTS
        .iter()
        .flat_map(|e| {
            Refusal::ALL.iter().map(move |r| {
                (
                    vec![
                        ("endpoint", e.to_string()),
                        ("reason", r.label().to_string()),
                    ],
                    refused(e, *r) as f64,
                )
            })
        })
        .collect()
}

/// Every counter and gauge family, with its points: what `/metrics` shows and what the
/// OTLP exporter sends (histograms: their `_count` and `_sum`).
pub(super) fn table(m: &Inner) -> Vec<Family> {
    trait Num: Copy {
        fn f(self) -> f64;
    }
    impl Num for u64 {
        fn f(self) -> f64 {
            self as f64
        }
    }
    impl Num for f64 {
        fn f(self) -> f64 {
            self
        }
    }
    fn points<V: Num>(map: &BTreeMap<Labels, V>) -> Vec<(Labels, f64)> {
        map.iter().map(|(l, v)| (l.clone(), v.f())).collect()
    }
    vec![
        Family(
            "spillway_jobs",
            Kind::Gauge,
            "GpuJobs by queue and phase.",
            points(&m.jobs),
        ),
        Family(
            "spillway_queue_gpus_in_use",
            Kind::Gauge,
            "GPUs in use by each queue's running jobs, by environment.",
            points(&m.queue_gpus),
        ),
        Family(
            "spillway_gpu_utilization_ratio",
            Kind::Gauge,
            "GPU-weighted mean activity (0..1) of each queue's running jobs that Prometheus reported on, by environment (with --prometheus-url).",
            points(&m.gpu_utilization),
        ),
        Family(
            "spillway_utilization_queries_total",
            Kind::Counter,
            "Queries of Prometheus for GPU utilization, by result: ok, error.",
            points(&m.utilization_queries),
        ),
        Family(
            "spillway_pool_gpus",
            Kind::Gauge,
            "GPUs of each ComputePool's nodes: capacity and allocated.",
            points(&m.pool_gpus),
        ),
        Family(
            "spillway_decisions_total",
            Kind::Counter,
            "Decisions that changed a job's status, by outcome and reason.",
            points(&m.decisions),
        ),
        Family(
            "spillway_api_writes_total",
            Kind::Counter,
            "Writes to the Kubernetes API, by kind and result.",
            points(&m.api_writes),
        ),
        Family(
            "spillway_policy_rule_errors_total",
            Kind::Counter,
            "BurstPolicy rule expressions that failed at run time (treated as not matching).",
            points(&m.policy_errors),
        ),
        Family(
            "spillway_cloud_calls_total",
            Kind::Counter,
            "Cloud launches and terminations, by call and result.",
            points(&m.cloud_calls),
        ),
        Family(
            "spillway_spend_usd_total",
            Kind::Counter,
            "Cloud spend accrued while this operator ran, USD, by queue, pool and capacity type.",
            points(&m.spend),
        ),
        Family(
            "spillway_queue_spend_this_month_usd",
            Kind::Gauge,
            "Each queue's spend this calendar month (UTC), as its status shows it.",
            points(&m.queue_spend),
        ),
        Family(
            "spillway_queue_budget_monthly_usd",
            Kind::Gauge,
            "Each queue's monthly budget (queues with one).",
            points(&m.queue_budget),
        ),
        Family(
            "spillway_queue_max_wait_seconds",
            Kind::Gauge,
            "Each bursting queue's maxWait.",
            points(&m.queue_max_wait),
        ),
        Family(
            "spillway_private_gpus",
            Kind::Gauge,
            "GPUs of the private pools' nodes: the capacity private GPU allocation divides by.",
            vec![(Vec::new(), m.private_gpus)],
        ),
        Family(
            "spillway_gpu_seconds_total",
            Kind::Counter,
            "GPU-seconds run by each queue's jobs, by pool and environment (private, cloud, remote), accrued while this operator ran.",
            points(&m.gpu_seconds),
        ),
        Family(
            "spillway_decide_cycles_total",
            Kind::Counter,
            "Decision cycles by result: decided in full, or skipped because nothing could change an outcome.",
            points(&m.decide_cycles),
        ),
        Family(
            "spillway_job_views_total",
            Kind::Counter,
            "GpuJob views a turn worked from, by result: derived from the caches, or kept from the turn before because nothing they were derived from changed.",
            points(&m.job_views),
        ),
        Family(
            "spillway_garbage_collected_total",
            Kind::Counter,
            "Orphaned instances terminated and Nodes of vanished instances deleted, by kind.",
            points(&m.garbage),
        ),
        Family(
            "spillway_webhook_reviews_total",
            Kind::Counter,
            "Admission reviews this replica answered, by kind and result (allowed, warned, refused, malformed).",
            points(&m.webhook),
        ),
        Family(
            "spillway_indicator_ledger_bytes",
            Kind::Gauge,
            "The indicator ledger's data, bytes (held to 900 KiB).",
            points(&m.indicator_ledger_bytes),
        ),
        Family(
            "spillway_indicator_ledger_dropped_total",
            Kind::Counter,
            "Days of indicators dropped to hold the ledger to its budget, by part: gone_queue, old_day, least_active_queue.",
            points(&m.indicator_ledger_dropped),
        ),
        Family(
            "spillway_http_connections_refused_total",
            Kind::Counter,
            "Connections and requests an endpoint (metrics, identity, webhook) cut off, by reason: connection_limit, handshake, lifetime, body_timeout, too_large.",
            refusals(),
        ),
        Family(
            "spillway_spot_interruptions_total",
            Kind::Counter,
            "Spot instances reclaimed (warned of, or gone without Spillway terminating them), by pool and instance type.",
            points(&m.spot_interruptions),
        ),
        Family(
            "spillway_interruption_notices_total",
            Kind::Counter,
            "Notices of the interruption queues about this cluster's instances, by pool and kind: spot-interruption-warning, rebalance-recommendation, state-change, scheduled-change.",
            points(&m.interruption_notices),
        ),
        Family(
            "spillway_environment_mismatches_total",
            Kind::Counter,
            "Cloud nodes that joined short of their pool's promised environment (driver, CUDA, GPU, memory) or their job's requirements, by pool.",
            points(&m.environment_mismatches),
        ),
        Family(
            "spillway_environment_drift",
            Kind::Gauge,
            "1 when a cloud or cluster pool's driver branch or CUDA version differs from the private nodes', else 0; pools not compared (facts unknown on a side) are absent.",
            points(&m.environment_drift),
        ),
        Family(
            "spillway_actions_total",
            Kind::Counter,
            "Actions the executor finished, by kind and result (ok, failed, cancelled, superseded, skipped).",
            points(&m.actions),
        ),
        Family(
            "spillway_action_errors_total",
            Kind::Counter,
            "Failed attempts of actions, by kind and error category.",
            points(&m.action_errors),
        ),
        Family(
            "spillway_action_retries_total",
            Kind::Counter,
            "Retries of failed actions, by kind.",
            points(&m.action_retries),
        ),
        Family(
            "spillway_telemetry_spans_total",
            Kind::Counter,
            "Spans of the operator's own traces, by result (exported, dropped, failed).",
            points(&m.telemetry_spans),
        ),
        Family(
            "spillway_invalid_objects",
            Kind::Gauge,
            "GpuQueues, ComputePools, Datasets and BurstPolicies the operator cannot use, by kind.",
            points(&m.invalid_objects),
        ),
        Family(
            "spillway_actions_in_flight",
            Kind::Gauge,
            "Actions started and not finished.",
            vec![(Vec::new(), m.actions_in_flight)],
        ),
        Family(
            "spillway_cache_objects",
            Kind::Gauge,
            "Objects in the operator's watch caches, by kind.",
            points(&m.cache_objects),
        ),
        Family(
            "spillway_runtime_tasks",
            Kind::Gauge,
            "Tasks alive in the operator's async runtime.",
            vec![(Vec::new(), m.runtime_tasks)],
        ),
    ]
}
