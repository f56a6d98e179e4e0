//! Cloud spend that survives restarts and failovers.
//!
//! Each GpuQueue and each cloud ComputePool keeps an [`Account`]: the USD its instances cost
//! this calendar month (UTC), complete up to a time (`through`). Both live in the object's
//! status (`thisMonthUSD` and `accruedThrough`) and are always written together, so the last
//! status that landed is a consistent pair. Every turn each instance is billed up to now, and
//! `through` moves to now: an instance billed at the last turn from its account's `through`;
//! one seen for the first time from its own launch time (EC2 reports it), or from the moment
//! its account was opened if that is later, so an instance that the listing showed late (EC2
//! throttled or slow to answer while it booted) still pays from its launch. A new leader, or
//! the same one after a restart, starts from the pair in status: the time no operator was
//! running is billed once, by the first turn after it, and never twice. An instance that ended
//! between two turns is billed up to the turn that noticed (within one poll period while EC2
//! answers; longer when it does not); one that both ran and ended while no operator was
//! running is not seen at all.
//!
//! Pure: the turn passes the instances and the clock.

use std::collections::{BTreeMap, HashMap};

use spillway_core::{self as core, Time};

use crate::metrics::Metrics;

/// One object's spend this month.
#[derive(Clone, Debug, PartialEq)]
pub struct Account {
    /// `YYYY-MM` (UTC) the spend belongs to.
    pub month: String,
    pub usd: f64,
    /// `usd` holds every instance's spend up to here.
    pub through: Time,
    /// `usd` held every instance's spend up to here when this operator opened the account
    /// (from status; a new month's first moment once one starts): an instance seen for the
    /// first time is billed from its launch, but not before this.
    pub opened: Time,
}

impl Account {
    /// An account as its status left it; `None` fields (a new object) start now at zero.
    pub fn from_status(usd: Option<f64>, through: Option<Time>, now: Time) -> Account {
        let through = through.filter(|t| *t <= now).unwrap_or(now);
        Account {
            month: month_of(through),
            usd: usd.unwrap_or(0.0).max(0.0),
            through,
            opened: through,
        }
    }

    /// Starts a new month when `now` is in one.
    fn roll(&mut self, now: Time) {
        let month = month_of(now);
        if month != self.month {
            self.through = self.through.max(month_start(now));
            self.opened = self.opened.max(month_start(now));
            self.usd = 0.0;
            self.month = month;
        }
    }
}

/// An instance as last billed.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    queue: String,
    pool: String,
    capacity_type: &'static str,
    hourly_price: f64,
    launched_at: Time,
}

/// A job billed by its GPUs rather than by instances, at its pool's `gpuCostPerHour` from its
/// start: a job in a cluster pool (billed to its queue and the pool, and counted in the spend
/// metric), or a private job whose queue's budget counts private GPU time
/// (`budget.countsPrivate`; billed to its queue only).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Where it runs: a private job bills no pool.
    pub remote: bool,
    /// The job's id and attempt (`namespace/name#attempt`).
    pub id: String,
    pub queue: String,
    pub pool: String,
    pub hourly_price: f64,
    pub started_at: Time,
}

/// What private runs are billed as (they are no capacity type; nor in the cloud spend metric).
const PRIVATE: &str = "private";
/// What runs in cluster pools are billed as (in the spend metric's `capacity_type` label).
const REMOTE: &str = "remote";

/// Spend rates of this turn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates {
    /// USD per hour per queue.
    pub queue_hourly: HashMap<String, f64>,
    /// Instances and USD per hour per pool.
    pub pool: HashMap<String, (i64, f64)>,
}

/// The accounts of queues and pools, and the instances billed last turn.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    pub queues: HashMap<String, Account>,
    pub pools: HashMap<String, Account>,
    seen: HashMap<String, Seen>,
    /// Instances noticed gone, with the time they were billed up to: one that a listing shows
    /// again goes on from there, not from its launch. Kept for an hour (EC2 lists a terminated
    /// instance for about that long).
    gone: HashMap<String, Time>,
}

impl Ledger {
    /// Opens the account of a queue or pool the ledger does not know yet, from its status.
    /// Returns whether it was opened now.
    pub fn open(
        accounts: &mut HashMap<String, Account>,
        name: &str,
        usd: Option<f64>,
        through: Option<Time>,
        now: Time,
    ) -> bool {
        if accounts.contains_key(name) {
            return false;
        }
        accounts.insert(name.to_string(), Account::from_status(usd, through, now));
        true
    }

