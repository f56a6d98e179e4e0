//! Step 2, continued: a job that can never be decided as it is (an invalid spec, a queue or
//! dataset that does not exist or is invalid) is rejected with the reason.

use super::*;

impl Cycle<'_> {
    pub(super) fn invalid(&self, i: usize, job: &Job) -> Option<(Reason, String)> {
        if job.replicas == 0 || job.gpus_per_replica == 0 {
            return Some((
                Reason::InvalidSpec,
                format!(
                    "Job {} asks for {} replicas of {} GPUs; both must be at least 1.",
                    job.id, job.replicas, job.gpus_per_replica
                ),
            ));
        }
        if self.job_queue[i].is_none() {
            return Some(match self.snap.invalid_queues.get(&job.queue) {
                Some(why) => (
                    Reason::QueueInvalid,
                    format!(
                        "GpuQueue {:?} is invalid and left out of decisions until it is fixed: {why}",
                        job.queue
                    ),
                ),
                None => (
                    Reason::QueueNotFound,
                    format!("GpuQueue {:?} does not exist.", job.queue),
                ),
            });
        }
        if let Some(missing) = job
            .datasets
            .iter()
            .find(|d| !self.datasets.contains_key(d.as_str()))
        {
            return Some(match self.snap.invalid_datasets.get(missing) {
                Some(why) => (
                    Reason::DatasetInvalid,
                    format!(
                        "Dataset {missing:?} is invalid and left out of decisions until it is fixed: {why}"
                    ),
                ),
                None => (
                    Reason::DatasetNotFound,
                    format!("Dataset {missing:?} does not exist."),
                ),
            });
        }
        None
    }
}
