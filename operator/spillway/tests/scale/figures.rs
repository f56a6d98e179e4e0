//! What the scale run measures: each pod's life as the test's watch saw it, and from it and the
//! API server's and the operator's counters, the figures `scripts/scale.sh` reports.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use serde::Serialize;

use super::Arrival;

/// One pod's life on the test's clock (seconds from the start).
#[derive(Clone, Debug, Default)]
pub struct PodLife {
    pub job: String,
    pub node: Option<String>,
    pub gpus: u32,
    pub seen: f64,
    pub running: Option<f64>,
    pub succeeded: Option<f64>,
}

/// Every pod seen, by UID.
#[derive(Default)]
pub struct Timeline {
    pods: HashMap<String, PodLife>,
}

impl Timeline {
    /// Records what `pod` shows at `at`: its owner (the job), node, GPUs, and when it was
    /// first seen, first Running and Succeeded.
    pub fn observe(&mut self, pod: &Pod, at: f64) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let life = self.pods.entry(uid).or_insert_with(|| PodLife {
            job: (pod.metadata.owner_references.iter().flatten())
                .next()
                .map(|o| o.name.clone())
                .unwrap_or_default(),
            gpus: (pod.spec.iter().flat_map(|s| &s.containers))
                .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get("nvidia.com/gpu"))
                .filter_map(|q| q.0.parse::<u32>().ok())
                .sum(),
            seen: at,
            ..PodLife::default()
        });
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            life.node = Some(node);
        }
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") if life.running.is_none() => life.running = Some(at),
            Some("Succeeded") if life.succeeded.is_none() => {
                life.running.get_or_insert(at);
                life.succeeded = Some(at);
            }
            _ => {}
        }
    }

    pub fn succeeded(&self) -> usize {
        self.pods.values().filter(|p| p.succeeded.is_some()).count()
    }

    /// The pods of each job.
    pub fn pods_by_job(&self) -> HashMap<String, Vec<&PodLife>> {
        let mut out: HashMap<String, Vec<&PodLife>> = HashMap::new();
        for p in self.pods.values() {
            out.entry(p.job.clone()).or_default().push(p);
        }
        out
    }

    /// The most GPUs each node's pods held at once, from Running to Succeeded (an end and a
    /// start at the same moment: the end first; the watch delivers them in the server's
    /// order).
    pub fn peak_gpus_per_node(&self) -> BTreeMap<String, u32> {
        let mut changes: BTreeMap<String, Vec<(f64, i64)>> = BTreeMap::new();
        for p in self.pods.values() {
            let (Some(node), Some(start)) = (&p.node, p.running) else {
                continue;
            };
            let c = changes.entry(node.clone()).or_default();
            c.push((start, i64::from(p.gpus)));
            c.push((p.succeeded.unwrap_or(f64::INFINITY), -i64::from(p.gpus)));
        }
        changes
            .into_iter()
            .map(|(node, mut c)| {
                c.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let (mut now, mut peak) = (0i64, 0i64);
                for (_, d) in c {
                    now += d;
                    peak = peak.max(now);
                }
                (node, peak.max(0) as u32)
            })
            .collect()
    }
}

/// The API server's `apiserver_request_total`, summed: writes, reads, and the writes by
/// resource (`resource` or `resource/subresource`).
#[derive(Clone, Debug, Default)]
pub struct Requests {
    pub writes: f64,
    pub reads: f64,
    pub writes_by: BTreeMap<String, f64>,
}

/// The API server's request counters now (from its `/metrics`, as the test's admin).
pub async fn api_requests(client: &Client) -> Requests {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = client.request_text(req).await.unwrap_or_default();
    let mut r = Requests::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let label = |name: &str| {
            line.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|v| v.split('"').next())
                .unwrap_or("")
        };
        match label("verb") {
            "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION" => {
                r.writes += value;
                let resource = match label("subresource") {
                    "" => label("resource").to_string(),
                    sub => format!("{}/{sub}", label("resource")),
                };
                *r.writes_by.entry(resource).or_default() += value;
            }
            "GET" | "LIST" | "WATCH" => r.reads += value,
            _ => {}
        }
    }
    r
}

/// Every Event in the cluster now, by the controller that reported it (`reportingController`,
/// else the old `source.component`), counting each repetition a series or count records: who
/// wrote the `events` of [`Requests::writes_by`]. The run is shorter than the API server's
/// Event TTL (an hour), so none has expired.
pub async fn events_by_reporter(client: &Client) -> BTreeMap<String, f64> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::all(client.clone());
    let mut out = BTreeMap::new();
    let mut params = kube::api::ListParams::default().limit(1000);
    loop {
        let Ok(page) = api.list(&params).await else {
            break;
        };
        for e in &page.items {
            let who = (e.reporting_controller.clone())
                .filter(|r| !r.is_empty())
                .or_else(|| e.deprecated_source.as_ref()?.component.clone())
                .unwrap_or_else(|| "(unnamed)".into());
            let times = (e.series.as_ref().map(|s| s.count))
                .or(e.deprecated_count)
                .unwrap_or(1)
                .max(1);
            *out.entry(who).or_default() += f64::from(times);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    out
}

/// `counts` per job, those of at least 0.05 per job.
pub fn per_job(counts: &BTreeMap<String, f64>, jobs: usize) -> BTreeMap<String, f64> {
    let jobs = jobs.max(1) as f64;
    (counts.iter())
        .map(|(k, n)| (k.clone(), ((n / jobs) * 100.0).round() / 100.0))
        .filter(|(_, n)| *n >= 0.05)
        .collect()
}

/// A process's CPU seconds (user and system) and peak resident memory in MiB.
pub fn process_usage(pid: u32) -> (f64, f64) {
    let ticks = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(100.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, r)| r.split_whitespace().collect());
    let field = |i: usize| {
        rest.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu = (field(11) + field(12)) / ticks;
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0);
    (cpu, rss_kib / 1024.0)
}

