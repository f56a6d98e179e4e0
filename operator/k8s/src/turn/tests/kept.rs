//! Turns that keep views and quiet statuses across turns against turns that derive everything
//! again: random histories of a small cluster (jobs and labelled batch Jobs submitted and
//! deleted, nodes going and coming, pods started, finished and lost, the turn's own writes
//! landing in the caches late (the jobs' and the queue's statuses, the workloads' GpuJobs and
//! patches, with the Job controller's pods), the clock), and at every turn both must ask for
//! the same actions and the same wake-up.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::DynamicObject;
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
    /// A labelled batch Job is made (suspended by the webhook, or not), or deleted.
    Workload(u8, u8),
    RemoveWorkload(u8),
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
        2 => (n(), n()).prop_map(|(a, b)| Step::Workload(a, b)),
        1 => n().prop_map(Step::RemoveWorkload),
    ]
}

const JOBS: usize = 5;
const WORKLOADS: usize = 3;
const NODES: usize = 3;

struct World {
    now: spillway_core::Time,
    jobs: BTreeMap<String, Arc<GpuJob>>,
    pods: BTreeMap<String, Arc<Pod>>,
    /// The labelled batch Jobs, as JSON and as the object the caches hand out.
    workloads: BTreeMap<String, (serde_json::Value, Arc<DynamicObject>)>,
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
            workloads: BTreeMap::new(),
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
        i.workloads = self.workloads.values().map(|(_, w)| w.clone()).collect();
        i
    }

    /// Workload `name` is now `v` (a new object, a new resourceVersion).
    fn set_workload(&mut self, name: &str, mut v: serde_json::Value) {
        let version = v["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(0);
        v["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        let w = Arc::new(serde_json::from_value(v.clone()).expect("a workload"));
        self.workloads.insert(name.to_string(), (v, w));
    }

    /// The Job controller: each pod of a running workload made once, on the nodes its
    /// template allows (in turn); its pods deleted while it is suspended; its end once its pods
    /// ended.
    fn job_controller(&mut self) {
        for (name, (w, _)) in self.workloads.clone() {
            let owned = |p: &Pod| {
                (p.owner_references().iter())
                    .any(|o| Some(o.uid.as_str()) == w["metadata"]["uid"].as_str())
            };
            if w["spec"]["suspend"] == json!(true) {
                self.pods.retain(|_, p| !owned(p));
                continue;
            }
            let mine: Vec<Arc<Pod>> = self.pods.values().filter(|p| owned(p)).cloned().collect();
            let t = &w["spec"]["template"];
            let nodes = &t["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchFields"][0]["values"];
            let attempt = t["metadata"]["labels"][crate::labels::ATTEMPT_LABEL]
                .as_str()
                .unwrap_or("x");
            let parallelism = w["spec"]["parallelism"].as_u64().unwrap_or(1);
            for r in 0..parallelism {
                let pod = format!("{name}-{attempt}-{r}");
                if self.pods.contains_key(&pod) || !w["status"]["conditions"].is_null() {
                    continue;
                }
                let n = nodes.as_array().map_or(0, Vec::len).max(1);
                self.pods.insert(pod.clone(), from(json!({
                    "metadata": {"name": pod, "namespace": NS, "uid": format!("uid-{pod}"),
                                 "labels": t["metadata"]["labels"],
                                 "creationTimestamp": "2026-03-10T12:00:05Z",
                                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                      "name": name, "uid": w["metadata"]["uid"], "controller": true}]},
                    "spec": {"nodeName": nodes[r as usize % n], "containers": [{"name": "main",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                    "status": {"phase": "Pending"},
                })));
            }
            let phases: Vec<String> = (mine.iter())
                .map(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default()
                })
                .collect();
            let end = if phases.iter().any(|p| p == "Failed") {
                Some("Failed")
            } else if phases.len() as u64 >= parallelism && phases.iter().all(|p| p == "Succeeded")
            {
                Some("Complete")
            } else {
                None
            };
            if let Some(end) = end.filter(|_| w["status"]["conditions"].is_null()) {
                let mut w = w.clone();
                w["status"] = json!({"conditions": [{"type": end, "status": "True",
                    "lastTransitionTime": "2026-03-10T12:10:00Z"}]});
                self.set_workload(&name, w);
            }
        }
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
            Step::Workload(j, how) => {
                let name = format!("w{}", *j as usize % WORKLOADS);
                if self.workloads.contains_key(&name) {
                    return;
                }
                let v = json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": NS, "uid": format!("w-{name}"),
                                 "resourceVersion": "1", "labels": {"spillway.io/queue": "q"}},
                    "spec": {"parallelism": 1 + u64::from(how % 2), "suspend": how % 3 != 0,
                             "template": {"spec": {"restartPolicy": "Never", "containers": [
                                 {"name": "main", "image": "trainer",
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
                });
                self.set_workload(&name, v);
            }
            Step::RemoveWorkload(j) => {
                let name = format!("w{}", *j as usize % WORKLOADS);
                if self.workloads.remove(&name).is_some() {
                    // The garbage collector: its GpuJob and its pods go with it.
                    self.jobs.remove(&format!("job-{name}"));
                    let uid = format!("w-{name}");
                    self.pods
                        .retain(|_, p| !(p.owner_references().iter()).any(|o| o.uid == uid));
                }
            }
        }
        self.job_controller();
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
            Action::ApplyWorkloadJob(j) => {
                let mut j = *j;
                let name = j.metadata.name.clone().unwrap_or_default();
                if let Some(old) = self.jobs.get(&name) {
                    // An apply keeps what it does not set: the uid, the status.
                    j.metadata.uid.clone_from(&old.metadata.uid);
                    j.metadata
                        .creation_timestamp
                        .clone_from(&old.metadata.creation_timestamp);
                    j.status.clone_from(&old.status);
                } else {
                    j.metadata.uid = Some(format!("uid-{name}"));
                    j.metadata.creation_timestamp = Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff_of(self.now)),
                    );
                }
                j.metadata.generation = Some(1);
                self.jobs.insert(name, Arc::new(j));
            }
            Action::PatchWorkload(p) => {
                if let Some((w, _)) = self.workloads.get(&p.name) {
                    let mut w = w.clone();
                    super::workloads::merge(&mut w, &p.patch);
                    self.set_workload(&p.name, w);
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
