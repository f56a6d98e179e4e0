//! The views kept across builds (`world::Memo`) against a build from scratch: random histories
//! of a small cluster (jobs, pods, nodes, queues, namespaces, pools, needs, what the loop
//! assumed and finished, the clock), some objects replaced by equal copies, and at every step
//! the kept build must equal the fresh one.

use std::collections::BTreeMap;

use spillway_k8s::hashing::{HashMap, HashMapExt};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};
use spillway_api::{ComputePool, GpuJob, GpuQueue};
use spillway_core::{Change, Settings, Time};
use spillway_k8s::pods;
use spillway_k8s::world::{self, Assumed, Inputs, Memo};

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("literal object"))
}

const JOBS: usize = 4;
const NODES: usize = 4;

/// One change to the world, its numbers taken modulo what they choose among.
#[derive(Clone, Debug)]
enum Step {
    Clock(u8),
    Job(u8, u8, u8),
    JobGone(u8),
    Pod(u8, u8, u8, u8),
    PodGone(u8, u8),
    Node(u8, u8),
    NodeGone(u8),
    Queue(u8),
    /// The queue's status written (the same spec).
    QueueStatus(u8),
    Namespace(u8),
    /// A namespace's annotations edited (the same labels).
    NamespaceNote(u8),
    Pools(u8),
    Need(u8, u8),
    Finished(u8),
    Assume(u8, u8),
    Floor(u8, u8),
    /// The same objects, as new copies (a relist hands out new `Arc`s).
    Copies,
}

fn step() -> impl Strategy<Value = Step> {
    let n = any::<u8>;
    prop_oneof![
        n().prop_map(Step::Clock),
        (n(), n(), n()).prop_map(|(a, b, c)| Step::Job(a, b, c)),
        n().prop_map(Step::JobGone),
        (n(), n(), n(), n()).prop_map(|(a, b, c, d)| Step::Pod(a, b, c, d)),
        (n(), n()).prop_map(|(a, b)| Step::PodGone(a, b)),
        (n(), n()).prop_map(|(a, b)| Step::Node(a, b)),
        n().prop_map(Step::NodeGone),
        n().prop_map(Step::Queue),
        n().prop_map(Step::QueueStatus),
        n().prop_map(Step::Namespace),
        n().prop_map(Step::NamespaceNote),
        n().prop_map(Step::Pools),
        (n(), n()).prop_map(|(a, b)| Step::Need(a, b)),
        n().prop_map(Step::Finished),
        (n(), n()).prop_map(|(a, b)| Step::Assume(a, b)),
        (n(), n()).prop_map(|(a, b)| Step::Floor(a, b)),
        Just(Step::Copies),
    ]
}

/// `secs` (under a minute) after 1.8e9 s since the epoch.
fn at(secs: i64) -> String {
    assert!((0..60).contains(&secs));
    format!("2027-01-15T08:00:{secs:02}Z")
}

fn job(j: usize, spec: u8, status: u8) -> Arc<GpuJob> {
    let ns = if j.is_multiple_of(2) { "a" } else { "b" };
    let mut meta = json!({"name": format!("j{j}"), "namespace": ns, "uid": format!("u{j}")});
    if !spec.is_multiple_of(5) {
        meta["creationTimestamp"] = json!(at(0));
    }
    if spec % 11 == 3 {
        meta["deletionTimestamp"] = json!(at(5));
    }
    let mut s = json!({"queue": "q", "replicas": 1 + (spec % 2) as i32,
        "gpusPerReplica": if spec % 13 == 7 { 0 } else { 1 },
        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}});
    if spec % 3 == 1 {
        s["maxRuntime"] = json!("1h");
    }
    let status = match status % 7 {
        0 => Value::Null,
        1 => json!({"phase": "Running", "startedAt": at(55)}),
        2 => json!({"phase": "Running", "restarts": 1}),
        3 => json!({"phase": "Suspended", "pool": "gpu", "nodes": ["n0"]}),
        4 => json!({"phase": "Succeeded"}),
        5 => json!({"phase": "Queued", "restarts": 1, "queuedAt": at(30)}),
        _ => json!({"phase": "Provisioning"}),
    };
    from(json!({"metadata": meta, "spec": s, "status": status}))
}

