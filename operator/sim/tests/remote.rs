//! Replays with other clusters (`cluster` pools): private first, then the clusters in order,
//! then the cloud, with each pool's spend.

use spillway_core::{Duration, NoPolicy, catalog};
use spillway_sim::setup::{self, RemoteCluster};
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, Summary, compare};

const CATALOG: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
    g6.xlarge,L4,1,4,16,0.80,,us-east-1,use1-az1\n";

/// Eight one-GPU jobs of an hour arriving together.
const CROWD: &str = "job_id,arrival_s,runtime_s,num_gpus\n\
    a,0,3600,1\nb,0,3600,1\nc,0,3600,1\nd,0,3600,1\ne,0,3600,1\nf,0,3600,1\ng,0,3600,1\nh,0,3600,1\n";

fn run(private: &str, remotes: &[&str], strategy: Strategy) -> Summary {
    let jobs = trace::parse(CROWD, TraceFormat::Spillway).expect("trace");
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus(private).expect("inventory");
    let mut base = setup::snapshot(None, &inventory, &rows).expect("world");
    let remotes: Vec<RemoteCluster> = remotes.iter().map(|r| r.parse().unwrap()).collect();
    setup::add_remote_clusters(&mut base, &remotes).expect("remotes");
    let options = Options {
        boot_delay: Duration::from_secs(180),
        seed: 7,
        capacity_error_rate: 0.0,
        spot_interruptions_per_hour: 0.0,
        ..Options::default()
    };
    compare(&base, &jobs, &[strategy], &options, &NoPolicy)
        .into_iter()
        .map(|(s, _)| s)
        .next()
        .unwrap()
}

fn pool<'s>(s: &'s Summary, name: &str) -> Option<&'s spillway_sim::report::PoolSpendSummary> {
    s.spend_by_pool.iter().find(|p| p.pool == name)
}

#[test]
fn the_overflow_goes_to_the_clusters_in_order_before_the_cloud() {
    // 4 private GPUs, then "dc2" (2 GPUs at $0.50) before "partner" (4 at $0.10), then EC2.
    let s = run(
        "1x4",
        &["dc2=1x2@0.50", "partner=1x4@0.10"],
        Strategy::NoWait,
    );
    assert_eq!((s.finished_jobs, s.remote_jobs, s.burst_jobs), (8, 4, 0));
    let dc2 = pool(&s, "dc2").expect("dc2 used");
    let partner = pool(&s, "partner").expect("partner used");
    assert_eq!(
        (dc2.environment, dc2.gpu_hours, dc2.cost_usd),
        ("remote", 2.0, 1.0)
    );
    assert_eq!((partner.gpu_hours, partner.cost_usd), (2.0, 0.2));
    assert_eq!((s.remote_gpu_hours, s.remote_cost_usd), (4.0, 1.2));
    assert_eq!(s.cloud_cost_usd, 0.0);
    // Nobody waited: the clusters' GPUs are there at once (no boot).
    assert_eq!(s.p95_wait_s, 0.0);
}

#[test]
fn what_the_clusters_cannot_hold_bursts_and_each_pool_reports_its_spend() {
    let s = run("1x4", &["dc2=1x2@0.50"], Strategy::NoWait);
    assert_eq!((s.remote_jobs, s.burst_jobs), (2, 2));
    assert_eq!(pool(&s, "dc2").unwrap().cost_usd, 1.0);
    let cloud = s
        .spend_by_pool
        .iter()
        .find(|p| p.environment == "cloud")
        .expect("a cloud pool launched");
    assert_eq!(cloud.cost_usd, s.cloud_cost_usd);
    assert!(s.cloud_cost_usd > 0.0);
}

#[test]
fn private_capacity_comes_first_and_never_burst_never_leaves_home() {
    let s = run("1x8", &["dc2=1x8@0"], Strategy::NoWait);
    assert_eq!((s.remote_jobs, s.burst_jobs), (0, 0));
    assert!(s.spend_by_pool.is_empty());
    let s = run("1x4", &["dc2=1x8@0"], Strategy::NeverBurst);
    assert_eq!(s.remote_jobs, 0);
    assert_eq!(s.avg_wait_s, 1800.0);
}

#[test]
fn bad_remote_cluster_flags_say_what_is_wrong() {
    let err = |spec: &str| spec.parse::<RemoteCluster>().unwrap_err();
    assert!(err("dc2").contains("NAME=NODESxGPUS"), "{}", err("dc2"));
    assert!(err("dc2=4x8@cheap").contains("not a price"));
    assert!(err("dc2=4x8@-1").contains(">= 0"));
    assert!(err("DC_2=4x8").contains("pool name"));
    assert!(err("dc2=4").contains("NODESxGPUS"));
    let ok: RemoteCluster = "dc2=4x8:A100@1.2".parse().unwrap();
    assert_eq!(
        (ok.shape.nodes, ok.shape.gpus, ok.gpu_cost_per_hour),
        (4, 8, Some(1.2))
    );
    let rows = catalog::parse(CATALOG).unwrap();
    let mut base = setup::snapshot(None, &[], &rows).unwrap();
    let twice: Vec<RemoteCluster> = vec!["a=1x8".parse().unwrap(), "a=1x8".parse().unwrap()];
    let e = setup::add_remote_clusters(&mut base, &twice).unwrap_err();
    assert!(e.contains("given twice"), "{e}");
    let cloud: Vec<RemoteCluster> = vec!["cloud=1x8".parse().unwrap()];
    let e = setup::add_remote_clusters(&mut base, &cloud).unwrap_err();
    assert!(e.contains("not a cluster pool"), "{e}");
}
