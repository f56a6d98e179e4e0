//! [`spillway_cloud::CloudProvider`] on AWS EC2, through `aws-sdk-ec2` and the standard AWS
//! configuration chain; [`spillway_cloud::notices::NoticeQueue`] on SQS (`aws-sdk-sqs`), whose
//! messages are EventBridge's EC2 events.
//!
//! Invariants (beyond the trait's): every launch carries Spillway's tags and a `ClientToken`;
//! listing filters on the cluster tag, so nothing without it is ever terminated; throttled calls
//! are retried with jittered backoff and every call has a timeout.

mod ec2;
pub mod eventbridge;
mod sqs;

pub use ec2::Ec2Provider;
pub use sqs::SqsQueue;
