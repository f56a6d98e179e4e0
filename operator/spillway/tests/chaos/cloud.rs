//! Scenarios on the cloud side: gangs burst to EC2 (moto behind the fault proxy; the harness
//! boots a Node for each instance, since no machine boots here) while the operator is SIGKILLed
//! at seeded moments (scenario 1's cloud half), or while EC2 storms (scenario 5: throttling,
//! capacity errors on the cheapest two offerings, slow responses, launches whose response is
//! lost). Besides the pods' invariants, checked over the whole history:
//! - no need was ever launched twice: all of a need's instances (a gang's need has one per
//!   replica) come from one RunInstances, one reservation (moto keeps terminated instances
//!   listed, so "ever" is checked, not only "at once");
//! - no job reading Restricted data ever had an instance;
//! - the queue's live instances never cost more per hour than its hourly budget;
//! - once the jobs are done, every instance is terminated within the idle timeout and the GC
//!   grace (none is left running unowned);
//! - the pool's recorded spend equals the instances' lifetimes x price, within, per instance,
//!   the time from its end to the first listing EC2 answered after it (the proxy records when
//!   each call reached EC2 and when its answer came back), the poll period and two seconds
//!   (EC2 reports launch and termination times to the second; the operator bills an ended
//!   instance up to the turn that noticed, and a launched one from its launch however late a
//!   listing first showed it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use spillway_api::{ComputePool, Dataset, GpuQueue};
use spillway_tests::faults::{Effect, FaultProxy};
use spillway_tests::machines::BootingMachines;
use spillway_tests::moto::{MotoServer, cluster_instances};

use crate::{Disruption, Operator, Rng, Scenario, Shape, env_or, seed};

/// The queue's hourly budget, USD.
const BUDGET: f64 = 30.0;
/// The operator's instance listing period and GC grace, seconds.
const POLL: u64 = 1;
const GC_GRACE: u64 = 5;
/// The cloud pool's idle timeout, seconds.
const IDLE: u64 = 2;

/// On-demand USD per hour of the bundled catalog's instance types.
fn price(instance_type: &str) -> f64 {
    match instance_type {
        "g6.xlarge" => 0.8048,
        "g5.8xlarge" => 2.448,
        "p5.4xlarge" => 6.88,
        "g6e.12xlarge" => 10.49264,
        other => panic!("no price for {other} in this test"),
    }
}

/// One instance as the test saw it in moto.
#[derive(Clone, Debug)]
struct Seen {
    need: String,
    instance_type: String,
    launched: f64,
    /// When EC2 says it was terminated (Unix seconds), once it was.
    ended: Option<f64>,
}

/// "User initiated (2026-12-01 00:26:33 UTC)" -> Unix seconds.
fn ended_at(reason: &str) -> Option<f64> {
    let inner = reason.split_once('(')?.1.split_once(" UTC)")?.0;
    let ts: k8s_openapi::jiff::Timestamp = format!("{}Z", inner.replace(' ', "T")).parse().ok()?;
    Some(ts.as_millisecond() as f64 / 1000.0)
}

/// The test's own view of the cluster's instances (straight from moto, not through the proxy).
struct CloudWatch {
    ec2: aws_sdk_ec2::Client,
    tag: String,
    /// Restricted jobs as the `spillway.io/job` tag names them.
    restricted: BTreeSet<String>,
    seen: BTreeMap<String, Seen>,
    broken: Vec<String>,
    next: Instant,
    /// The highest hourly cost of live instances seen.
    peak_hourly: f64,
}

impl CloudWatch {
    fn new(ec2: aws_sdk_ec2::Client, world: &Scenario) -> CloudWatch {
        CloudWatch {
            ec2,
            tag: world.ns.clone(),
            restricted: world
                .restricted
                .iter()
                .map(|j| format!("{}/{j}", world.ns))
                .collect(),
            seen: BTreeMap::new(),
            broken: Vec::new(),
            next: Instant::now(),
            peak_hourly: 0.0,
        }
    }

    fn broke(&mut self, what: String) {
        if !self.broken.contains(&what) {
            self.broken.push(what);
        }
    }

