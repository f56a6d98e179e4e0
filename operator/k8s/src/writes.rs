//! Ordering of the loop's status writes.
//!
//! The loop writes status in the background, many writes at once. Two writes of the same
//! object could then land out of order, and the loop, which builds each status on what it last
//! wrote, would never repeat the newer one. [`StatusOrder`] hands each write a ticket: writes of
//! one object take turns in the order they were issued, and one superseded before its turn is
//! dropped (the newer write carries the whole status).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

type Key = (StatusKind, String);

/// The object's newest write number, and the lock its writes take turns on.
type Entry = (u64, Arc<tokio::sync::Mutex<()>>);

/// The kinds whose status the loop writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusKind {
    GpuJob,
    GpuQueue,
    ComputePool,
}

/// Status writes of one object land in the order they were issued, and a write superseded by a
/// newer one before it started is dropped. Writes run concurrently, so without this an older
/// write could land after a newer one and leave a stale status that the loop, which builds on
/// what it last wrote, would never repeat.
#[derive(Clone, Default)]
pub struct StatusOrder {
    /// Per object: the newest write's number and the lock its writes take turns on.
    inner: Arc<Mutex<HashMap<Key, Entry>>>,
    /// Write numbers are never reused, so a write issued before an object's entry was dropped
    /// can never pass for the newest one of a later entry.
    next: Arc<AtomicU64>,
}

/// One write's place in its object's order.
pub struct StatusTicket {
    order: StatusOrder,
    key: Key,
    seq: u64,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl StatusOrder {
    pub fn issue(&self, kind: StatusKind, name: &str) -> StatusTicket {
        let key = (kind, name.to_string());
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = m.entry(key.clone()).or_insert_with(|| (0, Arc::default()));
        entry.0 = seq;
        StatusTicket {
            order: self.clone(),
            key,
            seq,
            lock: entry.1.clone(),
        }
    }
}

impl StatusTicket {
    /// Waits for the object's earlier writes; `None` when a newer write was issued meanwhile
    /// (this one is then moot). The guard keeps later writes waiting until this one is done.
    pub async fn wait(self) -> Option<StatusTurn> {
        let guard = self.lock.clone().lock_owned().await;
        let latest = self
            .order
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&self.key)
            .map(|e| e.0);
        (latest == Some(self.seq)).then_some(StatusTurn {
            _guard: guard,
            ticket: self,
        })
    }
}

/// Held while a write is applied; forgets the object's order when it was the last write.
pub struct StatusTurn {
    _guard: tokio::sync::OwnedMutexGuard<()>,
    ticket: StatusTicket,
}

impl Drop for StatusTurn {
    fn drop(&mut self) {
        let mut m = self
            .ticket
            .order
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if m.get(&self.ticket.key)
            .is_some_and(|e| e.0 == self.ticket.seq)
        {
            m.remove(&self.ticket.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_superseded_write_is_dropped_and_the_newest_one_runs() {
        let order = StatusOrder::default();
        let older = order.issue(StatusKind::GpuQueue, "q");
        let newer = order.issue(StatusKind::GpuQueue, "q");
        let other = order.issue(StatusKind::ComputePool, "q");
        assert!(older.wait().await.is_none(), "superseded");
        assert!(
            other.wait().await.is_some(),
            "another object is not affected"
        );
        let turn = newer.wait().await.expect("the newest write runs");
        drop(turn);
        assert!(
            order.inner.lock().unwrap().is_empty(),
            "forgotten when done"
        );
    }

    #[tokio::test]
    async fn writes_of_one_object_take_turns() {
        let order = StatusOrder::default();
        let first = order.issue(StatusKind::GpuJob, "ns/j");
        let turn = first.wait().await.expect("first runs");
        let second = order.issue(StatusKind::GpuJob, "ns/j");
        let waiting = tokio::spawn(async move { second.wait().await.is_some() });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "waits while the first write is applied"
        );
        drop(turn);
        assert!(waiting.await.unwrap(), "then runs");
    }

    #[tokio::test]
    async fn a_ticket_from_before_the_entry_was_dropped_never_passes_for_newest() {
        let order = StatusOrder::default();
        let stale = order.issue(StatusKind::GpuJob, "ns/j");
        let newer = order.issue(StatusKind::GpuJob, "ns/j");
        drop(newer.wait().await.expect("runs"));
        // The entry is gone; a later write starts a new one.
        let later = order.issue(StatusKind::GpuJob, "ns/j");
        assert!(stale.wait().await.is_none());
        assert!(later.wait().await.is_some());
    }
}