fn pod(job: &GpuJob, replica: u32, how: u8, node: u8) -> Arc<Pod> {
    let attempt = u32::from(how % 2);
    let node = format!("n{}", node as usize % (NODES + 1));
    let mut p = pods::replica_pod(job, attempt, replica, &node, None);
    p.metadata.uid = Some(format!(
        "{}-{attempt}-{replica}",
        job.metadata.uid.as_ref().unwrap()
    ));
    if !how.is_multiple_of(3) {
        p.spec.as_mut().unwrap().node_name = Some(node);
    }
    if !how.is_multiple_of(4) {
        p.metadata.creation_timestamp = Some(serde_json::from_value(json!(at(40))).unwrap());
    }
    if how % 5 == 2 {
        p.metadata.deletion_timestamp = Some(serde_json::from_value(json!(at(50))).unwrap());
    }
    if how % 17 == 8 {
        p.metadata.owner_references = None;
    }
    let phase = ["Pending", "Running", "Running", "Succeeded", "Failed"][(how / 4 % 5) as usize];
    p.status = Some(serde_json::from_value(json!({"phase": phase})).unwrap());
    Arc::new(p)
}

fn node(n: usize, how: u8) -> Arc<Node> {
    let team = if how.is_multiple_of(3) { "other" } else { "ml" };
    let ready = if how.is_multiple_of(4) {
        "False"
    } else {
        "True"
    };
    from(
        json!({"metadata": {"name": format!("n{n}"), "labels": {"team": team}},
        "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready", "status": ready}]}}),
    )
}

fn queue(how: u8) -> Arc<GpuQueue> {
    queue_with(how, 0)
}

/// The queue of [`queue`] with `pending` jobs in its status.
fn queue_with(how: u8, pending: u8) -> Arc<GpuQueue> {
    let spec = match how % 3 {
        0 => json!({}),
        1 => json!({"namespaces": ["a"]}),
        _ => json!({"namespaceSelector": {"matchLabels": {"gpu": "yes"}}}),
    };
    from(json!({"metadata": {"name": "q"}, "spec": spec, "status": {"pending": pending}}))
}

fn namespace(ns: &str, how: u8) -> Arc<Namespace> {
    namespace_noted(ns, how, 0)
}

/// The namespace of [`namespace`] with an annotation saying `note`.
fn namespace_noted(ns: &str, how: u8, note: u8) -> Arc<Namespace> {
    let labels = if how.is_multiple_of(2) {
        json!({"gpu": "yes"})
    } else {
        json!({})
    };
    from(json!({"metadata": {"name": ns, "labels": labels,
        "annotations": {"note": note.to_string()}}}))
}

fn pools(how: u8) -> Vec<Arc<ComputePool>> {
    let mut p = vec![from(json!({"metadata": {"name": "gpu"},
        "spec": {"private": {"nodeSelector": {"team": "ml"}}}}))];
    if how % 2 == 1 {
        p.push(from(json!({"metadata": {"name": "cloud"},
            "spec": {"aws": {"region": "us-east-1", "instanceTypes": ["g6.xlarge"],
                "amiId": "ami-0abc"}}})));
    }
    p
}

/// The world the steps change, its objects kept (same `Arc`) until a step replaces them.
struct World {
    now: i64,
    jobs: Vec<Option<(Arc<GpuJob>, u8, u8)>>,
    pods: Vec<Vec<Option<Arc<Pod>>>>,
    nodes: Vec<Option<(Arc<Node>, u8)>>,
    queue: (Arc<GpuQueue>, u8),
    namespaces: Vec<(Arc<Namespace>, u8)>,
    pools: (Vec<Arc<ComputePool>>, u8),
    needs: HashMap<String, String>,
    finished: spillway_k8s::hashing::HashSet<String>,
    assumed: HashMap<String, Assumed>,
    floor: HashMap<String, u32>,
}

