//! Replays of quota reclaim: a queue within its private quota gets borrowed GPUs back, and
//! the preempted job's lost work shows in the figures.

use spillway_core::{Duration, NoPolicy, Queue, catalog};
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, Summary, replay, setup};

const CATALOG: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
    p4d.24xlarge,A100,8,96,1152,21.96,8.0,us-east-1,use1-az1\n";

/// One 8-GPU private node; queue "team" has a quota of 8 GPUs and does not burst; the default
/// queue has no quota and bursting off, so it only borrows.
fn replay_team(trace_csv: &str, options: Options) -> (Summary, spillway_sim::Outcome) {
    let jobs = trace::parse(trace_csv, TraceFormat::Spillway).expect("trace");
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus("1x8").expect("inventory");
    let mut base = setup::snapshot(None, &inventory, &rows).expect("world");
    base.queues[0].burst.enabled = false;
    let mut team = Queue::new("team");
    team.quota_gpus = Some(8);
    base.queues.push(team);
    let options = Options {
        spot_interruptions_per_hour: 0.0,
        ..options
    };
    replay(
        &base,
        &jobs,
        &Strategy::Spillway,
        &options,
        &NoPolicy,
        &mut |_, _| {},
    )
}

/// A restartable borrower of 1,000 s starts at 0; the team's 100 s job arrives at 100.
const TRACE: &str = "job_id,arrival_s,runtime_s,num_gpus,queue,restartable\n\
    borrower,0,1000,8,default,true\n\
    mine,100,100,8,team,true\n";

#[test]
fn the_quota_queue_gets_its_gpus_at_once_and_the_borrower_resumes() {
    let (s, out) = replay_team(TRACE, Options::default());
    assert_eq!((s.finished_jobs, s.preemptions), (2, 1));
    let mine = &out.jobs[1];
    assert_eq!((mine.start_s, mine.finish_s), (Some(100.0), Some(200.0)));
    // The borrower checkpoints continuously (no interval given): it loses nothing and ends
    // 100 s later than it would have.
    let borrower = &out.jobs[0];
    assert_eq!(borrower.finish_s, Some(1100.0));
    assert_eq!(borrower.interruptions, 1);
    assert_eq!(s.preempted_gpu_hours_lost, 0.0);
}

#[test]
fn work_since_the_last_checkpoint_is_lost() {
    let options = Options {
        checkpoint_interval: Some(Duration::from_secs(60)),
        ..Options::default()
    };
    let (s, out) = replay_team(TRACE, options);
    // Preempted at 100 s with its last checkpoint at 60 s: 40 s of 8 GPUs are lost and done
    // again after the team's job.
    assert_eq!(out.jobs[0].finish_s, Some(1140.0));
    assert_eq!(
        s.preempted_gpu_hours_lost,
        (40.0 * 8.0 / 3600.0_f64 * 100.0).round() / 100.0
    );
}

#[test]
fn jobs_that_cannot_restart_keep_their_gpus_unless_their_queue_allows_it() {
    let trace = TRACE.replace(
        "borrower,0,1000,8,default,true",
        "borrower,0,1000,8,default,false",
    );
    let (s, out) = replay_team(&trace, Options::default());
    assert_eq!(s.preemptions, 0);
    // The team's job waits for the borrower to finish.
    assert_eq!(out.jobs[1].start_s, Some(1000.0));
}

#[test]
fn restartable_fraction_marks_jobs_by_seed() {
    let mut jobs = trace::parse(TRACE, TraceFormat::Spillway).unwrap();
    trace::mark_restartable(&mut jobs, 0.0, 1);
    assert!(jobs.iter().all(|j| !j.restartable));
    trace::mark_restartable(&mut jobs, 1.0, 1);
    assert!(jobs.iter().all(|j| j.restartable));
    let mut many: Vec<_> = (0..1000).map(|_| jobs[0].clone()).collect();
    trace::mark_restartable(&mut many, 0.3, 9);
    let n = many.iter().filter(|j| j.restartable).count();
    assert!((250..350).contains(&n), "{n} of 1000 marked at 0.3");
    let mut again = many.clone();
    trace::mark_restartable(&mut again, 0.3, 9);
    assert_eq!(
        many.iter().map(|j| j.restartable).collect::<Vec<_>>(),
        again.iter().map(|j| j.restartable).collect::<Vec<_>>()
    );
}

/// What a BurstPolicy rule `repatriate: never` says, as the core sees it.
struct StayInTheCloud;

impl spillway_core::Policy for StayInTheCloud {
    fn effects(&self, _: &spillway_core::PolicyContext<'_>) -> spillway_core::Effects {
        spillway_core::Effects {
            repatriate: Some(spillway_core::policy::Ruled {
                value: spillway_core::Repatriate::Never,
                rule: "p/stay".into(),
            }),
            ..Default::default()
        }
    }
}

/// A 4-hour restartable job bursts while a 1-hour job holds the one private node (its queue
/// waits a fixed 15 minutes), and comes home when that job ends.
#[test]
fn a_burst_job_comes_home_when_the_private_node_frees_up_and_costs_less() {
    let trace = "job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s,restartable\n\
        blocker,0,3600,8,3600,false\n\
        train,1,14400,8,14400,true\n";
    let jobs = trace::parse(trace, TraceFormat::Spillway).expect("trace");
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus("1x8").expect("inventory");
    let mut base = setup::snapshot(None, &inventory, &rows).expect("world");
    base.queues[0].burst.wait_mode = spillway_core::WaitMode::Fixed;
    let options = Options {
        spot_interruptions_per_hour: 0.0,
        ..Options::default()
    };
    let go = |policy: &dyn spillway_core::Policy| {
        replay(
            &base,
            &jobs,
            &Strategy::Spillway,
            &options,
            policy,
            &mut |_, _| {},
        )
    };
    let (home, out) = go(&NoPolicy);
    let (stay, stayed) = go(&StayInTheCloud);
    assert_eq!((home.repatriations, stay.repatriations), (1, 0));
    assert_eq!(out.jobs[1].moves, 1);
    assert!(out.jobs[1].cloud, "it still counts as a burst job");
    // It left the cloud when the blocker ended, and pays the restart overhead (5 min) in
    // completion time.
    let stayed_finish = stayed.jobs[1].finish_s.unwrap();
    let home_finish = out.jobs[1].finish_s.unwrap();
    assert_eq!(home_finish, stayed_finish + 300.0);
    assert!(
        home.cloud_cost_usd < stay.cloud_cost_usd / 2.0,
        "home {} vs stay {}",
        home.cloud_cost_usd,
        stay.cloud_cost_usd
    );
}
