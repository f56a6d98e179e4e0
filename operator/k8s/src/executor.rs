//! The executor: carries out a turn's actions.
//!
//! It owns every task it starts (a [`JoinSet`]: stopping the executor stops them all), runs at
//! most `max_in_flight` API or cloud calls at once, keeps the actions of one object in the order
//! they were issued ([`Order`]), and retries a failed action per object with full-jitter
//! exponential backoff when its error's category says a retry can help (transient errors and
//! conflicts; a conflict's retry reads the object afresh). An action that still fails, or fails
//! in a way no retry can fix, is reported back to the loop ([`Failure`]), which undoes what it
//! assumed (a start, a status it thought written) and decides again.
//!
//! Fencing: the executor holds the leadership signal ([`Fence`]). The moment this replica stops
//! leading, every action that has not yet reached the API or the cloud is cancelled before it
//! is sent: tasks check the fence before each call and stop waiting (for their turn, a permit or
//! a backoff) when it drops. The loop then aborts the rest.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::actions::{Action, ActionKind};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::order::Order;

/// Whether this replica may act: true while it leads.
#[derive(Clone, Debug)]
pub struct Fence {
    leading: watch::Receiver<bool>,
    /// The sender of a fence that never drops, kept alive with it.
    _open: Option<Arc<watch::Sender<bool>>>,
}

impl Fence {
    pub fn new(leading: watch::Receiver<bool>) -> Fence {
        Fence {
            leading,
            _open: None,
        }
    }

    /// A fence that never drops (a single replica without leader election).
    pub fn open() -> Fence {
        let (tx, rx) = watch::channel(true);
        Fence {
            leading: rx,
            _open: Some(Arc::new(tx)),
        }
    }

    /// `Err(Fenced)` once this replica no longer leads. Call it right before each API or
    /// cloud call.
    pub fn check(&self) -> Result<(), Error> {
        if self.leading() {
            Ok(())
        } else {
            Err(Error::Fenced)
        }
    }

    pub fn leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Resolves when this replica stops leading (or the signal's owner is gone).
    pub async fn lost(&self) {
        let mut rx = self.leading.clone();
        let _ = rx.wait_for(|leading| !*leading).await;
    }
}

/// What carries actions out: the Kubernetes API and the cloud in the operator
/// ([`crate::effects::KubeEffects`]), a script in unit tests of failure paths.
pub trait Effects: Send + Sync + 'static {
    /// Bookkeeping when an action is accepted, before it runs (marking a need as launching, an
    /// instance as terminating). `false` drops the action: the same work is already in flight.
    fn accept(&self, action: &Action) -> bool {
        let _ = action;
        true
    }

    /// Carries the action out once; called again for each retry. Checks `fence` before each
    /// call it makes. Outcomes that mean the work is done (a pod that already exists, an
    /// object already gone) are `Ok`.
    fn run<'a>(&'a self, action: &'a Action, fence: &'a Fence) -> BoxFuture<'a, Result<(), Error>>;

    /// Undoes [`Effects::accept`] for an action that will not run (again).
    fn abandon(&self, action: &Action) {
        let _ = action;
    }
}

/// How failed actions are retried.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// The first retry waits up to this long (full jitter), each further one up to twice as
    /// long, up to `cap`.
    pub base: Duration,
    pub cap: Duration,
    /// Attempts in all, the first included (actions that are never retried make one).
    pub attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            attempts: 6,
        }
    }
}

impl RetryPolicy {
    /// Attempts an action of `kind` gets: launches are re-planned by the loop instead (a failed
    /// launch cools its offering down), a placement group's delete is asked again by the loop
    /// (its instances may take minutes to leave it), and an Event is worth a few tries only.
    pub fn attempts_for(&self, kind: ActionKind) -> u32 {
        match kind {
            ActionKind::Launch | ActionKind::DeletePlacementGroup => 1,
            ActionKind::Publish => self.attempts.min(3),
            _ => self.attempts,
        }
        .max(1)
    }

    /// The wait before retry number `retry` (0 for the first retry): full jitter, a random
    /// wait in `[0, min(cap, base x 2^retry)]`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << retry.min(16))
            .min(self.cap);
        ceiling.mul_f64(fastrand::f64())
    }
}

