//! Repatriation, carried out: each move of the plan suspends the job (phase `Suspended`, its
//! next attempt, the private nodes held for it written in its status), records why and what it
//! saves (a `Suspended` condition and an Event), and evicts its cloud pods with their grace
//! period. Once they are gone the core starts it on those nodes (`Repatriated`); the cloud
//! node then idles and is scaled down as usual.

use crate::hashing::HashMap;
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use spillway_api::job::JobPhase;
use spillway_api::{Environment, GpuJob, GpuQueue};
use spillway_core::{self as core, Time};

use super::State;
use super::reclaim::grace_seconds;
use crate::status;
use crate::world::{self, Inputs, JobView};

impl State {
    /// Carries out the plan's moves.
    pub(super) fn moves(
        &mut self,
        plan: &core::Plan,
        built: &world::Built,
        queues: &HashMap<String, Arc<GpuQueue>>,
        now: Time,
    ) {
        for m in &plan.moves {
            if let Some(view) = self.fresh_view(built, &m.job) {
                let decision = plan.decision(&m.job);
                self.suspend(view, m, decision, queues.get(&view.job.spec.queue), now);
            }
        }
    }

    fn suspend(
        &mut self,
        view: &JobView,
        m: &core::Move,
        decision: Option<&core::Decision>,
        queue: Option<&Arc<GpuQueue>>,
        now: Time,
    ) {
        let next = self.next_attempt(view);
        let grace = grace_seconds(view, queue.map(|q| q.as_ref()));
        let note = format!("{} Its cloud pods stop within {grace} s.", m.message);
        let mut st = self.last_status(view);
        let generation = view.job.metadata.generation;
        st.restarts = Some(next as i32);
        st.phase = Some(JobPhase::Suspended);
        st.environment = Some(Environment::Private);
        st.pool = Some(m.pool.clone());
        st.nodes = m.nodes.clone();
        st.started_at = None;
        st.utilization = None;
        if let Some(d) = decision {
            st.decision = Some(status::merge_decision(
                st.decision.as_ref(),
                status::decision_status(d, None, now),
            ));
        }
        status::set_condition(
            &mut st.conditions,
            "Suspended",
            true,
            "Repatriating",
            &note,
            generation,
            now,
        );
        status::set_condition(
            &mut st.conditions,
            "Admitted",
            false,
            "Repatriating",
            &note,
            generation,
            now,
        );
        status::remove_condition(&mut st.conditions, "Running");
        self.publish(
            view.job.object_ref(&()),
            false,
            "Repatriating",
            "Move",
            note,
        );
        self.apply_job_status(view, &st);
        self.evict_pods(view, grace);
    }

    /// The caches' jobs with the `Suspended` statuses this loop wrote and the caches do not
    /// show yet, so a job moving home is not seen as pending in between. `None`: none.
    pub(super) fn with_suspensions(&self, inputs: &Inputs) -> Option<Inputs> {
        let pending = |j: &GpuJob| -> Option<spillway_api::GpuJobStatus> {
            let id = format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
            let written = self.written.jobs.get(&id)?;
            let seen = j.status.as_ref().and_then(|s| s.phase);
            (written.phase == Some(JobPhase::Suspended) && seen != Some(JobPhase::Suspended))
                .then(|| written.clone())
        };
        let suspending = (self.written.jobs.values()).any(|s| s.phase == Some(JobPhase::Suspended));
        if !suspending || !inputs.jobs.iter().any(|j| pending(j).is_some()) {
            return None;
        }
        let mut out = inputs.clone();
        for j in &mut out.jobs {
            if let Some(st) = pending(j) {
                let mut job = (**j).clone();
                job.status = Some(st);
                *j = Arc::new(job);
            }
        }
        Some(out)
    }
}
