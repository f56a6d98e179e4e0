//! The spend ledger that outlives its objects: every queue's and cloud pool's month of spend in
//! one ConfigMap the operator owns (`--spend-ledger`, in its namespace; the chart creates it and
//! keeps it on uninstall).
//!
//! A status belongs to its object: delete and apply a GpuQueue again (a GitOps sync does) and
//! its `thisMonthUSD` is gone. So the turn also records each account here, one key per object
//! and month, `<YYYY-MM>.<queue|pool>.<name>`, whose value is `{"usd": …, "through": …}`: the
//! same consistent pair the status holds. An account opened again (a new leader, or an object
//! applied again) continues from whichever pair, status or ledger, is the later one of this
//! month. Months older than [`KEEP_MONTHS`] are dropped. Pure: the turn hands in the cached
//! ConfigMap and the accounts, and gets back the data to write, if any.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};
use spillway_core::{Duration, Time};

use crate::clock;
use crate::spend::{Ledger, Rates, month_of};

/// Months of spend kept, this one included (a year back, for chargeback over the last one).
pub const KEEP_MONTHS: u32 = 13;

/// A ledger entry is written again at most this often while only its sum moves.
pub const REFRESH: Duration = Duration::from_secs(60);

/// Where the ledger lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef {
    pub namespace: String,
    pub name: String,
}

/// Which accounts an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Queue,
    Pool,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Queue => "queue",
            Kind::Pool => "pool",
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Value {
    usd: f64,
    /// RFC 3339, to the millisecond.
    through: String,
    /// The spend rate when written, USD per hour (a change is written at once, as in status).
    #[serde(default)]
    hourly: f64,
}

/// One recorded pair: the USD of an object's month, complete up to `through`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    pub usd: f64,
    pub through: Time,
    pub hourly: f64,
}

/// The ledger as read: its entries by key, and the keys it could not read (kept as they are).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    entries: BTreeMap<String, Entry>,
    raw: BTreeMap<String, String>,
}

pub fn key(month: &str, kind: Kind, name: &str) -> String {
    format!("{month}.{}.{name}", kind.as_str())
}

impl Record {
    /// Reads the cached ConfigMap; an entry that does not parse is logged and left alone.
    pub fn read(cm: Option<&ConfigMap>) -> Record {
        let mut r = Record::default();
        for (k, v) in cm.and_then(|c| c.data.as_ref()).into_iter().flatten() {
            r.raw.insert(k.clone(), v.clone());
            match parse(v) {
                Some(e) => {
                    r.entries.insert(k.clone(), e);
                }
                None => tracing::warn!(key = %k, value = %v,
                    "a spend ledger entry cannot be read (want {{\"usd\": N, \"through\": RFC3339}}); ignored"),
            }
        }
        r
    }

    /// The entry of `name` for the month `now` is in.
    pub fn get(&self, kind: Kind, name: &str, now: Time) -> Option<Entry> {
        self.entries.get(&key(&month_of(now), kind, name)).copied()
    }

    /// The ledger's data with the accounts recorded, when an entry needs writing: one missing,
    /// one whose spend rate changed (`rates`), one behind by a sum that was last written
    /// [`REFRESH`] ago or more, or one `now_please` names (`Kind/name`: an account opened this
    /// turn) that moved. Older months' entries stay, up to [`KEEP_MONTHS`]; entries of
    /// objects gone stay too (that is the point).
    pub fn to_write(
        &self,
        ledger: &Ledger,
        rates: &Rates,
        now_please: &dyn Fn(&str) -> bool,
        now: Time,
    ) -> Option<BTreeMap<String, String>> {
        let all = ledger
            .queues
            .iter()
            .map(|(n, a)| (Kind::Queue, n, a))
            .chain(ledger.pools.iter().map(|(n, a)| (Kind::Pool, n, a)));
        let mut data = self.raw.clone();
        let mut stale = false;
        for (kind, name, a) in all {
            let k = key(&a.month, kind, name);
            let (label, hourly) = match kind {
                Kind::Queue => (
                    format!("GpuQueue/{name}"),
                    rates.queue_hourly.get(name.as_str()).copied(),
                ),
                Kind::Pool => (
                    format!("ComputePool/{name}"),
                    rates.pool.get(name.as_str()).map(|p| p.1),
                ),
            };
            let hourly = hourly.unwrap_or(0.0);
            stale |= match self.entries.get(&k) {
                None => true,
                Some(e) => {
                    ((now_please(&label) || e.hourly != hourly)
                        && (e.usd != a.usd || e.through != a.through))
                        || (e.usd != a.usd && now.since(e.through) >= REFRESH)
                }
            };
            data.insert(k, format(a.usd, a.through, hourly));
        }
        let oldest = month_back(&month_of(now), KEEP_MONTHS - 1);
        let before = data.len();
        data.retain(|k, _| k.get(..7).is_none_or(|m| m >= oldest.as_str()));
        stale |= data.len() != before;
        stale.then_some(data)
    }
}

fn parse(v: &str) -> Option<Entry> {
    let v: Value = serde_json::from_str(v).ok()?;
    let ts: k8s_openapi::jiff::Timestamp = v.through.parse().ok()?;
    (v.usd.is_finite() && v.usd >= 0.0).then_some(Entry {
        usd: v.usd,
        through: Time::from_millis(ts.as_millisecond()),
        hourly: v.hourly,
    })
}

fn format(usd: f64, through: Time, hourly: f64) -> String {
    let through = clock::micro_time(through).0.to_string();
    serde_json::to_string(&Value {
        usd,
        through,
        hourly,
    })
    .unwrap_or_default()
}

