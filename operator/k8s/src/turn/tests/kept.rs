//! Turns that keep views and quiet statuses across turns against turns that derive everything
//! again: random histories of a small cluster (jobs submitted and deleted, nodes going and
//! coming, pods started, finished and lost, the turn's own writes landing in the caches late
//! (the jobs' and the queue's statuses), the clock), and at every turn both must ask for the
//! same actions and the same wake-up.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use proptest::prelude::*;
use serde_json::json;
use spillway_api::GpuJob;

use super::fixtures::*;
use crate::actions::{Action, StatusKind};
use crate::metrics::Metrics;
use crate::turn::{State, TurnSettings};
use crate::world::Inputs;

#[derive(Clone, Debug)]
enum Step {
    Submit(u8, u8),
    Delete(u8),
    Clock(u8),
    /// The writes of the last turns land in the caches.
    Land,
    /// The kubelet moves a pod on.
    Kubelet(u8, u8),
    Node(u8, bool),
    /// The private pool's GPUs get a price, or lose it.
    Price(bool),
    /// Nothing happened: a turn on the same world.
    Again,
}

fn step() -> impl Strategy<Value = Step> {
    let n = any::<u8>;
    prop_oneof![
        2 => (n(), n()).prop_map(|(a, b)| Step::Submit(a, b)),
        1 => n().prop_map(Step::Delete),
        2 => n().prop_map(Step::Clock),
        4 => Just(Step::Land),
        3 => (n(), n()).prop_map(|(a, b)| Step::Kubelet(a, b)),
        1 => (n(), any::<bool>()).prop_map(|(a, b)| Step::Node(a, b)),
        1 => any::<bool>().prop_map(Step::Price),
        2 => Just(Step::Again),
    ]
}

const JOBS: usize = 5;
const NODES: usize = 3;

struct World {
    now: spillway_core::Time,
    jobs: BTreeMap<String, Arc<GpuJob>>,
    pods: BTreeMap<String, Arc<Pod>>,
    nodes: Vec<bool>,
    /// The objects the caches hand out, the same until they change.
    base: Inputs,
    /// Actions asked for and not landed yet.
    pending: Vec<Action>,
}

impl World {
    fn new() -> World {
        let mut base = cluster();
        base.pools = vec![private_pool("onprem")];
        base.nodes = (0..NODES)
            .map(|n| node(&format!("n{n}"), "onprem", 2))
            .collect();
        World {
            now: noon(),
            jobs: BTreeMap::new(),
            pods: BTreeMap::new(),
            nodes: vec![true; NODES],
            base,
            pending: Vec::new(),
        }
    }

    fn inputs(&self) -> Inputs {
        let mut i = self.base.clone();
        i.nodes = (self.base.nodes.iter().zip(&self.nodes))
            .filter(|(_, up)| **up)
            .map(|(n, _)| n.clone())
            .collect();
        i.jobs = self.jobs.values().cloned().collect();
        i.pods = self.pods.values().cloned().collect();
        i
    }

    fn apply(&mut self, s: &Step) {
        match s {
            Step::Submit(j, how) => {
                let name = format!("j{}", *j as usize % JOBS);
                self.jobs.entry(name).or_insert_with_key(|name| {
                    let mut b = job(name).gpus(1 + u32::from(how % 2));
                    b = b.replicas(1 + u32::from(how / 2 % 2));
                    if how % 5 == 1 {
                        b = b.restartable();
                    }
                    if how % 3 == 2 {
                        b.0["spec"]["maxRuntime"] = json!("20m");
                    }
                    b.build()
                });
            }
            Step::Delete(j) => {
                let name = format!("j{}", *j as usize % JOBS);
                self.jobs.remove(&name);
                self.pods
                    .retain(|_, p| p.labels().get(crate::labels::JOB_LABEL) != Some(&name));
            }
            Step::Clock(d) => self.now = self.now + minutes([0, 1, 4, 11, 25][*d as usize % 5]),
            Step::Land => {
                for a in std::mem::take(&mut self.pending) {
                    self.land(a);
                }
            }
            Step::Kubelet(p, how) => {
                let Some(name) = self
                    .pods
                    .keys()
                    .nth(*p as usize % self.pods.len().max(1))
                    .cloned()
                else {
                    return;
                };
                let phase =
                    ["Running", "Running", "Succeeded", "Failed", "Gone"][*how as usize % 5];
                if phase == "Gone" {
                    self.pods.remove(&name);
                    return;
                }
                let mut pod = (*self.pods[&name]).clone();
                pod.status = Some(serde_json::from_value(json!({"phase": phase})).expect("status"));
                self.pods.insert(name, Arc::new(pod));
            }
            Step::Node(n, up) => self.nodes[*n as usize % NODES] = *up,
            Step::Price(p) => {
                let mut pool = (*private_pool("onprem")).clone();
                if *p {
                    let private = pool.spec.private.as_mut().expect("private");
                    private.gpu_cost_per_hour = Some(3.0);
                }
                self.base.pools = vec![Arc::new(pool)];
            }
            Step::Again => {}
        }
    }

