//! `spillway simulate`: reads the inputs, runs the simulator, prints and writes the results.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use spillway_api::manifests::Manifests;
use spillway_core::{Duration, NoPolicy, Policy, catalog};
use spillway_policy::PolicyEngine;
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, example, html, report, setup, strategy};

/// Replays a GPU trace against a private inventory, a price catalog and manifests, with no
/// cluster and no cloud, once per strategy. With no arguments it runs the bundled example.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Trace file (openb pod list, or Spillway's CSV job_id,arrival_s,runtime_s,num_gpus,...).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Trace format; guessed from the header when left out.
    #[arg(long, value_name = "openb|spillway")]
    trace_format: Option<String>,
    /// Private inventory as an openb node CSV (sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long, value_name = "FILE", conflicts_with = "private_gpus")]
    nodes: Option<PathBuf>,
    /// Private inventory as NODESxGPUS[:MODEL], for example 4x8 or 2x8:H100.
    #[arg(long, value_name = "NODESxGPUS[:MODEL]")]
    private_gpus: Option<String>,
    /// Racks of the private nodes, RACKSxNODES such as 4x2 (in inventory order; they must
    /// hold every private node): each gang of more than one replica is bound to one rack
    /// (spec.topology.required), and each strategy is replayed again ignoring racks, to report
    /// how often gangs waited for a rack against placement that splits them.
    #[arg(long, value_name = "RACKSxNODES")]
    private_topology: Option<String>,
    /// The NVIDIA driver and CUDA versions of the private nodes, DRIVER/CUDA such as
    /// 535.104.05/12.2 (either may be empty), for jobs with requirements (the trace's
    /// min_driver_version, min_cuda_version columns). Default: unknown, which meets none.
    #[arg(long, value_name = "DRIVER/CUDA")]
    private_environment: Option<String>,
    /// The driver and CUDA versions of the cloud pools' images where their spec.aws.environment
    /// (in --config) states none, such as 550.54.15/12.4.
    #[arg(long, value_name = "DRIVER/CUDA")]
    cloud_environment: Option<String>,
    /// Another cluster jobs may spill to after the private nodes and before the cloud:
    /// NAME=NODESxGPUS[:MODEL][@PRICE], such as dc2=4x8:A100@1.20 (USD per GPU-hour, default
    /// 0). Repeatable; every queue tries them in this order before its own pools. A pool of
    /// that name in --config (spec.cluster) gets these nodes and keeps its own price.
    #[arg(long, value_name = "NAME=NODESxGPUS[:MODEL][@PRICE]")]
    remote_cluster: Vec<setup::RemoteCluster>,
    /// Manifests (GpuQueues, ComputePools, Datasets, BurstPolicies): a YAML file or a directory.
    #[arg(long, value_name = "DIR|FILE")]
    config: Option<PathBuf>,
    /// Price catalog CSV (SkyPilot columns); default: the bundled AWS us-east-1 catalog.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Strategies to compare: spillway, never-burst, no-wait, constant-wait:SECONDS,
    /// starburst. Repeatable or comma-separated. Default: all of them (constant-wait:900).
    #[arg(long, value_name = "NAME")]
    strategy: Vec<String>,
    /// Seconds from launching an instance until it is a usable node.
    #[arg(long, value_name = "SECONDS", default_value_t = 180.0)]
    cloud_boot_delay: f64,
    /// Seed of the simulated failures (capacity errors, spot interruptions).
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Probability that a launch fails with a capacity error (the offering then cools down
    /// for 5 minutes and the next one is tried).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    capacity_error_rate: f64,
    /// Spot interruptions per instance-hour.
    #[arg(long, value_name = "RATE", default_value_t = 0.05)]
    spot_interruption_rate: f64,
    /// Warn of each spot interruption this long ahead (EC2: 2m) and act on it as the operator
    /// does with an interruption queue: the jobs on the instance checkpoint as they stop, are
    /// planned again at once, and the instance is terminated. Default 0s: interruptions are
    /// seen when the instance is gone.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    interruption_warning: String,
    /// Make each job restartable with this probability (seeded by --seed), whatever the
    /// trace says: restartable jobs may use spot capacity and be preempted or moved.
    #[arg(long, value_name = "P")]
    restartable: Option<f64>,
    /// How often restartable jobs checkpoint, such as 30m: a preempted or interrupted job
    /// loses the work since its last checkpoint. Default: they lose nothing.
    #[arg(long, value_name = "DURATION")]
    checkpoint_interval: Option<String>,
    /// Print a JSON array with one summary object per strategy instead of the table.
    #[arg(long)]
    json: bool,
    /// Runtime estimates the jobs carry: trace (as the trace says; openb has none), exact (the
    /// real runtime), none, or noisy:SIGMA (the real runtime with a seeded log-normal error).
    /// With trace, starburst uses the real runtimes, as its own simulator does. Default: trace,
    /// or noisy:0.5 for the bundled example.
    #[arg(long, value_name = "trace|exact|none|noisy:SIGMA")]
    runtime_estimates: Option<String>,
    /// Replay each strategy over its knob (the queues' maxWait or computeWaitFactor,
    /// Starburst's factor, constant-wait seconds) and report the cost-versus-JCT frontier:
    /// a table, JSON with --json, and a chart with --report. Replays run on every core.
    #[arg(long)]
    sweep: bool,
    /// Keep the trace's censored jobs (openb pods still running when the trace was cut, whose
    /// runtime is only a lower bound). Left out by default, with their count on stderr.
    #[arg(long)]
    keep_censored: bool,
    /// Write a self-contained HTML report (index.html) into this directory, and each of its
    /// charts as an SVG file.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Write the replay's jobs as GpuJobs with the status the operator would have written
    /// (a YAML List), for `kubectl spillway report -f FILE`. One strategy only.
    #[arg(long, value_name = "FILE")]
    jobs_out: Option<PathBuf>,
    /// With --jobs-out: when the trace's second 0 was, RFC 3339 (default: so the replay ends
    /// now).
    #[arg(long, value_name = "TIME", requires = "jobs_out")]
    trace_start: Option<String>,
}

