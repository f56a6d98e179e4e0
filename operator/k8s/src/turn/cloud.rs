//! The cloud's part of a turn: facts into the snapshot, spend, launches and scale-down, the
//! release of deleted jobs' instances and garbage collection.

use crate::hashing::{HashMap, HashSet, HashSetExt};
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use spillway_api::ComputePool;
use spillway_core::{self as core, Time};

use super::{CloudInputs, State};
use crate::actions::{Action, LaunchOrder};
use crate::labels;
use crate::metrics::Metrics;
use crate::spend::{Ledger, Rates};
use crate::spend_record::{self, Kind, Record};
use crate::world::{self, Inputs, Lifecycle};

/// Launches under way whose instances are not listed yet, as instances of the snapshot with no
/// node: what they will cost counts against the queue's hourly budget and the pool's limits,
/// and their job waits for them, while EC2 has not answered (a slow or throttled
/// RunInstances) or the listing has not caught up.
pub(super) fn add_launching(built: &mut world::Built, cloud: CloudInputs<'_>, now: Time) {
    let listed: HashSet<&str> = cloud
        .view
        .instances
        .iter()
        .map(|i| i.need.as_str())
        .collect();
    let mut launching: Vec<&core::Launch> = cloud
        .view
        .launching
        .values()
        .filter(|l| !listed.contains(l.need.as_str()))
        .collect();
    launching.sort_by(|a, b| a.need.cmp(&b.need));
    for l in launching {
        let o = &l.offering;
        for k in 0..l.count.max(1) {
            built.snapshot.instances.push(core::Instance {
                id: format!("{}@launching-{k}", l.need),
                pool: o.pool.clone(),
                instance_type: o.instance_type.clone(),
                capacity_type: o.capacity_type,
                zone: o.zone.clone(),
                gpus: o.gpus_per_instance,
                hourly_price: o.hourly_price,
                need: l.need.clone(),
                queue: l.queue.clone(),
                node: None,
                launched_at: now,
            });
        }
    }
}

