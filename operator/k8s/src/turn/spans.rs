//! The spans of a job's trace, as a turn records them: each decision that changes what the job
//! is told, the wait (queued to started), the join of its cloud instances, its run, and at the
//! end the root span from queued to finished.

use kube::ResourceExt;
use spillway_api::GpuJobStatus;
use spillway_api::job::JobPhase;
use spillway_core::Time;

use super::State;
use crate::actions::Action;
use crate::clock::core_time;
use crate::otel::{SpanRecord, Value};
use crate::telemetry::{self, TraceParent};
use crate::world::JobView;

fn s(v: impl Into<String>) -> Value {
    Value::Str(v.into())
}

impl State {
    /// The spans a status change of `view` from `before` to `after` tells of.
    pub(super) fn spans_for(
        &mut self,
        view: &JobView,
        before: &GpuJobStatus,
        after: &GpuJobStatus,
        launched: Option<Time>,
        now: Time,
    ) {
        let (trace, _) = telemetry::of_job(&view.job);
        let ours =
            TraceParent::derive(view.job.metadata.uid.as_deref().unwrap_or_default()) == trace;
        let base = vec![
            ("spillway.job", s(view.job.name_any())),
            ("spillway.queue", s(view.job.spec.queue.clone())),
            (
                "k8s.namespace.name",
                s(view.job.namespace().unwrap_or_default()),
            ),
        ];
        let key = |st: &GpuJobStatus| {
            st.decision
                .as_ref()
                .map(|d| (d.outcome.clone(), d.reason.clone(), d.rule.clone()))
        };
        let queued = after
            .queued_at
            .as_ref()
            .map(core_time)
            .unwrap_or(view.queued_at);
        if key(before) != key(after)
            && let Some(d) = &after.decision
        {
            let mut a = base.clone();
            a.push(("spillway.outcome", s(d.outcome.clone().unwrap_or_default())));
            a.push(("spillway.reason", s(d.reason.clone().unwrap_or_default())));
            a.push(("spillway.message", s(d.message.clone().unwrap_or_default())));
            if let Some(rule) = &d.rule {
                a.push(("spillway.rule", s(rule.clone())));
            }
            if let Some(o) = &d.offering {
                a.push((
                    "spillway.offering.instance_type",
                    s(o.instance_type.clone()),
                ));
                a.push((
                    "spillway.offering.capacity_type",
                    s(o.capacity_type.as_str()),
                ));
                if let Some(z) = &o.zone {
                    a.push(("spillway.offering.zone", s(z.clone())));
                }
            }
            if let Some(c) = d.estimated_hourly_cost {
                a.push(("spillway.cost.hourly_usd", Value::Float(c)));
            }
            a.push((
                "spillway.wait_s",
                Value::Float(now.since(queued).as_secs_f64()),
            ));
            self.span(trace, false, "spillway.decide", now, now, a, None);
        }
        let phase = |st: &GpuJobStatus| st.phase;
        if phase(before) != phase(after) {
            match phase(after) {
                Some(JobPhase::Running) => {
                    let started = after.started_at.as_ref().map(core_time).unwrap_or(now);
                    let mut a = base.clone();
                    let env = after
                        .environment
                        .map(|e| e.as_str().to_string())
                        .unwrap_or_default();
                    a.push(("spillway.environment", s(env.clone())));
                    a.push(("spillway.pool", s(after.pool.clone().unwrap_or_default())));
                    a.push((
                        "spillway.wait_s",
                        Value::Float(started.since(queued).as_secs_f64()),
                    ));
                    self.span(
                        trace,
                        false,
                        "spillway.wait",
                        queued,
                        started,
                        a.clone(),
                        None,
                    );
                    if let Some(at) = launched.filter(|_| env == "cloud") {
                        a.push(("spillway.nodes", s(after.nodes.join(","))));
                        self.span(trace, false, "spillway.join", at, started.max(at), a, None);
                    }
                }
                Some(p @ (JobPhase::Succeeded | JobPhase::Failed)) => {
                    let finished = after.finished_at.as_ref().map(core_time).unwrap_or(now);
                    let started = after
                        .started_at
                        .as_ref()
                        .or(before.started_at.as_ref())
                        .map(core_time);
                    let error = (p == JobPhase::Failed).then(|| {
                        after
                            .conditions
                            .iter()
                            .find(|c| c.type_ == "Failed")
                            .map(|c| format!("{}: {}", c.reason, c.message))
                            .unwrap_or_else(|| "failed".into())
                    });
                    let mut a = base.clone();
                    a.push(("spillway.phase", s(format!("{p:?}"))));
                    a.push((
                        "spillway.pool",
                        s(after
                            .pool
                            .clone()
                            .or(before.pool.clone())
                            .unwrap_or_default()),
                    ));
                    if let Some(started) = started {
                        self.span(
                            trace,
                            false,
                            "spillway.run",
                            started,
                            finished,
                            a.clone(),
                            error.clone(),
                        );
                    }
                    if ours {
                        self.span(trace, true, "spillway.gpujob", queued, finished, a, error);
                    }
                }
                _ => {}
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        trace: TraceParent,
        root: bool,
        name: &'static str,
        start: Time,
        end: Time,
        attributes: Vec<(&'static str, Value)>,
        error: Option<String>,
    ) {
        self.emit(Action::Span(Box::new(SpanRecord {
            trace,
            root,
            name,
            start,
            end,
            attributes,
            error,
        })));
    }
}