impl World {
    fn new() -> World {
        World {
            now: 100,
            jobs: (0..JOBS).map(|j| Some((job(j, 1, 0), 1, 0))).collect(),
            pods: vec![vec![None, None]; JOBS],
            nodes: (0..NODES).map(|n| Some((node(n, 1), 1))).collect(),
            queue: (queue(0), 0),
            namespaces: vec![(namespace("a", 0), 0), (namespace("b", 0), 0)],
            pools: (pools(0), 0),
            needs: HashMap::new(),
            finished: Default::default(),
            assumed: HashMap::new(),
            floor: HashMap::new(),
        }
    }

    fn id(j: usize) -> String {
        format!("{}/j{j}", if j.is_multiple_of(2) { "a" } else { "b" })
    }

    fn apply(&mut self, s: &Step) {
        let j = |x: &u8| *x as usize % JOBS;
        match s {
            Step::Clock(d) => self.now += [0, 1, 30, 1800, 3600, 86_400][*d as usize % 6],
            Step::Job(x, spec, status) => {
                self.jobs[j(x)] = Some((job(j(x), *spec, *status), *spec, *status))
            }
            Step::JobGone(x) => self.jobs[j(x)] = None,
            Step::Pod(x, r, how, n) => {
                if let Some((job, ..)) = &self.jobs[j(x)] {
                    let r = *r as usize % 2;
                    self.pods[j(x)][r] = Some(pod(job, r as u32, *how, *n));
                }
            }
            Step::PodGone(x, r) => self.pods[j(x)][*r as usize % 2] = None,
            Step::Node(n, how) => {
                self.nodes[*n as usize % NODES] = Some((node(*n as usize % NODES, *how), *how))
            }
            Step::NodeGone(n) => self.nodes[*n as usize % NODES] = None,
            Step::Queue(how) => self.queue = (queue(*how), *how),
            Step::QueueStatus(pending) => self.queue.0 = queue_with(self.queue.1, *pending),
            Step::Namespace(how) => {
                let i = *how as usize % 2;
                self.namespaces[i] = (namespace(["a", "b"][i], *how / 2), *how / 2);
            }
            Step::NamespaceNote(note) => {
                let i = *note as usize % 2;
                let how = self.namespaces[i].1;
                self.namespaces[i].0 = namespace_noted(["a", "b"][i], how, *note);
            }
            Step::Pools(how) => self.pools = (pools(*how), *how),
            Step::Need(x, attempt) => {
                let key = format!("{}#{}", World::id(j(x)), attempt % 2);
                if self.needs.remove(&key).is_none() {
                    self.needs.insert(key, "cloud".into());
                }
            }
            Step::Finished(x) => {
                let id = World::id(j(x));
                if !self.finished.remove(&id) {
                    self.finished.insert(id);
                }
            }
            Step::Assume(x, how) => {
                let id = World::id(j(x));
                if how % 3 == 0 {
                    self.assumed.remove(&id);
                } else {
                    let nodes =
                        (0..1 + how % 2).map(|r| format!("n{}", (how + r) as usize % NODES));
                    self.assumed.insert(
                        id,
                        Assumed {
                            attempt: 0,
                            pool: "gpu".into(),
                            environment: spillway_core::Environment::Private,
                            nodes: nodes.collect(),
                            at: Time::from_secs_f64(1.8e9 + self.now as f64 - 10.0),
                        },
                    );
                }
            }
            Step::Floor(x, f) => {
                self.floor.insert(World::id(j(x)), u32::from(f % 3));
            }
            Step::Copies => {
                for (job, spec, status) in self.jobs.iter_mut().flatten() {
                    *job = self::job(job_index(job), *spec, *status);
                }
                for p in self.pods.iter_mut().flatten().flatten() {
                    *p = Arc::new((**p).clone());
                }
                for (n, how) in self.nodes.iter_mut().flatten() {
                    *n = node(
                        n.metadata.name.as_ref().unwrap()[1..].parse().unwrap(),
                        *how,
                    );
                }
                self.queue.0 = queue(self.queue.1);
                self.pools.0 = pools(self.pools.1);
            }
        }
    }

    fn inputs(&self) -> Inputs {
        Inputs {
            jobs: self
                .jobs
                .iter()
                .flatten()
                .map(|(j, ..)| j.clone())
                .collect(),
            pods: self.pods.iter().flatten().flatten().cloned().collect(),
            nodes: self
                .nodes
                .iter()
                .flatten()
                .map(|(n, _)| n.clone())
                .collect(),
            queues: vec![self.queue.0.clone()],
            namespaces: self.namespaces.iter().map(|(n, _)| n.clone()).collect(),
            pools: self.pools.0.clone(),
            needs: self.needs.clone(),
            finished: self.finished.clone(),
            ..Inputs::default()
        }
    }
}

