//! Spillway's decision core.
//!
//! This crate owns the domain: what a job, a queue, a pool, a node and a cloud offering are, and
//! (from the decision-core work on) the pure function that turns a snapshot of them into a plan.
//!
//! Invariants this crate keeps:
//! - No I/O and no clock: no tokio, kube or AWS crate may appear in its dependency tree (a test
//!   in `tests/layering.rs` fails if one does), and time always arrives as an argument.
//! - Deterministic: the same input gives the same output.

pub mod duration;
pub mod gpu;
pub mod types;

pub use duration::{Duration, ParseDurationError};
pub use gpu::GpuModel;
pub use types::{CapacityType, Classification, Environment, Placement};
