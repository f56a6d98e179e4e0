//! The indicators' part of a turn ([`crate::indicators`]): the book opened from the ledger
//! once per leadership, GPU-seconds of running jobs and the private capacity accrued up to
//! now (the gap since the ledger's `through` included, so a restart or failover loses none),
//! the observations a job's status writes carry (a first start, a recovery, a finished run),
//! the ledger written when due, and each queue's `status.indicators`.

use crate::hashing::{HashMap, HashMapExt};

use kube::ResourceExt;
use spillway_api::indicators::QueueIndicators;
use spillway_api::job::{GpuJobStatus, JobPhase};
use spillway_core::{self as core, Time};

use super::State;
use crate::actions::Action;
use crate::clock;
use crate::indicators::{Book, Dropped, LEDGER_BUDGET, REFRESH, Use};
use crate::metrics::Metrics;
use crate::world::{self, Inputs, JobView, Lifecycle};

/// A queue's indicators as last shown in its status, and when.
#[derive(Clone, Debug)]
pub struct Shown {
    pub at: Time,
    /// The book's observation count then.
    pub events: u64,
    pub indicators: QueueIndicators,
}

/// The indicators' state kept between turns.
#[derive(Debug, Default)]
pub struct Keeping {
    pub book: Book,
    /// Observations recorded in all (for refreshing statuses after one).
    pub events: u64,
    /// When the ledger was last written.
    pub written_at: Option<Time>,
    pub shown: HashMap<String, Shown>,
    /// Observations not yet given to the metrics.
    pub pending: Vec<Observation>,
    /// The moments of each job's observations recorded (first start, recovery, finish), so a
    /// status write that failed and is made again does not count twice.
    pub seen: HashMap<String, [Option<Time>; 3]>,
    /// The series of the queues that exist (kept before the others when the ledger is full).
    pub live: std::collections::HashSet<String>,
    /// What was dropped from the ledger at its last write to fit its budget.
    pub dropped: Dropped,
}

impl Keeping {
    /// Whether the observation `kind` (0 start, 1 recovery, 2 finish) of `job` at `at` is new;
    /// remembers it.
    fn first_time(&mut self, job: &str, kind: usize, at: Time) -> bool {
        let seen = self.seen.entry(job.to_string()).or_default();
        if seen[kind] == Some(at) {
            return false;
        }
        seen[kind] = Some(at);
        true
    }
}

fn environment_of(pool: Option<&core::Pool>) -> &'static str {
    match pool.map(|p| p.environment()) {
        Some(core::Environment::Cloud) => "cloud",
        Some(core::Environment::Remote) => "remote",
        _ => "private",
    }
}

