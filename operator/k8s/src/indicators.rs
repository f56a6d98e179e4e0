//! The indicators a platform team reports on, kept per queue across restarts and failovers:
//! time to start, GPU-hours by environment and pool, private GPU allocation, recovery time
//! after a failure, cost per run and burst share (docs/indicators.md defines each).
//!
//! They live in a ledger the operator owns (`--indicator-ledger`, a ConfigMap in its namespace
//! that the chart creates and keeps), one key per series and UTC day, `<YYYY-MM-DD>.<series>`,
//! where a series is `queue.<name>` or `private` (the private pools' capacity). A day keeps its
//! hours apart while they are within the last 24 hours, then one bucket merged from them; days
//! older than [`KEEP_DAYS`] are dropped. Each bucket holds histograms (fixed bounds, the same as
//! the metrics'), sums and GPU-seconds; the windows of `status.indicators` are merged from the
//! buckets, their quantiles estimated as Prometheus' `histogram_quantile` does.
//!
//! The ledger is held to [`LEDGER_BUDGET`] bytes (a ConfigMap takes at most 1 MiB):
//! [`Book::bound`] drops what fits least, in this order, and says what it dropped: the series of
//! queues that no longer exist, then the oldest days of every series (the 30-day window
//! shortens, down to today and yesterday), then the least active queues whole.
//!
//! Pure: the turn hands in the cached ConfigMap, what it observed and the clock; it gets back
//! the data to write and the status to show.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};
use spillway_api::indicators::{
    ByEnvironment, CostPerRun, GpuHours, Indicators, Quantiles, QueueIndicators, TimeToStart,
};
use spillway_core::{Duration, Time};

/// Days of buckets kept, today included (the 30-day window and a day to spare).
pub const KEEP_DAYS: i64 = 31;

/// The most the ledger's data may take, bytes: below a ConfigMap's 1 MiB, with room for its
/// metadata and managed fields.
pub const LEDGER_BUDGET: usize = 900 * 1024;

/// Bounds of the time histograms (time to start, recovery), seconds: the metrics' too.
pub const SECONDS_BOUNDS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
    43200.0, 86400.0,
];

/// Bounds of the cost-per-run histogram, USD.
pub const COST_BOUNDS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
    5000.0,
];

/// The series of the private pools' capacity.
pub const PRIVATE: &str = "private";

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}

/// A histogram over fixed bounds: counts by bucket index (the index past the last bound is
/// `+Inf`), only those not zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hist {
    #[serde(rename = "b", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub buckets: BTreeMap<u8, u64>,
    #[serde(rename = "n", default, skip_serializing_if = "is_zero")]
    pub count: u64,
    #[serde(rename = "s", default, skip_serializing_if = "is_zero_f")]
    pub sum: f64,
}

impl Hist {
    pub fn observe(&mut self, bounds: &[f64], v: f64) {
        let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        *self.buckets.entry(i as u8).or_default() += 1;
        self.count += 1;
        self.sum += v;
    }

    pub fn merge(&mut self, other: &Hist) {
        for (i, n) in &other.buckets {
            *self.buckets.entry(*i).or_default() += n;
        }
        self.count += other.count;
        self.sum += other.sum;
    }

    /// The `q` quantile, linear within the bucket it falls in (a bucket's lower bound is the
    /// bound before it, 0 for the first); one in the `+Inf` bucket is the last bound.
    pub fn quantile(&self, bounds: &[f64], q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let mut seen = 0u64;
        for (i, n) in &self.buckets {
            let i = usize::from(*i);
            if (seen + n) as f64 >= rank {
                let Some(upper) = bounds.get(i) else {
                    return bounds.last().copied();
                };
                let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
                let within = (rank - seen as f64) / *n as f64;
                return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
            }
            seen += n;
        }
        bounds.last().copied()
    }

