//! The simulated cloud: a [`CloudProvider`] on the replay's virtual clock.
//!
//! The engine launches, looks up and terminates instances through the same trait the operator
//! drives EC2 with, and gets the same errors back ([`CloudError::Capacity`] for a capacity
//! shortage). What a real cloud does on its own time (a machine finishing its boot, a spot
//! instance being reclaimed) happens when the engine moves the clock with
//! [`SimCloud::advance_to`], which names the needs whose instances changed; the engine then asks
//! the provider about them, as the operator's poller does.
//!
//! Model: an instance is `pending` for `boot_delay` after launch, then `running`; a launch fails
//! with `InsufficientInstanceCapacity` with probability `capacity_error_rate`; a running spot
//! instance is reclaimed after an exponentially distributed time with rate
//! `spot_interruptions_per_hour`. Every future it returns is ready at once (there is no I/O).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use spillway_cloud::{
    BoxFuture, CloudError, CloudInstance, CloudProvider, InstanceState, InstanceTypeInfo,
    LaunchRequest, SpotPrice,
};
use spillway_core::{CapacityType, Duration, Offering, Time};

/// How the simulated cloud behaves.
#[derive(Clone, Debug)]
pub struct CloudModel {
    pub boot_delay: Duration,
    pub capacity_error_rate: f64,
    pub spot_interruptions_per_hour: f64,
    /// How long before a spot interruption the cloud warns of it (EC2: two minutes); zero
    /// sends no warning.
    pub interruption_warning: Duration,
    pub seed: u64,
}

/// SplitMix64: small, seedable, good enough for sampling failures.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    Booted(usize),
    /// The warning of a reclaim to come.
    Warned(usize),
    Reclaimed(usize),
}

struct Inner {
    model: CloudModel,
    rng: Rng,
    now: i64,
    instances: Vec<CloudInstance>,
    tags: Vec<String>,
    by_id: HashMap<String, usize>,
    by_need: HashMap<String, Vec<usize>>,
    changes: BinaryHeap<Reverse<(i64, u64, Change)>>,
    seq: u64,
    offerings: Vec<Offering>,
    /// Warnings sent and not yet taken: (instance id, when it will be reclaimed).
    warnings: Vec<(String, Time)>,
}

/// The simulated cloud. One per replay.
pub struct SimCloud {
    inner: Mutex<Inner>,
}

