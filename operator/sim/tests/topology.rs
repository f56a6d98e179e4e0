//! `--private-topology`: gangs bound to one rack wait for a rack with room for all of them,
//! where placement that ignores racks splits them.

use spillway_core::{Duration, NoPolicy, catalog};
use spillway_sim::topology::{self, Racks};
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, compare, setup};

const CATALOG: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
    p4d.24xlarge,A100,8,96,1152,21.96,8.0,us-east-1,use1-az1\n";

/// Two racks of two 8-GPU nodes. Three whole-node jobs take three nodes at 0; the short one
/// ends at 50 s, leaving one free node in each rack; a 2 x 8 gang arrives at 100 s. Ignoring
/// racks it starts at once across both; bound to one rack it waits until 1000 s.
const TRACE: &str = "job_id,arrival_s,runtime_s,num_gpus,replicas\n\
    a,0,50,8,1\nb,0,1000,8,1\nc,0,1000,8,1\ngang,100,300,8,2\n";

#[test]
fn a_gang_bound_to_a_rack_waits_where_ignoring_racks_splits_it() {
    let jobs = trace::parse(TRACE, TraceFormat::Spillway).expect("trace");
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus("4x8").expect("inventory");
    let mut base = setup::snapshot(None, &inventory, &rows).expect("world");
    let racks: Racks = "2x2".parse().expect("racks");
    topology::apply(&mut base, racks).expect("racks fit");
    let options = Options {
        boot_delay: Duration::from_secs(180),
        spot_interruptions_per_hour: 0.0,
        racks: Some(racks),
        ..Options::default()
    };
    let (s, _) = compare(&base, &jobs, &[Strategy::NeverBurst], &options, &NoPolicy)
        .into_iter()
        .next()
        .expect("one replay");
    let t = s.topology.expect("topology figures");
    assert_eq!(t.racks, "2x2");
    assert_eq!((t.gangs, t.gangs_waited_for_rack), (1, 1), "{t:?}");
    assert_eq!(
        t.gang_avg_wait_s, 900.0,
        "until b and c end at 1000 s: {t:?}"
    );
    assert_eq!(t.ignoring_gang_avg_wait_s, 0.0, "{t:?}");
    assert_eq!(t.ignoring_split_gangs, 1, "{t:?}");
    assert_eq!(s.finished_jobs, 4);
}

#[test]
fn racks_must_hold_every_private_node() {
    let rows = catalog::parse(CATALOG).expect("catalog");
    let inventory = trace::parse_private_gpus("5x8").expect("inventory");
    let mut base = setup::snapshot(None, &inventory, &rows).expect("world");
    let e = topology::apply(&mut base, "2x2".parse().expect("racks")).expect_err("5 nodes");
    assert!(
        e.contains("puts 4 nodes in racks; the private inventory has 5"),
        "{e}"
    );
}