    /// p50, p95 and count (all 0 with nothing observed).
    fn quantiles(&self, bounds: &[f64]) -> Quantiles {
        Quantiles {
            p50: round(self.quantile(bounds, 0.5).unwrap_or(0.0), 0),
            p95: round(self.quantile(bounds, 0.95).unwrap_or(0.0), 0),
            count: self.count as i64,
        }
    }
}

/// What one series saw in one bucket of time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Time to start of first starts, by the environment they started in.
    #[serde(rename = "tts", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub time_to_start: BTreeMap<String, Hist>,
    /// Recovery times, by the environment the job ran again in.
    #[serde(rename = "rec", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recovery: BTreeMap<String, Hist>,
    /// Accrued cost of finished runs.
    #[serde(rename = "cost", default, skip_serializing_if = "is_empty_hist")]
    pub cost: Hist,
    /// GPU-seconds run, by environment (by pool: `spillway_gpu_seconds_total{pool}`).
    #[serde(rename = "env", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_seconds: BTreeMap<String, f64>,
    /// The private pools' GPU capacity, GPU-seconds (series `private`).
    #[serde(rename = "cap", default, skip_serializing_if = "is_zero_f")]
    pub capacity_gpu_seconds: f64,
    /// GPU-seconds of running jobs whose utilization Prometheus reported.
    #[serde(rename = "us", default, skip_serializing_if = "is_zero_f")]
    pub sampled_gpu_seconds: f64,
    /// Of those, the busy part (GPU-seconds x activity).
    #[serde(rename = "ub", default, skip_serializing_if = "is_zero_f")]
    pub busy_gpu_seconds: f64,
    /// GPU-seconds held while below the idle threshold, and what they cost (USD).
    #[serde(rename = "ui", default, skip_serializing_if = "is_zero_f")]
    pub idle_gpu_seconds: f64,
    #[serde(rename = "uc", default, skip_serializing_if = "is_zero_f")]
    pub idle_cost_usd: f64,
}

/// How a queue's sampled jobs used their GPUs over a stretch of time: GPUs sampled, busy GPUs
/// (GPUs x activity), GPUs idle, and the idle jobs' cost per hour.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Use {
    pub sampled_gpus: f64,
    pub busy_gpus: f64,
    pub idle_gpus: f64,
    pub idle_usd_per_hour: f64,
}

fn is_empty_hist(h: &Hist) -> bool {
    h.count == 0
}

impl Bucket {
    pub fn merge(&mut self, other: &Bucket) {
        let hists = [
            (&mut self.time_to_start, &other.time_to_start),
            (&mut self.recovery, &other.recovery),
        ];
        for (mine, theirs) in hists {
            for (k, h) in theirs {
                mine.entry(k.clone()).or_default().merge(h);
            }
        }
        self.cost.merge(&other.cost);
        for (k, v) in &other.gpu_seconds {
            *self.gpu_seconds.entry(k.clone()).or_default() += v;
        }
        self.capacity_gpu_seconds += other.capacity_gpu_seconds;
        self.sampled_gpu_seconds += other.sampled_gpu_seconds;
        self.busy_gpu_seconds += other.busy_gpu_seconds;
        self.idle_gpu_seconds += other.idle_gpu_seconds;
        self.idle_cost_usd += other.idle_cost_usd;
    }
}

/// One UTC day of one series: hourly buckets (by hour of day) while it is recent, then one
/// merged bucket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Day {
    #[serde(rename = "h", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hours: BTreeMap<u8, Bucket>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<Bucket>,
}

impl Day {
    fn all(&self) -> Bucket {
        let mut b = self.merged.clone().unwrap_or_default();
        for h in self.hours.values() {
            b.merge(h);
        }
        b
    }
}

/// The day number (days since the epoch, UTC) and hour of a moment.
fn day_hour(t: Time) -> (i64, u8) {
    let secs = t.as_millis().div_euclid(1000);
    (
        secs.div_euclid(86_400),
        (secs.rem_euclid(86_400) / 3600) as u8,
    )
}

