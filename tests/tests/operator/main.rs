//! The operator end to end: the real API server and scheduler, the fake kubelet for GPU nodes.

mod admission;
mod identity;
mod jobsets;
mod leadership;
mod lifecycle;
mod placement;
mod pod_groups;
mod rayjobs;
mod reclaim;
mod remote;
mod remote_isolation;
mod remote_workloads;
mod telemetry;
mod topology;
mod trainjobs;
mod utilization;
mod validity;
mod workloads;
mod world;