/// An input error: `file:line: message`, exit code 2.
struct InputError(String);

fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("{}: cannot read: {e}", path.display())))
}

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    match simulate(args) {
        Ok(code) => Ok(code),
        Err(InputError(msg)) => {
            eprintln!("error: {msg}");
            Ok(ExitCode::from(2))
        }
    }
}

fn simulate(args: SimulateArgs) -> Result<ExitCode, InputError> {
    let bundled = args.trace.is_none()
        && args.config.is_none()
        && args.nodes.is_none()
        && args.private_gpus.is_none();
    let (trace_name, trace_text) = match &args.trace {
        Some(p) => (p.display().to_string(), read(p)?),
        None => (example::TRACE_NAME.to_string(), example::TRACE.to_string()),
    };
    let format = match &args.trace_format {
        Some(f) => f.parse::<TraceFormat>().map_err(InputError)?,
        None => trace::detect_format(&trace_text).ok_or_else(|| {
            InputError(format!("{trace_name}:1: cannot tell the trace format from the header; pass --trace-format openb|spillway"))
        })?,
    };
    let mut jobs =
        trace::parse(&trace_text, format).map_err(|e| InputError(format!("{trace_name}:{e}")))?;
    let censored = if args.keep_censored {
        let n = jobs.iter().filter(|j| j.censored).count();
        if n > 0 {
            eprintln!(
                "note: kept {n} jobs of {trace_name} still running when the trace was cut (their runtime is a lower bound)"
            );
        }
        0
    } else {
        let n = trace::drop_censored(&mut jobs);
        if n > 0 {
            eprintln!(
                "note: left out {n} jobs of {trace_name} still running when the trace was cut (their runtime is unknown); --keep-censored keeps them"
            );
        }
        n as u64
    };

    if let Some(p) = args.restartable {
        if !(0.0..=1.0).contains(&p) {
            return Err(InputError(format!(
                "--restartable: {p} is not a probability between 0 and 1"
            )));
        }
        trace::mark_restartable(&mut jobs, p, args.seed);
    }
    let checkpoint_interval = args
        .checkpoint_interval
        .as_deref()
        .map(|d| Duration::parse(d).map_err(|e| InputError(format!("--checkpoint-interval: {e}"))))
        .transpose()?;
    let interruption_warning = Duration::parse(&args.interruption_warning)
        .map_err(|e| InputError(format!("--interruption-warning: {e}")))?;

    let inventory = if let Some(p) = &args.nodes {
        trace::parse_openb_nodes(&read(p)?)
            .map_err(|e| InputError(format!("{}:{e}", p.display())))?
    } else {
        let spec = args
            .private_gpus
            .as_deref()
            .unwrap_or(example::PRIVATE_GPUS);
        trace::parse_private_gpus(spec).map_err(InputError)?
    };

    let (catalog_name, catalog_text) = match &args.catalog {
        Some(p) => (p.display().to_string(), read(p)?),
        None => (
            example::CATALOG_NAME.to_string(),
            example::CATALOG.to_string(),
        ),
    };
    let rows =
        catalog::parse(&catalog_text).map_err(|e| InputError(format!("{catalog_name}:{e}")))?;

    let manifests = match (&args.config, bundled) {
        (Some(path), _) => Some(Manifests::load(path).map_err(|e| InputError(e.to_string()))?),
        (None, true) => Some(
            Manifests::parse_str(Path::new(example::CONFIG_NAME), example::CONFIG)
                .map_err(|e| InputError(e.to_string()))?,
        ),
        (None, false) => None,
    };
    // BurstPolicies from the manifests, compiled once; an error names the policy's file and line.
    let policy: Box<dyn Policy> = match &manifests {
        Some(m) if !m.policies.is_empty() => {
            Box::new(PolicyEngine::compile_manifests(m).map_err(InputError)?)
        }
        _ => Box::new(NoPolicy),
    };
    let mut base = setup::snapshot(manifests.as_ref(), &inventory, &rows).map_err(InputError)?;
    setup::add_remote_clusters(&mut base, &args.remote_cluster).map_err(InputError)?;
    let racks = args
        .private_topology
        .as_deref()
        .map(|s| {
            let racks: spillway_sim::topology::Racks = s
                .parse()
                .map_err(|e| InputError(format!("--private-topology {e}")))?;
            spillway_sim::topology::apply(&mut base, racks).map_err(InputError)?;
            Ok(racks)
        })
        .transpose()?;
    let environment = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| {
                spillway_sim::environment::parse(s).map_err(|e| InputError(format!("{flag} {e}")))
            })
            .transpose()
    };
    spillway_sim::environment::apply(
        &mut base,
        environment("--private-environment", &args.private_environment)?.as_ref(),
        environment("--cloud-environment", &args.cloud_environment)?.as_ref(),
    );

    let strategies = if args.strategy.is_empty() {
        vec![
            Strategy::Spillway,
            Strategy::starburst(),
            Strategy::ConstantWait(Duration::from_secs(900)),
            Strategy::NoWait,
            Strategy::NeverBurst,
        ]
    } else {
        strategy::parse_list(&args.strategy).map_err(InputError)?
    };
    if !(args.cloud_boot_delay.is_finite() && args.cloud_boot_delay >= 0.0) {
        return Err(InputError(
            "--cloud-boot-delay must be a number of seconds >= 0".into(),
        ));
    }
    if !(0.0..=1.0).contains(&args.capacity_error_rate) {
        return Err(InputError(
            "--capacity-error-rate must be between 0 and 1".into(),
        ));
    }
    if !(args.spot_interruption_rate.is_finite() && args.spot_interruption_rate >= 0.0) {
        return Err(InputError("--spot-interruption-rate must be >= 0".into()));
    }
    // The bundled example's openb rows carry no estimates; it plays a team whose
    // estimatedRuntime is off by a log-normal error of sigma 0.5 (two thirds within a factor of
    // 1.65), so the planned starts it shows rest on imperfect estimates.
    let estimates: spillway_sim::Estimates = match (&args.runtime_estimates, bundled) {
        (Some(e), _) => e.parse().map_err(InputError)?,
        (None, true) => spillway_sim::example::ESTIMATES,
        (None, false) => spillway_sim::Estimates::Trace,
    };
    let options = Options {
        estimates,
        boot_delay: Duration::from_millis((args.cloud_boot_delay * 1000.0) as u64),
        seed: args.seed,
        capacity_error_rate: args.capacity_error_rate,
        spot_interruptions_per_hour: args.spot_interruption_rate,
        interruption_warning,
        checkpoint_interval,
        racks,
        ..Options::default()
    };
    if args.sweep {
        let objects: Vec<_> = manifests
            .as_ref()
            .map(|m| m.policies.iter().map(|p| p.object.clone()).collect())
            .unwrap_or_default();
        // One policy per worker thread. These objects compiled without error above, and
        // compiling is deterministic.
        let make = || -> Box<dyn Policy> {
            match PolicyEngine::compile(&objects) {
                Ok(engine) if !objects.is_empty() => Box::new(engine),
                _ => Box::new(NoPolicy),
            }
        };
        if std::io::stderr().is_terminal() {
            eprintln!(
                "sweeping {} strategies over {} jobs on {} threads...",
                strategies.len(),
                jobs.len(),
                spillway_sim::sweep::threads()
            );
        }
        let mut points = spillway_sim::sweep::run(&base, &jobs, &strategies, &options, &make);
        for p in &mut points {
            p.summary.censored_jobs_left_out = censored;
        }
        return write_sweep(&args, &points, &trace_name);
    }
    if args.jobs_out.is_some() && strategies.len() != 1 {
        return Err(InputError(format!(
            "--jobs-out writes one replay: name one strategy (--strategy), not {}",
            strategies.len()
        )));
    }
    let trace_start = args
        .trace_start
        .as_deref()
        .map(|t| {
            t.parse::<k8s_openapi::jiff::Timestamp>()
                .map(|t| t.as_millisecond())
                .map_err(|e| InputError(format!("--trace-start {t:?}: {e}")))
        })
        .transpose()?;
    let progress = std::io::stderr().is_terminal();
    let private: u32 = inventory.iter().map(|n| n.gpus).sum();
    let mut show = |s: &Strategy, done: usize, total: usize| {
        if progress {
            eprint!("\rsimulating {s}: {done}/{total} jobs arrived, {private} private GPUs   ");
        }
    };
    let mut runs = Vec::new();
    for s in &strategies {
        show(s, 0, jobs.len());
        runs.extend(spillway_sim::compare_with_progress(
            &base,
            &jobs,
            std::slice::from_ref(s),
            &options,
            policy.as_ref(),
            &mut show,
        ));
    }
    if progress {
        eprint!("\r{:78}\r", "");
    }
    for (s, _) in &mut runs {
        s.censored_jobs_left_out = censored;
    }
    let summaries: Vec<report::Summary> = runs.iter().map(|(s, _)| s.clone()).collect();
    if args.json {
        match serde_json::to_string_pretty(&summaries) {
            Ok(json) => println!("{json}"),
            Err(e) => return Err(InputError(format!("cannot encode results: {e}"))),
        }
    } else {
        println!(
            "{} jobs from {trace_name} (runtime estimates: {estimates}); {private} private GPUs; catalog {catalog_name}",
            jobs.len()
        );
        print!("{}", report::table(&summaries));
        print!("{}", report::topology_lines(&summaries));
    }
    if let (Some(path), Some((_, out))) = (&args.jobs_out, runs.first()) {
        let start = trace_start.unwrap_or_else(|| {
            k8s_openapi::jiff::Timestamp::now().as_millisecond() - (out.end_s * 1000.0) as i64
        });
        let queue = base.queues.first().map_or("default", |q| q.name.as_str());
        let list = crate::replay_jobs::list(&jobs, out, &base, start, queue);
        let yaml = serde_saphyr::to_string(&list)
            .map_err(|e| InputError(format!("cannot encode the jobs: {e}")))?;
        std::fs::write(path, yaml).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    }
    if let Some(dir) = &args.report {
        let title = format!("Spillway simulation: {trace_name}, {private} private GPUs");
        let page = html::render(&title, &runs)
            .map_err(|e| InputError(format!("rendering the report: {e}")))?;
        std::fs::create_dir_all(dir).map_err(|e| InputError(format!("{}: {e}", dir.display())))?;
        let path = dir.join("index.html");
        std::fs::write(&path, page).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
        // Each chart also on its own, for slides and READMEs.
        let charts =
            html::charts(&runs).map_err(|e| InputError(format!("rendering the charts: {e}")))?;
        for (name, svg) in charts {
            let file = dir.join(name);
            std::fs::write(&file, svg)
                .map_err(|e| InputError(format!("{}: {e}", file.display())))?;
        }
        if !args.json {
            print_out(&format!("report: {}\n", path.display()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_sweep(
    args: &SimulateArgs,
    points: &[spillway_sim::sweep::Point],
    trace_name: &str,
) -> Result<ExitCode, InputError> {
    if args.json {
        match serde_json::to_string_pretty(points) {
            Ok(json) => print_out(&format!("{json}\n")),
            Err(e) => return Err(InputError(format!("cannot encode results: {e}"))),
        }
    } else {
        print_out(&spillway_sim::sweep::table(points));
    }
    if let Some(dir) = &args.report {
        let title = format!("Spillway sweep: {trace_name}");
        let page = html::render_sweep(&title, points)
            .map_err(|e| InputError(format!("rendering the report: {e}")))?;
        let chart = html::sweep_chart(points)
            .map_err(|e| InputError(format!("rendering the chart: {e}")))?;
        std::fs::create_dir_all(dir).map_err(|e| InputError(format!("{}: {e}", dir.display())))?;
        for (name, text) in [("index.html", page), ("frontier.svg", chart)] {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
        }
        if !args.json {
            print_out(&format!("report: {}\n", dir.join("index.html").display()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes to stdout; a closed pipe (as in `spillway simulate | head`) is not an error.
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}
