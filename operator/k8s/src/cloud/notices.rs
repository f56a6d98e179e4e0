//! The interruption queues: long polls of each queue the cloud pools name
//! (`spec.aws.interruptionQueue`), the messages received and not yet deleted (what a turn sees
//! in [`super::CloudView::notices`]), and their deletion once a turn has acted on them.
//!
//! Nothing here decides what a notice means for a job (that is the turn's, in
//! `turn/interruptions.rs`). What is done here, as the notice arrives: a spot warning of an
//! instance of this cluster counts as that offering's interruption (the spot memory and
//! `spillway_spot_interruptions_total`), once; the instance's later disappearance is not
//! counted again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use spillway_api::ComputePool;
use spillway_cloud::CloudError;
use spillway_cloud::notices::{Notice, NoticeKind, NoticeQueue, QueueMessage};
use spillway_core::{self as core, CapacityType, Time};
use tokio::sync::Notify;

use super::Cloud;

/// Makes the notice queue reader of one region.
pub type NoticeFactory =
    Arc<dyn Fn(String) -> BoxFuture<'static, Arc<dyn NoticeQueue>> + Send + Sync>;

/// How long one receive waits for messages (SQS's longest long poll).
const LONG_POLL: Duration = Duration::from_secs(20);

/// A message not received again for this long is forgotten (another reader took it, or it
/// expired).
const FORGET_AFTER: core::Duration = core::Duration::from_secs(900);

/// A queue the pools name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueRef {
    pub url: String,
    pub region: String,
    /// A pool naming it says it is Spillway's alone.
    pub owned: bool,
}

/// A message received and not deleted yet.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingMessage {
    pub queue: QueueRef,
    /// The queue's id of the message.
    pub id: String,
    /// The receipt of its latest delivery (only the latest deletes it).
    pub receipt: String,
    pub notices: Result<Vec<Notice>, String>,
    /// When it was last delivered.
    pub received_at: Time,
}

/// The notice side of the cloud's state.
#[derive(Debug, Default)]
pub(super) struct NoticeState {
    pub(super) pending: BTreeMap<String, PendingMessage>,
    /// Spot instances warned of, already counted as interrupted.
    pub(super) warned: HashSet<String>,
    /// Instances of this cluster that notices name and no listing shows any more (asked of the
    /// provider by tag): the notices are ours, with nothing left to do.
    pub(super) gone: HashSet<String>,
}

/// The queues of `pools`, each once (owned when any pool naming it says so).
pub fn queues(pools: &[Arc<ComputePool>]) -> Vec<QueueRef> {
    let mut out: BTreeMap<String, QueueRef> = BTreeMap::new();
    for p in pools {
        let Some(aws) = &p.spec.aws else { continue };
        let Some(url) = &aws.interruption_queue else {
            continue;
        };
        let q = out.entry(url.clone()).or_insert_with(|| QueueRef {
            url: url.clone(),
            region: aws.region.clone(),
            owned: false,
        });
        q.owned |= aws.owns_interruption_queue;
    }
    out.into_values().collect()
}

impl Cloud {
    async fn notice_queue(&self, region: &str) -> Option<Arc<dyn NoticeQueue>> {
        let factory = self.config.notices.as_ref()?;
        if let Some(q) = self.queues.lock().ok()?.get(region) {
            return Some(q.clone());
        }
        let q = factory(region.to_string()).await;
        Some(
            self.queues
                .lock()
                .ok()?
                .entry(region.to_string())
                .or_insert(q)
                .clone(),
        )
    }

