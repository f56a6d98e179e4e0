//! Jobs stopped before they finish: a reclaimed spot instance, a preemption, a move home.

use spillway_core::{JobState, Time};

use super::{Engine, Event};

impl Engine<'_> {
    /// The cloud took a spot instance back: its jobs stop (restartable ones keep their
    /// progress), and its offering remembers.
    pub(super) fn reclaimed(&mut self, instance: usize, t: i64) {
        self.out.spot_interruptions += 1;
        let core = &self.instances[instance].core;
        self.spot.record(
            &core.pool,
            &core.instance_type,
            &core.zone,
            Time::from_millis(t),
        );
        if let Some(node) = core.node.clone() {
            let victims: Vec<usize> = self
                .snap
                .snapshot()
                .jobs
                .iter()
                .enumerate()
                .filter(|(_, j)| matches!(&j.state, JobState::Running { nodes, .. } if nodes.contains(&node)))
                .map(|(p, _)| self.trace_of[p])
                .collect();
            for v in victims {
                self.requeue(v, t);
            }
        }
        self.forget_instance(instance, t);
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