/// The run's figures (`scripts/scale.sh` writes them as JSON).
#[derive(Debug, Serialize)]
pub struct Figures {
    pub system: &'static str,
    /// What the jobs were: `GpuJob`s, or `batch/v1` Jobs.
    pub jobs_as: &'static str,
    /// The stream's seed (`SPILLWAY_SCALE_SEED`).
    pub seed: u64,
    pub kubernetes: String,
    /// Flags the run added to kube-controller-manager (`SPILLWAY_KCM_ARGS`).
    pub controller_manager_args: String,
    /// The peer's own settings, when they are not what it ships with.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer_settings: String,
    pub nodes: usize,
    pub jobs: usize,
    pub started: usize,
    /// Jobs started per second between the 5th and the 95th percentile start.
    pub starts_per_second: f64,
    /// Created to every pod Running.
    pub time_to_start_p50_s: f64,
    pub time_to_start_p99_s: f64,
    /// Created to the first pod made (waiting for GPUs and the decision).
    pub queueing_p50_s: f64,
    pub queueing_p99_s: f64,
    /// First pod made to every pod Running (bind and the kubelet's start).
    pub bind_p50_s: f64,
    pub bind_p99_s: f64,
    /// Requests of every client (the operator, scheduler, controllers, KWOK, the test's
    /// creates), over the run, per job.
    pub api_writes_per_job: f64,
    /// The writes per job by resource (`pods`, `pods/status`, `jobs/status`, `events`...),
    /// those of at least 0.05 per job.
    pub api_writes_per_job_by_resource: BTreeMap<String, f64>,
    /// The Events per job by the controller that reported them (repetitions counted), those
    /// of at least 0.05 per job.
    pub events_per_job_by_reporter: BTreeMap<String, f64>,
    pub api_reads_per_job: f64,
    pub operator_cpu_s: f64,
    pub operator_peak_rss_mib: f64,
    pub wall_s: f64,
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    (v[i] * 1000.0).round() / 1000.0
}

impl Figures {
    pub fn of(
        created: &HashMap<String, (f64, Arrival)>,
        timeline: &Timeline,
        end: f64,
        (before, after): (&Requests, &Requests),
        (cpu, rss): (f64, f64),
        nodes: usize,
        kubernetes: String,
    ) -> Figures {
        let by_job = timeline.pods_by_job();
        let (mut tts, mut queueing, mut bind, mut starts) = (vec![], vec![], vec![], vec![]);
        for (name, (at, a)) in created {
            let Some(pods) = by_job.get(name) else {
                continue;
            };
            let running: Vec<f64> = pods.iter().filter_map(|p| p.running).collect();
            if running.len() < a.replicas as usize {
                continue;
            }
            let first = pods.iter().map(|p| p.seen).fold(f64::INFINITY, f64::min);
            let all = running.iter().copied().fold(0.0, f64::max);
            tts.push(all - at);
            queueing.push(first - at);
            bind.push(all - first);
            starts.push(all);
        }
        starts.sort_by(f64::total_cmp);
        let n = starts.len();
        let starts_per_second = if n >= 20 {
            let (lo, hi) = (n / 20, n - 1 - n / 20);
            (hi - lo) as f64 / (starts[hi] - starts[lo]).max(1e-3)
        } else {
            0.0
        };
        let jobs = created.len().max(1) as f64;
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        Figures {
            system: "spillway",
            jobs_as: "GpuJob",
            seed: 0,
            kubernetes,
            controller_manager_args: std::env::var("SPILLWAY_KCM_ARGS").unwrap_or_default(),
            peer_settings: String::new(),
            nodes,
            jobs: created.len(),
            started: n,
            starts_per_second: round(starts_per_second),
            time_to_start_p50_s: quantile(&mut tts, 0.5),
            time_to_start_p99_s: quantile(&mut tts, 0.99),
            queueing_p50_s: quantile(&mut queueing, 0.5),
            queueing_p99_s: quantile(&mut queueing, 0.99),
            bind_p50_s: quantile(&mut bind, 0.5),
            bind_p99_s: quantile(&mut bind, 0.99),
            api_writes_per_job: round((after.writes - before.writes) / jobs),
            api_writes_per_job_by_resource: (after.writes_by.iter())
                .map(|(r, n)| {
                    let was = before.writes_by.get(r).copied().unwrap_or(0.0);
                    (r.clone(), (((n - was) / jobs) * 100.0).round() / 100.0)
                })
                .filter(|(_, n)| *n >= 0.05)
                .collect(),
            events_per_job_by_reporter: BTreeMap::new(),
            api_reads_per_job: round((after.reads - before.reads) / jobs),
            operator_cpu_s: round(cpu),
            operator_peak_rss_mib: round(rss),
            wall_s: round(end),
        }
    }
}