    /// The instances `messages` name that no listing showed and the provider was not asked
    /// about yet.
    fn unknown(&self, messages: &[QueueMessage]) -> Vec<String> {
        let st = self.state();
        let mut out: Vec<String> = messages
            .iter()
            .filter_map(|m| m.notices.as_ref().ok())
            .flatten()
            .map(|n| n.instance.clone())
            .filter(|i| !st.instances.contains_key(i) && !st.notices.gone.contains(i))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Asks the provider which of the instances `messages` name that no listing shows are
    /// this cluster's (gone since), so their notices are deleted as done rather than left as
    /// another cluster's.
    async fn ask_owner(&self, region: &str, messages: &[QueueMessage]) {
        let unknown = self.unknown(messages);
        if unknown.is_empty() {
            return;
        }
        let provider = self.provider(region).await;
        match provider.owned(&self.config.cluster, &unknown).await {
            Ok(ids) => self.state().notices.gone.extend(ids),
            Err(e) => {
                tracing::warn!(region, error = %e, "cannot tell whose instances the notices name; asking again at their next delivery")
            }
        }
    }

    /// Takes in messages just received from `queue`: a redelivery replaces the receipt; a spot
    /// warning of an instance of this cluster is counted as its offering's interruption.
    /// Returns the spot instances newly warned of (for the metric).
    pub fn take_messages(
        &self,
        queue: &QueueRef,
        messages: Vec<QueueMessage>,
        now: Time,
    ) -> Vec<spillway_cloud::CloudInstance> {
        let mut st = self.state();
        let mut warned = Vec::new();
        for m in messages {
            if let Ok(notices) = &m.notices {
                for n in notices {
                    if n.kind != NoticeKind::SpotInterruptionWarning {
                        continue;
                    }
                    let Some((_, i)) = st.instances.get(&n.instance) else {
                        continue;
                    };
                    if i.capacity_type == CapacityType::Spot && !st.notices.warned.contains(&i.id) {
                        let i = i.clone();
                        tracing::warn!(instance = %i.id, pool = %i.pool, instance_type = %i.instance_type, deadline = ?n.deadline, "spot interruption warning");
                        st.spot.record(&i.pool, &i.instance_type, &i.zone, n.time);
                        st.notices.warned.insert(i.id.clone());
                        warned.push(i);
                    }
                }
            }
            if let Err(e) = &m.notices {
                tracing::warn!(queue = %queue.url, message = %m.id, error = %e, "a message of the interruption queue is not an EC2 event");
            }
            st.notices.pending.insert(
                m.id.clone(),
                PendingMessage {
                    queue: queue.clone(),
                    id: m.id,
                    receipt: m.receipt,
                    notices: m.notices,
                    received_at: now,
                },
            );
        }
        st.notices
            .pending
            .retain(|_, m| now.since(m.received_at) < FORGET_AFTER);
        let named: HashSet<String> = st
            .notices
            .pending
            .values()
            .filter_map(|m| m.notices.as_ref().ok())
            .flatten()
            .map(|n| n.instance.clone())
            .collect();
        st.notices.gone.retain(|i| named.contains(i));
        let live: HashSet<&String> = st.instances.keys().collect();
        let kept: HashSet<String> = st
            .notices
            .warned
            .iter()
            .filter(|id| live.contains(id))
            .cloned()
            .collect();
        st.notices.warned = kept;
        warned
    }

    /// Deletes message `id` from its queue by the receipt of its latest delivery, and forgets
    /// it. A message forgotten already is done.
    pub async fn delete_message(&self, id: &str) -> Result<(), CloudError> {
        let Some(m) = self.state().notices.pending.get(id).cloned() else {
            return Ok(());
        };
        let Some(queue) = self.notice_queue(&m.queue.region).await else {
            return Ok(());
        };
        queue.delete(&m.queue.url, &m.receipt).await?;
        let mut st = self.state();
        if st
            .notices
            .pending
            .get(id)
            .is_some_and(|p| p.receipt == m.receipt)
        {
            st.notices.pending.remove(id);
        }
        Ok(())
    }
}

/// Long-polls every interruption queue the pools name, taking in what arrives and notifying
/// `changed`; a queue that fails is tried again after a pause, without holding up the others
/// for longer than one long poll.
pub async fn poll(
    cloud: Arc<Cloud>,
    pools: impl Fn() -> Vec<Arc<ComputePool>>,
    metrics: Arc<crate::metrics::Metrics>,
    changed: Arc<Notify>,
) {
    let mut failed_at: HashMap<String, std::time::Instant> = HashMap::new();
    loop {
        let qs: Vec<QueueRef> = queues(&pools())
            .into_iter()
            .filter(|q| {
                failed_at
                    .get(&q.url)
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
            })
            .collect();
        if qs.is_empty() || cloud.config.notices.is_none() {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        }
        let received = futures::future::join_all(qs.iter().map(|q| {
            let cloud = cloud.clone();
            async move {
                let Some(reader) = cloud.notice_queue(&q.region).await else {
                    return Ok::<_, CloudError>(Vec::new());
                };
                let messages = reader.receive(&q.url, LONG_POLL).await?;
                cloud.ask_owner(&q.region, &messages).await;
                Ok(messages)
            }
        }))
        .await;
        let mut any = false;
        for (q, r) in qs.iter().zip(received) {
            match r {
                Ok(messages) => {
                    failed_at.remove(&q.url);
                    any |= !messages.is_empty();
                    for i in cloud.take_messages(q, messages, crate::clock::now()) {
                        metrics.spot_interrupted(&i.pool, &i.instance_type);
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %q.url, error = %e, "cannot read the interruption queue");
                    failed_at.insert(q.url.clone(), std::time::Instant::now());
                }
            }
        }
        if any {
            changed.notify_one();
        }
    }
}
