//! Per-object ordering of the executor's actions.
//!
//! The executor runs many actions at once, but the actions of one object must land in the
//! order the loop issued them: a cordon before the terminate that follows it, and above all
//! status writes, which the loop builds on what it last wrote (an older status landing after
//! a newer one would never be repeated). [`Order`] hands each action a ticket: tickets of one
//! key run one at a time in issue order, whatever order their tasks happen to start in. A
//! supersedable ticket (a status write) whose key got a newer supersedable ticket before its
//! turn is skipped: the newer write carries the whole status. A ticket dropped without
//! running (its task cancelled) gives its turn up, so the tickets behind it are not stuck.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::actions::Key;

#[derive(Debug)]
struct KeyState {
    /// Sequence number of the next ticket issued.
    next_issue: u64,
    /// The ticket whose turn it is; its waiters watch this.
    turn: watch::Sender<u64>,
    /// Tickets given up without running, not yet reached.
    skipped: BTreeSet<u64>,
    /// The newest supersedable ticket.
    newest_supersedable: Option<u64>,
}

impl KeyState {
    /// Moves the turn past `seq` and past every given-up ticket that follows it.
    fn advance_from(&mut self, seq: u64) {
        let mut next = seq + 1;
        while self.skipped.remove(&next) {
            next += 1;
        }
        self.turn.send_replace(next);
    }

    fn idle(&self) -> bool {
        *self.turn.borrow() >= self.next_issue
    }
}

/// Issues tickets and keeps each key's order.
#[derive(Clone, Default)]
pub struct Order {
    keys: Arc<Mutex<HashMap<Key, KeyState>>>,
}

/// One action's place in its key's order.
pub struct Ticket {
    order: Order,
    key: Key,
    seq: u64,
    supersedable: bool,
    rx: watch::Receiver<u64>,
    /// Set once the ticket has had its turn (run or skipped); otherwise dropping gives it up.
    done: bool,
}

/// Held while the action runs; ends the turn when dropped.
pub struct Turn {
    ticket: Ticket,
}

impl Order {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, KeyState>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ticket for an action on `key`.
    pub fn issue(&self, key: Key, supersedable: bool) -> Ticket {
        let mut keys = self.lock();
        let state = keys.entry(key.clone()).or_insert_with(|| KeyState {
            next_issue: 0,
            turn: watch::channel(0).0,
            skipped: BTreeSet::new(),
            newest_supersedable: None,
        });
        let seq = state.next_issue;
        state.next_issue += 1;
        if supersedable {
            state.newest_supersedable = Some(seq);
        }
        Ticket {
            order: self.clone(),
            key,
            seq,
            supersedable,
            rx: state.turn.subscribe(),
            done: false,
        }
    }

    /// Keys with tickets outstanding (tests).
    pub fn pending_keys(&self) -> usize {
        self.lock().len()
    }

    /// Ends `seq`'s turn on `key` and forgets the key when nothing is outstanding.
    fn finish(&self, key: &Key, seq: u64) {
        let mut keys = self.lock();
        if let Some(state) = keys.get_mut(key) {
            if *state.turn.borrow() == seq {
                state.advance_from(seq);
            } else {
                state.skipped.insert(seq);
            }
            if state.idle() {
                keys.remove(key);
            }
        }
    }
}

impl Ticket {
    /// Whether a newer supersedable ticket of the same key was issued after this one.
    pub fn superseded(&self) -> bool {
        self.supersedable
            && self
                .order
                .lock()
                .get(&self.key)
                .and_then(|s| s.newest_supersedable)
                .is_some_and(|newest| newest != self.seq)
    }

    /// Waits for this ticket's turn. `None` when it was superseded meanwhile (its turn is then
    /// passed on at once).
    pub async fn wait(mut self) -> Option<Turn> {
        let seq = self.seq;
        // The sender lives as long as the key has outstanding tickets, and this one is.
        let _ = self.rx.wait_for(|turn| *turn >= seq).await;
        if self.superseded() {
            self.done = true;
            self.order.finish(&self.key, seq);
            return None;
        }
        Some(Turn { ticket: self })
    }
}

impl Turn {
    /// Whether a newer write of the same key was issued while this one ran or waited to retry.
    pub fn superseded(&self) -> bool {
        self.ticket.superseded()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.ticket.done = true;
        self.ticket.order.finish(&self.ticket.key, self.ticket.seq);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            self.order.finish(&self.key, self.seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(name: &str) -> Key {
        Key::new("GpuQueue", name)
    }

    #[tokio::test]
    async fn a_superseded_write_is_skipped_and_the_newest_one_runs() {
        let order = Order::default();
        let older = order.issue(key("q"), true);
        let newer = order.issue(key("q"), true);
        let other = order.issue(key("p"), true);
        assert!(older.wait().await.is_none(), "superseded");
        assert!(other.wait().await.is_some(), "another key is not affected");
        let turn = newer.wait().await.expect("the newest write runs");
        drop(turn);
        assert_eq!(order.pending_keys(), 0, "forgotten when done");
    }

    #[tokio::test]
    async fn actions_of_one_key_run_in_issue_order_whatever_order_they_start_in() {
        let order = Order::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<Ticket> = (0..5).map(|_| order.issue(key("n"), false)).collect();
        let mut tasks = Vec::new();
        // Start them in reverse.
        for (i, t) in tickets.into_iter().enumerate().rev() {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let turn = t.wait().await.expect("never superseded");
                log.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(turn);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(order.pending_keys(), 0);
    }

    #[tokio::test]
    async fn a_dropped_ticket_gives_its_turn_up() {
        let order = Order::default();
        let first = order.issue(key("n"), false);
        let second = order.issue(key("n"), false);
        let third = order.issue(key("n"), false);
        drop(second);
        drop(first.wait().await.expect("runs"));
        let turn = tokio::time::timeout(Duration::from_secs(1), third.wait())
            .await
            .expect("not stuck behind the dropped ticket");
        assert!(turn.is_some());
    }

    #[tokio::test]
    async fn a_write_learns_it_was_superseded_while_it_ran() {
        let order = Order::default();
        let turn = order.issue(key("q"), true).wait().await.expect("runs");
        assert!(!turn.superseded());
        let newer = order.issue(key("q"), true);
        assert!(turn.superseded(), "a retry would now be moot");
        drop(turn);
        assert!(newer.wait().await.is_some());
    }
}
