//! [`spillway_cloud::CloudProvider`] on AWS EC2, through `aws-sdk-ec2` and the standard AWS
//! configuration chain.
//!
//! Invariants (beyond the trait's): every launch carries Spillway's tags and a `ClientToken`;
//! listing filters on the cluster tag, so nothing without it is ever terminated; throttled calls
//! are retried with jittered backoff and every call has a timeout.

mod ec2;

pub use ec2::Ec2Provider;
