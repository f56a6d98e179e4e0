//! Workload traces: the openb format of the Alibaba GPU cluster trace (cluster-trace-gpu-v2023)
//! and Spillway's own CSV.
//!
//! Spillway's CSV has the columns `job_id,arrival_s,runtime_s,num_gpus`, plus optional
//! `estimated_runtime_s`, `gpu_model` (alternatives separated by `|`), `queue`, `priority`,
//! `restartable` (`true`/`false`/`1`/`0`), `datasets` (separated by `|`), `replicas`, and the
//! job's requirements (`GpuJob spec.requirements`): `min_driver_version`, `min_cuda_version`,
//! `gpu_products` (globs separated by `|`) and `min_gpu_memory_gib`, and `kind`: what the job
//! runs as (`GpuJob`, the default, or a labelled workload's kind: `Job`, `JobSet`, `TrainJob`,
//! `RayJob`, `Pod`), which policies read as `job.kind`, `namespace` (carried, not used), and `gpu_utilization`: how busy its GPUs
//! were (percent, 0-100; what `kubectl spillway export-trace` writes from the job's last
//! `status.utilization`), which the summary turns into `gpu_utilization` and `idle_gpu_hours`.
//!
//! openb (`openb_pod_list_*.csv`): tasks asking for no GPU are skipped; a fractional GPU
//! (`gpu_milli < 1000`) counts as one whole GPU; arrival is `creation_time` and runtime
//! `deletion_time - scheduled_time`. Tasks that never ran (no `scheduled_time`) are dropped:
//! their lifetime is time spent waiting, not running, so it says nothing about their runtime.
//! openb's `gpu_spec` names Alibaba's GPU types, which no other inventory has, so it is not
//! used: every task accepts any model.
//!
//! openb was cut while some tasks still ran: their `deletion_time` is the trace's last moment,
//! so their "runtime" is only a lower bound (some would last 2,000-3,000 hours). A task is
//! marked [`TraceJob::censored`] when its `deletion_time` equals the file's largest one and at
//! least two tasks share that moment (one task ending last is not a cut). Callers decide what
//! to do with them ([`drop_censored`]).

use std::fmt;

use spillway_core::{GpuModel, NodeShape};

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    pub id: String,
    pub arrival_s: f64,
    pub runtime_s: f64,
    pub gpus: u32,
    pub replicas: u32,
    pub estimated_runtime_s: Option<f64>,
    pub gpu_models: Vec<GpuModel>,
    pub queue: Option<String>,
    pub priority: i32,
    pub restartable: bool,
    pub datasets: Vec<String>,
    /// What its GPUs must come with.
    pub requirements: spillway_core::Requirements,
    /// Still running when the trace was cut: `runtime_s` is a lower bound.
    pub censored: bool,
    /// What it runs as (`job.kind`), when the trace says; `GpuJob` otherwise.
    pub kind: Option<String>,
    /// How busy its GPUs were (percent, 0-100), when the trace says (`gpu_utilization`).
    pub gpu_percent: Option<f64>,
    /// The namespace it was submitted in, when the trace says (`namespace`): the simulator
    /// does not use it; `--jobs-out` writes it.
    pub namespace: Option<String>,
}

/// The kinds a trace's `kind` column may name.
pub const KINDS: [&str; 6] = ["GpuJob", "Job", "JobSet", "TrainJob", "RayJob", "Pod"];

/// Makes each job restartable with probability `fraction` (and the others not), by a draw
/// that depends only on `seed` and the job's position: `--restartable P`.
pub fn mark_restartable(jobs: &mut [TraceJob], fraction: f64, seed: u64) {
    for (i, j) in jobs.iter_mut().enumerate() {
        let draw = crate::seeded::mix(seed ^ crate::seeded::mix(i as u64 ^ 0x5e57_a27a)) as f64
            / u64::MAX as f64;
        j.restartable = draw < fraction;
    }
}

