//! The soak: GpuJobs arriving at a steady rate and finishing, finished ones deleted (as a user
//! or a TTL controller would), and nodes leaving and joining, through the real operator binary
//! for a while. Every few seconds it samples the operator's resident memory, threads, open
//! files, async tasks, watch-cache sizes and decision-cycle time, and prints them as a table.
//!
//! Checked: every job succeeds (restartable gangs; those on a node that left are requeued), and
//! afterwards the operator's caches hold exactly what the API server holds (no deleted object
//! kept). Memory, tasks and cycle times are reported, not asserted; `scripts/soak.sh` runs the
//! long form (10,000 jobs over an hour, a release build) whose curve docs/reliability.md shows.
//!
//! Short form here: `SPILLWAY_SOAK_JOBS` (150) over `SPILLWAY_SOAK_SECONDS` (30), sampled every
//! `SPILLWAY_SOAK_SAMPLE_SECONDS` (5).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use spillway_api::GpuJob;
use spillway_api::job::JobPhase;
use spillway_tests::kubelet::RUN_SECONDS;

use crate::{Operator, Rng, Scenario, Shape, env_or, seed, start_env};

/// One look at the operator.
struct Sample {
    at: Duration,
    submitted: usize,
    succeeded: usize,
    rss_mib: f64,
    threads: u64,
    fds: usize,
    tasks: f64,
    cached_jobs: f64,
    cached_pods: f64,
    cycles: f64,
    cycle_seconds: f64,
}

/// A field of `/proc/PID/status` (the number before any unit).
fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The operator's metrics, as `name{labels}` -> value.
async fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return BTreeMap::new();
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    if stream.write_all(request.as_bytes()).await.is_err()
        || stream.read_to_string(&mut text).await.is_err()
    {
        return BTreeMap::new();
    }
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