impl State {
    /// Opens the book (once), accrues GPU-seconds of running jobs and the private pools'
    /// capacity since the last turn, and compacts old days.
    pub(super) fn account_indicators(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        metrics: &Metrics,
        now: Time,
    ) {
        let k = &mut self.indicators;
        if !k.book.opened {
            k.book = Book::read(inputs.indicator_record.as_deref());
        }
        let from = k.book.through.unwrap_or(now).min(now);
        let pools: HashMap<&str, &core::Pool> = built
            .snapshot
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();
        let private: u32 = built
            .snapshot
            .nodes
            .iter()
            .filter(|n| {
                pools
                    .get(n.pool.as_str())
                    .is_some_and(|p| matches!(p.kind, core::PoolKind::Private { .. }))
            })
            .map(|n| n.gpus)
            .sum();
        metrics.set_private_gpus(private);
        let mut environments = vec!["private"];
        for (env, any) in [
            ("cloud", pools.values().any(|p| p.is_cloud())),
            ("remote", pools.values().any(|p| p.is_cluster())),
        ] {
            if any {
                environments.push(env);
            }
        }
        let queues: Vec<String> = built
            .snapshot
            .queues
            .iter()
            .map(|q| q.name.clone())
            .collect();
        let cloud_pools: Vec<String> = (pools.values())
            .filter(|p| p.is_cloud())
            .map(|p| p.name.clone())
            .collect();
        metrics.init_series(&queues, &environments, &cloud_pools);
        // Accrued every ACCRUE_EVERY at most: a pass over every job (a millisecond at 10,000
        // running jobs) is not worth making at every turn; nothing is lost meanwhile.
        if k.book.through.is_some() && now.since(from) < ACCRUE_EVERY {
            return;
        }
        if from < now {
            // GPUs by (queue, pool, environment, start, end): one bucket update per group, not
            // per job (at 10,000 running jobs, a handful of groups a turn).
            let mut groups: HashMap<(&str, &str, &'static str, Time, Time), f64> = HashMap::new();
            // GPU use of the running jobs Prometheus reported on, by (queue, start).
            let mut uses: HashMap<(&str, Time), Use> = HashMap::new();
            for v in built.jobs.values() {
                // Running now, or finished since the last turn (up to its end).
                let (pool, started_at, end) = match &v.lifecycle {
                    Lifecycle::Running {
                        pool: Some(pool),
                        started_at,
                        ..
                    } => (pool, *started_at, now),
                    // Finished: up to its end, if that is since the last accrual (a job whose
                    // end is written already is `Done`; its status says when).
                    Lifecycle::Succeeded { .. } | Lifecycle::Failed { .. } | Lifecycle::Done => {
                        let st = v.job.status.as_ref();
                        let ended = match &v.lifecycle {
                            Lifecycle::Succeeded { at } | Lifecycle::Failed { at, .. } => Some(*at),
                            _ => st
                                .and_then(|s| s.finished_at.as_ref())
                                .map(clock::core_time),
                        };
                        match (
                            st.and_then(|s| s.pool.as_ref()),
                            st.and_then(|s| s.started_at.as_ref()),
                            ended.filter(|at| *at > from),
                        ) {
                            (Some(pool), Some(started), Some(at)) => {
                                (pool, clock::core_time(started), at.min(now))
                            }
                            _ => continue,
                        }
                    }
                    _ => continue,
                };
                let start = from.max(started_at);
                if start >= end {
                    continue;
                }
                let spec = &v.job.spec;
                let gpus = f64::from(spec.replicas.max(0) as u32)
                    * f64::from(spec.gpus_per_replica.max(0) as u32);
                let env = environment_of(pools.get(pool.as_str()).copied());
                *groups
                    .entry((&spec.queue, pool, env, start, end))
                    .or_default() += gpus;
                if let Some((u, hourly)) = sampled_use(v, now) {
                    let e = uses.entry((&spec.queue, start)).or_default();
                    e.sampled_gpus += gpus;
                    e.busy_gpus += gpus * u.gpu_percent / 100.0;
                    if u.idle_since.is_some() {
                        e.idle_gpus += gpus;
                        e.idle_usd_per_hour += hourly;
                    }
                }
            }
            for ((queue, start), u) in uses {
                k.book.used(queue, u, start, now);
            }
            for ((queue, pool, env, start, end), gpus) in groups {
                k.book.ran(queue, env, gpus, start, end);
                metrics.gpu_seconds(queue, pool, env, gpus * end.since(start).as_secs_f64());
            }
            if private > 0 {
                k.book.capacity(f64::from(private), from, now);
            }
        }
        k.book.through = Some(now);
        k.book.compact(now);
        k.live.clear();
        k.live
            .extend((inputs.queues.iter()).map(|q| Book::queue_series(&q.name_any())));
    }

    /// What a status write says of the job: its first start (time to start), its running
    /// again after a failure (recovery), its run finished (cost per run).
    pub(super) fn observe_status(
        &mut self,
        view: &JobView,
        before: &GpuJobStatus,
        after: &GpuJobStatus,
    ) {
        let queue = view.job.spec.queue.as_str();
        let env: &'static str = after.environment.map_or("private", |e| e.as_str());
        let t = |s: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
            s.as_ref().map(clock::core_time)
        };
        let k = &mut self.indicators;
        if before.first_started_at.is_none()
            && let (Some(started), Some(queued)) = (t(&after.first_started_at), t(&after.queued_at))
            && k.first_time(&view.id, 0, started)
        {
            let secs = started.since(queued).as_secs_f64();
            k.book.started(queue, env, secs, started);
            k.events += 1;
            k.pending
                .push(Observation::Started(queue.to_string(), env, secs));
        }
        if after.phase == Some(JobPhase::Running)
            && after.interrupted_at.is_none()
            && let (Some(failed), Some(started)) = (t(&before.interrupted_at), t(&after.started_at))
            && k.first_time(&view.id, 1, started)
        {
            let secs = started.since(failed).as_secs_f64();
            k.book.recovered(queue, env, secs, started);
            k.events += 1;
            k.pending
                .push(Observation::Recovered(queue.to_string(), env, secs));
        }
        if before.finished_at.is_none()
            && let Some(finished) = t(&after.finished_at)
            && k.first_time(&view.id, 2, finished)
        {
            let usd = after.cost.as_ref().map_or(0.0, |c| c.accrued_usd);
            k.book.finished(queue, usd, finished);
            k.events += 1;
            k.pending
                .push(Observation::Finished(queue.to_string(), usd));
        }
    }

