//! Environments in a turn. A cloud node that joined for a waiting job is checked against what
//! its pool promised (the image's driver and CUDA, the instance type's GPU model and memory)
//! and against the job's `requirements` before the job starts there: a node that falls short
//! fails its launch (`EnvironmentMismatch`: the node cordoned, the instance terminated, its
//! offering kept out of decisions for [`MISMATCH_MEMORY`], the job planned again). A node of a
//! pool that promises an environment, or joined for a job with requirements, takes no work
//! until GPU feature discovery has labelled it (or [`FACTS_GRACE`] has passed).
//!
//! And each cloud or cluster pool's drift from the private side (`EnvironmentDrift`).

use crate::hashing::{HashMap, HashMapExt};
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use spillway_api::ComputePool;
use spillway_api::environment::{ENVIRONMENT_VALUES, PoolEnvironment};
use spillway_core::environment::{self as env, Provided};
use spillway_core::{self as core, Time};

use super::{CloudInputs, State};
use crate::clock::k8s_time;
use crate::metrics::Metrics;
use crate::world::{self, Inputs, Lifecycle};

/// How long an offering whose instance fell short of its pool's promise stays out of
/// decisions (the image does not change by itself; a pool whose spec changes is trusted again
/// at once).
pub const MISMATCH_MEMORY: core::Duration = core::Duration::from_secs(3600);

/// How long a joined node that should state its environment may go without GPU feature
/// discovery's labels before it is judged on what it states (GFD labels a node some seconds
/// after it is Ready).
pub const FACTS_GRACE: core::Duration = core::Duration::from_secs(120);

/// An offering (pool, instance type) whose instance fell short of the promise.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatched {
    pub at: Time,
    /// The pool's generation then.
    pub generation: Option<i64>,
    /// What fell short, as the Event said it.
    pub what: String,
}