    /// Bills every instance live now, or live at the last turn and gone since, up to `now`;
    /// counts it in the spend metric; returns this turn's rates. Accounts not opened (a queue
    /// or pool that no longer exists) are not billed.
    pub fn accrue(&mut self, instances: &[core::Instance], metrics: &Metrics, now: Time) -> Rates {
        self.accrue_with(instances, &[], metrics, now)
    }

    /// [`Ledger::accrue`], billing `runs` too: to their queues, and those in cluster pools to
    /// their pool and the spend metric as well.
    pub fn accrue_with(
        &mut self,
        instances: &[core::Instance],
        runs: &[Run],
        metrics: &Metrics,
        now: Time,
    ) -> Rates {
        for a in self.queues.values_mut().chain(self.pools.values_mut()) {
            a.roll(now);
        }
        // Per instance: its record, and where a first sighting's bill starts (`None`: billed
        // at the last turn, so from its accounts' `through`).
        let mut billed: BTreeMap<String, (Seen, Option<Time>)> =
            self.seen.drain().map(|(id, s)| (id, (s, None))).collect();
        let mut rates = Rates::default();
        let mut live = HashMap::new();
        for i in instances {
            let seen = Seen {
                queue: i.queue.clone(),
                pool: i.pool.clone(),
                capacity_type: i.capacity_type.as_str(),
                hourly_price: i.hourly_price,
                launched_at: i.launched_at,
            };
            *rates.queue_hourly.entry(i.queue.clone()).or_default() += i.hourly_price;
            let p = rates.pool.entry(i.pool.clone()).or_default();
            p.0 += 1;
            p.1 += i.hourly_price;
            let since = match billed.get(&i.id) {
                Some((_, since)) => *since,
                None => Some(self.gone.remove(&i.id).unwrap_or(i.launched_at)),
            };
            billed.insert(i.id.clone(), (seen.clone(), since));
            live.insert(i.id.clone(), seen);
        }
        for r in runs {
            let id = format!("run/{}", r.id);
            let seen = Seen {
                queue: r.queue.clone(),
                pool: r.pool.clone(),
                capacity_type: if r.remote { REMOTE } else { PRIVATE },
                hourly_price: r.hourly_price,
                launched_at: r.started_at,
            };
            *rates.queue_hourly.entry(r.queue.clone()).or_default() += r.hourly_price;
            if r.remote {
                rates.pool.entry(r.pool.clone()).or_default().1 += r.hourly_price;
            }
            let since = match billed.get(&id) {
                Some((_, since)) => *since,
                None => Some(self.gone.remove(&id).unwrap_or(r.started_at)),
            };
            billed.insert(id.clone(), (seen.clone(), since));
            live.insert(id, seen);
        }
        for (id, (s, since)) in &billed {
            let from = |a: &Account| since.map_or(a.through, |t| t.max(a.opened));
            if let Some(q) = self.queues.get_mut(&s.queue) {
                let usd = cost(s, from(q), now);
                q.usd += usd;
                if usd > 0.0 && s.capacity_type != PRIVATE {
                    metrics.spend(&s.queue, &s.pool, s.capacity_type, usd);
                }
            }
            if let Some(p) = self.pools.get_mut(&s.pool)
                && s.capacity_type != PRIVATE
            {
                p.usd += cost(s, from(p), now);
            }
            if !live.contains_key(id) {
                tracing::debug!(instance = %id, pool = %s.pool, launched_at = %s.launched_at.as_millis(), "instance billed to its end");
                self.gone.insert(id.clone(), now);
            } else if since.is_some() {
                tracing::debug!(instance = %id, pool = %s.pool, launched_at = %s.launched_at.as_millis(), "instance billed for the first time");
            }
        }
        for a in self.queues.values_mut().chain(self.pools.values_mut()) {
            a.through = a.through.max(now);
        }
        let hour = core::Duration::from_secs(3600);
        self.gone.retain(|_, t| now.since(*t) < hour);
        self.seen = live;
        rates
    }

    /// Forgets the accounts of objects that are gone.
    pub fn retain(&mut self, queues: &dyn Fn(&str) -> bool, pools: &dyn Fn(&str) -> bool) {
        self.queues.retain(|k, _| queues(k));
        self.pools.retain(|k, _| pools(k));
    }
}

/// What an instance cost from the later of `from` and its launch up to `now`.
fn cost(s: &Seen, from: Time, now: Time) -> f64 {
    let start = from.max(s.launched_at);
    if now <= start {
        return 0.0;
    }
    s.hourly_price * now.since(start).as_secs_f64() / 3600.0
}

/// `YYYY-MM` of a time, in UTC.
pub fn month_of(t: Time) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
        .map(|ts| ts.strftime("%Y-%m").to_string())
        .unwrap_or_default()
}

