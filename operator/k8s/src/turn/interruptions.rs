//! Interruption notices, carried out. For each message of an interruption queue
//! (`cloud::notices`):
//! - a spot interruption warning of an instance of this cluster: its node is cordoned and
//!   tainted `spillway.io/interrupted` with the deadline in an annotation; every job running
//!   there is requeued at once (condition `Interrupted`, a Warning Event) and its pods are
//!   asked to stop with a grace period that ends before the deadline, so a job that
//!   checkpoints on SIGTERM does; the instance is terminated once its GPU pods are gone, or at
//!   the deadline. An instance that has not joined yet is terminated at once (its need is
//!   planned again as for any lost instance);
//! - a rebalance recommendation or a scheduled change: per the pool's `rebalance`, nothing,
//!   the node cordoned and tainted (`Cordon`), or that and its restartable jobs moved at their
//!   next checkpoint announcement or the pool's `rebalanceDeadline` (`Replace`);
//! - a state change: counted; the instance listing acts on it.
//!
//! A message is deleted once the node shows its marks and no job runs there any more (or the
//! instance is gone): from then on the node carries what remains to do, so a new leader
//! carries on from the node and a message delivered again finds nothing left to do. A message
//! about no instance of this cluster is deleted only from a queue a pool owns; otherwise it
//! is left for the queue's other readers.

use crate::hashing::{HashMap, HashSet};
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use spillway_api::pool::Rebalance;
use spillway_api::{ComputePool, GpuQueue};
use spillway_cloud::notices::{Notice, NoticeKind};
use spillway_core::{self as core, Time};

use super::reclaim::{Stop, grace_seconds};
use super::{CloudInputs, State};
use crate::actions::Action;
use crate::clock::rfc3339;
use crate::cloud::notices::PendingMessage;
use crate::interruptions::{Marks, marked, marks};
use crate::labels::{INSTANCE_ID_LABEL, INTERRUPTION_DEADLINE_ANNOTATION, REBALANCE_AT_ANNOTATION};
use crate::metrics::Metrics;
use crate::world::{self, Inputs, JobView, Lifecycle};

/// What a stopping pod leaves the kubelet before the deadline: its grace period ends this
/// long before the instance is lost.
pub const STOP_MARGIN: core::Duration = core::Duration::from_secs(10);

/// A pool's `rebalanceDeadline` when it names none.
pub const DEFAULT_REBALANCE_DEADLINE: core::Duration = core::Duration::from_secs(600);

/// What the loop remembers of the notices between turns.
#[derive(Debug, Default)]
pub(super) struct Keeping {
    /// Messages about no instance of this cluster in a queue no pool owns, by id, with the
    /// receipt seen (a redelivery is looked at again: the listing may have caught up).
    released: HashMap<String, String>,
    /// Messages being deleted.
    deleting: HashSet<String>,
    /// Nodes being marked.
    marking: HashSet<String>,
    /// Notices counted in the metric (`event/instance`: a duplicate message of one event is
    /// counted once).
    counted: HashSet<String>,
}

/// The world of one turn, as the notices need it.
pub(super) struct Around<'a> {
    pub built: &'a world::Built,
    pub inputs: &'a Inputs,
    pub pools: &'a HashMap<String, Arc<ComputePool>>,
    pub queues: &'a HashMap<String, Arc<GpuQueue>>,
    pub now: Time,
}

