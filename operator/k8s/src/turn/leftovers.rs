//! The pods of a job's earlier attempts: its next attempt starts only once each of them is
//! being deleted, has ended, or is known never to have been made.
//!
//! A job moved to its next attempt (a gang requeued, a job preempted, moved or restarted) has
//! its earlier pods deleted as the caches show them (`jobs.rs`). Two things can still be
//! running for a while: a pod of the earlier attempt that the caches show and whose deletion
//! they do not show yet (the delete is in flight, retrying, or failed and is asked again), and
//! a pod that an earlier start asked for and the caches have not shown at all (its create is in
//! flight or retrying, or landed and the watch has not brought it). Either would run beside the
//! next attempt's pods: a gang's old replicas would meet the new ones at their rendezvous, and
//! the job would hold more pods than replicas. So the next attempt's start is held, its
//! decision a wait with reason `PreviousAttemptStopping`, until every pod of an earlier attempt
//! is shown being deleted (or ended), and every pod asked for has shown up or failed to be
//! created, or the assume timeout has passed since it was asked for. A pod being deleted may
//! still run through its grace period; its GPUs stay counted on its node until it stops.
//!
//! A labelled workload's pods are its controller's (its run is held by suspending the
//! workload, `turn/workloads.rs`); pods in another cluster are that cluster's caches' to show.

use std::collections::BTreeMap;

use crate::hashing::HashSet;
use kube::ResourceExt;
use spillway_core::{self as core, Environment, Time};

use super::State;
use crate::world::{self, Assumed, Inputs, JobView};

/// Pods asked for by a job's earlier starts that the caches have not shown yet.
#[derive(Debug)]
pub(super) struct Unseen {
    /// (attempt, pod name), in the job's namespace.
    pods: Vec<(u32, String)>,
    /// When the oldest of them was asked for.
    since: Time,
}

impl State {
    /// Keeps the pods a start `a` of job `id` asked for that may still land: every replica of
    /// `a` but those `seen` says the caches show and the one whose create `failed`.
    pub(super) fn leave_unseen(
        &mut self,
        id: &str,
        a: &Assumed,
        seen: impl Fn(u32) -> bool,
        failed: Option<&str>,
    ) {
        if a.environment == Environment::Remote {
            return;
        }
        let Some((_, name)) = id.split_once('/') else {
            return;
        };
        let pods: Vec<(u32, String)> = (0..a.nodes.len() as u32)
            .filter(|r| !seen(*r))
            .map(|r| (a.attempt, crate::pods::pod_name(name, a.attempt, r)))
            .filter(|(_, pod)| Some(pod.as_str()) != failed)
            .collect();
        if pods.is_empty() {
            return;
        }
        let unseen = (self.unseen_pods.entry(id.to_string())).or_insert_with(|| Unseen {
            pods: Vec::new(),
            since: a.at,
        });
        for p in pods {
            if !unseen.pods.contains(&p) {
                unseen.pods.push(p);
            }
        }
    }

    /// A create of `pod` (of job `id`) failed for good: it is not waited for any more.
    pub(super) fn create_failed(&mut self, id: &str, pod: &str) {
        if let Some(u) = self.unseen_pods.get_mut(id) {
            u.pods.retain(|(_, p)| p != pod);
            if u.pods.is_empty() {
                self.unseen_pods.remove(id);
            }
        }
    }

    /// Job `id` starts again (its earlier attempts' pods are gone, or it starts the same
    /// attempt again, whose pods' creates count as done where they exist): nothing is waited for.
    pub(super) fn started_again(&mut self, id: &str) {
        if !self.unseen_pods.is_empty() {
            self.unseen_pods.remove(id);
        }
    }

    /// Holds the starts of the plan whose job still has pods of an earlier attempt that may
    /// run (see the module documentation); returns when to turn again at the latest.
    pub(super) fn hold_for_earlier_attempts(
        &mut self,
        plan: &mut core::Plan,
        built: &world::Built,
        inputs: &Inputs,
        now: Time,
    ) -> Option<Time> {
        let wake = self.forget_seen(inputs, now);
        let mut held = BTreeMap::new();
        for s in &plan.starts {
            let Some(view) = built.jobs.get(s.job.as_str()) else {
                continue;
            };
            if let Some(why) = self.earlier_pods(view) {
                held.insert(s.job.clone(), why);
            }
        }
        if !held.is_empty() {
            self.hold_starts(plan, &held, core::Reason::PreviousAttemptStopping);
        }
        wake
    }

    /// Why `view`'s job cannot start its current attempt yet, if it cannot.
    fn earlier_pods(&self, view: &JobView) -> Option<String> {
        if view.job.spec.workload_ref.is_some() {
            return None;
        }
        if let Some(p) = view.surplus_pods.iter().find(|p| world::pod_active(p)) {
            return Some(format!(
                "Pod {} of an earlier attempt still runs; it is being deleted, and attempt {} starts once it is.",
                p.name_any(),
                view.attempt
            ));
        }
        let (attempt, pod) =
            (self.unseen_pods.get(&view.id)?.pods.iter()).find(|(a, _)| *a < view.attempt)?;
        Some(format!(
            "Pod {pod} of its attempt {attempt} was asked for and has not shown up yet; attempt {} starts once it has (and is deleted) or its create has failed.",
            view.attempt
        ))
    }

    /// Drops the pods waited for that the caches now show (as surplus, they are deleted like
    /// any other) and those waited for past the assume timeout; returns when the next wait
    /// runs out.
    fn forget_seen(&mut self, inputs: &Inputs, now: Time) -> Option<Time> {
        if self.unseen_pods.is_empty() {
            return None;
        }
        let shown: HashSet<(&str, &str)> = (inputs.pods.iter())
            .filter_map(|p| {
                Some((
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ))
            })
            .collect();
        let timeout = self.settings.assume_timeout;
        self.unseen_pods.retain(|id, u| {
            let ns = id.split_once('/').map_or("", |(ns, _)| ns);
            u.pods.retain(|(_, p)| !shown.contains(&(ns, p.as_str())));
            let waited = now.since(u.since) > timeout;
            if waited && !u.pods.is_empty() {
                tracing::warn!(job = %id, pods = ?u.pods, "pods asked for by an earlier start never showed up; no longer waiting for them");
            }
            !u.pods.is_empty() && !waited
        });
        (self.unseen_pods.values()).map(|u| u.since + timeout).min()
    }
}