/// Removes the censored jobs; returns how many there were.
pub fn drop_censored(jobs: &mut Vec<TraceJob>) -> usize {
    let before = jobs.len();
    jobs.retain(|j| !j.censored);
    before - jobs.len()
}

/// Trace file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Openb,
    Spillway,
}

impl std::str::FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openb" => Ok(TraceFormat::Openb),
            "spillway" => Ok(TraceFormat::Spillway),
            other => Err(format!(
                "unknown trace format {other:?} (use openb or spillway)"
            )),
        }
    }
}

/// A problem in an input file, at a 1-based line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct InputError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.line, self.message)
    }
}

/// A CSV header: column positions by name.
struct Header {
    names: Vec<String>,
}

impl Header {
    fn col(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    fn require(&self, name: &str, line: usize) -> Result<usize, InputError> {
        self.col(name).ok_or_else(|| InputError {
            line,
            message: format!("header has no column {name:?}"),
        })
    }
}

/// Non-comment, non-empty lines with their 1-based numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn number<T: std::str::FromStr>(
    fields: &[&str],
    col: usize,
    name: &str,
    line: usize,
) -> Result<T, InputError> {
    let text = fields.get(col).copied().unwrap_or("");
    text.parse().map_err(|_| InputError {
        line,
        message: format!("{name} {text:?} is not a valid number"),
    })
}

fn optional<T: std::str::FromStr>(
    fields: &[&str],
    col: Option<usize>,
    name: &str,
    line: usize,
) -> Result<Option<T>, InputError> {
    match col.and_then(|c| fields.get(c)).copied() {
        None | Some("") => Ok(None),
        Some(_) => number(fields, col.unwrap_or(0), name, line).map(Some),
    }
}

/// The largest time a trace may hold, in seconds (about 31 years): far beyond any trace, and
/// far within what the replay's millisecond clock can add up.
pub const MAX_SECONDS: f64 = 1e9;

/// A time or duration in seconds: a finite number from 0 to [`MAX_SECONDS`].
fn seconds(fields: &[&str], col: usize, name: &str, line: usize) -> Result<f64, InputError> {
    let v: f64 = number(fields, col, name, line)?;
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(InputError {
            line,
            message: format!(
                "{name} must be a number of seconds from 0 to {MAX_SECONDS:e}, got {v}"
            ),
        })
    }
}

fn optional_seconds(
    fields: &[&str],
    col: Option<usize>,
    name: &str,
    line: usize,
) -> Result<Option<f64>, InputError> {
    optional::<f64>(fields, col, name, line)?
        .map(|_| seconds(fields, col.unwrap_or(0), name, line))
        .transpose()
}

/// Guesses the format from the header line.
pub fn detect_format(text: &str) -> Option<TraceFormat> {
    let (_, header) = lines(text).next()?;
    if header.contains("creation_time") && header.contains("num_gpu") {
        Some(TraceFormat::Openb)
    } else if header.contains("arrival_s") {
        Some(TraceFormat::Spillway)
    } else {
        None
    }
}

/// Parses a trace; jobs come out sorted by arrival (stable).
pub fn parse(text: &str, format: TraceFormat) -> Result<Vec<TraceJob>, InputError> {
    let mut jobs = match format {
        TraceFormat::Openb => parse_openb(text)?,
        TraceFormat::Spillway => parse_spillway(text)?,
    };
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(jobs)
}

fn header_of(text: &str) -> Result<(usize, Header), InputError> {
    let (line, h) = lines(text).next().ok_or(InputError {
        line: 1,
        message: "empty file: no header line".into(),
    })?;
    Ok((
        line,
        Header {
            names: h.split(',').map(|s| s.trim().to_string()).collect(),
        },
    ))
}

