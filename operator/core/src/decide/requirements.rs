//! A job whose size and model fit somewhere but whose `requirements` (driver, CUDA, GPU
//! product, memory) no node or offering meets is not rejected as never fitting: drivers are
//! upgraded and images change, so it waits, told which requirement and the closest facts.

use super::*;

impl Cycle<'_> {
    /// For a job about to be rejected as never fitting: when nodes or offerings of its size and
    /// model exist and only its requirements keep it out, why (the requirement most of them miss
    /// and the place whose fact comes closest).
    pub(super) fn unmet_requirements(&self, job: &Job) -> Option<String> {
        if job.requirements.is_empty() {
            return None;
        }
        let g = job.gpus_per_replica;
        let nodes = self
            .snap
            .nodes
            .iter()
            .filter(|n| n.gpus >= g && job.accepts_model(n.gpu_model.as_ref()))
            .map(|n| (n.name.clone(), &n.facts));
        let offerings = self
            .snap
            .offerings
            .iter()
            .filter(|o| o.gpus >= g && job.accepts_model(Some(&o.gpu_model)))
            .map(|o| (format!("{} {} offering", o.pool, o.instance_type), &o.facts));
        let places: Vec<(String, &crate::Facts)> = nodes.chain(offerings).collect();
        let (unmet, place) = job
            .requirements
            .closest(places.iter().map(|(n, f)| (n.as_str(), *f)))?;
        Some(format!(
            "No node or offering that holds a replica of {g} GPUs meets the job's requirements: {} is not met anywhere; the closest is {} ({}). It waits until one does.",
            unmet.wanted(),
            place,
            unmet.fact(),
        ))
    }
}
