//! Step 1 of a cycle: usage per queue and pool, releases of private work, needs in flight.

use super::*;

impl<'a> Cycle<'a> {
    /// Step 1: usage per queue and pool, releases of private work, needs in flight.
    pub(super) fn index_usage(&mut self) {
        let snap = self.snap;
        // Into the buffers of the caller's scratch (emptied).
        self.queue_state
            .extend(snap.queues.iter().map(|q| QueueState {
                spent_this_month_usd: q.spent_this_month_usd,
                ..Default::default()
            }));
        match self.refs {
            Some(refs) => self.job_queue.extend(refs.iter().map(JobRefs::queue)),
            None => {
                let mut last = None;
                let queues = &self.queues;
                self.job_queue.extend(
                    snap.jobs
                        .iter()
                        .map(|job| index_in(queues, &mut last, &job.queue)),
                );
            }
        }
        // Running jobs priced at their pool's GPU-hour (`count_priced`).
        let mut priced = Vec::new();
        for (i, job) in snap.jobs.iter().enumerate() {
            match &job.state {
                JobState::Running {
                    environment: Environment::Cloud,
                    ..
                } => {
                    self.movable_in_cloud |=
                        job.restartable && job.placement != Placement::CloudOnly;
                }
                JobState::Running { .. } => {}
                JobState::Suspended { .. } => {
                    self.suspended.push(i);
                    self.unplaced.push(i);
                }
                _ => self.unplaced.push(i),
            }
            let Some(q) = self.job_queue[i] else {
                continue;
            };
            let state = &mut self.queue_state[q];
            match &job.state {
                JobState::Pending => state.pending_jobs += 1,
                JobState::Provisioning { .. } => state.pending_jobs += 1,
                JobState::Suspended { .. } => {
                    state.running_jobs += 1;
                    state.private_gpus_in_use += job.total_gpus();
                }
                JobState::Running {
                    nodes,
                    started_at,
                    environment,
                } => {
                    state.running_jobs += 1;
                    if *environment == Environment::Cloud {
                        state.cloud_gpus_in_use += job.total_gpus();
                    } else if *environment == Environment::Remote {
                        // Its GPUs there cost what the pool of its first node says; they count
                        // against the queue's hourly budget and the pool's limits.
                        state.remote_gpus_in_use += job.total_gpus();
                        priced.push(i);
                    } else {
                        state.private_gpus_in_use += job.total_gpus();
                        if snap.queues[q].budget_counts_private {
                            priced.push(i);
                        }
                        if let Some((end, stable)) = expected_end(job, *started_at, self.now) {
                            self.stable_until(stable);
                            for (k, n) in nodes.iter().enumerate() {
                                let at = match self.refs {
                                    Some(refs) => refs[i].node(k),
                                    None => self.node_at(n),
                                };
                                if let Some(at) = at {
                                    self.releases.push((end, at, job.gpus_per_replica));
                                }
                            }
                        }
                    }
                }
            }
        }
        // Instances of one launch come together: their queue and pool are looked up again
        // only when they differ from the last instance's. (Their needs are listed only when a
        // provisioning job asks: `need_in_flight`.)
        self.pool_usage.resize(snap.pools.len(), (0, 0, 0.0));
        for i in priced {
            self.count_priced(i);
        }
        let mut last_queue = None;
        let mut last_pool = None;
        for inst in &snap.instances {
            if let Some(q) = index_in(&self.queues, &mut last_queue, &inst.queue) {
                self.queue_state[q].hourly_usd += inst.hourly_price;
            }
            if let Some(p) = index_in(&self.pools, &mut last_pool, &inst.pool) {
                let usage = &mut self.pool_usage[p];
                usage.0 += 1;
                usage.1 += inst.gpus;
                usage.2 += inst.hourly_price;
            }
        }
    }

    /// Adds a running job's spend rate at its pool's price per GPU-hour to its queue: a job in
    /// another cluster (whose GPUs also count against that pool's limits), or a private job of
    /// a queue whose budget counts private GPU time.
    fn count_priced(&mut self, i: usize) {
        let job = &self.snap.jobs[i];
        let JobState::Running { nodes, .. } = &job.state else {
            return;
        };
        let Some(p) = nodes
            .first()
            .and_then(|n| self.node_at(n))
            .and_then(|n| self.pools.get(&self.snap.nodes[n].pool))
        else {
            return;
        };
        let gpus = job.total_gpus();
        let hourly = match self.snap.pools[p].kind {
            PoolKind::Cluster {
                gpu_cost_per_hour, ..
            } => {
                let hourly = gpu_cost_per_hour * gpus as f64;
                let usage = &mut self.pool_usage[p];
                usage.1 += gpus;
                usage.2 += hourly;
                hourly
            }
            PoolKind::Private { gpu_cost_per_hour } => {
                gpu_cost_per_hour.unwrap_or(0.0) * gpus as f64
            }
            PoolKind::Cloud { .. } => 0.0,
        };
        if let Some(q) = self.job_queue[i] {
            self.queue_state[q].hourly_usd += hourly;
        }
    }
}

/// The index of the queue or pool named `name`, looked up again only when the name differs
/// from the last one (`last`): the jobs or instances of one queue mostly come one after another.
fn index_in<'a, T: names::Named>(
    table: &names::Names<'_, T>,
    last: &mut Option<(&'a str, Option<usize>)>,
    name: &'a str,
) -> Option<usize> {
    match *last {
        Some((n, q)) if n == name => q,
        _ => {
            let q = table.get(name);
            *last = Some((name, q));
            q
        }
    }
}