/// Executor settings.
#[derive(Clone, Debug)]
pub struct ExecutorSettings {
    /// API and cloud calls in flight at once.
    pub max_in_flight: usize,
    pub retry: RetryPolicy,
    /// A test's crash at an exact instant (`None` in the operator).
    pub crash: Option<Crash>,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            max_in_flight: 64,
            retry: RetryPolicy::default(),
            crash: None,
        }
    }
}

/// A seam for the tests that kill the operator at an exact instant rather than at a lucky one:
/// actions of the kinds in `hold` are never sent, and once `times` actions of kind `after` have
/// been carried out nothing more is sent and `fired` is notified. What the API servers and the cloud
/// are left with is what a process killed at that instant leaves; the test then drops the
/// operator. Never set by the `spillway` binary.
#[derive(Clone, Debug)]
pub struct Crash {
    pub hold: Vec<ActionKind>,
    pub after: ActionKind,
    pub times: usize,
    pub fired: Arc<tokio::sync::Notify>,
    dead: Arc<std::sync::atomic::AtomicBool>,
    done: Arc<std::sync::atomic::AtomicUsize>,
}

impl Crash {
    /// Dies after the first action of kind `after`.
    pub fn new(hold: Vec<ActionKind>, after: ActionKind) -> Crash {
        Crash {
            hold,
            after,
            times: 1,
            fired: Arc::new(tokio::sync::Notify::new()),
            dead: Arc::default(),
            done: Arc::default(),
        }
    }

    /// Dies after the `times`-th action of that kind instead.
    pub fn times(mut self, times: usize) -> Crash {
        self.times = times.max(1);
        self
    }

    fn dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An action that failed for good (no retry left, or none can help).
#[derive(Debug)]
pub struct Failure {
    pub action: Action,
    pub error: Error,
}

/// Carries out actions; see the module documentation.
pub struct Executor {
    effects: Arc<dyn Effects>,
    tasks: JoinSet<()>,
    order: Order,
    permits: Arc<Semaphore>,
    fence: Fence,
    failures: mpsc::UnboundedSender<Failure>,
    retry: RetryPolicy,
    metrics: Arc<Metrics>,
    crash: Option<Crash>,
}

impl Executor {
    /// An executor and the receiving end of its failure reports.
    pub fn new(
        effects: Arc<dyn Effects>,
        settings: &ExecutorSettings,
        fence: Fence,
        metrics: Arc<Metrics>,
    ) -> (Executor, mpsc::UnboundedReceiver<Failure>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Executor {
                effects,
                tasks: JoinSet::new(),
                order: Order::default(),
                permits: Arc::new(Semaphore::new(settings.max_in_flight.max(1))),
                fence,
                failures: tx,
                retry: settings.retry.clone(),
                metrics,
                crash: settings.crash.clone(),
            },
            rx,
        )
    }

    /// Takes an action and starts carrying it out. Dropped at once when this replica no longer
    /// leads or the same work is in flight.
    pub fn submit(&mut self, action: Action) {
        self.reap();
        let kind = action.kind();
        if !self.fence.leading() {
            self.metrics.action(kind, "cancelled");
            return;
        }
        if !self.effects.accept(&action) {
            self.metrics.action(kind, "skipped");
            return;
        }
        let ticket = self.order.issue(action.key(), action.supersedable());
        let job = Job {
            action,
            effects: self.effects.clone(),
            permits: self.permits.clone(),
            fence: self.fence.clone(),
            failures: self.failures.clone(),
            retry: self.retry.clone(),
            metrics: self.metrics.clone(),
            crash: self.crash.clone(),
        };
        self.tasks.spawn(job.run(ticket));
        self.metrics.set_actions_in_flight(self.tasks.len());
    }