impl State {
    /// Cloud offerings, instances and idle cloud nodes into the snapshot.
    pub(super) fn add_cloud_facts(
        &mut self,
        built: &mut world::Built,
        inputs: &Inputs,
        cloud: CloudInputs<'_>,
        now: Time,
    ) {
        let view = cloud.view;
        let aws_pools: Vec<Arc<ComputePool>> = inputs
            .pools
            .iter()
            .filter(|p| p.spec.aws.is_some())
            .filter(|p| built.snapshot.pools.iter().any(|c| c.name == p.name_any()))
            .cloned()
            .collect();
        built.snapshot.offerings = cloud.config.offerings(&aws_pools, view, now);
        let node_of: HashMap<String, String> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| Some((n.instance_id.clone()?, n.name.clone())))
            .collect();
        for i in &view.instances {
            if !i.placement_group.is_empty() {
                (built.cloud_groups).insert(i.need.clone(), i.placement_group.clone());
            }
            let (gpus, price) = cloud.config.describe(i, view);
            built.snapshot.instances.push(core::Instance {
                id: i.id.clone(),
                pool: i.pool.clone(),
                instance_type: i.instance_type.clone(),
                capacity_type: i.capacity_type,
                zone: i.zone.clone(),
                gpus,
                hourly_price: price,
                need: i.need.clone(),
                queue: i.queue.clone(),
                node: node_of.get(&i.id).cloned(),
                launched_at: i.launched_at,
            });
        }
        let cloud_pools: HashSet<String> = aws_pools.iter().map(|p| p.name_any()).collect();
        let warned: HashSet<&str> = view
            .notices
            .iter()
            .filter_map(|m| m.notices.as_ref().ok())
            .flatten()
            .filter(|n| n.kind == spillway_cloud::notices::NoticeKind::SpotInterruptionWarning)
            .map(|n| n.instance.as_str())
            .collect();
        let listed: HashSet<&str> = view.instances.iter().map(|i| i.id.as_str()).collect();
        let mut idle = HashSet::new();
        for n in &mut built.snapshot.nodes {
            // A node whose instance is being terminated, or warned of a spot interruption,
            // takes no new work (it is cordoned too, but the watch may not have said so yet).
            if n.instance_id
                .as_ref()
                .is_some_and(|id| view.terminating.contains(id) || warned.contains(id.as_str()))
            {
                n.schedulable = false;
            }
            // Idle only once its instance is listed: a machine may join before the listing
            // that shows which need it was launched for (a launch whose answer was lost), and
            // retiring it then would have that need launched again.
            let known = (n.instance_id.as_deref()).is_none_or(|id| listed.contains(id));
            if cloud_pools.contains(&n.pool) && n.free_gpus >= n.gpus && known {
                n.idle_since = Some(*self.idle_since.entry(n.name.clone()).or_insert(now));
                idle.insert(n.name.clone());
            }
        }
        self.idle_since.retain(|k, _| idle.contains(k));
    }

    /// Accrues each instance's price into its queue's and pool's account ([`crate::spend`]),
    /// and each private job's GPU time into its queue's when its budget counts private time;
    /// gives the core each queue's month-to-date spend (for monthly budgets). With a cloud,
    /// nothing is accrued before every cloud region has been listed: an account moved past a
    /// gap while its instances were not known yet would never bill that gap.
    pub(super) fn account_spend(
        &mut self,
        built: &mut world::Built,
        inputs: &Inputs,
        cloud: Option<CloudInputs<'_>>,
        metrics: &Metrics,
        now: Time,
    ) -> Rates {
        self.opened_accounts.clear();
        let runs = gpu_runs(built);
        let listed = match &cloud {
            Some(c) => c.view.complete,
            // No cloud: only runs to bill (remote ones, and private ones of queues counting
            // them); with none, the accounts are left as they are.
            None => !runs.is_empty() || inputs.pools.iter().any(|p| p.spec.cluster.is_some()),
        };
        if !listed {
            return Rates::default();
        }
        let recorded = self.recorded_spend(inputs);
        for q in &inputs.queues {
            let spend = q.status.as_ref().and_then(|s| s.spend.as_ref());
            let through = spend
                .and_then(|s| s.accrued_through.as_ref())
                .map(crate::clock::core_micro_time);
            let usd = spend.map(|s| s.this_month_usd);
            let (usd, through) = spend_record::later(
                (usd, through),
                recorded.get(Kind::Queue, &q.name_any(), now),
            );
            if Ledger::open(&mut self.ledger.queues, &q.name_any(), usd, through, now) {
                self.opened_accounts
                    .insert(format!("GpuQueue/{}", q.name_any()));
            }
        }
        for p in (inputs.pools.iter()).filter(|p| p.spec.aws.is_some() || p.spec.cluster.is_some())
        {
            let st = p.status.as_ref();
            let through = st
                .and_then(|s| s.accrued_through.as_ref())
                .map(crate::clock::core_micro_time);
            let usd = st.and_then(|s| s.this_month_usd);
            let (usd, through) =
                spend_record::later((usd, through), recorded.get(Kind::Pool, &p.name_any(), now));
            if Ledger::open(&mut self.ledger.pools, &p.name_any(), usd, through, now) {
                self.opened_accounts
                    .insert(format!("ComputePool/{}", p.name_any()));
            }
        }
        let queues: HashSet<String> = inputs.queues.iter().map(|q| q.name_any()).collect();
        let pools: HashSet<String> = inputs.pools.iter().map(|p| p.name_any()).collect();
        self.ledger
            .retain(&|q| queues.contains(q), &|p| pools.contains(p));
        let rates = self
            .ledger
            .accrue_with(&built.snapshot.instances, &runs, metrics, now);
        for q in &mut built.snapshot.queues {
            if let Some(a) = self.ledger.queues.get(&q.name) {
                q.spent_this_month_usd = a.usd;
            }
        }
        if let Some(at) = self.settings.spend_record.clone()
            && let Some(data) = recorded.to_write(
                &self.ledger,
                &rates,
                &|k| self.opened_accounts.contains(k),
                now,
            )
        {
            self.spend_written = Some(data.clone());
            self.emit(Action::RecordSpend(Box::new(spend_record::config_map(
                &at, data,
            ))));
        }
        rates
    }

    /// The spend ledger as this turn knows it: what the loop last wrote until the cache
    /// shows it, else the cache.
    fn recorded_spend(&mut self, inputs: &Inputs) -> Record {
        let cached = inputs.spend_record.as_deref();
        if self.spend_written.is_some()
            && self.spend_written.as_ref() == cached.and_then(|c| c.data.as_ref())
        {
            self.spend_written = None;
        }
        match &self.spend_written {
            Some(data) => Record::read(Some(&k8s_openapi::api::core::v1::ConfigMap {
                data: Some(data.clone()),
                ..Default::default()
            })),
            None => Record::read(cached),
        }
    }

    /// The plan's launches, and its scale-down terminations (cordon first).
    pub(super) fn launches_and_terminations(
        &mut self,
        plan: &core::Plan,
        pools: &HashMap<String, Arc<ComputePool>>,
        built: &world::Built,
        cloud: CloudInputs<'_>,
        now: Time,
    ) {
        // Until every region has been listed, what runs there is unknown: a restarted operator
        // would launch past budgets and pool limits, counting none of the instances its
        // predecessor left. The decisions stand; their launches go out once the listing is in
        // (the core plans them again: a cycle that planned launches is never skipped).
        let launches = if cloud.view.complete {
            plan.launches.as_slice()
        } else {
            &[]
        };
        for l in launches {
            let (Some(pool), Some(view)) =
                (pools.get(&l.offering.pool), built.jobs.get(l.job.as_str()))
            else {
                continue;
            };
            // A launch under way answers for itself (the core plans a need with no instance
            // again, to recover one whose launch failed).
            if cloud.view.launching.contains_key(&l.need) || self.moved_on(view) {
                continue;
            }
            // The core plans a need that has instances again only when they cannot hold its
            // job any more (a gang's need lost one before the job started: interrupted, or
            // terminated by someone). Under its key the launch would adopt them and nothing
            // more, so the job moves to its next attempt and launches under the new key; the
            // instances left are idle capacity (reused, or scaled down after the pool's
            // idleTimeout) or, not joined yet, collected as orphans. A listing may show part
            // of a launch for a while (EC2's describe calls are eventually consistent), so
            // this waits until the instances left are older than that.
            let left: Vec<_> = (cloud.view.instances.iter())
                .filter(|i| i.need == l.need)
                .collect();
            if left
                .iter()
                .any(|i| now.since(i.launched_at) < crate::cloud::LISTING_LAG)
            {
                continue;
            }
            let mut launch = l.clone();
            if !left.is_empty() {
                let next = self.next_attempt(view);
                launch.need = format!("{}#{next}", view.id);
                tracing::warn!(job = %view.id, need = %l.need, left = left.len(), next = %launch.need, "the instances left of a need cannot hold its job; launching under a new need");
                self.publish(
                    view.job.object_ref(&()),
                    true,
                    "NeedReplanned",
                    "Launch",
                    format!(
                        "The {} instance(s) left of need {} cannot hold the job (one was lost before it started); launching {} x {} for need {} instead.",
                        left.len(), l.need, l.count, l.offering.instance_type, launch.need
                    ),
                );
            }
            self.emit(Action::Launch(Box::new(LaunchOrder {
                launch,
                pool: pool.clone(),
                job: view.job.clone(),
            })));
        }
        for t in &plan.terminations {
            self.retire(
                t.instance_id.clone(),
                Some(t.node.clone()),
                "idle past the pool's idleTimeout",
            );
        }
    }

    /// Cordons the node (if any), terminates the instance (if any), then deletes the node.
    /// Remembered under both names until each is gone, so that a node outliving its
    /// instance (its deletion not seen yet) is not retired a second time as an orphan.
    pub(super) fn retire(&mut self, instance: Option<String>, node: Option<String>, why: &str) {
        let keys: Vec<String> = instance
            .iter()
            .map(|i| format!("instance/{i}"))
            .chain(node.iter().map(|n| format!("node/{n}")))
            .collect();
        if keys.is_empty() || keys.iter().any(|k| self.retiring.contains(k)) {
            return;
        }
        self.retiring.extend(keys);
        if let Some(n) = &node {
            self.emit(Action::Cordon { node: n.clone() });
        }
        match instance {
            Some(instance) => self.emit(Action::Terminate {
                instance,
                node,
                why: why.to_string(),
            }),
            None => {
                if let Some(node) = node {
                    self.emit(Action::DeleteNode {
                        node,
                        why: why.to_string(),
                    });
                }
            }
        }
    }

    /// Deleted jobs holding the cloud finalizer: terminate their instances (those whose node
    /// runs nothing else), then remove the finalizer so the deletion completes.
    pub(super) fn release_deleted_jobs(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        cloud: CloudInputs<'_>,
    ) {
        let view = cloud.view;
        for v in built.jobs.values() {
            let meta = &v.job.metadata;
            let ours = meta
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == labels::CLOUD_FINALIZER);
            if meta.deletion_timestamp.is_none() || !ours {
                continue;
            }
            let mine: Vec<&spillway_cloud::CloudInstance> =
                view.instances.iter().filter(|i| i.job == v.id).collect();
            let ns = v.job.namespace().unwrap_or_default();
            let name = v.job.name_any();
            for i in &mine {
                let node = built
                    .snapshot
                    .nodes
                    .iter()
                    .find(|n| n.instance_id.as_deref() == Some(i.id.as_str()))
                    .map(|n| n.name.clone());
                let shared = node.as_ref().is_some_and(|n| {
                    inputs.pods.iter().any(|p| {
                        world::pod_active(p)
                            && world::pod_node(p).as_deref() == Some(n.as_str())
                            && !(p.namespace().as_deref() == Some(ns.as_str())
                                && p.labels().get(labels::JOB_LABEL) == Some(&name))
                    })
                });
                if !shared {
                    self.retire(Some(i.id.clone()), node, "its GpuJob was deleted");
                }
            }
            let launching = view
                .launching
                .keys()
                .any(|need| need.rsplit_once('#').map(|(j, _)| j) == Some(v.id.as_str()));
            if mine.is_empty() && !launching && self.releasing.insert(v.id.clone()) {
                self.emit(Action::PatchFinalizer {
                    namespace: ns,
                    name,
                    add: false,
                });
            }
        }
        let live: HashSet<&str> = built.jobs.keys().map(|k| &**k).collect();
        self.releasing.retain(|id| live.contains(id.as_str()));
    }

    /// Garbage collection: instances no need wants (or that never joined), and Nodes of cloud
    /// pools whose instance is gone. Only once every cloud region has been listed.
    pub(super) fn collect_garbage(
        &mut self,
        built: &world::Built,
        inputs: &Inputs,
        cloud: CloudInputs<'_>,
        metrics: &Metrics,
        now: Time,
    ) {
        let (cfg, view) = (cloud.config, cloud.view);
        if !view.complete {
            return;
        }
        let joined: HashSet<&str> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| n.instance_id.as_deref())
            .collect();
        for i in &view.instances {
            if joined.contains(i.id.as_str()) {
                continue;
            }
            let age = now.since(i.launched_at).as_secs_f64();
            let wanted = built.jobs.get(i.job.as_str()).filter(|v| {
                matches!(v.lifecycle, Lifecycle::Provisioning { .. })
                    && format!("{}#{}", v.id, v.attempt) == i.need
            });
            match wanted {
                None if age > cfg.gc_grace.as_secs_f64() => {
                    metrics.garbage("instance");
                    self.retire(Some(i.id.clone()), None, "no need wants it (orphan)");
                }
                Some(v) if age > cfg.join_timeout.as_secs_f64() => {
                    metrics.garbage("instance");
                    self.retire(Some(i.id.clone()), None, "its node did not join in time");
                    // Plan the need again, under a new key.
                    self.attempt_floor.insert(v.id.clone(), v.attempt + 1);
                }
                _ => {}
            }
        }
        let live: HashSet<&str> = view.instances.iter().map(|i| i.id.as_str()).collect();
        // Cloud pool -> its region.
        let cloud_pools: HashMap<String, &str> = inputs
            .pools
            .iter()
            .filter_map(|p| Some((p.name_any(), p.spec.aws.as_ref()?.region.as_str())))
            .collect();
        for n in &inputs.nodes {
            let Some(region) = built
                .node_pool
                .get(&n.name_any())
                .and_then(|p| cloud_pools.get(p))
            else {
                continue;
            };
            let Some(id) = world::node_instance_id(n) else {
                continue;
            };
            // A machine's instance exists before its Node: a listing asked for after the
            // Node was created must show the instance, unless it is gone. A slow or throttled
            // listing (asked for before the Node joined) says nothing about it yet.
            let listed_since_join = n.metadata.creation_timestamp.as_ref().is_some_and(|t| {
                view.listed_at.get(*region).is_some_and(|at| {
                    *at > Time::from_millis(t.0.as_millisecond()) + core::Duration::from_secs(1)
                })
            });
            if listed_since_join && !live.contains(id.as_str()) {
                metrics.garbage("node");
                self.retire(None, Some(n.name_any()), "its instance is gone");
            }
        }
    }

    /// Forgets retirements whose instance and node are both gone.
    pub(super) fn forget_retired(&mut self, inputs: &Inputs, cloud: CloudInputs<'_>) {
        let instances: HashSet<&str> = cloud.view.instances.iter().map(|i| i.id.as_str()).collect();
        let nodes: HashSet<String> = inputs.nodes.iter().map(|n| n.name_any()).collect();
        self.retiring.retain(|k| match k.split_once('/') {
            Some(("instance", id)) => instances.contains(id),
            Some(("node", n)) => nodes.contains(n),
            _ => false,
        });
    }
}