/// `YYYY-MM-DD` of a day number.
fn date(day: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(day * 86_400)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

fn day_of(date: &str) -> Option<i64> {
    let d: k8s_openapi::jiff::civil::Date = date.parse().ok()?;
    let t = d.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).ok()?;
    Some(t.timestamp().as_second().div_euclid(86_400))
}

/// Rounds to `digits` decimals.
fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The ledger as the turn keeps it: each series' days, the data last read or written, and
/// whether something changed since.
#[derive(Clone, Debug, Default)]
pub struct Book {
    /// (series, day number) -> the day.
    days: BTreeMap<(String, i64), Day>,
    /// Keys that could not be read, kept as they are.
    raw_unread: BTreeMap<String, String>,
    /// Time observations (starts, recoveries, finishes) not yet written.
    pub unwritten_events: u64,
    /// Anything not yet written.
    pub dirty: bool,
    /// Everything up to here is in the buckets (GPU-seconds accrued).
    pub through: Option<Time>,
    /// When the book was opened from the ledger (a turn reads it once per leadership).
    pub opened: bool,
}

/// Key of the `through` mark in the ledger.
const THROUGH: &str = "through";

impl Book {
    /// Reads the ledger; an entry that does not parse is logged and kept as it is.
    pub fn read(cm: Option<&ConfigMap>) -> Book {
        let mut b = Book::default();
        for (k, v) in cm.and_then(|c| c.data.as_ref()).into_iter().flatten() {
            if k == THROUGH {
                b.through = crate::clock::parse_rfc3339(v);
                continue;
            }
            let parsed = k
                .split_once('.')
                .and_then(|(d, series)| Some((day_of(d)?, series)))
                .and_then(|(d, series)| Some((d, series, serde_json::from_str::<Day>(v).ok()?)));
            match parsed {
                Some((d, series, day)) => {
                    b.days.insert((series.to_string(), d), day);
                }
                None => {
                    tracing::warn!(key = %k, "an indicator ledger entry cannot be read; kept as it is");
                    b.raw_unread.insert(k.clone(), v.clone());
                }
            }
        }
        b.opened = true;
        b
    }

    /// The bucket of `series` for the hour of `t`.
    fn bucket(&mut self, series: &str, t: Time) -> &mut Bucket {
        let (d, h) = day_hour(t);
        self.dirty = true;
        self.days
            .entry((series.to_string(), d))
            .or_default()
            .hours
            .entry(h)
            .or_default()
    }

    /// The series of `queue`. A key is `<YYYY-MM-DD>.<series>` and may have 253 characters: a
    /// name too long for that is cut and told apart by a hash of the whole name.
    pub fn queue_series(queue: &str) -> String {
        const ROOM: usize = 253 - "YYYY-MM-DD.queue.".len();
        if queue.len() <= ROOM {
            return format!("queue.{queue}");
        }
        // FNV-1a: the same in every process and release.
        let hash = queue.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let head = queue.get(..ROOM - 18).unwrap_or(queue);
        format!("queue.{head}.{hash:016x}")
    }

    /// A first start of a job of `queue` in `environment`, `seconds` after it was queued.
    pub fn started(&mut self, queue: &str, environment: &str, seconds: f64, at: Time) {
        self.unwritten_events += 1;
        self.bucket(&Book::queue_series(queue), at)
            .time_to_start
            .entry(environment.to_string())
            .or_default()
            .observe(SECONDS_BOUNDS, seconds);
    }

    /// A job of `queue` running again in `environment`, `seconds` after it failed.
    pub fn recovered(&mut self, queue: &str, environment: &str, seconds: f64, at: Time) {
        self.unwritten_events += 1;
        self.bucket(&Book::queue_series(queue), at)
            .recovery
            .entry(environment.to_string())
            .or_default()
            .observe(SECONDS_BOUNDS, seconds);
    }

    /// A run of `queue` finished, having cost `usd`.
    pub fn finished(&mut self, queue: &str, usd: f64, at: Time) {
        self.unwritten_events += 1;
        self.bucket(&Book::queue_series(queue), at)
            .cost
            .observe(COST_BOUNDS, usd);
    }

