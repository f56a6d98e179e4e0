//! Positions of trace jobs in the snapshot's job list.

/// Where each trace job sits in the snapshot's job list (jobs leave it from the middle, so
/// the positions after it shift; a plain array keeps that shift a few stores per job).
pub(super) struct Positions(pub(super) Vec<usize>);

impl Positions {
    pub(super) const NONE: usize = usize::MAX;

    pub(super) fn get(&self, job: usize) -> Option<usize> {
        self.0.get(job).copied().filter(|&p| p != Self::NONE)
    }

    pub(super) fn set(&mut self, job: usize, pos: usize) {
        self.0[job] = pos;
    }

    pub(super) fn remove(&mut self, job: usize) -> Option<usize> {
        let p = self.get(job)?;
        self.0[job] = Self::NONE;
        Some(p)
    }
}
