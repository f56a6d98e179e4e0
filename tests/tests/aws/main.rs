//! Bursting to EC2 end to end: moto's EC2 server, the real API server and scheduler, the fake
//! kubelet, and the harness booting a Node for each instance.

mod bursting;
mod environment;
mod identity;
mod interruptions;
mod lifecycle;
mod locality;
mod placement;
mod repatriation;
mod spend;
mod telemetry;
mod workloads;
mod world;
