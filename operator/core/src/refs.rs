//! A job's queue and nodes resolved to indexes of a snapshot: kept by [`crate::tracked`], read
//! by [`crate::decide`] (both import it; it imports neither).

/// "Not found": a queue or node name the snapshot does not hold.
pub(crate) const NONE: u32 = u32::MAX;

/// One job's queue and nodes as indexes into the snapshot.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobRefs {
    /// The `Tracked` epoch they were found in; another one: to be found again.
    pub(crate) epoch: u64,
    pub(crate) queue: u32,
    /// The first node of a running job (most have one); the others after it in `more`.
    pub(crate) first: u32,
    pub(crate) more: Vec<u32>,
}

impl JobRefs {
    /// The job's queue (index into the snapshot's queues).
    pub(crate) fn queue(&self) -> Option<usize> {
        (self.queue != NONE).then_some(self.queue as usize)
    }

    /// Node `k` of the running job (index into the snapshot's nodes).
    pub(crate) fn node(&self, k: usize) -> Option<usize> {
        let n = match k {
            0 => self.first,
            _ => self.more.get(k - 1).copied().unwrap_or(NONE),
        };
        (n != NONE).then_some(n as usize)
    }
}