impl SimCloud {
    /// A cloud that sells `offerings` (for its instance-type facts and spot prices).
    pub fn new(model: CloudModel, offerings: Vec<Offering>) -> SimCloud {
        SimCloud {
            inner: Mutex::new(Inner {
                rng: Rng(model.seed ^ 0x5eed_5eed),
                model,
                now: 0,
                instances: Vec::new(),
                tags: Vec::new(),
                by_id: HashMap::new(),
                by_need: HashMap::new(),
                changes: BinaryHeap::new(),
                seq: 0,
                offerings,
                warnings: Vec::new(),
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the cloud next changes on its own (a boot ends, a spot instance is reclaimed).
    pub fn next_change(&self) -> Option<Time> {
        self.inner()
            .changes
            .peek()
            .map(|Reverse((t, _, _))| Time::from_millis(*t))
    }

    /// The interruption warnings sent since the last call, oldest first: (instance id, when it
    /// will be reclaimed). What an interruption queue would carry.
    pub fn take_warnings(&self) -> Vec<(String, Time)> {
        std::mem::take(&mut self.inner().warnings)
    }

    /// Moves the clock to `t`, applying what happens on the way; returns the needs whose
    /// instances changed, each once, in the order they changed (a warning changes no need:
    /// see [`SimCloud::take_warnings`]).
    pub fn advance_to(&self, t: Time) -> Vec<String> {
        let mut g = self.inner();
        let t = t.as_millis();
        g.now = g.now.max(t);
        let mut needs: Vec<String> = Vec::new();
        while let Some(Reverse((at, _, _))) = g.changes.peek() {
            if *at > t {
                break;
            }
            let Some(Reverse((at, _, change))) = g.changes.pop() else {
                break;
            };
            let i = match change {
                Change::Booted(i) | Change::Warned(i) | Change::Reclaimed(i) => i,
            };
            match (change, g.instances[i].state) {
                (Change::Booted(_), InstanceState::Pending) => {
                    g.instances[i].state = InstanceState::Running;
                    let rate = g.model.spot_interruptions_per_hour;
                    if g.instances[i].capacity_type == CapacityType::Spot && rate > 0.0 {
                        let u = g.rng.next_f64().max(1e-12);
                        let after_ms = (-u.ln() / rate * 3_600_000.0).round() as i64;
                        g.push(at + after_ms, Change::Reclaimed(i));
                        let lead = g.model.interruption_warning.as_millis() as i64;
                        if lead > 0 {
                            g.push((at + after_ms - lead).max(at), Change::Warned(i));
                        }
                    }
                }
                (Change::Warned(_), InstanceState::Running) => {
                    let reclaim = g
                        .changes
                        .iter()
                        .find(|Reverse((_, _, c))| *c == Change::Reclaimed(i))
                        .map_or(at, |Reverse((t, _, _))| *t);
                    let id = g.instances[i].id.clone();
                    g.warnings.push((id, Time::from_millis(reclaim)));
                    continue;
                }
                (Change::Reclaimed(_), InstanceState::Running) => {
                    g.instances[i].state = InstanceState::Terminated;
                }
                // Terminated before it booted or was reclaimed: nothing happens.
                _ => continue,
            }
            let need = &g.instances[i].need;
            if !needs.contains(need) {
                needs.push(need.clone());
            }
        }
        needs
    }
}

impl Inner {
    fn push(&mut self, t: i64, c: Change) {
        self.seq += 1;
        self.changes.push(Reverse((t, self.seq, c)));
    }

    fn live(&self, cluster: &str, ids: impl Iterator<Item = usize>) -> Vec<CloudInstance> {
        ids.filter(|&i| self.tags[i] == cluster)
            .map(|i| &self.instances[i])
            .filter(|i| i.state != InstanceState::Terminated)
            .cloned()
            .collect()
    }

    fn launch(&mut self, r: &LaunchRequest) -> Result<Vec<CloudInstance>, CloudError> {
        if self.model.capacity_error_rate > 0.0
            && self.rng.next_f64() < self.model.capacity_error_rate
        {
            return Err(CloudError::from_code(
                "InsufficientInstanceCapacity",
                &format!(
                    "We currently do not have sufficient {} capacity (simulated).",
                    r.instance_type
                ),
            ));
        }
        let mut out = Vec::with_capacity(r.count as usize);
        for _ in 0..r.count {
            let i = self.instances.len();
            let instance = CloudInstance {
                id: format!("i-{i:08x}"),
                pool: r.pool.clone(),
                job: r.job.clone(),
                queue: r.queue.clone(),
                need: r.need.clone(),
                instance_type: r.instance_type.clone(),
                capacity_type: r.capacity_type,
                zone: r.zone.clone().unwrap_or_default(),
                state: InstanceState::Pending,
                launched_at: Time::from_millis(self.now),
                placement_group: r.placement_group.clone().unwrap_or_default(),
            };
            self.by_id.insert(instance.id.clone(), i);
            self.by_need.entry(r.need.clone()).or_default().push(i);
            self.instances.push(instance.clone());
            self.tags.push(r.cluster.clone());
            let booted = self.now + self.model.boot_delay.as_millis() as i64;
            self.push(booted, Change::Booted(i));
            out.push(instance);
        }
        Ok(out)
    }
}

impl CloudProvider for SimCloud {
    fn instances<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        let g = self.inner();
        let out = g.live(cluster, 0..g.instances.len());
        Box::pin(std::future::ready(Ok(out)))
    }

    fn instances_for_need<'a>(
        &'a self,
        cluster: &'a str,
        need: &'a str,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        let g = self.inner();
        let ids = g.by_need.get(need).cloned().unwrap_or_default();
        let out = g.live(cluster, ids.into_iter());
        Box::pin(std::future::ready(Ok(out)))
    }

    fn launch<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Vec<CloudInstance>, CloudError>> {
        let r = self.inner().launch(request);
        Box::pin(std::future::ready(r))
    }

    fn terminate<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), CloudError>> {
        let mut g = self.inner();
        for id in ids {
            if let Some(&i) = g.by_id.get(id) {
                g.instances[i].state = InstanceState::Terminated;
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceTypeInfo>, CloudError>> {
        let g = self.inner();
        let mut out: Vec<InstanceTypeInfo> = Vec::new();
        for o in g
            .offerings
            .iter()
            .filter(|o| types.contains(&o.instance_type))
        {
            if out.iter().all(|t| t.instance_type != o.instance_type) {
                out.push(InstanceTypeInfo {
                    instance_type: o.instance_type.clone(),
                    gpus: o.gpus,
                    gpu_model: o.gpu_model.as_str().to_string(),
                    gpu_memory_mib: (o.gpu_memory_gib * 1024.0).round() as u64,
                    efa_supported: None,
                });
            }
        }
        Box::pin(std::future::ready(Ok(out)))
    }

    fn spot_prices<'a>(
        &'a self,
        types: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<SpotPrice>, CloudError>> {
        let g = self.inner();
        let out = g
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Spot && types.contains(&o.instance_type))
            .map(|o| SpotPrice {
                instance_type: o.instance_type.clone(),
                zone: o.zone.clone(),
                hourly_price: o.hourly_price,
                at: Time::from_millis(g.now),
            })
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}

/// The value of a provider call that completes at once, as [`SimCloud`]'s do. A provider whose
/// call would wait (real I/O) cannot drive a replay: that is an error, not a hang.
pub fn now_or_error<T>(mut call: BoxFuture<'_, Result<T, CloudError>>) -> Result<T, CloudError> {
    let mut cx = Context::from_waker(Waker::noop());
    match call.as_mut().poll(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(CloudError::Other(
            "the simulator's cloud provider must answer at once".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_cloud::Image;

    fn request(need: &str, capacity_type: CapacityType) -> LaunchRequest {
        LaunchRequest {
            cluster: "sim".into(),
            pool: "aws".into(),
            job: "ns/j".into(),
            queue: "q".into(),
            need: need.into(),
            instance_type: "g6.xlarge".into(),
            capacity_type,
            zone: Some("us-east-1a".into()),
            count: 2,
            image: Image::Ami("ami-simulated".into()),
            subnet_ids: vec![],
            security_group_ids: vec![],
            iam_instance_profile: None,
            tags: Default::default(),
            user_data: None,
            token_generation: 0,
            placement_group: None,
            efa: false,
        }
    }

    fn model(capacity_error_rate: f64, spot: f64) -> CloudModel {
        CloudModel {
            boot_delay: Duration::from_secs(100),
            capacity_error_rate,
            spot_interruptions_per_hour: spot,
            interruption_warning: Duration::ZERO,
            seed: 7,
        }
    }

    #[test]
    fn instances_boot_after_the_delay_and_terminate_on_request() {
        let c = SimCloud::new(model(0.0, 0.0), vec![]);
        let got = now_or_error(c.launch(&request("ns/j#0", CapacityType::OnDemand))).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|i| i.state == InstanceState::Pending));
        assert_eq!(c.next_change(), Some(Time::from_millis(100_000)));
        assert!(c.advance_to(Time::from_millis(99_999)).is_empty());
        assert_eq!(c.advance_to(Time::from_millis(100_000)), vec!["ns/j#0"]);
        let listed = now_or_error(c.instances_for_need("sim", "ns/j#0")).unwrap();
        assert!(listed.iter().all(|i| i.state == InstanceState::Running));
        assert!(
            now_or_error(c.instances_for_need("other", "ns/j#0"))
                .unwrap()
                .is_empty(),
            "another cluster's instances are not listed"
        );
        now_or_error(c.terminate(&[listed[0].id.clone()])).unwrap();
        assert_eq!(now_or_error(c.instances("sim")).unwrap().len(), 1);
    }

    #[test]
    fn capacity_errors_and_spot_reclaims_are_drawn_from_the_seed() {
        let c = SimCloud::new(model(1.0, 0.0), vec![]);
        let err = now_or_error(c.launch(&request("n", CapacityType::OnDemand))).unwrap_err();
        assert!(matches!(err, CloudError::Capacity { .. }), "{err}");

        let c = SimCloud::new(model(0.0, 3600.0), vec![]);
        now_or_error(c.launch(&request("n", CapacityType::Spot))).unwrap();
        c.advance_to(Time::from_millis(100_000));
        let reclaim = c.next_change().expect("a reclaim is scheduled");
        assert_eq!(c.advance_to(reclaim), vec!["n"]);
        let left = now_or_error(c.instances("sim")).unwrap();
        assert_eq!(left.len(), 1, "one of the two spot instances was reclaimed");
    }

    #[test]
    fn a_reclaim_is_warned_of_its_lead_time_ahead_and_not_once_terminated() {
        let mut m = model(0.0, 1.0);
        m.interruption_warning = Duration::from_secs(120);
        let c = SimCloud::new(m, vec![]);
        let mut one = request("n", CapacityType::Spot);
        one.count = 1;
        now_or_error(c.launch(&one)).unwrap();
        c.advance_to(Time::from_millis(100_000));
        // The next change is the warning: no need changes, one warning is sent.
        let warned_at = c.next_change().expect("a warning is scheduled");
        assert!(c.advance_to(warned_at).is_empty());
        let warnings = c.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let (id, reclaim_at) = warnings[0].clone();
        assert_eq!(reclaim_at.as_millis() - warned_at.as_millis(), 120_000);
        assert!(c.take_warnings().is_empty(), "taken once");
        // Terminated after its warning: the reclaim finds nothing to do.
        now_or_error(c.terminate(std::slice::from_ref(&id))).unwrap();
        assert!(c.advance_to(reclaim_at).is_empty());
        assert!(now_or_error(c.instances("sim")).unwrap().is_empty());
    }
}