    /// Adds `gpus` GPUs of `queue` running in `environment` from `from` to `to`,
    /// spread over the hours they span.
    pub fn ran(&mut self, queue: &str, environment: &str, gpus: f64, from: Time, to: Time) {
        let series = Book::queue_series(queue);
        for (at, secs) in hours_between(from, to) {
            let b = self.bucket(&series, at);
            *b.gpu_seconds.entry(environment.to_string()).or_default() += gpus * secs;
        }
    }

    /// Adds how `queue`'s sampled jobs used their GPUs from `from` to `to`.
    pub fn used(&mut self, queue: &str, u: Use, from: Time, to: Time) {
        let series = Book::queue_series(queue);
        for (at, secs) in hours_between(from, to) {
            let b = self.bucket(&series, at);
            b.sampled_gpu_seconds += u.sampled_gpus * secs;
            b.busy_gpu_seconds += u.busy_gpus * secs;
            b.idle_gpu_seconds += u.idle_gpus * secs;
            b.idle_cost_usd += u.idle_usd_per_hour * secs / 3600.0;
        }
    }

    /// Adds the private pools' capacity of `gpus` GPUs from `from` to `to`.
    pub fn capacity(&mut self, gpus: f64, from: Time, to: Time) {
        for (at, secs) in hours_between(from, to) {
            self.bucket(PRIVATE, at).capacity_gpu_seconds += gpus * secs;
        }
    }

    /// Merges the hours that left the 24-hour window into their day's bucket and drops days
    /// older than [`KEEP_DAYS`].
    pub fn compact(&mut self, now: Time) {
        let (today, hour) = day_hour(now);
        let now_hour = today * 24 + i64::from(hour);
        self.days.retain(|(_, d), _| today - d < KEEP_DAYS);
        for ((_, d), day) in self.days.iter_mut() {
            let old: Vec<u8> = (day.hours.keys())
                .filter(|h| *d * 24 + i64::from(**h) <= now_hour - 24)
                .copied()
                .collect();
            if old.is_empty() {
                continue;
            }
            let mut merged = day.merged.take().unwrap_or_default();
            for h in old {
                if let Some(b) = day.hours.remove(&h) {
                    merged.merge(&b);
                }
            }
            day.merged = Some(merged);
            self.dirty = true;
        }
        self.raw_unread.retain(|k, _| {
            k.split_once('.')
                .and_then(|(d, _)| day_of(d))
                .is_none_or(|d| today - d < KEEP_DAYS)
        });
    }