    /// The ledger write, when due: in the turn of an observation (so a stop right after it
    /// loses none: the executor finishes what is in flight), else every [`REFRESH`] while
    /// GPU-seconds accrue. Observations go to the metrics here too.
    pub(super) fn record_indicators(&mut self, metrics: &Metrics, now: Time) {
        for o in self.indicators.pending.drain(..) {
            match o {
                Observation::Started(q, env, secs) => metrics.time_to_start(&q, env, secs),
                Observation::Recovered(q, env, secs) => metrics.recovery(&q, env, secs),
                Observation::Finished(q, usd) => metrics.run_cost(&q, usd),
            }
        }
        let Some(at) = self.settings.indicator_record.clone() else {
            return;
        };
        let k = &mut self.indicators;
        let since = k.written_at.map(|w| now.since(w));
        let due = match since {
            None => true,
            Some(_) if k.book.unwritten_events > 0 => true,
            Some(s) => k.book.dirty && s >= REFRESH,
        };
        if !due {
            return;
        }
        let dropped = k.book.bound(&k.live, LEDGER_BUDGET, now);
        metrics.indicator_ledger(
            dropped.bytes,
            [
                ("gone_queue", dropped.gone_queue_days),
                ("old_day", dropped.old_days),
                ("least_active_queue", dropped.live_queue_days),
            ],
        );
        if dropped.any() {
            tracing::warn!(
                bytes = dropped.bytes,
                gone_queue_days = dropped.gone_queue_days,
                old_days = dropped.old_days,
                least_active_queue_days = dropped.live_queue_days,
                "the indicator ledger is full: days dropped to fit"
            );
            k.dropped = dropped;
        } else if !k.dropped.series.is_empty() && dropped.bytes < LEDGER_BUDGET / 2 {
            // Room again: the queues' conditions clear.
            k.dropped = dropped;
        }
        k.book.dirty = false;
        k.book.unwritten_events = 0;
        k.written_at = Some(now);
        let cm = crate::spend_record::config_map(&at, k.book.data());
        self.emit(Action::RecordIndicators(Box::new(cm)));
    }

    /// A failed ledger write: written again at the next turn.
    pub(super) fn indicators_failed(&mut self) {
        self.indicators.written_at = None;
        self.indicators.book.dirty = true;
    }

    /// The indicators a queue's status shows: worked out again after an observation or every
    /// [`STATUS_REFRESH`], else what it shows (so a status is not written every turn).
    pub(super) fn queue_indicators(
        &mut self,
        queue: &str,
        base: Option<&QueueIndicators>,
        now: Time,
    ) -> QueueIndicators {
        let k = &mut self.indicators;
        if let (Some(s), Some(b)) = (k.shown.get(queue), base)
            && s.events == k.events
            && now.since(s.at) < STATUS_REFRESH
            && *b == s.indicators
        {
            return b.clone();
        }
        let fresh = k.book.queue_indicators(queue, now);
        k.shown.insert(
            queue.to_string(),
            Shown {
                at: now,
                events: k.events,
                indicators: fresh.clone(),
            },
        );
        fresh
    }

    /// Forgets the shown indicators of queues gone.
    pub(super) fn prune_shown(&mut self, inputs: &Inputs) {
        if self.indicators.shown.len() > inputs.queues.len() {
            let live: Vec<String> = inputs.queues.iter().map(|q| q.name_any()).collect();
            self.indicators.shown.retain(|q, _| live.contains(q));
        }
    }
}

/// How often GPU-seconds are accrued at most.
const ACCRUE_EVERY: core::Duration = core::Duration::from_secs(10);

/// How often a queue's indicators are worked out again while only GPU-hours move.
pub const STATUS_REFRESH: core::Duration = core::Duration::from_secs(300);

/// An observation waiting for the metrics.
#[derive(Clone, Debug)]
pub enum Observation {
    Started(String, &'static str, f64),
    Recovered(String, &'static str, f64),
    Finished(String, f64),
}

/// A queue's figures for the alerts on it: (queue, spend this month, monthly budget, the
/// `maxWait` of a queue that bursts), in USD and seconds.
pub(super) fn queue_gauges(
    q: &spillway_api::GpuQueue,
    st: &spillway_api::queue::GpuQueueStatus,
) -> crate::metrics::QueueGauges {
    let burst = q.spec.burst.as_ref().filter(|b| b.enabled);
    crate::metrics::QueueGauges {
        queue: q.name_any(),
        spend_this_month_usd: st.spend.as_ref().map_or(0.0, |s| s.this_month_usd),
        budget_monthly_usd: q.spec.budget.as_ref().and_then(|b| b.monthly_usd),
        max_wait_seconds: burst
            .and_then(|b| core::Duration::parse(&b.max_wait).ok())
            .map(|d| d.as_secs_f64()),
    }
}

/// A running job's GPU use as its status last said (when Prometheus reported on it in the last
/// [`UTILIZATION_FRESH`]), and its cost per hour.
fn sampled_use(v: &JobView, now: Time) -> Option<(&spillway_api::job::JobUtilization, f64)> {
    if !matches!(v.lifecycle, Lifecycle::Running { .. }) {
        return None;
    }
    let st = v.job.status.as_ref()?;
    let u = st.utilization.as_ref()?;
    (now.since(clock::core_time(&u.sampled_at)) <= UTILIZATION_FRESH)
        .then(|| (u, st.cost.as_ref().map_or(0.0, |c| c.hourly_usd)))
}

/// A job's utilization counts in the indicators while it was sampled this recently (its status
/// is written again at least every 10 minutes while it is read).
const UTILIZATION_FRESH: core::Duration = core::Duration::from_secs(900);