    /// Lists the instances (at most every 500 ms) and checks them; returns how many are live.
    async fn look(&mut self) -> Option<usize> {
        if Instant::now() < self.next {
            return None;
        }
        self.next = Instant::now() + Duration::from_millis(500);
        let listed = cluster_instances(&self.ec2, &self.tag).await.ok()?;
        let mut live = 0;
        let mut paying = Vec::new();
        let mut hourly = 0.0;
        let mut needs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for i in listed {
            let (id, need, job) = (&i.id, i.tag("spillway.io/need"), i.tag("spillway.io/job"));
            if self.restricted.contains(job) {
                self.broke(format!(
                    "instance {id} for {job}, which reads Restricted data"
                ));
            }
            needs
                .entry(need.to_string())
                .or_default()
                .insert(i.reservation_id.clone());
            if i.alive() {
                live += 1;
                hourly += price(&i.instance_type);
                paying.push(format!("{id} {} for {need}", i.instance_type));
            }
            let e = self.seen.entry(id.clone()).or_insert_with(|| Seen {
                need: need.to_string(),
                instance_type: i.instance_type.clone(),
                launched: i.launched.unwrap_or(0.0),
                ended: None,
            });
            if !i.alive() && e.ended.is_none() {
                e.ended = i.state_reason.as_deref().and_then(ended_at);
            }
        }
        for (need, launches) in needs.into_iter().filter(|(_, r)| r.len() > 1) {
            self.broke(format!(
                "need {need} was launched twice: reservations {launches:?}"
            ));
        }
        self.peak_hourly = self.peak_hourly.max(hourly);
        if hourly > BUDGET + 1e-6 {
            self.broke(format!(
                "live instances cost {hourly:.4} USD/h, over the budget {BUDGET}: {paying:?}"
            ));
        }
        Some(live)
    }
}

/// What breaks the cloud scenarios: operator kills (scenario 1's cloud half) or none (the
/// storm is the proxy's); the instances are watched either way.
struct CloudChaos {
    operator: Operator,
    args: Vec<String>,
    endpoint: String,
    kills: usize,
    killed: usize,
    next: Instant,
    /// Instances to terminate under running jobs (a burst node that vanishes mid-job).
    losses: usize,
    lost: usize,
    next_loss: Instant,
    give_up: Instant,
    rng: Rng,
    watch: CloudWatch,
}

impl CloudChaos {
    /// Terminates (straight in moto, as EC2 would reclaim it) an instance whose node runs a
    /// pod of the scenario; the harness deletes its Node. Returns whether one was found.
    async fn lose_instance(&mut self, world: &Scenario) -> bool {
        let pods: Api<Pod> = Api::namespaced(world.client.clone(), &world.ns);
        let Ok(list) = pods.list(&ListParams::default()).await else {
            return false;
        };
        let busy: Vec<String> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .filter(|n| n.starts_with("i-"))
            .collect();
        if busy.is_empty() {
            return false;
        }
        let id = busy[self.rng.below(busy.len() as u64) as usize].clone();
        self.watch
            .ec2
            .terminate_instances()
            .instance_ids(&id)
            .send()
            .await
            .is_ok()
    }
}

/// The operator binary with its EC2 calls going to `endpoint` (the fault proxy).
fn start_cloud(world: &Scenario, args: &[String], endpoint: &str) -> Operator {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    crate::start_env(
        &world.kubeconfig,
        &args,
        &[
            ("AWS_ENDPOINT_URL_EC2", endpoint),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
        ],
    )
}

impl Disruption for CloudChaos {
    async fn step(&mut self, world: &mut Scenario) -> bool {
        if self.killed < self.kills && Instant::now() >= self.next {
            self.operator.kill();
            self.killed += 1;
            self.operator = start_cloud(world, &self.args, &self.endpoint);
            self.next = Instant::now() + Duration::from_millis(1000 + self.rng.below(4000));
        }
        if self.lost < self.losses
            && Instant::now() >= self.next_loss
            && self.lose_instance(world).await
        {
            self.lost += 1;
            self.next_loss = Instant::now() + Duration::from_millis(2000 + self.rng.below(4000));
        }
        self.watch.look().await;
        // Instances can only be lost while cloud pods run: the jobs may all finish first.
        self.killed >= self.kills && (self.lost >= self.losses || Instant::now() >= self.give_up)
    }
}