/// The first moment of `t`'s month, in UTC.
fn month_start(t: Time) -> Time {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
        .ok()
        .and_then(|ts| {
            ts.strftime("%Y-%m-01T00:00:00Z")
                .to_string()
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
        })
        .map(|ts| Time::from_millis(ts.as_millisecond()))
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::CapacityType;

    fn t(s: &str) -> Time {
        let ts: k8s_openapi::jiff::Timestamp = s.parse().unwrap();
        Time::from_millis(ts.as_millisecond())
    }

    fn instance(id: &str, price: f64, launched: Time) -> core::Instance {
        core::Instance {
            id: id.into(),
            pool: "aws".into(),
            instance_type: "g5.xlarge".into(),
            capacity_type: CapacityType::OnDemand,
            zone: "us-east-1a".into(),
            gpus: 1,
            hourly_price: price,
            need: format!("ns/{id}#0"),
            queue: "q".into(),
            node: None,
            launched_at: launched,
        }
    }

    fn ledger(usd: Option<f64>, through: Option<Time>, now: Time) -> Ledger {
        let mut l = Ledger::default();
        Ledger::open(&mut l.queues, "q", usd, through, now);
        Ledger::open(&mut l.pools, "aws", usd, through, now);
        l
    }

    #[test]
    fn private_runs_are_billed_to_their_queue_from_their_start_and_to_no_pool() {
        let m = Metrics::default();
        let start = t("2026-03-10T10:00:00Z");
        let mut l = ledger(None, None, start);
        Ledger::open(&mut l.pools, "onprem", None, None, start);
        let run = Run {
            remote: false,
            id: "ml/train#0".into(),
            queue: "q".into(),
            pool: "onprem".into(),
            hourly_price: 8.0,
            started_at: start,
        };
        let rates = l.accrue_with(
            &[],
            std::slice::from_ref(&run),
            &m,
            t("2026-03-10T10:30:00Z"),
        );
        assert_eq!(rates.queue_hourly["q"], 8.0);
        assert!(rates.pool.is_empty());
        assert!((l.queues["q"].usd - 4.0).abs() < 1e-9);
        assert_eq!(l.pools["onprem"].usd, 0.0);
        // It ends: billed up to the turn that noticed, then no more.
        l.accrue_with(&[], &[], &m, t("2026-03-10T11:00:00Z"));
        l.accrue_with(&[], &[], &m, t("2026-03-10T12:00:00Z"));
        assert!((l.queues["q"].usd - 8.0).abs() < 1e-9);
        assert!(!m.render().contains("capacity_type=\"private\""));
    }

    #[test]
    fn an_instance_is_billed_from_its_launch_turn_by_turn() {
        let m = Metrics::default();
        let launched = t("2026-03-10T10:00:00Z");
        let mut l = ledger(None, None, launched);
        let i = instance("i-1", 3.6, launched);
        for minute in 1..=30 {
            l.accrue(
                std::slice::from_ref(&i),
                &m,
                launched + core::Duration::from_secs(60 * minute),
            );
        }
        // Half an hour at 3.60 USD/h.
        assert!((l.queues["q"].usd - 1.8).abs() < 1e-9);
        assert!((l.pools["aws"].usd - 1.8).abs() < 1e-9);
    }

    #[test]
    fn the_time_no_operator_ran_is_billed_once_after_a_restart() {
        let m = Metrics::default();
        let launched = t("2026-03-10T10:00:00Z");
        let i = instance("i-1", 3.6, launched);
        // The first operator billed ten minutes and wrote (0.60, 10:10) before it died.
        let mut first = ledger(None, None, launched);
        first.accrue(std::slice::from_ref(&i), &m, t("2026-03-10T10:10:00Z"));
        let written = first.queues["q"].clone();
        assert!((written.usd - 0.6).abs() < 1e-9);
        // The next one starts at 10:25 from the status: the 15 minutes in between are billed
        // by its first turn.
        let now = t("2026-03-10T10:25:00Z");
        let mut second = ledger(Some(written.usd), Some(written.through), now);
        second.accrue(std::slice::from_ref(&i), &m, now);
        assert!(
            (second.queues["q"].usd - 1.5).abs() < 1e-9,
            "{:?}",
            second.queues
        );
        // And not again.
        second.accrue(std::slice::from_ref(&i), &m, now);
        assert!((second.queues["q"].usd - 1.5).abs() < 1e-9);
    }

    #[test]
    fn an_instance_launched_after_the_last_accrual_starts_at_its_launch() {
        let m = Metrics::default();
        let now = t("2026-03-10T11:00:00Z");
        let mut l = ledger(Some(5.0), Some(t("2026-03-10T10:00:00Z")), now);
        l.accrue(&[instance("i-2", 3.6, t("2026-03-10T10:50:00Z"))], &m, now);
        assert!((l.queues["q"].usd - 5.6).abs() < 1e-9);
    }

    #[test]
    fn an_instance_gone_since_the_last_turn_is_billed_up_to_now() {
        let m = Metrics::default();
        let launched = t("2026-03-10T10:00:00Z");
        let mut l = ledger(None, None, launched);
        l.accrue(
            &[instance("i-1", 3.6, launched)],
            &m,
            t("2026-03-10T10:10:00Z"),
        );
        l.accrue(&[], &m, t("2026-03-10T10:11:00Z"));
        assert!((l.queues["q"].usd - 0.66).abs() < 1e-9);
        l.accrue(&[], &m, t("2026-03-10T10:20:00Z"));
        assert!((l.queues["q"].usd - 0.66).abs() < 1e-9, "billed once");
    }

    #[test]
    fn an_instance_the_listing_showed_late_is_billed_from_its_launch() {
        let m = Metrics::default();
        let mut l = ledger(None, None, t("2026-03-10T10:00:00Z"));
        // EC2 throttled: the turn at 10:01 did not list the instance launched at 10:00:30.
        l.accrue(&[], &m, t("2026-03-10T10:01:00Z"));
        let i = instance("i-1", 3.6, t("2026-03-10T10:00:30Z"));
        l.accrue(std::slice::from_ref(&i), &m, t("2026-03-10T10:02:00Z"));
        // A minute and a half at 3.60 USD/h.
        assert!((l.queues["q"].usd - 0.09).abs() < 1e-9, "{:?}", l.queues);
        assert!((l.pools["aws"].usd - 0.09).abs() < 1e-9);
    }

    #[test]
    fn an_instance_a_listing_dropped_and_showed_again_is_billed_once() {
        let m = Metrics::default();
        let launched = t("2026-03-10T10:00:00Z");
        let mut l = ledger(None, None, launched);
        let i = instance("i-1", 3.6, launched);
        l.accrue(std::slice::from_ref(&i), &m, t("2026-03-10T10:10:00Z"));
        l.accrue(&[], &m, t("2026-03-10T10:11:00Z"));
        l.accrue(std::slice::from_ref(&i), &m, t("2026-03-10T10:12:00Z"));
        // Twelve minutes, each once.
        assert!((l.queues["q"].usd - 0.72).abs() < 1e-9, "{:?}", l.queues);
    }

    #[test]
    fn an_instance_first_seen_in_a_new_month_is_billed_from_its_first_moment() {
        let m = Metrics::default();
        let mut l = ledger(
            Some(4.0),
            Some(t("2026-03-31T23:00:00Z")),
            t("2026-03-31T23:00:00Z"),
        );
        let i = instance("i-1", 3.6, t("2026-03-31T23:10:00Z"));
        l.accrue(std::slice::from_ref(&i), &m, t("2026-04-01T00:30:00Z"));
        assert_eq!(l.queues["q"].month, "2026-04");
        assert!((l.queues["q"].usd - 1.8).abs() < 1e-9, "{:?}", l.queues);
    }

    #[test]
    fn a_new_month_starts_from_zero_at_its_first_moment() {
        let m = Metrics::default();
        let launched = t("2026-03-31T23:00:00Z");
        let mut l = ledger(None, None, launched);
        let i = instance("i-1", 3.6, launched);
        l.accrue(std::slice::from_ref(&i), &m, t("2026-03-31T23:30:00Z"));
        l.accrue(std::slice::from_ref(&i), &m, t("2026-04-01T00:30:00Z"));
        assert_eq!(l.queues["q"].month, "2026-04");
        assert!((l.queues["q"].usd - 1.8).abs() < 1e-9, "{:?}", l.queues);
    }

    #[test]
    fn spend_is_counted_in_the_metric() {
        let m = Metrics::default();
        let launched = t("2026-03-10T10:00:00Z");
        let mut l = ledger(None, None, launched);
        let rates = l.accrue(
            &[instance("i-1", 3.6, launched)],
            &m,
            t("2026-03-10T11:00:00Z"),
        );
        assert_eq!(rates.queue_hourly["q"], 3.6);
        assert_eq!(rates.pool["aws"], (1, 3.6));
        assert!(m.render().contains(
            r#"spillway_spend_usd_total{queue="q",pool="aws",capacity_type="on-demand"} 3.6"#
        ));
    }
}
