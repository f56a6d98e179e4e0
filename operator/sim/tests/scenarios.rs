//! Simulation tests: a scenario in, figures out, checked against bounds.

use spillway_core::{
    CapacityType, Duration, Effects, NoPolicy, Offering, Policy, PolicyContext, catalog,
};
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, Summary, compare, setup};

const CATALOG: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
    g6.xlarge,L4,1,4,16,0.80,0.36,us-east-1,use1-az1\n\
    p4d.24xlarge,A100,8,96,1152,21.96,8.0,us-east-1,use1-az1\n";

fn run(trace_csv: &str, private: &str, strategies: &[Strategy], options: Options) -> Vec<Summary> {
    run_with(trace_csv, private, strategies, options, &NoPolicy)
}

fn run_with(
    trace_csv: &str,
    private: &str,
    strategies: &[Strategy],
    options: Options,
    policy: &dyn Policy,
) -> Vec<Summary> {
    let jobs = trace::parse(trace_csv, TraceFormat::Spillway).expect("trace");
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus(private).expect("inventory");
    let base = setup::snapshot(None, &inventory, &rows).expect("world");
    compare(&base, &jobs, strategies, &options, policy)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

fn no_failures(boot_s: u64) -> Options {
    Options {
        boot_delay: Duration::from_secs(boot_s),
        seed: 7,
        capacity_error_rate: 0.0,
        spot_interruptions_per_hour: 0.0,
        ..Options::default()
    }
}

/// Eight one-GPU jobs of an hour arriving together on a 4-GPU private cluster.
const CROWD: &str = "job_id,arrival_s,runtime_s,num_gpus\n\
    a,0,3600,1\nb,0,3600,1\nc,0,3600,1\nd,0,3600,1\ne,0,3600,1\nf,0,3600,1\ng,0,3600,1\nh,0,3600,1\n";

#[test]
fn never_burst_keeps_everything_private_and_queues() {
    let s = &run(CROWD, "1x4", &[Strategy::NeverBurst], no_failures(180))[0];
    assert_eq!((s.jobs, s.finished_jobs, s.burst_jobs), (8, 8, 0));
    assert_eq!(s.cloud_cost_usd, 0.0);
    // Half the jobs wait an hour for the first half to finish.
    assert_eq!(s.p95_wait_s, 3600.0);
    assert_eq!(s.avg_wait_s, 1800.0);
    assert_eq!(s.avg_jct_s, 5400.0);
}

#[test]
fn no_wait_bursts_the_overflow_at_once_and_pays_boot_and_idle_time() {
    let s = &run(CROWD, "1x4", &[Strategy::NoWait], no_failures(180))[0];
    assert_eq!(s.burst_jobs, 4);
    assert_eq!(s.p95_wait_s, 180.0, "burst jobs wait for the boot delay");
    // 4 instances x (180 s boot + 3600 s work + 600 s idle timeout) at $0.80/h.
    let expected = 4.0 * 0.80 * (180.0 + 3600.0 + 600.0) / 3600.0;
    assert!(
        (s.cloud_cost_usd - expected).abs() < 0.02,
        "{} vs {expected}",
        s.cloud_cost_usd
    );
    assert!((s.cloud_gpu_hours - 4.0 * 4380.0 / 3600.0).abs() < 0.02);
}

#[test]
fn constant_wait_bursts_after_the_wait_and_zero_boot_delay_is_allowed() {
    let s = &run(
        CROWD,
        "1x4",
        &[Strategy::ConstantWait(Duration::from_secs(600))],
        no_failures(0),
    )[0];
    assert_eq!(s.burst_jobs, 4);
    assert_eq!(s.p95_wait_s, 600.0);
}

#[test]
fn spillway_backfills_short_jobs_around_a_blocked_gang() {
    // A 4-GPU job holds one node for two hours; a 2 x 8 gang must wait for it; short 2-GPU
    // jobs with estimates run in the gap instead of waiting behind the gang.
    let trace = "job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s,replicas\n\
        long,0,7200,4,7200,1\nbig,10,3600,8,3600,2\ns1,20,600,2,600,1\ns2,20,600,2,600,1\n";
    let r = run(
        trace,
        "2x8",
        &[Strategy::Spillway, Strategy::NeverBurst],
        no_failures(180),
    );
    let (spillway, fifo) = (&r[0], &r[1]);
    assert_eq!((spillway.finished_jobs, fifo.finished_jobs), (4, 4));
    // In strict order s1 and s2 wait for the gang, which waits for `long`: 3 h each.
    assert!(fifo.p95_wait_s >= 10_780.0, "{}", fifo.p95_wait_s);
    assert!(
        spillway.avg_wait_s < fifo.avg_wait_s / 2.0,
        "backfilling waits less: {} vs {}",
        spillway.avg_wait_s,
        fifo.avg_wait_s
    );
}

#[test]
fn capacity_errors_fall_back_and_never_loop_forever() {
    let mut o = no_failures(60);
    o.capacity_error_rate = 1.0;
    let s = &run(CROWD, "0x8", &[Strategy::NoWait], o)[0];
    assert_eq!(s.instances_launched, 0);
    assert!(
        s.capacity_errors >= 2,
        "both offerings were tried: {}",
        s.capacity_errors
    );
    assert_eq!(
        s.unfinished_jobs, 8,
        "with every launch failing and no private GPUs nothing runs"
    );

    let mut o = no_failures(60);
    o.capacity_error_rate = 0.3;
    let s = &run(CROWD, "1x4", &[Strategy::NoWait], o)[0];
    assert_eq!(s.finished_jobs, 8, "errors delay jobs but lose none");
}

#[test]
fn spot_interruptions_requeue_restartable_jobs_without_losing_them() {
    let trace = "job_id,arrival_s,runtime_s,num_gpus,restartable\n\
        a,0,36000,1,true\nb,0,36000,1,true\nc,0,36000,1,true\n";
    let mut o = no_failures(60);
    o.spot_interruptions_per_hour = 0.5;
    let s = &run(trace, "0x8", &[Strategy::NoWait], o)[0];
    assert_eq!(s.finished_jobs, 3);
    assert!(s.spot_interruptions > 0);
    assert!(s.instances_launched > 3, "interrupted work was relaunched");
}

#[test]
fn acting_on_interruption_warnings_loses_no_checkpointed_work_and_recovers_sooner() {
    let trace = "job_id,arrival_s,runtime_s,num_gpus,restartable\n\
        a,0,36000,1,true\nb,0,36000,1,true\nc,0,36000,1,true\n";
    let mut o = no_failures(60);
    o.spot_interruptions_per_hour = 0.5;
    o.checkpoint_interval = Some(Duration::from_secs(1800));
    let reactive = run(trace, "0x8", &[Strategy::NoWait], o.clone()).remove(0);
    o.interruption_warning = Duration::from_secs(120);
    let warned = run(trace, "0x8", &[Strategy::NoWait], o).remove(0);
    for s in [&reactive, &warned] {
        assert_eq!(s.finished_jobs, 3);
        assert!(s.spot_interruptions > 0);
    }
    assert_eq!(reactive.interruption_warnings, 0);
    assert!(reactive.interrupted_gpu_hours_lost > 0.0, "{reactive:?}");
    assert_eq!(warned.interruption_warnings, warned.spot_interruptions);
    assert_eq!(warned.interrupted_gpu_hours_lost, 0.0, "{warned:?}");
    assert!(warned.avg_recovery_s > 0.0 && reactive.avg_recovery_s > 0.0);
}

/// What `offeringFilter: offering.capacityType == 'on-demand' || offering.recentInterruptions < 1`
/// says, as the core sees it.
struct AvoidReclaimedSpot;

impl Policy for AvoidReclaimedSpot {
    fn effects(&self, _: &PolicyContext<'_>) -> Effects {
        Effects::default()
    }
    fn offering_allowed(&self, _: &PolicyContext<'_>, o: &Offering) -> Result<(), String> {
        if o.capacity_type == CapacityType::Spot && o.recent_interruptions >= 1 {
            Err("avoid-reclaimed-spot".into())
        } else {
            Ok(())
        }
    }
    fn filters_offerings(&self) -> bool {
        true
    }
}

#[test]
fn reclaimed_spot_offerings_are_remembered_and_can_be_avoided() {
    let trace = "job_id,arrival_s,runtime_s,num_gpus,restartable\n\
        a,0,36000,1,true\nb,0,36000,1,true\nc,0,36000,1,true\n";
    let mut o = no_failures(60);
    o.spot_interruptions_per_hour = 2.0;
    let plain = &run(trace, "0x8", &[Strategy::NoWait], o.clone())[0];
    let avoiding = &run_with(trace, "0x8", &[Strategy::NoWait], o, &AvoidReclaimedSpot)[0];
    assert_eq!(plain.finished_jobs, 3);
    assert_eq!(avoiding.finished_jobs, 3);
    assert!(
        plain.spot_interruptions > 6,
        "spot keeps being used and reclaimed: {}",
        plain.spot_interruptions
    );
    assert!(
        avoiding.spot_interruptions <= 3,
        "after its first reclaim the spot offering is skipped for a day: {}",
        avoiding.spot_interruptions
    );
}

#[test]
fn every_strategy_finishes_the_bundled_example() {
    let jobs = trace::parse(spillway_sim::example::TRACE, TraceFormat::Openb).unwrap();
    let rows = catalog::parse(spillway_sim::example::CATALOG).unwrap();
    let m = spillway_api::manifests::Manifests::parse_str(
        std::path::Path::new(spillway_sim::example::CONFIG_NAME),
        spillway_sim::example::CONFIG,
    )
    .unwrap();
    let inventory = trace::parse_private_gpus(spillway_sim::example::PRIVATE_GPUS).unwrap();
    let base = setup::snapshot(Some(&m), &inventory, &rows).unwrap();
    let all = [
        Strategy::Spillway,
        Strategy::starburst(),
        Strategy::NoWait,
        Strategy::NeverBurst,
    ];
    let r: Vec<Summary> = compare(&base, &jobs, &all, &Options::default(), &NoPolicy)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    for s in &r {
        assert_eq!(
            s.finished_jobs + s.rejected_jobs,
            s.jobs,
            "{}: every job accounted for",
            s.strategy
        );
        // The limit holds for every schedule, so for every strategy's too.
        assert!(
            s.cloud_gpu_hours + 0.01 >= s.cloud_gpu_hours_lower_bound,
            "{}: {} cloud GPU-hours, below the limit {}",
            s.strategy,
            s.cloud_gpu_hours,
            s.cloud_gpu_hours_lower_bound
        );
    }
    // Finishing every job as soon as no-wait does overflows the private GPUs: its limit is
    // above zero; never bursting finishes late enough to need no cloud at all.
    assert!(r[2].cloud_gpu_hours_lower_bound > 0.0, "{:?}", r[2]);
    assert_eq!(r[3].cloud_gpu_hours_lower_bound, 0.0);
    assert_eq!(r[3].burst_jobs, 0);
    assert!(r[2].avg_wait_s <= r[0].avg_wait_s, "no-wait waits least");
}