/// A cloud scenario's world: the private scenario's (one node of 8 GPUs), an AWS pool of the
/// bundled catalog's four GPU types in moto, a Restricted dataset every fourth job reads, and
/// the queue bursting there after 1 s within an hourly budget. Returns the world and the
/// operator's arguments.
async fn cloud_world(
    prefix: &str,
    jobs: usize,
    rng: &mut Rng,
    restartable: bool,
) -> (Scenario, Vec<String>, aws_sdk_ec2::Client) {
    let world = Scenario::build(
        prefix,
        rng,
        Shape {
            jobs,
            restartable,
            nodes: 1,
            sizes: &[1, 4],
            restricted_every: 4,
            cloud_only_every: 4,
        },
    )
    .await;
    let moto = MotoServer::shared().await;
    let ec2 = moto.ec2_client().await;
    let ami = ec2
        .describe_images()
        .send()
        .await
        .expect("images")
        .images()
        .iter()
        .find_map(|i| i.image_id().map(str::to_string))
        .expect("an AMI");
    let aws_pool = format!("{}-aws", world.label);
    let pool: ComputePool = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "ComputePool",
        "metadata": {"name": aws_pool},
        "spec": {"aws": {"region": "us-east-1", "amiId": ami,
                         "instanceTypes": ["g6.xlarge", "g5.8xlarge", "p5.4xlarge", "g6e.12xlarge"],
                         "capacityTypes": ["on-demand"]},
                 "idleTimeout": format!("{IDLE}s")},
    }))
    .expect("pool");
    Api::<ComputePool>::all(world.client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("aws pool");
    let dataset: Dataset = serde_json::from_value(json!({
        "apiVersion": "spillway.io/v1alpha1", "kind": "Dataset",
        "metadata": {"name": format!("{}-restricted", world.label)},
        "spec": {"classification": "Restricted", "locations": [{"environment": "private"}]},
    }))
    .expect("dataset");
    Api::<Dataset>::all(world.client.clone())
        .create(&PostParams::default(), &dataset)
        .await
        .expect("dataset");
    Api::<GpuQueue>::all(world.client.clone())
        .patch(
            &world.label,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "burst": {"enabled": true, "maxWait": "1s", "capacityTypes": ["on-demand"],
                          "pools": [aws_pool]},
                "budget": {"hourlyUSD": BUDGET}}})),
        )
        .await
        .expect("queue bursts");
    let args = [
        "--leader-elect=false",
        "--cluster-name",
        world.ns.as_str(),
        "--cloud-poll",
        &POLL.to_string(),
        "--gc-grace",
        &GC_GRACE.to_string(),
        "--capacity-cooldown",
        "20",
        "--join-timeout",
        "60",
        "--resync",
        "5",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    (world, args, ec2)
}