async fn sample(
    operator: &Operator,
    addr: &str,
    started: Instant,
    submitted: usize,
    succeeded: usize,
) -> Sample {
    let pid = operator.0.id();
    let m = scrape(addr).await;
    let get = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
    Sample {
        at: started.elapsed(),
        submitted,
        succeeded,
        rss_mib: proc_status(pid, "VmRSS:").map_or(f64::NAN, |k| k as f64 / 1024.0),
        threads: proc_status(pid, "Threads:").unwrap_or(0),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
        tasks: get("spillway_runtime_tasks"),
        cached_jobs: get(r#"spillway_cache_objects{kind="GpuJob"}"#),
        cached_pods: get(r#"spillway_cache_objects{kind="Pod"}"#),
        cycles: get("spillway_reconcile_duration_seconds_count"),
        cycle_seconds: get("spillway_reconcile_duration_seconds_sum"),
    }
}

/// Keeps a sample and prints its row at once (a long run shows its curve as it goes).
fn push(samples: &mut Vec<Sample>, s: Sample) {
    let mean = samples
        .last()
        .map(|p| (s.cycle_seconds - p.cycle_seconds) / (s.cycles - p.cycles).max(1.0) * 1e3)
        .unwrap_or(f64::NAN);
    println!(
        "| {:.0} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {mean:.2} |",
        s.at.as_secs_f64(),
        s.submitted,
        s.succeeded,
        s.rss_mib,
        s.threads,
        s.fds,
        s.tasks,
        s.cached_jobs,
        s.cached_pods,
        s.cycles
    );
    samples.push(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_keeps_memory_caches_and_cycles_flat() {
    // One scenario at a time: they share two cores with the control plane.
    let _turn = spillway_tests::operator::serial().await;
    let jobs_n = env_or("SPILLWAY_SOAK_JOBS", 150) as usize;
    let seconds = env_or("SPILLWAY_SOAK_SECONDS", 30).max(1);
    let every = Duration::from_secs(env_or("SPILLWAY_SOAK_SAMPLE_SECONDS", 5).max(1));
    let seed = seed();
    println!("soak seed {seed}: {jobs_n} jobs over {seconds} s, sampled every {every:?}");
    let mut rng = Rng(seed);
    let shape = Shape {
        jobs: 0,
        restartable: true,
        nodes: 4,
        sizes: &[1, 2, 4],
        restricted_every: 0,
        cloud_only_every: 0,
    };
    let mut world = Scenario::build("soak", &mut rng, shape).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let operator = start_env(
        &world.kubeconfig,
        &["--leader-elect=false", "--metrics-addr", &addr],
        &[],
    );
    let jobs: Api<GpuJob> = Api::namespaced(world.client.clone(), &world.ns);
    let started = Instant::now();
    let length = Duration::from_secs(seconds);
    let (mut submitted, mut succeeded, mut requeues) = (0usize, 0usize, 0i64);
    println!(
        "| s | submitted | succeeded | RSS MiB | threads | fds | tasks | cached GpuJobs | cached Pods | cycles | mean cycle ms (since last) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut samples = Vec::new();
    push(&mut samples, sample(&operator, &addr, started, 0, 0).await);
    let (mut next_sample, mut next_look) = (started + every, started);
    let mut next_loss = started + Duration::from_secs(10 + rng.below(10));
    let deadline = started + length + Duration::from_secs(120 + jobs_n as u64 / 10);
    loop {
        let now = Instant::now();
        assert!(
            now < deadline,
            "seed {seed}: {} of {jobs_n} jobs succeeded in time: {}",
            succeeded,
            world.unfinished().await
        );
        // Arrivals at a steady rate.
        let due = ((now - started).as_secs_f64() / length.as_secs_f64() * jobs_n as f64)
            .ceil()
            .min(jobs_n as f64) as usize;
        while submitted < due {
            let gpus = [1, 2, 4][rng.below(3) as usize];
            let job: GpuJob = serde_json::from_value(json!({
                "apiVersion": "spillway.io/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": format!("job-{submitted:05}"), "namespace": world.ns},
                "spec": {"queue": world.label, "replicas": 1 + rng.below(2), "gpusPerReplica": gpus,
                         "restartable": true,
                         "template": {
                             "metadata": {"annotations": {RUN_SECONDS: (1 + rng.below(4)).to_string()}},
                             "spec": {"containers": [{"name": "c", "image": "x"}]}}},
            }))
            .expect("job");
            jobs.create(&PostParams::default(), &job)
                .await
                .expect("create job");
            submitted += 1;
        }
        // Finished jobs are deleted; none may fail.
        if now >= next_look {
            next_look = now + Duration::from_secs(1);
            if let Ok(list) = jobs.list(&ListParams::default()).await {
                for j in &list.items {
                    let st = j.status.clone().unwrap_or_default();
                    assert_ne!(
                        st.phase,
                        Some(JobPhase::Failed),
                        "seed {seed}: job {} failed: {:?}",
                        j.name_any(),
                        st.decision.and_then(|d| d.message)
                    );
                    if st.phase == Some(JobPhase::Succeeded)
                        && j.metadata.deletion_timestamp.is_none()
                        && jobs
                            .delete(&j.name_any(), &DeleteParams::background())
                            .await
                            .is_ok()
                    {
                        succeeded += 1;
                        requeues += i64::from(st.restarts.unwrap_or(0));
                    }
                }
            }
        }
        // Nodes leave (their machine gone) and fresh ones join, while jobs arrive.
        if now >= next_loss && now < started + length {
            let live: Vec<String> = world.live_nodes();
            let node = live[rng.below(live.len() as u64) as usize].clone();
            world.lose_node(&node).await;
            next_loss = now + Duration::from_secs(10 + rng.below(10));
        }
        if now >= next_sample {
            next_sample += every;
            let s = sample(&operator, &addr, started, submitted, succeeded).await;
            push(&mut samples, s);
        }
        if submitted == jobs_n && succeeded == jobs_n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Settled: the caches hold exactly what the API server holds (pods of deleted jobs go with
    // them, through the garbage collector).
    let all_jobs: Api<GpuJob> = Api::all(world.client.clone());
    let all_pods: Api<Pod> = Api::all(world.client.clone());
    let settle = Instant::now() + Duration::from_secs(60);
    let last = loop {
        let s = sample(&operator, &addr, started, submitted, succeeded).await;
        let api_jobs = all_jobs
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .ok();
        let api_pods = all_pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .ok();
        if let (Some(j), Some(p)) = (api_jobs, api_pods)
            && s.cached_jobs == j as f64
            && s.cached_pods == p as f64
        {
            break s;
        }
        assert!(
            Instant::now() < settle,
            "seed {seed}: the operator caches {} GpuJobs and {} Pods; the API server has {api_jobs:?} and {api_pods:?}",
            s.cached_jobs,
            s.cached_pods
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    push(&mut samples, last);
    println!(
        "soak seed {seed}: {succeeded} jobs succeeded ({requeues} requeues after lost nodes, {} nodes lost)",
        world.gone.len()
    );
    assert_eq!(succeeded, jobs_n);
    flat(&samples, seed);
}

/// What the name promises, with margin for a loaded two-core machine: against the first
/// sample taken under load, the operator's memory at most 1.5x + 32 MiB, its threads at most a
/// few more, its runtime tasks and open files at most a few more than then or than at the
/// middle of the run (connection pools may fill up while the load rises; nothing may keep
/// growing with the jobs that finish in the second half), and the mean cycle time of every
/// later interval at most 4x the first measured one + 20 ms (a cycle does not grow with the
/// jobs that came and went).
fn flat(samples: &[Sample], seed: u64) {
    let base = samples.get(1).unwrap_or(&samples[0]);
    let last = samples.last().unwrap_or(base);
    let peak_rss = samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
    assert!(
        peak_rss <= base.rss_mib * 1.5 + 32.0,
        "seed {seed}: RSS grew from {:.1} MiB to a peak of {peak_rss:.1} MiB",
        base.rss_mib
    );
    let mid = &samples[samples.len() / 2];
    assert!(
        last.tasks <= base.tasks + 16.0 || last.tasks <= mid.tasks + 4.0,
        "seed {seed}: runtime tasks grew from {} to {} (mid-run {})",
        base.tasks,
        last.tasks,
        mid.tasks
    );
    assert!(
        last.threads <= base.threads + 4 && (last.fds <= base.fds + 16 || last.fds <= mid.fds + 4),
        "seed {seed}: threads {} -> {}, open files {} -> {} (mid-run {})",
        base.threads,
        last.threads,
        base.fds,
        last.fds,
        mid.fds
    );
    let means: Vec<f64> = samples
        .windows(2)
        .filter(|w| w[1].cycles > w[0].cycles)
        .map(|w| (w[1].cycle_seconds - w[0].cycle_seconds) / (w[1].cycles - w[0].cycles))
        .filter(|m| m.is_finite())
        .collect();
    assert!(
        means.len() >= 2,
        "seed {seed}: cycle times were not measured: {means:?}"
    );
    let first = means[0];
    for m in &means[1..] {
        assert!(
            *m <= first * 4.0 + 0.020,
            "seed {seed}: the mean cycle grew from {:.2} ms to {:.2} ms",
            first * 1e3,
            m * 1e3
        );
    }
}