fn parse_openb(text: &str) -> Result<Vec<TraceJob>, InputError> {
    let (hline, h) = header_of(text)?;
    let name = h.require("name", hline)?;
    let num_gpu = h.require("num_gpu", hline)?;
    let created = h.require("creation_time", hline)?;
    let deleted = h.require("deletion_time", hline)?;
    let scheduled = h.require("scheduled_time", hline)?;
    let mut jobs = Vec::new();
    // Deletion time of each kept job, and the file's last deletion time with how many rows
    // (of any kind) end then.
    let mut ends = Vec::new();
    let (mut last_end, mut at_last_end) = (f64::NEG_INFINITY, 0usize);
    for (line, l) in lines(text).skip(1) {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() < h.names.len() {
            return Err(InputError {
                line,
                message: format!("expected {} fields, found {}", h.names.len(), f.len()),
            });
        }
        let gpus: u32 = number(&f, num_gpu, "num_gpu", line)?;
        let end = seconds(&f, deleted, "deletion_time", line)?;
        if end > last_end {
            (last_end, at_last_end) = (end, 1);
        } else if end == last_end {
            at_last_end += 1;
        }
        if gpus == 0 {
            continue;
        }
        if f[scheduled].is_empty() {
            continue; // never ran
        }
        let arrival = seconds(&f, created, "creation_time", line)?;
        let start = seconds(&f, scheduled, "scheduled_time", line)?;
        if end < start {
            return Err(InputError {
                line,
                message: format!("deletion_time {end} is before scheduled_time {start}"),
            });
        }
        jobs.push(TraceJob {
            id: f[name].to_string(),
            arrival_s: arrival,
            runtime_s: (end - start).max(1.0),
            gpus,
            replicas: 1,
            estimated_runtime_s: None,
            gpu_models: Vec::new(),
            queue: None,
            priority: 0,
            restartable: false,
            datasets: Vec::new(),
            requirements: Default::default(),
            kind: None,
            gpu_percent: None,
            namespace: None,
            censored: false,
        });
        ends.push(end);
    }
    if at_last_end >= 2 {
        for (job, end) in jobs.iter_mut().zip(ends) {
            job.censored = end == last_end;
        }
    }
    Ok(jobs)
}