impl State {
    /// Checks the cloud nodes that joined for waiting jobs; see the module documentation.
    /// Returns when to look again at a node still waiting for its labels.
    pub(super) fn check_environments(
        &mut self,
        built: &mut world::Built,
        inputs: &Inputs,
        cloud: CloudInputs<'_>,
        metrics: &Metrics,
        now: Time,
    ) -> Option<Time> {
        let generations: HashMap<String, Option<i64>> = inputs
            .pools
            .iter()
            .map(|p| (p.name_any(), p.metadata.generation))
            .collect();
        if !self.mismatched_seeded {
            // A new leader keeps out what its predecessor left out (the pools' status says it).
            self.mismatched_seeded = true;
            for p in &inputs.pools {
                for l in p.status.iter().flat_map(|s| &s.left_out) {
                    let until = Time::from_millis(l.until.0.as_millisecond());
                    self.mismatched
                        .entry((p.name_any(), l.instance_type.clone()))
                        .or_insert(Mismatched {
                            at: until - MISMATCH_MEMORY,
                            generation: Some(l.generation),
                            what: l.what.clone(),
                        });
                }
            }
        }
        self.mismatched.retain(|(pool, _), m| {
            now.since(m.at) < MISMATCH_MEMORY
                && generations.get(pool).is_some_and(|g| *g == m.generation)
        });
        let snap = &mut built.snapshot;
        for o in &mut snap.offerings {
            if let Some(m) = self
                .mismatched
                .get(&(o.pool.clone(), o.instance_type.clone()))
            {
                let until = m.at + MISMATCH_MEMORY;
                o.unavailable_until = Some(o.unavailable_until.map_or(until, |u| u.max(until)));
            }
        }
        let promised: HashMap<(&str, &str), core::Facts> = snap
            .offerings
            .iter()
            .map(|o| ((o.pool.as_str(), o.instance_type.as_str()), o.facts.clone()))
            .collect();
        let instances: HashMap<&str, &spillway_cloud::CloudInstance> = cloud
            .view
            .instances
            .iter()
            .map(|i| (i.id.as_str(), i))
            .collect();
        let mut wake: Option<Time> = None;
        let mut failed = Vec::new();
        for n in &mut snap.nodes {
            let Some(id) = n.instance_id.as_deref() else {
                continue;
            };
            // A node being retired takes no new work, before its cordon shows.
            if !self.retiring.is_empty() && self.retiring.contains(&format!("node/{}", n.name)) {
                n.schedulable = false;
                continue;
            }
            let Some(i) = instances.get(id) else {
                continue;
            };
            let Some(view) = built.jobs.get(i.job.as_str()).filter(|v| {
                matches!(v.lifecycle, Lifecycle::Provisioning { .. })
                    && format!("{}#{}", v.id, v.attempt) == i.need
            }) else {
                continue;
            };
            let promise = promised
                .get(&(i.pool.as_str(), i.instance_type.as_str()))
                .cloned()
                .unwrap_or_default();
            let required = view
                .job
                .spec
                .requirements
                .as_ref()
                .map(|r| r.to_core())
                .unwrap_or_default();
            let stated = n.facts.driver.is_some() || n.facts.cuda.is_some();
            let expected =
                promise.driver.is_some() || promise.cuda.is_some() || !required.is_empty();
            if expected && !stated {
                let joined = node_created(inputs, &n.name).unwrap_or(now);
                let until = joined + FACTS_GRACE;
                if now < until {
                    n.schedulable = false;
                    wake = Some(wake.map_or(until, |w| w.min(until)));
                    continue;
                }
            }
            // The machine against its pool's promise (what it states falls short: the whole
            // offering is suspect), else against the job's wish (unstated or short of what
            // this job requires: only this job is concerned).
            let short: Vec<String> = env::shortfalls(&n.facts, &promise)
                .iter()
                .map(ToString::to_string)
                .collect();
            let (against_promise, what) = if !short.is_empty() {
                (true, short.join("; "))
            } else if let Some(u) = required.first_unmet(&n.facts) {
                (
                    false,
                    format!("{} where the job requires {}", u.fact(), u.wanted()),
                )
            } else {
                continue;
            };
            n.schedulable = false;
            failed.push((
                view.clone(),
                (*i).clone(),
                n.name.clone(),
                what,
                against_promise,
            ));
        }
        for (view, i, node, what, against_promise) in failed {
            if !against_promise {
                self.requirements_failed(&view, &i, &node, &what, metrics);
                continue;
            }
            let pool = inputs.pools.iter().find(|p| p.name_any() == i.pool);
            tracing::warn!(job = %view.id, instance = %i.id, node = %node, pool = %i.pool, %what, "a joined node falls short of its pool's environment");
            metrics.environment_mismatch(&i.pool);
            self.mismatched.insert(
                (i.pool.clone(), i.instance_type.clone()),
                Mismatched {
                    at: now,
                    generation: pool.and_then(|p| p.metadata.generation),
                    what: what.clone(),
                },
            );
            self.retire(
                Some(i.id.clone()),
                Some(node.clone()),
                "its environment falls short of its pool's promise",
            );
            let next = self.next_attempt(&view);
            let note = format!(
                "Instance {} ({}) of pool {} joined as node {node} with {what}. The node is cordoned and the instance terminated; {} in pool {} is left out of decisions for {} minutes (or until the pool changes), and the job is planned again (need {}#{next}).",
                i.id,
                i.instance_type,
                i.pool,
                i.instance_type,
                i.pool,
                MISMATCH_MEMORY.as_secs() / 60,
                view.id,
            );
            self.publish(
                view.job.object_ref(&()),
                true,
                "EnvironmentMismatch",
                "Launch",
                note.clone(),
            );
            if let Some(p) = pool {
                self.publish(
                    p.object_ref(&()),
                    true,
                    "EnvironmentMismatch",
                    "Launch",
                    note,
                );
            }
        }
        wake
    }