/// After the jobs: every instance terminated within the idle timeout and GC grace, and the
/// pool's spend equal to the lifetimes x price. Returns (instances, USD recorded).
async fn settle(
    world: &Scenario,
    chaos: &mut CloudChaos,
    proxy: &FaultProxy,
    seed: u64,
) -> (usize, f64) {
    let deadline = Instant::now() + Duration::from_secs(IDLE + GC_GRACE + 4 * POLL + 30);
    loop {
        if chaos.watch.look().await == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: instances left running after the jobs: {:?}",
            chaos
                .watch
                .seen
                .iter()
                .filter(|(_, s)| s.ended.is_none())
                .map(|(id, s)| format!("{id} ({} for {})", s.instance_type, s.need))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last_end = chaos
        .watch
        .seen
        .values()
        .filter_map(|s| s.ended)
        .fold(0.0, f64::max);
    // The spend the operator records once it has noticed the last termination: the rate
    // drops to zero and the pair is written with it.
    let pools: Api<ComputePool> = Api::all(world.client.clone());
    let name = format!("{}-aws", world.label);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (usd, through) = loop {
        let st = pools.get(&name).await.ok().and_then(|p| p.status);
        let pair = st.and_then(|s| {
            Some((
                s.this_month_usd?,
                s.accrued_through?.0.as_millisecond() as f64 / 1000.0,
                s.hourly_usd?,
            ))
        });
        // EC2 reports an end to the second: the operator may have noticed it (and written a
        // rate of zero) within that second.
        if let Some((usd, through, hourly)) = pair
            && hourly == 0.0
            && through + 1.0 >= last_end
        {
            break (usd, through);
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: no spend written after the last instance ended at {last_end}: {pair:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let month =
        spillway_k8s::spend::month_of(spillway_core::Time::from_millis((through * 1000.0) as i64));
    let started = chaos
        .watch
        .seen
        .values()
        .map(|s| s.launched)
        .fold(f64::MAX, f64::min);
    let n = chaos.watch.seen.len();
    if n > 0
        && spillway_k8s::spend::month_of(spillway_core::Time::from_millis(
            (started * 1000.0) as i64,
        )) != month
    {
        println!(
            "seed {seed}: the run crossed a month boundary; spend starts again at zero, not compared"
        );
        return (n, usd);
    }
    let mut expected = 0.0;
    let mut slack = 0.0;
    for s in chaos.watch.seen.values() {
        let end = s.ended.unwrap_or(through).min(through);
        expected += price(&s.instance_type) * (end - s.launched).max(0.0) / 3600.0;
        // The operator learns of an end from the first listing EC2 answers after it: while
        // EC2 throttles or is slow, later than one poll period.
        let late = s.ended.map_or(0.0, |e| {
            let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(e);
            proxy
                .first_answer_after("DescribeInstances", at)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(through, |t| t.as_secs_f64())
                .min(through)
                - e
        });
        slack += price(&s.instance_type) * (late.max(0.0) + POLL as f64 + 2.0) / 3600.0;
    }
    // The status rounds to 0.0001 USD; a restarted operator starts from the rounded figure.
    slack += 0.0001 * (chaos.killed as f64 + 2.0);
    println!(
        "seed {seed}: spend recorded {usd:.6} USD, lifetimes x price {expected:.6}, allowed difference {slack:.6}"
    );
    assert!(
        (usd - expected).abs() <= slack,
        "seed {seed}: the pool recorded {usd:.6} USD; its {n} instances' lifetimes x price are {expected:.6} USD (allowed difference {slack:.6})"
    );
    (n, usd)
}

/// Runs a cloud scenario to its end and checks every invariant; returns the chaos state.
async fn run(
    mut world: Scenario,
    mut chaos: CloudChaos,
    proxy: &FaultProxy,
    seed: u64,
    jobs: usize,
) -> (CloudChaos, usize, f64) {
    let _machines = BootingMachines::start(
        chaos.watch.ec2.clone(),
        world.kubelet.clone(),
        world.ns.clone(),
        Some(Duration::from_secs(1)),
    );
    let limit = Duration::from_secs(120 + 4 * jobs as u64);
    let (done, _) = world.drive(seed, limit, &mut chaos).await;
    assert_eq!(done, jobs);
    let (instances, usd) = settle(&world, &mut chaos, proxy, seed).await;
    chaos.operator.kill();
    assert!(
        chaos.watch.broken.is_empty(),
        "seed {seed}: cloud invariants broken: {:#?}",
        chaos.watch.broken
    );
    assert!(
        instances > 0,
        "seed {seed}: nothing burst; the scenario tested nothing on the cloud side"
    );
    (chaos, instances, usd)
}

/// Scenario 1's cloud half: gangs burst to moto while the operator is SIGKILLed at seeded
/// moments and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_bursts_survive_kills_without_a_second_launch() {
    let _turn = spillway_tests::operator::serial().await;
    let jobs = env_or("SPILLWAY_CHAOS_CLOUD_JOBS", 16) as usize;
    let kills = env_or("SPILLWAY_CHAOS_KILLS", 6) as usize;
    let seed = seed();
    let losses = env_or("SPILLWAY_CHAOS_INSTANCE_LOSSES", 2) as usize;
    println!("cloud-kill seed {seed}: {jobs} jobs, {kills} kills, {losses} instances lost");
    let mut rng = Rng(seed);
    // Restartable: a job whose instance vanishes is requeued, not failed.
    let (world, args, ec2) = cloud_world("cloudkill", jobs, &mut rng, true).await;
    let proxy = FaultProxy::start_seeded(&MotoServer::shared().await.endpoint, seed)
        .await
        .expect("proxy");
    let watch = CloudWatch::new(ec2, &world);
    let chaos = CloudChaos {
        operator: start_cloud(&world, &args, &proxy.endpoint),
        args,
        endpoint: proxy.endpoint.clone(),
        kills,
        killed: 0,
        losses,
        lost: 0,
        next_loss: Instant::now() + Duration::from_millis(3000 + rng.below(4000)),
        give_up: Instant::now() + Duration::from_secs(60),
        next: Instant::now() + Duration::from_millis(1000 + rng.below(4000)),
        rng,
        watch,
    };
    let (chaos, instances, usd) = run(world, chaos, &proxy, seed, jobs).await;
    println!(
        "cloud-kill seed {seed}: {jobs} jobs succeeded through {} kills and {} instances lost under running jobs; {instances} instances, none twice for a need; {usd:.4} USD recorded = lifetimes x price; peak {:.2} USD/h of {BUDGET}",
        chaos.killed, chaos.lost, chaos.watch.peak_hourly
    );
    assert!(
        losses == 0 || chaos.lost > 0,
        "seed {seed}: no instance was lost under a running job"
    );
}

/// Scenario 5, EC2 storms: for the whole run (`SPILLWAY_CHAOS_STORM_SECONDS`, default 60),
/// 30 % of all EC2 calls are throttled, 10 % are answered 10 s late, 30 % of launches act but
/// lose their response, and the cheapest two offerings (g6.xlarge, g5.8xlarge) have no capacity.
/// Every job is placed (Restricted ones privately), the budget holds, no need launches twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec2_storms_place_every_job_within_budget_without_a_second_launch() {
    let _turn = spillway_tests::operator::serial().await;
    let jobs = env_or("SPILLWAY_CHAOS_CLOUD_JOBS", 16) as usize;
    let storm = Duration::from_secs(env_or("SPILLWAY_CHAOS_STORM_SECONDS", 60));
    let seed = seed();
    println!(
        "storm seed {seed}: {jobs} jobs, {} s of storm",
        storm.as_secs()
    );
    let mut rng = Rng(seed);
    let (world, args, ec2) = cloud_world("storm", jobs, &mut rng, false).await;
    let proxy = FaultProxy::start_seeded(&MotoServer::shared().await.endpoint, seed)
        .await
        .expect("proxy");
    for cheap in ["g6.xlarge", "g5.8xlarge"] {
        proxy.storm(
            Some("RunInstances"),
            Some(&format!("InstanceType={cheap}")),
            100,
            Effect::Fail {
                status: 500,
                code: "InsufficientInstanceCapacity".into(),
            },
            storm,
        );
    }
    proxy.storm(
        None,
        None,
        30,
        Effect::Fail {
            status: 503,
            code: "RequestLimitExceeded".into(),
        },
        storm,
    );
    proxy.storm(Some("RunInstances"), None, 30, Effect::LoseResponse, storm);
    proxy.storm(
        None,
        None,
        10,
        Effect::Delay(Duration::from_secs(10)),
        storm,
    );
    let watch = CloudWatch::new(ec2, &world);
    let chaos = CloudChaos {
        operator: start_cloud(&world, &args, &proxy.endpoint),
        args,
        endpoint: proxy.endpoint.clone(),
        kills: 0,
        killed: 0,
        losses: 0,
        lost: 0,
        next_loss: Instant::now(),
        give_up: Instant::now(),
        next: Instant::now(),
        rng,
        watch,
    };
    let (chaos, instances, usd) = run(world, chaos, &proxy, seed, jobs).await;
    let all = proxy.counts("");
    let launches = proxy.counts("RunInstances");
    let cheap: usize = chaos
        .watch
        .seen
        .values()
        .filter(|s| matches!(s.instance_type.as_str(), "g6.xlarge" | "g5.8xlarge"))
        .count();
    println!(
        "storm seed {seed}: {jobs} jobs succeeded; {} EC2 calls: {} failed, {} delayed, {} responses lost, {} launches replayed by ClientToken; {} RunInstances; {instances} instances ({cheap} of the two cheapest), none twice for a need; {usd:.4} USD recorded = lifetimes x price; peak {:.2} USD/h of {BUDGET}",
        all.calls,
        all.failed,
        all.delayed,
        all.lost,
        all.replayed,
        launches.calls,
        chaos.watch.peak_hourly
    );
    assert!(all.failed > 0, "seed {seed}: the storm failed no call");
}