fn parse_spillway(text: &str) -> Result<Vec<TraceJob>, InputError> {
    let (hline, h) = header_of(text)?;
    let id = h.require("job_id", hline)?;
    let arrival = h.require("arrival_s", hline)?;
    let runtime = h.require("runtime_s", hline)?;
    let gpus_col = h.require("num_gpus", hline)?;
    let est = h.col("estimated_runtime_s");
    let model = h.col("gpu_model");
    let queue = h.col("queue");
    let prio = h.col("priority");
    let restart = h.col("restartable");
    let datasets = h.col("datasets");
    let replicas = h.col("replicas");
    let min_driver = h.col("min_driver_version");
    let min_cuda = h.col("min_cuda_version");
    let products = h.col("gpu_products");
    let min_memory = h.col("min_gpu_memory_gib");
    let kind = h.col("kind");
    let utilization = h.col("gpu_utilization");
    let namespace = h.col("namespace");
    let mut jobs = Vec::new();
    let list = |f: &[&str], c: Option<usize>| -> Vec<String> {
        c.and_then(|c| f.get(c))
            .map(|s| {
                s.split('|')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    for (line, l) in lines(text).skip(1) {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() < 4 {
            return Err(InputError {
                line,
                message: format!(
                    "expected at least 4 fields (job_id,arrival_s,runtime_s,num_gpus), found {}",
                    f.len()
                ),
            });
        }
        let job_id = f.get(id).copied().unwrap_or("");
        if job_id.is_empty() {
            return Err(InputError {
                line,
                message: "empty job_id".into(),
            });
        }
        let gpus: u32 = number(&f, gpus_col, "num_gpus", line)?;
        let arrival_s = seconds(&f, arrival, "arrival_s", line)?;
        let runtime_s = seconds(&f, runtime, "runtime_s", line)?;
        if gpus == 0 || gpus > 16 {
            return Err(InputError {
                line,
                message: format!("num_gpus must be between 1 and 16, got {gpus}"),
            });
        }
        let restartable = match restart.and_then(|c| f.get(c)).copied().unwrap_or("") {
            "" | "false" | "0" => false,
            "true" | "1" => true,
            other => {
                return Err(InputError {
                    line,
                    message: format!("restartable {other:?} is not true or false"),
                });
            }
        };
        let replicas: u32 = optional(&f, replicas, "replicas", line)?.unwrap_or(1);
        let max = spillway_api::job::MAX_REPLICAS as u32;
        if !(1..=max).contains(&replicas) {
            return Err(InputError {
                line,
                message: format!("replicas must be between 1 and {max}, got {replicas}"),
            });
        }
        let version = |c: Option<usize>, name: &str| {
            c.and_then(|c| f.get(c))
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse().map_err(|e| InputError {
                        line,
                        message: format!("{name}: {e}"),
                    })
                })
                .transpose()
        };
        let requirements = spillway_core::Requirements {
            min_driver: version(min_driver, "min_driver_version")?,
            min_cuda: version(min_cuda, "min_cuda_version")?,
            gpu_products: list(&f, products),
            min_gpu_memory_gib: optional(&f, min_memory, "min_gpu_memory_gib", line)?,
        };
        jobs.push(TraceJob {
            id: job_id.to_string(),
            arrival_s,
            runtime_s: runtime_s.max(1.0),
            gpus,
            replicas,
            estimated_runtime_s: optional_seconds(&f, est, "estimated_runtime_s", line)?,
            gpu_models: list(&f, model)
                .iter()
                .map(|m| GpuModel::normalize(m))
                .collect(),
            queue: queue
                .and_then(|c| f.get(c))
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string()),
            namespace: namespace
                .and_then(|c| f.get(c))
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string()),
            priority: optional(&f, prio, "priority", line)?.unwrap_or(0),
            restartable,
            datasets: list(&f, datasets),
            requirements,
            censored: false,
            gpu_percent: match optional::<f64>(&f, utilization, "gpu_utilization", line)? {
                Some(u) if !(0.0..=100.0).contains(&u) => {
                    return Err(InputError {
                        line,
                        message: format!("gpu_utilization {u} is not a percentage (0-100)"),
                    });
                }
                u => u,
            },
            kind: match kind.and_then(|c| f.get(c)).copied().unwrap_or("") {
                "" => None,
                k if KINDS.contains(&k) => Some(k.to_string()),
                other => {
                    return Err(InputError {
                        line,
                        message: format!("kind {other:?} is not one of {}", KINDS.join(", ")),
                    });
                }
            },
        });
    }
    Ok(jobs)
}

/// A private node of the inventory.
#[derive(Clone, Debug, PartialEq)]
pub struct InventoryNode {
    pub name: String,
    pub gpus: u32,
    pub model: Option<GpuModel>,
}

/// `NODESxGPUS[:MODEL]`, as in `4x8` or `2x8:H100`.
pub fn parse_private_gpus(spec: &str) -> Result<Vec<InventoryNode>, String> {
    let NodeShape { nodes, gpus, model } =
        NodeShape::parse(spec).map_err(|e| format!("--private-gpus {e}"))?;
    Ok((0..nodes)
        .map(|i| InventoryNode {
            name: format!("private-{i}"),
            gpus,
            model: model.clone(),
        })
        .collect())
}

