//! Tests of the profile: how it is built and searched.

use super::*;

fn node(name: &str, gpus: u32) -> Node {
    Node {
        facts: Default::default(),
        name: name.into(),
        pool: "p".into(),
        gpu_model: None,
        gpus,
        free_gpus: gpus,
        schedulable: true,
        releasing_gpus: 0,
        instance_id: None,
        idle_since: None,
        domains: Vec::new(),
    }
}

fn job(gpus: u32, replicas: u32) -> Job {
    let mut j = Job::new("j", "q", gpus, Time::from_millis(0));
    j.replicas = replicas;
    j
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

#[test]
fn plans_in_order_without_delaying_earlier_plans() {
    // Two 8-GPU nodes: n0 has 4 free until t=100 s, n1 is full until t=50 s.
    let nodes = [node("n0", 8), node("n1", 8)];
    let releases = [
        (Time::from_millis(100_000), 0, 4),
        (Time::from_millis(50_000), 1, 8),
    ];
    let mut p = Profile::new_in(
        None,
        Time::from_millis(0),
        &nodes,
        &[true, true],
        |i| [4, 0][i],
        &releases,
        Packing::BestFit,
    );
    // An 8-GPU job fits first on n1 at 50 s.
    let big = job(8, 1);
    let slot = p.earliest(&big, secs(200), |_| true).unwrap();
    assert_eq!((slot.at.as_millis(), slot.nodes.clone()), (50_000, vec![1]));
    p.take(&big, &slot, secs(200));
    // A 4-GPU job for 30 s fits now on n0.
    let small = job(4, 1);
    let slot = p.earliest(&small, secs(30), |_| true).unwrap();
    assert_eq!((slot.at.as_millis(), slot.nodes.clone()), (0, vec![0]));
    p.take(&small, &slot, secs(30));
    // Another 8-GPU job: n1 is taken until 250 s, n0 is whole from 100 s.
    let slot = p.earliest(&big, secs(10), |_| true).unwrap();
    assert_eq!(
        (slot.at.as_millis(), slot.nodes.clone()),
        (100_000, vec![0])
    );
    // A 2 x 8 gang must wait for both: 250 s.
    let gang = job(8, 2);
    let slot = p.earliest(&gang, secs(10), |_| true).unwrap();
    assert_eq!(slot.at.as_millis(), 250_000);
    assert_eq!(slot.nodes.len(), 2);
    // A job that never ends fits only where nothing is reserved later: n0 keeps 4 GPUs
    // free from 30 s on.
    let forever = p.earliest(&job(4, 1), None, |_| true).unwrap();
    assert_eq!(
        (forever.at.as_millis(), forever.nodes.clone()),
        (30_000, vec![0])
    );
    assert_eq!(
        p.earliest(&job(8, 1), None, |_| true)
            .unwrap()
            .at
            .as_millis(),
        100_000
    );
}

#[test]
fn a_job_longer_than_a_gap_waits_for_a_gap_long_enough() {
    let nodes = [node("n0", 8)];
    let mut p = Profile::new_in(
        None,
        Time::from_millis(0),
        &nodes,
        &[true],
        |_| 8,
        &[],
        Packing::BestFit,
    );
    // Reserved from 60 s for 100 s.
    let blocker = job(8, 1);
    let slot = Slot {
        at: Time::from_millis(60_000),
        nodes: vec![0],
    };
    p.take(&blocker, &slot, secs(100));
    let short = job(8, 1);
    assert_eq!(
        p.earliest(&short, secs(60), |_| true)
            .unwrap()
            .at
            .as_millis(),
        0
    );
    assert_eq!(
        p.earliest(&short, secs(61), |_| true)
            .unwrap()
            .at
            .as_millis(),
        160_000
    );
    assert!(p.earliest(&job(16, 1), secs(1), |_| true).is_none());
    assert!(p.earliest(&short, secs(1), |_| false).is_none());
}

#[test]
fn overdue_work_is_expected_a_second_from_now() {
    let nodes = [node("n0", 8)];
    let releases = [(Time::from_millis(-5_000), 0, 8)];
    let mut p = Profile::new_in(
        None,
        Time::from_millis(0),
        &nodes,
        &[true],
        |_| 0,
        &releases,
        Packing::BestFit,
    );
    let slot = p.earliest(&job(8, 1), secs(10), |_| true).unwrap();
    assert_eq!(slot.at.as_millis(), 1_000);
}

/// The search as first written: every step of every eligible node tried in time order,
/// each node's step found by binary search. Returns the slot and the work it counted.
fn every_step(
    p: &Profile,
    job: &Job,
    runtime: Option<Duration>,
    accepts: impl Fn(usize) -> bool,
) -> (Option<(i64, Vec<usize>)>, u64) {
    let g = job.gpus_per_replica;
    let mut work = p.work + p.nodes.len() as u64;
    let eligible: Vec<usize> = (0..p.nodes.len())
        .filter(|&i| p.nodes[i].is_some() && p.capacity[i] >= g && accepts(i))
        .collect();
    let mut times: Vec<i64> = eligible
        .iter()
        .filter_map(|&i| p.nodes[i].as_ref())
        .flat_map(|s| s.0.iter().map(|&(t, _)| t))
        .collect();
    times.sort_unstable();
    times.dedup();
    let len = runtime.map(|d| d.as_millis() as i64);
    for t in times {
        if work >= WORK_BUDGET {
            return (None, work);
        }
        let to = len.map(|l| t + l.max(1));
        let mut rooms = Vec::new();
        let mut slots = 0;
        for &i in &eligible {
            work += 1;
            let room = p.nodes[i].as_ref().unwrap().min_free(t, to);
            if room >= g {
                slots += room / g;
                rooms.push((room, i));
            }
        }
        if slots >= job.replicas {
            match p.packing {
                Packing::BestFit => rooms.sort_unstable(),
                Packing::FirstFit => rooms.sort_unstable_by_key(|&(_, i)| i),
            }
            let mut nodes = Vec::new();
            for (room, i) in rooms {
                let k = (room / g).min(job.replicas - nodes.len() as u32);
                nodes.extend(std::iter::repeat_n(i, k as usize));
                if nodes.len() as u32 == job.replicas {
                    break;
                }
            }
            return (Some((t, nodes)), work);
        }
    }
    (None, work)
}

/// The profile as first built: one release at a time, each raising the node's free GPUs
/// from its moment on, capped at the node's capacity.
fn release_by_release(
    now: i64,
    caps: &[u32],
    free: &[u32],
    releases: &[(Time, usize, u32)],
) -> Vec<Vec<(i64, u32)>> {
    let mut nodes: Vec<Steps> = free.iter().map(|&f| Steps(vec![(now, f)])).collect();
    for &(t, n, gpus) in releases {
        let steps = &mut nodes[n];
        let first = steps.split(t.as_millis().max(now + 1000));
        for step in &mut steps.0[first..] {
            step.1 = (step.1 + gpus).min(caps[n]);
        }
    }
    nodes.into_iter().map(|s| s.0).collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Built at once from the releases grouped by node, the profile is the one built a
    /// release at a time (same times, one step per distinct moment, same free GPUs), also
    /// when built in the buffers of another profile.
    #[test]
    fn the_profile_built_at_once_is_the_one_built_release_by_release(
        caps in proptest::collection::vec((0u32..=8, 0u32..=8), 1..6),
        releases in proptest::collection::vec((0usize..6, -3i64..20, 0u32..=8), 0..24),
        now in -2i64..3,
        spare_from in 0usize..6,
        spare_private in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
    ) {
        let nodes: Vec<Node> = caps.iter().enumerate().map(|(i, &(c, _))| node(&format!("n{i}"), c)).collect();
        let cap: Vec<u32> = caps.iter().map(|&(c, _)| c).collect();
        let free: Vec<u32> = caps.iter().map(|&(_, f)| f).collect();
        // Moments a whole number of seconds apart, some overdue, some equal.
        let releases: Vec<(Time, usize, u32)> = releases
            .iter()
            .map(|&(n, t, g)| (Time::from_millis(t * 1000), n % nodes.len(), g))
            .collect();
        let private = vec![true; nodes.len()];
        let now = Time::from_millis(now * 1000);
        let p = Profile::new_in(None, now, &nodes, &private, |i| free[i], &releases, Packing::BestFit);
        let got: Vec<Vec<(i64, u32)>> = p.nodes.iter().map(|s| s.as_ref().unwrap().0.clone()).collect();
        proptest::prop_assert_eq!(&got, &release_by_release(now.as_millis(), &cap, &free, &releases));
        // Built again in the buffers of a profile of other nodes (some not private, so
        // with fewer or more step lists), the profile is the same.
        let others = &nodes[spare_from % nodes.len()..];
        let spare = Profile::new_in(None, now, others, &spare_private[..others.len()], |i| free[i], &[], Packing::BestFit);
        let q = Profile::new_in(Some(spare), now, &nodes, &private, |i| free[i], &releases, Packing::BestFit);
        let again: Vec<Vec<(i64, u32)>> = q.nodes.iter().map(|s| s.as_ref().unwrap().0.clone()).collect();
        proptest::prop_assert_eq!(again, got);
        proptest::prop_assert_eq!(&q.capacity, &cap);
    }

    /// Passing over the moments where no node's free GPUs rise finds the same slots, and
    /// counts the same work against the budget, as trying every step.
    #[test]
    fn the_search_finds_what_trying_every_step_finds(
        caps in proptest::collection::vec((1u32..=8, 0u32..=8), 1..5),
        releases in proptest::collection::vec((0usize..5, 1u64..400, 1u32..=8), 0..8),
        plans in proptest::collection::vec((1u32..=8, 1u32..=3, proptest::option::of(1u64..300)), 1..12),
        near_budget in proptest::prelude::any::<bool>(),
        short in 0u64..600,
        first_fit in proptest::prelude::any::<bool>(),
        refused in proptest::collection::vec(proptest::prelude::any::<bool>(), 5),
    ) {
        let nodes: Vec<Node> = caps.iter().enumerate().map(|(i, &(c, _))| node(&format!("n{i}"), c)).collect();
        let free: Vec<u32> = caps.iter().map(|&(c, f)| f.min(c)).collect();
        let releases: Vec<(Time, usize, u32)> = releases
            .iter()
            .map(|&(n, t, g)| (Time::from_millis(t as i64 * 1000), n % nodes.len(), g))
            .collect();
        let private = vec![true; nodes.len()];
        let packing = if first_fit { Packing::FirstFit } else { Packing::BestFit };
        let mut p = Profile::new_in(None, Time::from_millis(0), &nodes, &private, |i| free[i], &releases, packing);
        // Some nodes do not take some jobs (their GPU model): the odd-sized gangs here.
        let refused = &refused;
        let accepts = |g: u32| move |i: usize| g.is_multiple_of(2) || !refused[i];
        // Some histories start near the end of the cycle's budget.
        if near_budget {
            p.work = WORK_BUDGET - short;
        }
        for &(g, replicas, runtime) in &plans {
            let j = job(g, replicas);
            let runtime = runtime.map(Duration::from_secs);
            let (want, work) = every_step(&p, &j, runtime, accepts(g));
            let got = p.earliest(&j, runtime, accepts(g));
            proptest::prop_assert_eq!(got.as_ref().map(|s| (s.at.as_millis(), s.nodes.clone())), want);
            proptest::prop_assert_eq!(p.work, work);
            if let Some(slot) = got {
                p.take(&j, &slot, runtime);
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Gangs of one replica that every private node takes (searched node by node, with the
    /// moments counted from the step times) get the slots, and count the work, that trying
    /// every step gives; also between holds, and when only a start now is asked for.
    #[test]
    fn one_replica_searched_node_by_node_finds_what_trying_every_step_finds(
        caps in proptest::collection::vec((4u32..=8, 0u32..=8), 1..6),
        private in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
        releases in proptest::collection::vec((0usize..6, 1u64..400, 1u32..=8), 0..16),
        plans in proptest::collection::vec((1u32..=4, proptest::option::of(1u64..300), 0u8..8), 1..24),
        near_budget in proptest::prelude::any::<bool>(),
        short in 0u64..300,
        first_fit in proptest::prelude::any::<bool>(),
    ) {
        let nodes: Vec<Node> = caps.iter().enumerate().map(|(i, &(c, _))| node(&format!("n{i}"), c)).collect();
        let free: Vec<u32> = caps.iter().map(|&(c, f)| f.min(c)).collect();
        let mut private = private[..nodes.len()].to_vec();
        private[0] = true;
        let releases: Vec<(Time, usize, u32)> = releases
            .iter()
            .map(|&(n, t, g)| (Time::from_millis(t as i64 * 1000), n % nodes.len(), g))
            .collect();
        let packing = if first_fit { Packing::FirstFit } else { Packing::BestFit };
        let mut p = Profile::new_in(None, Time::from_millis(0), &nodes, &private, |i| free[i], &releases, packing);
        if near_budget {
            p.work = WORK_BUDGET - short * nodes.len() as u64;
        }
        for &(g, runtime, what) in &plans {
            let j = job(g, 1);
            let runtime = runtime.map(Duration::from_secs);
            match what {
                // Now only: the one moment now, tried whatever the budget.
                0 => {
                    // Tried whatever the budget: the reference is asked with none spent.
                    let mut unspent = p.clone();
                    unspent.work = 0;
                    let (want, _) = every_step(&unspent, &j, runtime, |_| true);
                    let want = want.filter(|(t, _)| *t == 0);
                    let work = p.work + 2 * nodes.len() as u64;
                    let work = work - (nodes.len() - private.iter().filter(|&&x| x).count()) as u64;
                    let got = p.now_slot(&j, runtime, |_| true);
                    proptest::prop_assert_eq!(got.as_ref().map(|s| (s.at.as_millis(), s.nodes.clone())), want);
                    proptest::prop_assert_eq!(p.work, work);
                    if let Some(slot) = got {
                        p.take(&j, &slot, runtime);
                    }
                }
                // A hold from now on the first node with the GPUs free now.
                1 => {
                    if let Some(i) = (0..nodes.len()).find(|&i| p.nodes[i].as_ref().is_some_and(|s| s.0[0].1 >= g)) {
                        p.hold(i, g);
                    }
                }
                _ => {
                    let (want, work) = every_step(&p, &j, runtime, |_| true);
                    let got = p.earliest(&j, runtime, |_| true);
                    proptest::prop_assert_eq!(got.as_ref().map(|s| (s.at.as_millis(), s.nodes.clone())), want);
                    proptest::prop_assert_eq!(p.work, work);
                    if let Some(slot) = got {
                        p.take(&j, &slot, runtime);
                    }
                }
            }
        }
    }
}
