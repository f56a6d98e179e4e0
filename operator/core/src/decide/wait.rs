//! How long a waiting job may wait for private GPUs before it bursts (its allowance: a fixed
//! `maxWait`, a compute-wait or a priced budget), and where a queue plans it among its jobs.

use super::*;

/// A job's wait allowance.
pub(super) struct Allowance {
    pub(super) mode: WaitMode,
    pub(super) max_wait: Duration,
    pub(super) threshold: Duration,
    /// The trigger once it is used up.
    pub(super) reason: Reason,
    pub(super) rule: Option<String>,
}

impl<'a> Cycle<'a> {
    /// How long `job` may wait for private GPUs before it bursts, and why: its compute-wait
    /// budget, else the queue's (or a rule's) `maxWait`. A rule that sets `maxWait` and no
    /// rule that sets `waitMode` make that `maxWait` the job's wait, whatever the queue's mode.
    pub(super) fn allowance(&self, job: &Job, effects: &Effects) -> Allowance {
        let queue = self
            .queue(&job.queue)
            .expect("a job's queue exists: `invalid` rejected the others");
        let (mode, factor, mode_rule) = match (&effects.wait_mode, &effects.max_wait) {
            (Some(r), _) => (
                r.value.0,
                r.value.1.unwrap_or(queue.burst.compute_wait_factor),
                Some(r.rule.clone()),
            ),
            (None, Some(_)) => (WaitMode::Fixed, queue.burst.compute_wait_factor, None),
            (None, None) => (queue.burst.wait_mode, queue.burst.compute_wait_factor, None),
        };
        let (max_wait, wait_rule) = match &effects.max_wait {
            Some(r) => (r.value, Some(r.rule.clone())),
            None => (queue.burst.max_wait, None),
        };
        match (mode, job.planning_runtime()) {
            (WaitMode::ComputeWait | WaitMode::Priced, Some(rt)) => Allowance {
                mode,
                max_wait,
                threshold: self.wait_budget(queue, job, mode, factor, rt),
                reason: Reason::ComputeWaitExceeded,
                rule: mode_rule.or(wait_rule),
            },
            _ => Allowance {
                mode,
                max_wait,
                threshold: max_wait,
                reason: Reason::MaxWaitExceeded,
                rule: wait_rule,
            },
        }
    }

    /// Where `job` stands in its queue's plan among jobs of its priority: its arrival, or, in
    /// a bursting compute-wait or priced queue planned conservatively, its arrival less its
    /// wait budget. A job that may wait an hour longer is planned as if it had arrived an hour
    /// earlier: the jobs that save the most cloud capacity per hour of waiting get the
    /// earliest private slots, and the others burst at once when their slot comes later than
    /// they may wait. The offset is fixed per job, so no job is passed over indefinitely. A
    /// rule's `waitMode` changes the job's allowance, not its place in the plan.
    pub(super) fn plan_order(&self, job: &Job, queue: &crate::Queue) -> Time {
        let mode = queue.burst.wait_mode;
        if self.settings.order != QueueOrder::Conservative
            || !queue.burst.enabled
            || !matches!(mode, WaitMode::ComputeWait | WaitMode::Priced)
        {
            return job.queued_at;
        }
        match job.planning_runtime() {
            Some(rt) => {
                job.queued_at
                    - self.wait_budget(queue, job, mode, queue.burst.compute_wait_factor, rt)
            }
            None => job.queued_at,
        }
    }

    /// A job's wait budget in compute-wait or priced mode (`runtime`: its estimate).
    pub(super) fn wait_budget(
        &self,
        queue: &Queue,
        job: &Job,
        mode: WaitMode,
        factor: f64,
        runtime: Duration,
    ) -> Duration {
        if mode == WaitMode::Priced
            && queue.burst.wait_cost_per_hour > 0.0
            && let Some(price) = self.gpu_hour_price(queue, job)
        {
            let secs = job.total_gpus() as f64 * runtime.as_secs_f64() * price
                / queue.burst.wait_cost_per_hour;
            return Duration::from_millis((secs.min(1e15) * 1000.0) as u64);
        }
        compute_wait_allowance(factor, job.total_gpus(), runtime)
    }

    /// What a GPU-hour of `job` costs at its cheapest fitting offering among the queue's
    /// pools (on demand, or spot for a restartable job; an instance with room for fewer
    /// replicas than its GPUs allow is paid whole): `None` when no offering holds it.
    /// Found once per replica shape, queue and spot eligibility, and kept while no offering it
    /// looked at becomes available or unavailable ([`super::offer_memo`]).
    fn gpu_hour_price(&self, queue: &Queue, job: &Job) -> Option<f64> {
        let offerings = self.offerings_for(job);
        let key = (
            offerings.as_ptr() as usize,
            queue as *const Queue as usize,
            job.restartable,
        );
        if let Some(price) = self.offerings.borrow().price(key, self.now) {
            return price;
        }
        let g = job.gpus_per_replica.max(1);
        let now = self.now.as_millis();
        // The span of time in which the offerings looked at are available as they are now.
        let (mut from, mut until) = (i64::MIN, i64::MAX);
        let price = offerings
            .iter()
            .filter(|&&i| self.offering_allowed(queue, i))
            .map(|&i| &self.snap.offerings[i])
            .filter(|o| o.capacity_type == CapacityType::OnDemand || job.restartable)
            .filter(|o| match o.unavailable_until.map(Time::as_millis) {
                Some(t) if t > now => {
                    until = until.min(t);
                    false
                }
                Some(t) => {
                    from = from.max(t);
                    true
                }
                None => true,
            })
            .map(|o| o.hourly_price / ((o.gpus / g).max(1) * g) as f64)
            .min_by(f64::total_cmp);
        self.offerings
            .borrow_mut()
            .keep_price(key, price, from, until);
        price
    }
}

/// A compute-wait allowance: `factor` seconds of wait per GPU-second of estimated work.
pub(super) fn compute_wait_allowance(factor: f64, gpus: u32, runtime: Duration) -> Duration {
    let secs = factor * gpus as f64 * runtime.as_secs_f64();
    Duration::from_millis((secs * 1000.0) as u64)
}
