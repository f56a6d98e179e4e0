//! Notices of what the cloud is about to do to an instance (EC2's two-minute spot
//! interruption warning, a rebalance recommendation, a state change, a scheduled change), read
//! from a queue the provider's event bus writes to, and the queue's narrow contract.
//!
//! Invariants: a message is deleted only by its receipt, once the caller has acted on it (or
//! decided it is not its own); a message that does not parse is data ([`QueueMessage::notices`]
//! is `Err`), never a panic.

use std::time::Duration;

use spillway_core::Time;

use crate::{BoxFuture, CloudError};

/// How long EC2 warns before it interrupts a spot instance.
pub const SPOT_WARNING_LEAD: spillway_core::Duration = spillway_core::Duration::from_secs(120);

/// What a notice says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The instance will be interrupted (terminated, stopped or hibernated) at `deadline`.
    SpotInterruptionWarning,
    /// The instance is at elevated risk of interruption; moving its work early is advised.
    RebalanceRecommendation,
    /// The instance changed state (`pending`, `running`, `stopping`, `stopped`,
    /// `shutting-down`, `terminated`).
    StateChange(String),
    /// Maintenance is scheduled for the instance (a retirement, a reboot, a stop) from
    /// `deadline`.
    ScheduledChange,
}

impl NoticeKind {
    /// The metric label and the word in logs: `spot-interruption-warning`,
    /// `rebalance-recommendation`, `state-change`, `scheduled-change`.
    pub fn as_str(&self) -> &'static str {
        match self {
            NoticeKind::SpotInterruptionWarning => "spot-interruption-warning",
            NoticeKind::RebalanceRecommendation => "rebalance-recommendation",
            NoticeKind::StateChange(_) => "state-change",
            NoticeKind::ScheduledChange => "scheduled-change",
        }
    }
}

/// One notice about one instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The event's id (the same in a duplicate delivery).
    pub id: String,
    pub kind: NoticeKind,
    pub instance: String,
    /// When the event happened.
    pub time: Time,
    /// When the instance is lost: the warning's time plus [`SPOT_WARNING_LEAD`], or the start
    /// of a scheduled change. `None` for the other kinds.
    pub deadline: Option<Time>,
}

/// One message received from a notice queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueMessage {
    /// The queue's id of the message (the same on a redelivery).
    pub id: String,
    /// What deletes this delivery of it (a redelivery has a new one).
    pub receipt: String,
    /// The notices it carries (an AWS Health event may name several instances; an event of
    /// another kind carries none), or why it could not be read.
    pub notices: Result<Vec<Notice>, String>,
}

/// A queue of notices (an SQS queue on AWS).
pub trait NoticeQueue: Send + Sync {
    /// Waits up to `wait` for messages of queue `url` and returns those that arrived (at most
    /// ten); each stays invisible to other readers for the queue's visibility timeout.
    fn receive<'a>(
        &'a self,
        url: &'a str,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<QueueMessage>, CloudError>>;

    /// Deletes one delivered message; one deleted already (an old receipt) is done.
    fn delete<'a>(
        &'a self,
        url: &'a str,
        receipt: &'a str,
    ) -> BoxFuture<'a, Result<(), CloudError>>;
}