/// `YYYY-MM`, `n` months before `month`.
fn month_back(month: &str, n: u32) -> String {
    let (y, m) = month.split_once('-').unwrap_or(("1970", "01"));
    let index = y.parse::<i64>().unwrap_or(1970) * 12 + m.parse::<i64>().unwrap_or(1) - 1;
    let back = index - i64::from(n);
    format!("{:04}-{:02}", back.div_euclid(12), back.rem_euclid(12) + 1)
}

/// The ConfigMap to apply with `data`.
pub fn config_map(at: &RecordRef, data: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(at.name.clone()),
            namespace: Some(at.namespace.clone()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Of the pair in status and the ledger's entry for this month, the later one (the status of
/// an object applied again is empty; the ledger of a first install is).
pub fn later(
    status: (Option<f64>, Option<Time>),
    entry: Option<Entry>,
) -> (Option<f64>, Option<Time>) {
    match (status, entry) {
        ((_, Some(t)), Some(e)) if e.through <= t => status,
        (_, Some(e)) => (Some(e.usd), Some(e.through)),
        (s, None) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        let ts: k8s_openapi::jiff::Timestamp = s.parse().unwrap();
        Time::from_millis(ts.as_millisecond())
    }

    fn cm(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn entries_round_trip_and_a_bad_one_is_kept_as_it_is() {
        let r = Record::read(Some(&cm(&[
            (
                "2026-03.queue.q",
                r#"{"usd":1.5,"through":"2026-03-10T11:50:00Z"}"#,
            ),
            ("2026-03.queue.bad", "not json"),
        ])));
        let now = t("2026-03-10T12:00:00Z");
        assert_eq!(
            r.get(Kind::Queue, "q", now),
            Some(Entry {
                usd: 1.5,
                through: t("2026-03-10T11:50:00Z"),
                hourly: 0.0,
            })
        );
        assert_eq!(r.get(Kind::Queue, "bad", now), None);
        assert_eq!(r.get(Kind::Pool, "q", now), None);
        let mut ledger = Ledger::default();
        Ledger::open(&mut ledger.queues, "q", Some(2.0), Some(now), now);
        let data = r
            .to_write(&ledger, &Rates::default(), &|_| false, now)
            .expect("the sum moved and was last written 10 min ago");
        assert_eq!(data["2026-03.queue.bad"], "not json");
        let back = Record::read(Some(&cm(&[(
            "2026-03.queue.q",
            data["2026-03.queue.q"].as_str(),
        )])));
        assert_eq!(
            back.get(Kind::Queue, "q", now),
            Some(Entry {
                usd: 2.0,
                through: now,
                hourly: 0.0,
            })
        );
    }

    #[test]
    fn a_moving_sum_is_written_once_a_minute_and_old_months_go() {
        let now = t("2026-03-10T12:00:00Z");
        let mut ledger = Ledger::default();
        Ledger::open(&mut ledger.queues, "q", Some(2.0), Some(now), now);
        // Missing: written at once.
        let data = Record::default()
            .to_write(&ledger, &Rates::default(), &|_| false, now)
            .expect("a new entry");
        let written = Record::read(Some(&ConfigMap {
            data: Some(data),
            ..Default::default()
        }));
        // Same sum 30 s later: nothing; a moved sum 30 s later: nothing yet, at 60 s: written.
        let later_by = |s: u64| now + Duration::from_secs(s);
        ledger.queues.get_mut("q").unwrap().through = later_by(30);
        assert_eq!(
            written.to_write(&ledger, &Rates::default(), &|_| false, later_by(30)),
            None
        );
        ledger.queues.get_mut("q").unwrap().usd = 2.01;
        assert_eq!(
            written.to_write(&ledger, &Rates::default(), &|_| false, later_by(30)),
            None
        );
        let opened = |k: &str| k == "GpuQueue/q";
        assert!(
            written
                .to_write(&ledger, &Rates::default(), &opened, later_by(30))
                .is_some()
        );
        assert!(
            written
                .to_write(&ledger, &Rates::default(), &|_| false, later_by(60))
                .is_some()
        );
        // Thirteen months are kept; the fourteenth back goes.
        let old = Record::read(Some(&cm(&[
            (
                "2025-03.queue.q",
                r#"{"usd":9,"through":"2025-03-31T00:00:00Z"}"#,
            ),
            (
                "2025-02.queue.q",
                r#"{"usd":9,"through":"2025-02-28T00:00:00Z"}"#,
            ),
        ])));
        let data = old
            .to_write(&ledger, &Rates::default(), &|_| false, now)
            .unwrap();
        assert!(data.contains_key("2025-03.queue.q"));
        assert!(!data.contains_key("2025-02.queue.q"));
        assert_eq!(month_back("2026-01", 1), "2025-12");
        assert_eq!(month_back("2026-03", 12), "2025-03");
    }

    #[test]
    fn the_later_pair_wins() {
        let e = Entry {
            usd: 3.0,
            through: t("2026-03-10T11:00:00Z"),
            hourly: 0.8,
        };
        let status_later = (Some(4.0), Some(t("2026-03-10T11:30:00Z")));
        assert_eq!(later(status_later, Some(e)), status_later);
        let status_earlier = (Some(1.0), Some(t("2026-03-10T10:00:00Z")));
        assert_eq!(later(status_earlier, Some(e)), (Some(3.0), Some(e.through)));
        assert_eq!(later((None, None), Some(e)), (Some(3.0), Some(e.through)));
        assert_eq!(later(status_later, None), status_later);
    }
}