    /// A machine launched for `view`'s job joined without meeting its requirements while it
    /// keeps its pool's promise: the machine goes and the job is planned again, the offering
    /// stays open to other jobs, and the failure is counted on the job
    /// ([`crate::labels::ENVIRONMENT_FAILURES_ANNOTATION`]); at the cap no more machines are
    /// launched for it until its spec changes (it waits with `RequirementsUnmet`).
    fn requirements_failed(
        &mut self,
        view: &world::JobView,
        i: &spillway_cloud::CloudInstance,
        node: &str,
        what: &str,
        metrics: &Metrics,
    ) {
        use crate::labels::{ENVIRONMENT_FAILURES_ANNOTATION, MAX_ENVIRONMENT_FAILURES};
        tracing::warn!(job = %view.id, instance = %i.id, node = %node, pool = %i.pool, %what, "a joined node does not meet the job's requirements");
        metrics.environment_mismatch(&i.pool);
        let count = crate::labels::environment_failures(&view.job) + 1;
        self.emit(crate::actions::Action::Annotate {
            namespace: view.job.namespace().unwrap_or_default(),
            name: view.job.name_any(),
            key: ENVIRONMENT_FAILURES_ANNOTATION.into(),
            value: format!("{}/{count}", view.job.metadata.generation.unwrap_or(0)),
        });
        self.retire(
            Some(i.id.clone()),
            Some(node.to_string()),
            "its environment does not meet its job's requirements",
        );
        let next = self.next_attempt(view);
        let after = if count >= MAX_ENVIRONMENT_FAILURES {
            "no more machines are launched for it until its spec changes (it waits with RequirementsUnmet)".to_string()
        } else {
            format!(
                "the job is planned again (need {}#{next}; machine {count} of at most {MAX_ENVIRONMENT_FAILURES} that may fail it)",
                view.id
            )
        };
        self.publish(
            view.job.object_ref(&()),
            true,
            "EnvironmentMismatch",
            "Launch",
            format!(
                "Instance {} ({}) of pool {} joined as node {node} with {what}. The node is cordoned and the instance terminated; the offering stays open to other jobs; {after}.",
                i.id, i.instance_type, i.pool
            ),
        );
    }