    /// Holds the book to `budget` bytes of ledger data (see the module documentation), keeping
    /// the series in `live` (and the private capacity) before the others. Returns what it
    /// dropped (nothing when all fits).
    pub fn bound(
        &mut self,
        live: &std::collections::HashSet<String>,
        budget: usize,
        now: Time,
    ) -> Dropped {
        let mut dropped = Dropped::default();
        let size =
            |b: &Book| -> usize { b.data().iter().map(|(k, v)| k.len() + v.len() + 8).sum() };
        let mut total = size(self);
        dropped.bytes = total;
        if total <= budget {
            return dropped;
        }
        // What a day takes in `size` (its key is `<date>.<series>`).
        let cost = |k: &(String, i64), d: &Day| -> usize {
            serde_json::to_string(d).map_or(0, |v| v.len()) + date(k.1).len() + 1 + k.0.len() + 8
        };
        let (today, _) = day_hour(now);
        // What to drop, in order: (rank, key). Gone queues' series oldest first; then every
        // series' oldest days (before yesterday); then the least active live queues whole.
        let kept = |series: &str| series == PRIVATE || live.contains(series);
        let mut order: Vec<(u8, i64, f64, (String, i64))> = Vec::new();
        let mut activity: BTreeMap<&str, f64> = BTreeMap::new();
        for ((series, _), day) in &self.days {
            let all = day.all();
            *activity.entry(series).or_default() +=
                all.gpu_seconds.values().sum::<f64>() + all.cost.count as f64;
        }
        for (series, d) in self.days.keys() {
            let key = (series.clone(), *d);
            if !kept(series) {
                order.push((0, *d, 0.0, key));
            } else if today - d >= 2 {
                order.push((1, *d, 0.0, key));
            } else if series != PRIVATE {
                order.push((
                    2,
                    0,
                    activity.get(series.as_str()).copied().unwrap_or(0.0),
                    key,
                ));
            }
        }
        order.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)));
        for (rank, _, _, key) in order {
            if total <= budget {
                break;
            }
            if let Some(day) = self.days.remove(&key) {
                total = total.saturating_sub(cost(&key, &day));
                self.dirty = true;
                match rank {
                    0 => dropped.gone_queue_days += 1,
                    1 => dropped.old_days += 1,
                    _ => dropped.live_queue_days += 1,
                }
                if rank > 0 {
                    dropped.series.insert(key.0.clone());
                }
                if rank == 1 {
                    dropped.oldest_kept = Some(
                        dropped
                            .oldest_kept
                            .map_or(key.1 + 1, |d: i64| d.max(key.1 + 1)),
                    );
                }
            }
        }
        dropped.bytes = size(self);
        dropped
    }

    /// The ledger's data as it should be written.
    pub fn data(&self) -> BTreeMap<String, String> {
        let mut out = self.raw_unread.clone();
        for ((series, d), day) in &self.days {
            if let Ok(v) = serde_json::to_string(day) {
                out.insert(format!("{}.{series}", date(*d)), v);
            }
        }
        if let Some(t) = self.through {
            out.insert(THROUGH.to_string(), crate::clock::rfc3339(t));
        }
        out
    }

    /// `series` merged over the window: the last 24 hours (this hour and the 23 before it) or
    /// the last 30 days (today and the 29 before it).
    pub fn window(&self, series: &str, now: Time, last: Window) -> Bucket {
        let (today, hour) = day_hour(now);
        let now_hour = today * 24 + i64::from(hour);
        let mut out = Bucket::default();
        let first_day = match last {
            Window::Hours24 => (now_hour - 23).div_euclid(24),
            Window::Days30 => today - 29,
        };
        for ((_, d), day) in self
            .days
            .range((series.to_string(), first_day)..=(series.to_string(), today))
        {
            match last {
                Window::Days30 => out.merge(&day.all()),
                Window::Hours24 => {
                    for (h, b) in &day.hours {
                        if d * 24 + i64::from(*h) > now_hour - 24 {
                            out.merge(b);
                        }
                    }
                }
            }
        }
        out
    }

    /// A queue's indicators over both windows.
    pub fn queue_indicators(&self, queue: &str, now: Time) -> QueueIndicators {
        let series = Book::queue_series(queue);
        let of = |w: Window| {
            let b = self.window(&series, now, w);
            let capacity = self.window(PRIVATE, now, w).capacity_gpu_seconds;
            indicators(&b, capacity)
        };
        QueueIndicators {
            last_24h: of(Window::Hours24),
            last_30d: of(Window::Days30),
        }
    }
}

/// What [`Book::bound`] dropped to fit the budget.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dropped {
    /// The ledger data's size after it, bytes.
    pub bytes: usize,
    /// Days of queues that no longer exist.
    pub gone_queue_days: u64,
    /// Days before yesterday of queues that exist.
    pub old_days: u64,
    /// Recent days of the least active queues.
    pub live_queue_days: u64,
    /// The series of existing queues that lost days.
    pub series: std::collections::BTreeSet<String>,
    /// The day number of the oldest day kept where old days went.
    pub oldest_kept: Option<i64>,
}

impl Dropped {
    pub fn any(&self) -> bool {
        self.gone_queue_days + self.old_days + self.live_queue_days > 0
    }

