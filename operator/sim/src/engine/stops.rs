//! Jobs stopped before they finish: a spot instance warned of or reclaimed, a preemption, a
//! move home.

use spillway_core::{JobState, Time};

use super::{Engine, Event};

impl Engine<'_> {
    /// The cloud took a spot instance back: its jobs stop (restartable ones keep their
    /// progress), and its offering remembers.
    pub(super) fn reclaimed(&mut self, instance: usize, t: i64) {
        self.out.spot_interruptions += 1;
        self.remember_reclaim(instance, t);
        for v in self.running_on(instance) {
            self.out.interrupted_gpu_seconds_lost += self.requeue(v, t);
            self.interrupted_at[v].get_or_insert(t);
        }
        self.forget_instance(instance, t);
    }

    /// The cloud warned that it will take spot instance `id` back, as the operator acts on an
    /// interruption queue's warning: the instance counts as interrupted now; its jobs stop at
    /// once, a restartable one checkpointing as it stops (so it loses no work; one that is not
    /// restartable starts over), and are planned again at once; the instance is terminated.
    pub(super) fn warned(&mut self, id: &str, t: i64) {
        let Some(&instance) = self.instance_by_id.get(id) else {
            return;
        };
        if !self.instances[instance].alive {
            return;
        }
        self.out.spot_interruptions += 1;
        self.out.interruption_warnings += 1;
        self.remember_reclaim(instance, t);
        for v in self.running_on(instance) {
            if let Some(p) = self.pos.get(v)
                && self.snap.snapshot().jobs[p].restartable
            {
                // Its checkpoint on SIGTERM saves the work done so far.
                self.snap.job_mut(p).checkpointed_at = Some(Time::from_millis(t));
            }
            self.out.interrupted_gpu_seconds_lost += self.requeue(v, t);
            self.interrupted_at[v].get_or_insert(t);
        }
        self.push(t, Event::Wake);
        self.terminate_instance(instance, t);
    }

    /// The offering of `instance` remembers an interruption at `t`.
    fn remember_reclaim(&mut self, instance: usize, t: i64) {
        let core = &self.instances[instance].core;
        self.spot.record(
            &core.pool,
            &core.instance_type,
            &core.zone,
            Time::from_millis(t),
        );
    }

    /// The trace indexes of the jobs running on `instance`'s node.
    fn running_on(&self, instance: usize) -> Vec<usize> {
        let Some(node) = self.instances[instance].core.node.clone() else {
            return Vec::new();
        };
        self.snap
            .snapshot()
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| matches!(&j.state, JobState::Running { nodes, .. } if nodes.contains(&node)))
            .map(|(p, _)| self.trace_of[p])
            .collect()
    }

    /// A job starts: if it was interrupted, it has recovered.
    pub(super) fn restarted(&mut self, job: usize, t: i64) {
        if let Some(at) = self.interrupted_at[job].take() {
            self.out.recovery_seconds.push((t - at) as f64 / 1000.0);
        }
    }

    /// Stops a running job and puts it back in its queue. A restartable job keeps its work up
    /// to its last checkpoint (every `checkpoint_interval`; without one, all of it); any other
    /// job starts over. Returns the GPU-seconds of work lost.
    pub(super) fn requeue(&mut self, job: usize, t: i64) -> f64 {
        let Some(p) = self.pos.get(job) else {
            return 0.0;
        };
        let j = &self.snap.snapshot().jobs[p];
        let mut lost = 0.0;
        if let JobState::Running {
            nodes, started_at, ..
        } = j.state.clone()
        {
            let g = j.gpus_per_replica;
            let done = (t - started_at.as_millis()) as f64 / 1000.0;
            lost = done;
            if j.restartable {
                lost = match j.checkpoint_interval {
                    Some(_) => j
                        .work_at_risk(started_at, Time::from_millis(t))
                        .as_secs_f64(),
                    None => 0.0,
                };
                self.remaining[job] = (self.remaining[job] - (done - lost)).max(1.0);
            }
            lost *= f64::from(j.total_gpus());
            self.release(&nodes, g, t);
            self.running -= 1;
            self.attempt[job] += 1;
            self.out.jobs[job].interruptions += 1;
            let j = self.snap.job_mut(p);
            j.attempt += 1;
            j.state = JobState::Pending;
        }
        lost
    }

    /// Moves a cloud job home: its cloud pods stop at once (grace periods are not simulated),
    /// it loses the work since its last checkpoint and pays the restart overhead as extra
    /// runtime, and it is suspended on the private nodes held for it; the next cycle, at the
    /// same instant, starts it there.
    pub(super) fn move_home(&mut self, job: usize, m: &spillway_core::Move, t: i64) {
        let Some(p) = self.pos.get(job) else { return };
        let j = &self.snap.snapshot().jobs[p];
        let JobState::Running {
            nodes, started_at, ..
        } = j.state.clone()
        else {
            return;
        };
        let done = (t - started_at.as_millis()) as f64 / 1000.0;
        let lost = match j.checkpoint_interval {
            Some(_) => j
                .work_at_risk(started_at, Time::from_millis(t))
                .as_secs_f64(),
            None => 0.0,
        };
        let overhead = self.snap.snapshot().settings.restart_overhead.as_secs_f64();
        self.remaining[job] = (self.remaining[job] - (done - lost)).max(1.0) + overhead;
        self.out.repatriations += 1;
        self.out.repatriated_gpu_seconds_lost += lost * f64::from(j.total_gpus());
        let g = j.gpus_per_replica;
        self.release(&nodes, g, t);
        self.running -= 1;
        self.attempt[job] += 1;
        self.out.jobs[job].moves += 1;
        let j = self.snap.job_mut(p);
        j.attempt += 1;
        j.state = JobState::Suspended {
            nodes: m.nodes.clone(),
            pool: m.pool.clone(),
            ready: true,
        };
        self.push(t, Event::Wake);
    }
}