fn job_index(job: &GpuJob) -> usize {
    job.metadata.name.as_ref().unwrap()[1..].parse().unwrap()
}

/// What a build says, as comparable text (views hold objects without equality), and its
/// snapshot with `jobs` in id order.
fn said(b: &world::Built, jobs: Vec<spillway_core::Job>) -> (String, spillway_core::Snapshot) {
    let views: Vec<String> = b
        .jobs
        .iter()
        .map(|(id, v)| {
            let names = |p: &[Arc<Pod>]| -> Vec<String> {
                p.iter()
                    .map(|p| p.metadata.uid.clone().unwrap_or_default())
                    .collect()
            };
            format!(
                "{id} {} {:?} {:?} {:?} {:?} {:?} {:?}",
                v.id,
                v.attempt,
                v.queued_at,
                names(&v.pods),
                names(&v.surplus_pods),
                v.lifecycle,
                v.invalid
            )
        })
        .collect();
    let pools: BTreeMap<_, _> = b.node_pool.iter().collect();
    let text = format!("{views:#?}\n{pools:?}\n{:?}", b.invalid_objects);
    let mut snapshot = b.snapshot.clone();
    snapshot.jobs = jobs;
    snapshot.jobs.sort_by(|a, b| a.id.cmp(&b.id));
    (text, snapshot)
}

type Said = (String, spillway_core::Snapshot);