impl State {
    /// Acts on the interruption queues' messages and on the nodes marked for earlier ones;
    /// returns when to turn again at the latest (a deadline).
    pub(super) fn interruptions(
        &mut self,
        around: &Around<'_>,
        cloud: CloudInputs<'_>,
        metrics: &Metrics,
    ) -> Option<Time> {
        let (built, inputs, pools, now) = (around.built, around.inputs, around.pools, around.now);
        let view = cloud.view;
        let pending: HashSet<&str> = view.notices.iter().map(|m| m.id.as_str()).collect();
        self.notices
            .released
            .retain(|id, _| pending.contains(id.as_str()));
        self.notices
            .deleting
            .retain(|id| pending.contains(id.as_str()));
        let events: HashSet<&str> = view
            .notices
            .iter()
            .filter_map(|m| m.notices.as_ref().ok())
            .flatten()
            .map(|n| n.id.as_str())
            .collect();
        self.notices
            .counted
            .retain(|k| k.split_once('/').is_some_and(|(e, _)| events.contains(e)));
        self.notices.marking.retain(|name| {
            inputs
                .nodes
                .iter()
                .any(|n| n.name_any() == *name && marks(n).taint.is_none())
        });
        // Every listing answered: an instance not known is not this cluster's.
        if view.complete && !view.notices.is_empty() {
            let nodes: HashMap<&str, &Arc<Node>> = inputs
                .nodes
                .iter()
                .filter_map(|n| Some((n.labels().get(INSTANCE_ID_LABEL)?.as_str(), n)))
                .collect();
            for m in &view.notices {
                if self.notices.released.get(&m.id) == Some(&m.receipt)
                    || self.notices.deleting.contains(&m.id)
                {
                    continue;
                }
                let ours: Vec<&Notice> = match &m.notices {
                    Ok(ns) => ns
                        .iter()
                        .filter(|n| {
                            view.regions.contains_key(&n.instance)
                                || view.gone.contains(&n.instance)
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                if ours.is_empty() {
                    self.not_ours(m);
                    continue;
                }
                let mut settled = true;
                for n in ours {
                    // Gone already: the listing has dealt with it.
                    let Some(i) = view.instances.iter().find(|i| i.id == n.instance) else {
                        continue;
                    };
                    if self
                        .notices
                        .counted
                        .insert(format!("{}/{}", n.id, n.instance))
                    {
                        metrics.interruption_notice(&i.pool, n.kind.as_str());
                    }
                    let node = nodes.get(n.instance.as_str()).map(|n| n.as_ref());
                    let rebalance = pools
                        .get(&i.pool)
                        .and_then(|p| p.spec.aws.as_ref())
                        .and_then(|a| a.rebalance)
                        .unwrap_or_default();
                    settled &= self.act(n, node, rebalance, cloud, around);
                }
                if settled && self.notices.deleting.insert(m.id.clone()) {
                    self.emit(Action::DeleteNotice {
                        message: m.id.clone(),
                    });
                }
            }
        }
        let mut wake = None;
        for node in &inputs.nodes {
            let m = marks(node);
            if m.taint.is_none() {
                continue;
            }
            let instance = node.labels().get(INSTANCE_ID_LABEL).cloned();
            if let Some(deadline) = m.deadline {
                self.clear_warned(&node.name_any(), instance, deadline, around);
                if deadline > now {
                    wake = Some(wake.map_or(deadline, |w: Time| w.min(deadline)));
                }
            }
            if let Some(at) = m.rebalance_at {
                let pool = built
                    .node_pool
                    .get(&node.name_any())
                    .and_then(|p| pools.get(p));
                let by = at + rebalance_deadline(pool.map(|p| p.as_ref()));
                self.rebalance_moves(&node.name_any(), &m, by, around);
                if by > now {
                    wake = Some(wake.map_or(by, |w: Time| w.min(by)));
                }
            }
        }
        wake
    }

    /// A message about no instance of this cluster (or not an EC2 event): deleted from a queue
    /// a pool owns, else left to the queue's other readers.
    fn not_ours(&mut self, m: &PendingMessage) {
        if m.queue.owned {
            if self.notices.deleting.insert(m.id.clone()) {
                self.emit(Action::DeleteNotice {
                    message: m.id.clone(),
                });
            }
        } else {
            tracing::debug!(queue = %m.queue.url, message = %m.id, "a notice about no instance of this cluster; left in the queue");
            self.notices
                .released
                .insert(m.id.clone(), m.receipt.clone());
        }
    }

    /// Acts on one notice of an instance of this cluster; returns whether it is settled (what
    /// remains is carried by the node's marks).
    fn act(
        &mut self,
        n: &Notice,
        node: Option<&Node>,
        rebalance: Rebalance,
        cloud: CloudInputs<'_>,
        around: &Around<'_>,
    ) -> bool {
        let mut annotations = BTreeMap::new();
        match &n.kind {
            NoticeKind::StateChange(_) => return true,
            NoticeKind::SpotInterruptionWarning => {
                let deadline = n
                    .deadline
                    .unwrap_or(n.time + spillway_cloud::notices::SPOT_WARNING_LEAD);
                let Some(node) = node else {
                    // Not joined yet: it will never run the job; its need is planned again.
                    self.retire(
                        Some(n.instance.clone()),
                        None,
                        "a spot interruption warning came before its machine joined",
                    );
                    return cloud.view.terminating.contains(&n.instance);
                };
                annotations.insert(
                    INTERRUPTION_DEADLINE_ANNOTATION.to_string(),
                    rfc3339(deadline),
                );
                self.mark(node, n.kind.as_str(), &annotations);
                self.clear_warned(&node.name_any(), Some(n.instance.clone()), deadline, around);
            }
            NoticeKind::RebalanceRecommendation | NoticeKind::ScheduledChange => {
                let Some(node) = node else { return true };
                match rebalance {
                    Rebalance::Ignore => return true,
                    Rebalance::Cordon => {}
                    Rebalance::Replace => {
                        annotations.insert(REBALANCE_AT_ANNOTATION.to_string(), rfc3339(n.time));
                    }
                }
                self.mark(node, n.kind.as_str(), &annotations);
            }
        }
        let Some(node) = node else { return true };
        let name = node.name_any();
        marked(node, &annotations)
            && (n.kind != NoticeKind::SpotInterruptionWarning
                || !running_on(around.built, &name).any(|v| !self.moved_on(v)))
    }

    fn mark(&mut self, node: &Node, value: &str, annotations: &BTreeMap<String, String>) {
        let name = node.name_any();
        if !marked(node, annotations) && self.notices.marking.insert(name.clone()) {
            tracing::warn!(node = %name, notice = value, "marking a node the interruption queue warned of");
            self.emit(Action::MarkNode {
                node: name,
                value: value.to_string(),
                annotations: annotations.clone(),
            });
        }
    }

    /// A node whose instance is lost at `deadline`: its jobs are requeued, their pods asked to
    /// stop before then; the instance is terminated once no GPU pod is left on it, or at the
    /// deadline.
    fn clear_warned(
        &mut self,
        node: &str,
        instance: Option<String>,
        deadline: Time,
        around: &Around<'_>,
    ) {
        let now = around.now;
        let left = deadline.since(now);
        let cap = left.as_secs().saturating_sub(STOP_MARGIN.as_secs()) as i64;
        let running: Vec<&JobView> = running_on(around.built, node)
            .filter(|v| !self.moved_on(v))
            .collect();
        for view in running {
            let note = format!(
                "EC2 will interrupt the spot instance {} of node {node} at {}.",
                instance.as_deref().unwrap_or("?"),
                rfc3339(deadline),
            );
            self.interrupt(
                view,
                "SpotInterruptionWarning",
                &note,
                Some(cap),
                deadline - spillway_cloud::notices::SPOT_WARNING_LEAD,
                around,
            );
        }
        let gpu_pods_left = around.inputs.pods.iter().any(|p| {
            world::pod_node(p).as_deref() == Some(node)
                && world::pod_active(p)
                && world::pod_gpus(p) > 0
        });
        if !gpu_pods_left || now >= deadline {
            self.retire(
                instance,
                Some(node.to_string()),
                if gpu_pods_left {
                    "the spot interruption deadline passed"
                } else {
                    "warned of a spot interruption, and its jobs are off it"
                },
            );
        }
    }

    /// A node recommended for rebalancing (`Replace`): its restartable jobs move once they
    /// announce a checkpoint after the recommendation, or at `by`.
    fn rebalance_moves(&mut self, node: &str, m: &Marks, by: Time, around: &Around<'_>) {
        let Some(at) = m.rebalance_at else { return };
        let movable: Vec<&JobView> = running_on(around.built, node)
            .filter(|v| v.job.spec.restartable && !self.moved_on(v))
            .filter(|v| {
                around.now >= by
                    || spillway_api::convert::checkpoint_time(&v.job).is_some_and(|c| c > at)
            })
            .collect();
        for view in movable {
            let why = if around.now >= by {
                format!("its rebalance deadline {} passed", rfc3339(by))
            } else {
                "it announced a checkpoint".to_string()
            };
            let note = format!(
                "EC2 recommended rebalancing node {node} at {}, and {why}.",
                rfc3339(at)
            );
            self.interrupt(
                view,
                m.taint
                    .as_deref()
                    .map_or("RebalanceRecommendation", reason_of),
                &note,
                None,
                at,
                around,
            );
        }
    }

    /// Requeues a job whose node is going away: its next attempt, condition `Interrupted`, a
    /// Warning Event, its pods evicted with their grace period (capped by `cap` seconds).
    fn interrupt(
        &mut self,
        view: &JobView,
        reason: &str,
        why: &str,
        cap: Option<i64>,
        noticed: Time,
        around: &Around<'_>,
    ) {
        let queue = around.queues.get(&view.job.spec.queue).map(|q| q.as_ref());
        let grace = cap.map_or(grace_seconds(view, queue), |c| {
            grace_seconds(view, queue).min(c.max(0))
        });
        let next = self.next_attempt(view);
        let restart = if view.job.spec.restartable {
            "it resumes from its last checkpoint wherever the next decision places it"
        } else {
            "it is not restartable, so it starts over wherever the next decision places it"
        };
        let note = format!(
            "{why} Its pods stop within {grace} s and the job is requeued (attempt {next}): {restart}."
        );
        let mut st = self.last_status(view);
        if st.interrupted_at.is_none() {
            // Its recovery counts from the notice.
            st.interrupted_at = Some(crate::clock::k8s_time(noticed));
        }
        self.stop_and_requeue(
            view,
            st,
            Stop {
                next,
                condition: ("Interrupted", reason),
                admitted: "Interrupted",
                event: ("Interrupted", "Interrupt", true),
                note,
                grace,
            },
            around.now,
        );
    }

    /// A failed node mark or message deletion is asked again at the next turn.
    pub(super) fn notice_failed(&mut self, action: &Action) {
        match action {
            Action::MarkNode { node, .. } => {
                self.notices.marking.remove(node);
            }
            Action::DeleteNotice { message } => {
                self.notices.deleting.remove(message);
            }
            _ => {}
        }
    }
}

/// The condition reason of a node's taint value.
fn reason_of(value: &str) -> &'static str {
    match value {
        "scheduled-change" => "ScheduledChange",
        "spot-interruption-warning" => "SpotInterruptionWarning",
        _ => "RebalanceRecommendation",
    }
}

/// The jobs running on `node`.
fn running_on<'a>(built: &'a world::Built, node: &'a str) -> impl Iterator<Item = &'a JobView> {
    built.jobs.values().map(|v| &**v).filter(move |v| {
        matches!(&v.lifecycle, Lifecycle::Running { nodes, .. } if nodes.iter().any(|n| n == node))
    })
}

/// How long a pool's restartable jobs may stay on a node recommended for rebalancing.
fn rebalance_deadline(pool: Option<&ComputePool>) -> core::Duration {
    pool.and_then(|p| p.spec.aws.as_ref())
        .and_then(|a| a.rebalance_deadline.as_deref())
        .and_then(|d| core::Duration::parse(d).ok())
        .unwrap_or(DEFAULT_REBALANCE_DEADLINE)
}