    /// The offerings of `pool` left out after a mismatch, for its `status.leftOut`.
    pub(super) fn left_out(&self, pool: &str) -> Vec<spillway_api::pool::LeftOut> {
        let mut out: Vec<spillway_api::pool::LeftOut> = (self.mismatched.iter())
            .filter(|((p, _), _)| p == pool)
            .map(|((_, t), m)| spillway_api::pool::LeftOut {
                instance_type: t.clone(),
                until: crate::clock::micro_time(m.at + MISMATCH_MEMORY),
                generation: m.generation.unwrap_or(0),
                what: m.what.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
        out
    }

    /// A cloud pool's `LaunchHealthy` turned False (reason `EnvironmentMismatch`) while some of
    /// its offerings are left out after a mismatch, naming them, until when and why.
    pub(super) fn mismatches_in_health(
        &self,
        pool: &str,
        conditions: &mut Vec<Condition>,
        generation: Option<i64>,
        now: Time,
    ) {
        let mut out: Vec<(&str, Time, &str)> = self
            .mismatched
            .iter()
            .filter(|((p, _), _)| p == pool)
            .map(|((_, t), m)| (t.as_str(), m.at + MISMATCH_MEMORY, m.what.as_str()))
            .collect();
        if out.is_empty() {
            return;
        }
        out.sort();
        let text: Vec<String> = out
            .iter()
            .map(|(t, until, what)| format!("{t} until {} ({what})", k8s_time(*until).0))
            .collect();
        crate::status::set_condition(
            conditions,
            "LaunchHealthy",
            false,
            "EnvironmentMismatch",
            &format!(
                "Instances fell short of the environment the pool promises; left out of decisions: {}.",
                text.join("; ")
            ),
            generation,
            now,
        );
    }
}

/// When a node was created (joined the cluster).
fn node_created(inputs: &Inputs, name: &str) -> Option<Time> {
    let n: &Node = inputs.nodes.iter().find(|n| n.name_any() == name)?;
    let t = n.metadata.creation_timestamp.as_ref()?;
    Some(Time::from_millis(t.0.as_millisecond()))
}

/// A cloud or cluster pool's `EnvironmentDrift` against the private pools: (status, reason,
/// message). The pool's side is what its nodes state, or for a cloud pool without labelled
/// nodes what its image promises; the private side is every private node's labels. `None`
/// for private pools.
pub(super) fn drift_condition(
    pool: &ComputePool,
    built: &world::Built,
) -> Option<(&'static str, &'static str, String)> {
    let name = pool.name_any();
    let snap = &built.snapshot;
    let private_pools: Vec<&str> = snap
        .pools
        .iter()
        .filter(|p| !p.is_cloud() && !p.is_cluster())
        .map(|p| p.name.as_str())
        .collect();
    if pool.spec.private.is_some() {
        return None;
    }
    let private = Provided::of(
        snap.nodes
            .iter()
            .filter(|n| private_pools.contains(&n.pool.as_str()))
            .map(|n| &n.facts),
    );
    let mut source = "its nodes";
    let mut here = Provided::of(
        snap.nodes
            .iter()
            .filter(|n| n.pool == name)
            .map(|n| &n.facts),
    );
    if here.is_empty() && pool.spec.aws.is_some() {
        source = "its image";
        here = Provided::of(
            snap.offerings
                .iter()
                .filter(|o| o.pool == name)
                .map(|o| &o.facts),
        );
    }
    if here.is_empty() || private.is_empty() {
        let missing = if here.is_empty() {
            format!(
                "pool {name} states no driver or CUDA version (no labelled node{})",
                if pool.spec.aws.is_some() {
                    ", and no aws.environment or image tags"
                } else {
                    ""
                }
            )
        } else {
            "no private node states its driver or CUDA version (GPU feature discovery labels)"
                .to_string()
        };
        return Some((
            "Unknown",
            "NotCompared",
            format!("Not compared with the private pools: {missing}."),
        ));
    }
    let drift = env::drift(&here, &private);
    if drift.is_empty() {
        return Some((
            "False",
            "SameAsPrivate",
            format!(
                "The driver branch and CUDA version of {source} are those of the private nodes."
            ),
        ));
    }
    let text: Vec<String> = drift.iter().map(ToString::to_string).collect();
    Some((
        "True",
        "EnvironmentDiffers",
        format!(
            "{} ({source}). Jobs that state no requirements may behave differently here; `kubectl spillway parity` shows both sides.",
            capitalise(&text.join("; "))
        ),
    ))
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// What a pool's nodes state, as sets of distinct values.
#[derive(Clone, Debug, Default)]
pub struct Sets {
    drivers: BTreeSet<String>,
    cuda: BTreeSet<String>,
    products: BTreeSet<String>,
    memory: BTreeSet<i64>,
    kernels: BTreeSet<String>,
    runtimes: BTreeSet<String>,
}

/// The nodes' sets per pool, kept between turns while the nodes and pools are the very objects
/// the caches handed out last time (reading every node's labels costs about a millisecond at
/// 1,250 nodes, at every turn).
#[derive(Debug, Default)]
pub struct NodeSets {
    key: Option<u64>,
    by_pool: HashMap<String, Sets>,
}

impl NodeSets {
    fn of(&mut self, built: &world::Built, inputs: &Inputs) -> &HashMap<String, Sets> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for n in &inputs.nodes {
            (std::sync::Arc::as_ptr(n) as usize).hash(&mut h);
        }
        for p in &inputs.pools {
            (std::sync::Arc::as_ptr(p) as usize).hash(&mut h);
        }
        let key = h.finish();
        if self.key != Some(key) {
            self.by_pool = read_nodes(built, inputs);
            self.key = Some(key);
        }
        &self.by_pool
    }
}

fn read_nodes(built: &world::Built, inputs: &Inputs) -> HashMap<String, Sets> {
    let mut by_pool: HashMap<String, Sets> = HashMap::new();
    let insert = |set: &mut BTreeSet<String>, v: &str| {
        if !set.contains(v) {
            set.insert(v.to_string());
        }
    };
    for n in &inputs.nodes {
        let Some(pool) = (n.metadata.name.as_deref()).and_then(|name| built.node_pool.get(name))
        else {
            continue;
        };
        if !by_pool.contains_key(pool) {
            by_pool.insert(pool.clone(), Sets::default());
        }
        let Some(s) = by_pool.get_mut(pool) else {
            continue;
        };
        let l = n.labels();
        let label = |k: &str| l.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        use core::environment::labels as gfd;
        if let (Some(major), Some(minor)) = (label(gfd::DRIVER_MAJOR), label(gfd::DRIVER_MINOR)) {
            s.drivers.insert(match label(gfd::DRIVER_REV) {
                Some(rev) => format!("{major}.{minor}.{rev}"),
                None => format!("{major}.{minor}"),
            });
        }
        if let (Some(major), Some(minor)) = (label(gfd::CUDA_MAJOR), label(gfd::CUDA_MINOR)) {
            s.cuda.insert(format!("{major}.{minor}"));
        }
        if let Some(p) = label(gfd::PRODUCT) {
            insert(&mut s.products, p);
        }
        s.memory
            .extend(label(gfd::MEMORY).and_then(|m| m.parse::<i64>().ok()));
        if let Some(info) = n.status.as_ref().and_then(|s| s.node_info.as_ref()) {
            insert(&mut s.kernels, &info.kernel_version);
            insert(&mut s.runtimes, &info.container_runtime_version);
        }
    }
    by_pool
}

/// Each pool's environment as its status shows it (see [`PoolEnvironment`]): the distinct
/// values over its nodes, or for a cloud pool whose nodes state no driver or CUDA version,
/// what its offerings promise.
pub(super) fn environments(
    built: &world::Built,
    inputs: &Inputs,
    nodes: &mut NodeSets,
) -> HashMap<String, PoolEnvironment> {
    let by_pool = nodes.of(built, inputs);
    let first = |s: BTreeSet<String>| -> Vec<String> {
        s.into_iter()
            .filter(|v| !v.is_empty())
            .take(ENVIRONMENT_VALUES)
            .collect()
    };
    let mut out = HashMap::new();
    for p in &inputs.pools {
        let name = p.name_any();
        let mut s = by_pool.get(name.as_str()).cloned().unwrap_or_default();
        let mut source = "nodes";
        if p.spec.aws.is_some() && s.drivers.is_empty() && s.cuda.is_empty() {
            source = "image";
            s.products.clear();
            s.memory.clear();
            let offered: Vec<&core::Facts> = built
                .snapshot
                .offerings
                .iter()
                .filter(|o| o.pool == name)
                .map(|o| &o.facts)
                .collect();
            // Without a cloud to read offerings from, the pool's own word.
            let stated = p
                .spec
                .aws
                .as_ref()
                .and_then(|a| a.environment.as_ref())
                .map(|e| e.facts())
                .filter(|_| offered.is_empty());
            for f in offered.into_iter().chain(stated.as_ref()) {
                s.drivers.extend(f.driver.map(|v| v.to_string()));
                s.cuda.extend(f.cuda.map(|v| v.to_string()));
                s.products.extend(f.product.clone());
                s.memory.extend(f.gpu_memory_mib.map(|m| m as i64));
            }
        }
        let e = PoolEnvironment {
            source: source.to_string(),
            driver_versions: first(s.drivers),
            cuda_versions: first(s.cuda),
            gpu_products: first(s.products),
            gpu_memory_mib: s.memory.into_iter().take(ENVIRONMENT_VALUES).collect(),
            kernel_versions: first(s.kernels),
            container_runtimes: first(s.runtimes),
        };
        out.insert(name, e);
    }
    out
}