/// The running jobs billed by their GPUs: every job in a cluster pool, and the private jobs
/// whose queue's budget counts private GPU time, each priced at its pool's `gpuCostPerHour`
/// (a private pool without one: not billed).
fn gpu_runs(built: &world::Built) -> Vec<crate::spend::Run> {
    let snap = &built.snapshot;
    let counts: HashSet<&str> = snap
        .queues
        .iter()
        .filter(|q| q.budget_counts_private)
        .map(|q| q.name.as_str())
        .collect();
    let any_remote = snap.pools.iter().any(core::Pool::is_cluster);
    if counts.is_empty() && !any_remote {
        return Vec::new();
    }
    built
        .jobs
        .values()
        .filter_map(|v| {
            let Lifecycle::Running {
                pool: Some(pool),
                started_at,
                ..
            } = &v.lifecycle
            else {
                return None;
            };
            let (remote, price) =
                snap.pools
                    .iter()
                    .find(|p| &p.name == pool)
                    .and_then(|p| match p.kind {
                        core::PoolKind::Private { gpu_cost_per_hour }
                            if counts.contains(v.job.spec.queue.as_str()) =>
                        {
                            Some((false, gpu_cost_per_hour?))
                        }
                        core::PoolKind::Cluster {
                            gpu_cost_per_hour, ..
                        } => Some((true, gpu_cost_per_hour)),
                        _ => None,
                    })?;
            let spec = &v.job.spec;
            let gpus = spec.replicas.max(0) as f64 * spec.gpus_per_replica.max(0) as f64;
            Some(crate::spend::Run {
                remote,
                id: format!("{}#{}", v.id, v.attempt),
                queue: spec.queue.clone(),
                pool: pool.clone(),
                hourly_price: price * gpus,
                started_at: *started_at,
            })
        })
        .collect()
}