/// An openb node list (`sn,cpu_milli,memory_mib,gpu,model`); nodes without GPUs are skipped.
/// openb's models are Alibaba's (P100, T4, V100M16...); they are normalised but, as in the
/// trace, jobs accept any model.
pub fn parse_openb_nodes(text: &str) -> Result<Vec<InventoryNode>, InputError> {
    let (hline, h) = header_of(text)?;
    let sn = h.require("sn", hline)?;
    let gpu = h.require("gpu", hline)?;
    let model = h.col("model");
    let mut nodes = Vec::new();
    for (line, l) in lines(text).skip(1) {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let gpus: u32 = number(&f, gpu, "gpu", line)?;
        if gpus == 0 {
            continue;
        }
        if gpus > NodeShape::MAX_GPUS {
            return Err(InputError {
                line,
                message: format!("gpu must be at most {}, got {gpus}", NodeShape::MAX_GPUS),
            });
        }
        nodes.push(InventoryNode {
            name: f.get(sn).copied().unwrap_or("").to_string(),
            gpus,
            model: model
                .and_then(|c| f.get(c))
                .filter(|m| !m.is_empty())
                .map(|m| GpuModel::normalize(m)),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openb_rows_become_gpu_jobs() {
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
            p0,1000,100,1,500,,LS,Running,10,110,20\n\
            p1,1000,100,0,0,,LS,Running,0,100,0\n\
            p2,1000,100,2,1000,V100M16|T4,LS,Pending,5,50,\n\
            p3,1000,100,8,1000,,LS,Succeeded,0,1000,0\n";
        let jobs = parse(text, TraceFormat::Openb).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(
            ids,
            ["p3", "p0"],
            "CPU-only and never-ran tasks dropped, sorted by arrival"
        );
        assert_eq!(
            (jobs[1].gpus, jobs[1].runtime_s, jobs[1].arrival_s),
            (1, 90.0, 10.0)
        );
    }

    #[test]
    fn openb_pods_running_at_the_cut_are_censored() {
        let header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";
        // Two GPU pods and a CPU pod end at the last moment: a cut.
        let cut = format!(
            "{header}a,1,1,1,1000,,LS,Running,0,500,0\nb,1,1,2,1000,,LS,Running,10,900,10\n\
             c,1,1,1,1000,,LS,Running,20,900,20\nd,1,1,0,0,,LS,Running,0,900,0\n"
        );
        let mut jobs = parse(&cut, TraceFormat::Openb).unwrap();
        let censored: Vec<&str> = jobs
            .iter()
            .filter(|j| j.censored)
            .map(|j| j.id.as_str())
            .collect();
        assert_eq!(censored, ["b", "c"]);
        assert_eq!(drop_censored(&mut jobs), 2);
        assert_eq!(jobs.len(), 1);
        // One pod ending last is not a cut.
        let single = format!(
            "{header}a,1,1,1,1000,,LS,Running,0,500,0\nb,1,1,1,1000,,LS,Running,10,900,10\n"
        );
        let jobs = parse(&single, TraceFormat::Openb).unwrap();
        assert!(jobs.iter().all(|j| !j.censored));
    }

    #[test]
    fn spillway_csv_with_optional_columns() {
        let text = "job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s,gpu_model,queue,priority,restartable,datasets\n\
            a,0,3600,8,4000,H100|A100-80GB,research,5,true,imagenet|coco\n\
            b,10,60,1,,,,,,\n";
        let jobs = parse(text, TraceFormat::Spillway).unwrap();
        assert_eq!(jobs[0].estimated_runtime_s, Some(4000.0));
        assert_eq!(jobs[0].gpu_models.len(), 2);
        assert_eq!(jobs[0].datasets, ["imagenet", "coco"]);
        assert!(jobs[0].restartable);
        assert_eq!(jobs[1].queue, None);
        assert_eq!(detect_format(text), Some(TraceFormat::Spillway));
    }

    #[test]
    fn a_trace_may_say_how_busy_each_jobs_gpus_were() {
        let text =
            "job_id,arrival_s,runtime_s,num_gpus,gpu_utilization\na,0,60,1,42.5\nb,0,60,1,\n";
        let jobs = parse(text, TraceFormat::Spillway).unwrap();
        assert_eq!(
            (jobs[0].gpu_percent, jobs[1].gpu_percent),
            (Some(42.5), None)
        );
        let e = parse(
            "job_id,arrival_s,runtime_s,num_gpus,gpu_utilization\nc,0,60,1,140\n",
            TraceFormat::Spillway,
        )
        .unwrap_err();
        assert!(e.message.contains("not a percentage"), "{e}");
    }

    #[test]
    fn a_trace_may_say_what_kind_each_job_runs_as() {
        let text = "job_id,arrival_s,runtime_s,num_gpus,kind\na,0,60,1,Job\nb,0,60,1,\n";
        let jobs = parse(text, TraceFormat::Spillway).unwrap();
        assert_eq!(jobs[0].kind.as_deref(), Some("Job"));
        assert_eq!(jobs[1].kind, None);
        let e = parse(
            "job_id,arrival_s,runtime_s,num_gpus,kind\nc,0,60,1,CronJob\n",
            TraceFormat::Spillway,
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.message.contains("\"CronJob\" is not one of GpuJob, Job"),
            "{e}"
        );
    }

    #[test]
    fn bad_rows_name_their_line() {
        let text = "job_id,arrival_s,runtime_s,num_gpus\n# a comment\na,0,10,1\nb,soon,10,1\n";
        let e = parse(text, TraceFormat::Spillway).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.message.contains("arrival_s"), "{e}");
        let e = parse(
            "job_id,arrival_s,runtime_s,num_gpus\nc,0,10,32\n",
            TraceFormat::Spillway,
        )
        .unwrap_err();
        assert!(e.message.contains("between 1 and 16"), "{e}");
        let e = parse("job_id,arrival_s\n", TraceFormat::Spillway).unwrap_err();
        assert!(e.message.contains("runtime_s"), "{e}");
    }

    #[test]
    fn openb_node_lists_keep_gpu_nodes_with_their_models() {
        let text = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,1024,0,\nn1,64000,1024,8,V100M32\nn2,64000,1024,2,T4\n";
        let nodes = parse_openb_nodes(text).unwrap();
        assert_eq!(nodes.len(), 2, "CPU-only nodes are skipped");
        assert_eq!((nodes[0].name.as_str(), nodes[0].gpus), ("n1", 8));
        assert_eq!(
            nodes[0].model.as_ref().map(|m| m.as_str()),
            Some("V100-32GB")
        );
        let e =
            parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,many,T4\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn private_gpu_shapes() {
        let nodes = parse_private_gpus("4x8").unwrap();
        assert_eq!(
            (nodes.len(), nodes[0].gpus, nodes[0].model.clone()),
            (4, 8, None)
        );
        let nodes = parse_private_gpus("2x8:h100").unwrap();
        assert_eq!(nodes[0].model.as_ref().map(|m| m.as_str()), Some("H100"));
        assert!(parse_private_gpus("4by8").is_err());
        assert!(parse_private_gpus("4x0").is_err());
        // Found by fuzzing: an inventory too large to build is refused, not allocated.
        let e = parse_private_gpus("999999999x8").unwrap_err();
        assert!(e.contains("at most 100000 nodes"), "{e}");
        assert!(parse_private_gpus("1x65").is_err());
    }

    /// Found by fuzzing: values the replay cannot hold are refused at their line.
    #[test]
    fn absurd_values_are_refused_at_their_line() {
        let header = "job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s,replicas\n";
        for (row, says) in [
            (
                "a,0,1e300,1,,1",
                "runtime_s must be a number of seconds from 0 to 1e9",
            ),
            ("a,NaN,10,1,,1", "arrival_s must be a number of seconds"),
            ("a,inf,10,1,,1", "arrival_s must be a number of seconds"),
            (
                "a,0,10,1,-5,1",
                "estimated_runtime_s must be a number of seconds",
            ),
            (
                "a,0,10,8,,90000",
                "replicas must be between 1 and 1024, got 90000",
            ),
            ("a,0,10,8,,0", "replicas must be between 1 and 1024, got 0"),
        ] {
            let e = parse(&format!("{header}{row}\n"), TraceFormat::Spillway).unwrap_err();
            assert_eq!(e.line, 2, "{row}");
            assert!(e.message.contains(says), "{row}: {}", e.message);
        }
        let openb = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
            p0,1000,100,1,500,,LS,Running,10,1e400,20\n";
        let e = parse(openb, TraceFormat::Openb).unwrap_err();
        assert!(e.message.contains("deletion_time must be"), "{}", e.message);
        let nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,4294967295,T4\n";
        assert!(
            parse_openb_nodes(nodes)
                .unwrap_err()
                .message
                .contains("at most 64")
        );
    }
}
