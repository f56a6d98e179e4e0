//! Spillway's decision core.
//!
//! This crate owns the domain (jobs, queues, pools, nodes, cloud offerings) and the pure
//! function [`decide`] that turns a [`Snapshot`] into a [`Plan`]: jobs to start on named
//! private nodes, jobs to place on existing cloud nodes, instances to launch (with an
//! idempotency key per need), idle cloud nodes to terminate, and a [`Decision`] with a reason
//! for every job it looked at. The operator, the simulator and `spillway explain` all call it.
//!
//! Invariants this crate keeps:
//! - No I/O and no clock: no tokio, kube or AWS crate may appear in its dependency tree (a test
//!   in `tests/layering.rs` fails if one does), and `now` always arrives as an argument.
//! - Deterministic: the same snapshot and `now` give the same plan.
//! - A job reading a Restricted dataset is never placed in the cloud; a gang is placed whole
//!   or not at all; a plan never takes a queue past its budget or a pool past its limits; no
//!   need is launched twice.

pub mod catalog;
pub mod decide;
pub mod duration;
pub mod environment;
pub mod error;
pub mod gpu;
pub mod model;
pub mod plan;
pub mod policy;
mod profile;
pub mod quiet;
mod refs;
pub mod scheduler;
pub mod spot;
pub mod time;
pub mod tracked;
pub mod types;

pub use decide::{FastMap, Scratch, decide, decide_with};
pub use duration::{Duration, ParseDurationError};
pub use environment::{Facts, Requirements, Version};
pub use error::ErrorCategory;
pub use gpu::{GpuModel, NodeShape};
pub use model::{
    BurstSettings, Dataset, Efa, Instance, Job, JobState, Node, Offering, Packing, Pool, PoolKind,
    Queue, QueueOrder, Settings, Snapshot, TopologyWish, WaitMode,
};
pub use plan::{
    Decision, Launch, Move, OfferingChoice, Outcome, Plan, Preemption, Reason, Start, Termination,
};
pub use policy::{Effects, NoPolicy, Policy, PolicyContext, QueueState, Repatriate};
pub use quiet::Quiet;
pub use scheduler::{Change, Config, Scheduler, SchedulerStats};
pub use time::Time;
pub use tracked::{NodeMut, Tracked};
pub use types::{CapacityType, Classification, Environment, Placement};
