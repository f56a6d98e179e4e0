//! Unit tests of the turn: literal objects and a clock in, actions out. No API server, no
//! cloud; milliseconds each. New operator behaviour is tested here first.

mod fixtures;

mod cloud;
mod dispatch;
mod environment;
mod identity;
mod indicators;
mod interruptions;
mod jobs;
mod kept;
mod leftovers;
mod objects;
mod placement;
mod pod_groups;
mod reclaim;
mod remote;
mod repatriate;
mod spend;
mod telemetry;
mod utilization;
mod workload_moves;
mod workload_status;
mod workloads;