    /// Forgets finished tasks (a panicked one is logged).
    pub fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                tracing::error!(error = %e, "an action panicked");
            }
        }
        self.metrics.set_actions_in_flight(self.tasks.len());
    }

    /// Actions started and not finished.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Waits until every action is done, at most `timeout`; then cancels what is left.
    /// Returns whether everything finished.
    pub async fn drain(&mut self, timeout: Duration) -> bool {
        let all = async {
            while let Some(done) = self.tasks.join_next().await {
                if let Err(e) = done
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "an action panicked");
                }
            }
        };
        let finished = tokio::time::timeout(timeout, all).await.is_ok();
        if !finished {
            tracing::warn!(
                left = self.tasks.len(),
                "actions still running after {timeout:?}; cancelling them"
            );
        }
        self.cancel();
        finished
    }

    /// Cancels every action at once (this replica stopped leading).
    pub fn cancel(&mut self) {
        let left = self.tasks.len();
        if left > 0 {
            tracing::info!(cancelled = left, "cancelling actions in flight");
        }
        self.tasks.abort_all();
        self.metrics.set_actions_in_flight(0);
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// One action's life inside its task.
struct Job {
    action: Action,
    effects: Arc<dyn Effects>,
    permits: Arc<Semaphore>,
    fence: Fence,
    failures: mpsc::UnboundedSender<Failure>,
    retry: RetryPolicy,
    metrics: Arc<Metrics>,
    crash: Option<Crash>,
}

impl Job {
    async fn run(self, ticket: crate::order::Ticket) {
        let kind = self.action.kind();
        if let Some(c) = &self.crash
            && (c.dead() || c.hold.contains(&kind))
        {
            // Never sent: the test kills the operator with it still waiting.
            return self.fence.lost().await;
        }
        let turn = tokio::select! {
            t = ticket.wait() => t,
            _ = self.fence.lost() => return self.cancelled(),
        };
        let Some(turn) = turn else {
            self.metrics.action(kind, "superseded");
            return self.effects.abandon(&self.action);
        };
        let attempts = self.retry.attempts_for(kind);
        let mut attempt = 0;
        loop {
            let permit = tokio::select! {
                p = self.permits.clone().acquire_owned() => p,
                _ = self.fence.lost() => return self.cancelled(),
            };
            if self.fence.check().is_err() {
                return self.cancelled();
            }
            // A call still waiting for its answer when this replica stops leading is dropped:
            // an answer could no longer be acted on, and a request stuck on its way (a
            // partition) must not arrive later.
            let result = tokio::select! {
                r = self.effects.run(&self.action, &self.fence) => r,
                _ = self.fence.lost() => Err(Error::Fenced),
            };
            drop(permit);
            let error = match result {
                Ok(()) => {
                    self.metrics.action(kind, "ok");
                    if let Some(c) = self.crash.as_ref().filter(|c| c.after == kind) {
                        let done = c.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        if done >= c.times {
                            c.dead.store(true, std::sync::atomic::Ordering::SeqCst);
                            c.fired.notify_one();
                        }
                    }
                    return;
                }
                Err(Error::Fenced) => return self.cancelled(),
                Err(e) => e,
            };
            let category = error.category();
            self.metrics.action_error(kind, category);
            attempt += 1;
            if turn.superseded() {
                // A newer write of the same object carries the whole status.
                self.metrics.action(kind, "superseded");
                return self.effects.abandon(&self.action);
            }
            // A cloud error was retried already, inside the provider's SDK (one retry layer
            // per call, `spillway_cloud::CallPolicy`): the loop decides again instead.
            if !category.retryable() || attempt >= attempts || error.retried_below() {
                tracing::warn!(action = kind.as_str(), key = %self.action.key(), attempts = attempt,
                    category = category.as_str(), error = %error, "action failed");
                self.metrics.action(kind, "failed");
                self.effects.abandon(&self.action);
                let _ = self.failures.send(Failure {
                    action: self.action,
                    error,
                });
                return;
            }
            let wait = self.retry.backoff(attempt - 1);
            tracing::debug!(action = kind.as_str(), key = %self.action.key(), attempt,
                category = category.as_str(), error = %error, "retrying in {wait:?}");
            self.metrics.action_retried(kind);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.fence.lost() => return self.cancelled(),
            }
        }
    }

    fn cancelled(self) {
        self.metrics.action(self.action.kind(), "cancelled");
        self.effects.abandon(&self.action);
    }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