    /// What a queue's condition says of it, when its series lost days.
    pub fn message(&self, series: &str) -> Option<String> {
        if !self.series.contains(series) {
            return None;
        }
        Some(match self.oldest_kept {
            Some(d) => format!(
                "The indicator ledger is full ({} KiB of {} KiB): its days before {} were dropped, so last30d covers less than 30 days.",
                self.bytes / 1024,
                LEDGER_BUDGET / 1024,
                date(d)
            ),
            None => format!(
                "The indicator ledger is full ({} KiB of {} KiB): this queue's history was dropped (it is among the least active).",
                self.bytes / 1024,
                LEDGER_BUDGET / 1024
            ),
        })
    }
}

/// The windows of `status.indicators`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Hours24,
    Days30,
}

/// The indicators a window's bucket gives, with the private capacity over it.
pub fn indicators(b: &Bucket, private_capacity_gpu_seconds: f64) -> Indicators {
    let mut all = Hist::default();
    for h in b.time_to_start.values() {
        all.merge(h);
    }
    let env = |e: &str| {
        b.time_to_start
            .get(e)
            .map(|h| h.quantiles(SECONDS_BOUNDS))
            .unwrap_or_default()
    };
    let total = all.quantiles(SECONDS_BOUNDS);
    let mut recovery = Hist::default();
    for h in b.recovery.values() {
        recovery.merge(h);
    }
    let hours = |env: &str| round(b.gpu_seconds.get(env).copied().unwrap_or(0.0) / 3600.0, 2);
    let private_seconds = b.gpu_seconds.get("private").copied().unwrap_or(0.0);
    let started_away: u64 = ["cloud", "remote"]
        .iter()
        .filter_map(|e| b.time_to_start.get(*e))
        .map(|h| h.count)
        .sum();
    Indicators {
        time_to_start_seconds: TimeToStart {
            p50: total.p50,
            p95: total.p95,
            count: total.count,
            by_environment: ByEnvironment {
                private: env("private"),
                cloud: env("cloud"),
                remote: env("remote"),
            },
        },
        gpu_hours: GpuHours {
            private: hours("private"),
            cloud: hours("cloud"),
            remote: hours("remote"),
        },
        private_gpu_allocation: if private_capacity_gpu_seconds > 0.0 {
            round((private_seconds / private_capacity_gpu_seconds).min(1.0), 3)
        } else {
            0.0
        },
        recovery_seconds: recovery.quantiles(SECONDS_BOUNDS),
        cost_per_run_usd: CostPerRun {
            mean: if b.cost.count > 0 {
                round(b.cost.sum / b.cost.count as f64, 2)
            } else {
                0.0
            },
            p95: round(b.cost.quantile(COST_BOUNDS, 0.95).unwrap_or(0.0), 2),
            count: b.cost.count as i64,
        },
        burst_share: if all.count > 0 {
            round(started_away as f64 / all.count as f64, 3)
        } else {
            0.0
        },
        gpu_utilization: if b.sampled_gpu_seconds > 0.0 {
            round(
                (b.busy_gpu_seconds / b.sampled_gpu_seconds).clamp(0.0, 1.0),
                3,
            )
        } else {
            0.0
        },
        idle_gpu_hours: round(b.idle_gpu_seconds / 3600.0, 2),
        idle_cost_usd: round(b.idle_cost_usd, 2),
    }
}

/// The hours `[from, to)` spans: (a moment in the hour, seconds of it), in order.
fn hours_between(from: Time, to: Time) -> Vec<(Time, f64)> {
    let mut out = Vec::new();
    let mut t = from.as_millis();
    let end = to.as_millis();
    while t < end {
        let next = ((t.div_euclid(3_600_000)) + 1) * 3_600_000;
        let stop = next.min(end);
        out.push((Time::from_millis(t), (stop - t) as f64 / 1000.0));
        t = stop;
    }
    out
}

/// How long the book may go unwritten while only GPU-seconds move.
pub const REFRESH: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests;