/// Builds the world both ways; the kept build's core jobs are the ones its memo told as
/// changes, applied to those it told before (`held`).
fn both(
    w: &World,
    memo: &mut Memo,
    held: &mut BTreeMap<String, spillway_core::Job>,
) -> (Said, Said) {
    let i = w.inputs();
    let now = Time::from_secs_f64(1.8e9 + w.now as f64);
    let kept = world::build_kept(memo, &i, &w.assumed, &w.floor, Settings::default(), now);
    assert!(
        kept.snapshot.jobs.is_empty(),
        "a kept build leaves them to the memo"
    );
    for change in memo.take_job_changes() {
        match change {
            Change::Job(j) => {
                held.insert(j.id.clone(), *j);
            }
            Change::JobGone(id) => {
                held.remove(&id);
            }
            other => panic!("not a job's change: {other:?}"),
        }
    }
    let fresh = world::build(&i, &w.assumed, &w.floor, Settings::default(), now);
    (
        said(&kept, held.values().cloned().collect()),
        said(&fresh, fresh.snapshot.jobs.clone()),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn kept_views_build_what_a_fresh_build_does(steps in prop::collection::vec(step(), 1..60)) {
        let mut w = World::new();
        let mut memo = Memo::default();
        let mut held = BTreeMap::new();
        for (n, s) in steps.iter().enumerate() {
            w.apply(s);
            let (kept, fresh) = both(&w, &mut memo, &mut held);
            prop_assert_eq!(kept, fresh, "after step {} ({:?})", n, s);
        }
    }
}

/// A job moving home waits for its pods being deleted to stop; one on a node that stops being
/// Ready never will (no kubelet confirms it), so the job is ready to resume. A kept view
/// must see the readiness change although the pod and its node's pool did not change.
#[test]
fn a_kept_view_sees_the_readiness_of_its_pods_nodes() {
    let mut w = World::new();
    let mut memo = Memo::default();
    let mut held = BTreeMap::new();
    // j0 suspended, holding n0; its pod of attempt 0 on n0 is being deleted, still Pending.
    for s in [
        Step::Job(0, 1, 3),
        Step::Pod(0, 0, 22, 0),
        Step::Node(0, 4),
        Step::Node(0, 1),
    ] {
        w.apply(&s);
        let (kept, fresh) = both(&w, &mut memo, &mut held);
        assert_eq!(kept, fresh, "after {s:?}");
    }
}

/// The loop writes a queue's status whenever a job of it starts or ends: the views of its
/// jobs, which read only whom it admits, are kept; a change of whom it admits derives them
/// again. Likewise a namespace's annotations and its labels.
#[test]
fn a_queue_or_namespace_reading_the_same_keeps_the_views() {
    let mut w = World::new();
    let mut memo = Memo::default();
    let mut held = BTreeMap::new();
    w.apply(&Step::Queue(2));
    let mut counts = |w: &World, memo: &mut Memo| {
        let (kept, fresh) = both(w, memo, &mut held);
        assert_eq!(kept, fresh);
        memo.take_counts()
    };
    assert_eq!(counts(&w, &mut memo), (JOBS, 0), "first build");
    for s in [
        Step::QueueStatus(7),
        Step::NamespaceNote(0),
        Step::NamespaceNote(1),
    ] {
        w.apply(&s);
        assert_eq!(counts(&w, &mut memo), (0, JOBS), "after {s:?}");
        assert_eq!(counts(&w, &mut memo), (0, JOBS), "the build after {s:?}");
    }
    w.apply(&Step::Queue(1));
    assert_eq!(
        counts(&w, &mut memo),
        (JOBS, 0),
        "whom the queue admits changed"
    );
    // Namespace a (half the jobs) loses its labels.
    w.apply(&Step::Namespace(2));
    assert_eq!(
        counts(&w, &mut memo),
        (JOBS / 2, JOBS / 2),
        "namespace a's labels changed"
    );
}

/// A job that leaves in the build in which the pools change (every view is derived again) is
/// gone from the build like any other.
#[test]
fn a_job_leaving_as_the_pools_change_is_gone() {
    let mut w = World::new();
    let mut memo = Memo::default();
    let mut held = BTreeMap::new();
    let (kept, fresh) = both(&w, &mut memo, &mut held);
    assert_eq!(kept, fresh);
    w.apply(&Step::JobGone(1));
    w.apply(&Step::Pools(1));
    let (kept, fresh) = both(&w, &mut memo, &mut held);
    assert_eq!(kept, fresh);
}

/// While nothing that many views read changes, a build looks only at the jobs whose view may
/// have changed (their objects, their pods, what the loop assumed for them); when something
/// does (a node's readiness), it looks at every job. Either way it builds what a fresh build
/// does.
#[test]
fn a_build_looks_only_at_the_jobs_that_may_have_changed() {
    let mut w = World::new();
    let mut memo = Memo::default();
    let mut held = BTreeMap::new();
    let mut visited = |w: &World, memo: &mut Memo| {
        let (kept, fresh) = both(w, memo, &mut held);
        assert_eq!(kept, fresh);
        memo.visited()
    };
    assert_eq!(visited(&w, &mut memo), JOBS, "first build");
    assert_eq!(visited(&w, &mut memo), 0, "nothing changed");
    for (s, looked, why) in [
        (Step::Pod(1, 0, 1, 1), 1, "a pod of job 1 appeared"),
        (Step::Pod(1, 0, 5, 1), 1, "the pod changed"),
        (Step::Pod(2, 1, 1, 2), 1, "a pod of job 2 appeared"),
        (Step::Job(3, 1, 1), 1, "job 3's status changed"),
        (Step::Assume(0, 1), 1, "a start of job 0 was assumed"),
        (Step::Assume(0, 0), 1, "and is no longer"),
        (Step::QueueStatus(5), 0, "the queue's status was written"),
        (
            Step::NamespaceNote(1),
            0,
            "a namespace's annotations changed",
        ),
        (
            Step::Node(2, 1),
            0,
            "node 2 is a new copy that reads the same",
        ),
        (Step::PodGone(1, 0), 1, "job 1's pod is gone"),
        (Step::Node(2, 4), JOBS, "node 2 is no longer Ready"),
        (Step::JobGone(3), 0, "job 3 is gone"),
        (Step::Job(3, 1, 0), 1, "job 3 is back"),
        (Step::Queue(1), JOBS, "whom the queue admits changed"),
        (Step::Copies, JOBS, "every object is a new copy"),
    ] {
        w.apply(&s);
        assert_eq!(visited(&w, &mut memo), looked, "{why} ({s:?})");
        assert_eq!(visited(&w, &mut memo), 0, "the build after: {why}");
    }
}