    /// What the API server and the scheduler make of one action.
    fn land(&mut self, a: Action) {
        match a {
            Action::CreatePod { pod, .. } => {
                let mut pod = *pod;
                let name = pod.metadata.name.clone().unwrap_or_default();
                pod.metadata.uid = Some(format!("uid-{name}"));
                pod.metadata.creation_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff_of(self.now)),
                );
                let node = pod
                    .annotations()
                    .get(crate::labels::NODE_ANNOTATION)
                    .cloned();
                if let Some(spec) = pod.spec.as_mut() {
                    spec.node_name = node;
                }
                self.pods.insert(name, Arc::new(pod));
            }
            Action::DeletePod { name, .. } | Action::EvictPod { name, .. } => {
                self.pods.remove(&name);
            }
            Action::ApplyStatus(p) if p.kind == StatusKind::GpuJob => {
                if let Some(job) = self.jobs.get(&p.name) {
                    let mut job = (**job).clone();
                    job.status = serde_json::from_value(p.body["status"].clone()).ok();
                    self.jobs.insert(p.name.clone(), Arc::new(job));
                }
            }
            Action::ApplyStatus(p) if p.kind == StatusKind::GpuQueue => {
                // The queue's counts: its jobs' views, which read whom it admits, are kept.
                for q in self
                    .base
                    .queues
                    .iter_mut()
                    .filter(|q| q.name_any() == p.name)
                {
                    let mut queue = (**q).clone();
                    queue.status = serde_json::from_value(p.body["status"].clone()).ok();
                    *q = Arc::new(queue);
                }
            }
            Action::Annotate {
                name, key, value, ..
            } => {
                if let Some(job) = self.jobs.get(&name) {
                    let mut job = (**job).clone();
                    job.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(key, value);
                    self.jobs.insert(name, Arc::new(job));
                }
            }
            _ => {}
        }
    }
}

fn jiff_of(t: spillway_core::Time) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis()).expect("a time")
}

/// The actions as comparable text, in a fixed order (the order of the decisions and starts
/// follows the scheduler's order of jobs, which the two may differ in).
fn said(actions: &[Action]) -> Vec<String> {
    let mut v: Vec<String> = actions.iter().map(|a| format!("{a:?}")).collect();
    v.sort();
    v
}

/// Runs `steps` through a turn that keeps and one that derives; the first difference, if any.
fn differs(steps: &[Step]) -> Option<String> {
    let mut w = World::new();
    let metrics = Metrics::default();
    let mut kept = State::new(TurnSettings::default());
    let mut fresh = State::forgetful(TurnSettings::default());
    for (n, s) in steps.iter().enumerate() {
        w.apply(s);
        let i = w.inputs();
        let a = kept.turn(i.clone(), None, &metrics, w.now);
        let b = fresh.turn(i, None, &metrics, w.now);
        if said(&a.actions) != said(&b.actions) || a.wake != b.wake {
            return Some(format!(
                "after step {n} ({s:?}):\nkept:  {:#?} wake {:?}\nfresh: {:#?} wake {:?}",
                said(&a.actions),
                a.wake,
                said(&b.actions),
                b.wake
            ));
        }
        w.pending.extend(a.actions);
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn turns_that_keep_views_act_as_turns_that_derive_them(steps in prop::collection::vec(step(), 1..60)) {
        if let Some(d) = differs(&steps) {
            prop_assert!(false, "{}", d);
        }
    }
}

/// Histories the random ones reach too rarely.
#[test]
fn a_priced_job_lost_pod_and_requeue_act_alike() {
    use Step::*;
    // A priced running job's cost grows with the clock alone.
    let priced = [
        Price(true),
        Submit(0, 0),
        Land,
        Again,
        Land,
        Again,
        Again,
        Clock(3),
        Again,
    ];
    // A restartable job's pod is lost: requeued to its next attempt, then started again.
    let lost = [
        Submit(0, 1),
        Land,
        Again,
        Land,
        Kubelet(0, 1),
        Land,
        Again,
        Kubelet(0, 4),
        Again,
        Land,
        Again,
        Land,
        Again,
    ];
    // The pool's GPUs get a price while a job runs: its rate changes, its view does not.
    let repriced = [Submit(0, 0), Land, Again, Land, Again, Price(true), Again];
    for steps in [&priced[..], &lost[..], &repriced[..]] {
        if let Some(d) = differs(steps) {
            panic!("{d}");
        }
    }
}
