//! One harness per parser of outside input. Each runs the product's own entry point on the
//! bytes it is given, as far as the product would take an accepted input (a policy file is
//! compiled and its rules evaluated; a small trace is replayed; a catalog becomes offerings),
//! and says whether the input was accepted or rejected, with the rejection's message.

use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use spillway_api::manifests::Manifests;
use spillway_api::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue, convert, validate};
use spillway_core::{Duration, Job, NoPolicy, Snapshot, Time, catalog, decide};
use spillway_identity::documents::jwks;
use spillway_identity::token::{Request, Workload, issue, subject};
use spillway_identity::{Algorithm, KeyRing, SigningKey, Verifier};
use spillway_policy::PolicyEngine;
use spillway_sim::trace::{self, TraceFormat};
use spillway_sim::{Options, Strategy, example, setup};

/// What a harness made of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Refused, with what the user would be told.
    Rejected(String),
}

/// A parser of outside input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harness {
    /// YAML manifests and policy files (`--config`, `spillway policy lint|test`): loaded,
    /// linted, converted into a simulator world, their BurstPolicies compiled and evaluated.
    Manifests,
    /// GpuJob, GpuQueue, ComputePool, Dataset and BurstPolicy objects as JSON (what the API
    /// server hands the operator): deserialised, validated and converted.
    Specs,
    /// Trace CSVs in both formats; small ones are replayed.
    Trace,
    /// Node CSVs (`--nodes`) and inventory specs (`--private-gpus`).
    Nodes,
    /// Price catalogs (`--catalog`), turned into offerings.
    Catalog,
    /// JWKS documents given to a token verifier.
    Jwks,
    /// Tokens given to `spillway token verify`.
    Token,
}

const ISSUER: &str = "https://spillway.example.com";
const AUDIENCE: &str = "sts.amazonaws.com";

fn now() -> Time {
    Time::from_millis(1_800_000_000_000)
}

/// The issuer's keys (ES256 and RS256) of the token harnesses, made once.
fn ring() -> &'static KeyRing {
    static RING: OnceLock<KeyRing> = OnceLock::new();
    RING.get_or_init(|| {
        let since = now() - Duration::from_secs(3600);
        KeyRing {
            keys: [Algorithm::ES256, Algorithm::RS256]
                .into_iter()
                .map(|a| SigningKey::generate(a, since, since).expect("key generation"))
                .collect(),
        }
    })
}

fn verifier() -> &'static Verifier {
    static VERIFIER: OnceLock<Verifier> = OnceLock::new();
    VERIFIER.get_or_init(|| Verifier::new(&jwks_document(), ISSUER, AUDIENCE).expect("verifier"))
}

fn jwks_document() -> Vec<u8> {
    serde_json::to_vec(&jwks(ring()).expect("jwks")).expect("json")
}

fn valid_token() -> String {
    let request = Request {
        issuer: ISSUER,
        subject: subject("team", Some("trainer")),
        audiences: vec![AUDIENCE.into()],
        workload: Workload {
            job: "train".into(),
            queue: "research".into(),
            environment: "cloud".into(),
            pool: "aws".into(),
        },
        lifetime: Duration::from_secs(3600),
    };
    issue(ring(), request, now()).expect("token").token
}

/// The bundled example's catalog, parsed once.
fn catalog_rows() -> &'static [catalog::CatalogRow] {
    static ROWS: OnceLock<Vec<catalog::CatalogRow>> = OnceLock::new();
    ROWS.get_or_init(|| catalog::parse(example::CATALOG).expect("catalog"))
}

/// The bundled example's world: one 8-GPU node and the AWS catalog, for replays.
fn example_world() -> &'static Snapshot {
    static WORLD: OnceLock<Snapshot> = OnceLock::new();
    WORLD.get_or_init(|| {
        let nodes = trace::parse_private_gpus(example::PRIVATE_GPUS).expect("inventory");
        setup::snapshot(None, &nodes, catalog_rows()).expect("world")
    })
}

impl Harness {
    pub const ALL: [Harness; 7] = [
        Harness::Manifests,
        Harness::Specs,
        Harness::Trace,
        Harness::Nodes,
        Harness::Catalog,
        Harness::Jwks,
        Harness::Token,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Harness::Manifests => "manifests",
            Harness::Specs => "specs",
            Harness::Trace => "trace",
            Harness::Nodes => "nodes",
            Harness::Catalog => "catalog",
            Harness::Jwks => "jwks",
            Harness::Token => "token",
        }
    }

    pub fn by_name(name: &str) -> Option<Harness> {
        Harness::ALL.into_iter().find(|h| h.name() == name)
    }

    /// Seeds made at run time (a fresh key's documents cannot live in the repository).
    pub fn generated_seeds(self) -> Vec<Vec<u8>> {
        match self {
            Harness::Jwks => vec![jwks_document()],
            Harness::Token => vec![valid_token().into_bytes()],
            _ => Vec::new(),
        }
    }

    /// Repository files that are also seeds (the examples users start from).
    pub fn repository_seeds(self) -> &'static [&'static str] {
        match self {
            Harness::Manifests => &[
                "examples/config/setup.yaml",
                "examples/starburst-terms/setup-fixed.yaml",
                "examples/cluster/burstpolicy.yaml",
                "examples/cluster/queue-clinical.yaml",
                "examples/cluster/aws-pool.yaml",
                "examples/cluster/dataset-patients.yaml",
                "examples/cluster/job-gang.yaml",
                "policies/confidential-data.yaml",
            ],
            Harness::Catalog => &["examples/starburst-terms/catalog.csv"],
            _ => &[],
        }
    }

    /// Fragments worth splicing into this harness's inputs.
    pub fn dictionary(self) -> Vec<&'static str> {
        const NUMBERS: &[&str] = &[
            "0",
            "-1",
            "1e309",
            "-1e309",
            "NaN",
            "inf",
            "1.5",
            "4294967296",
            "18446744073709551616",
            "9223372036854775807",
            "-9223372036854775808",
            "0x10",
            "",
            " ",
        ];
        let words: &[&'static str] = match self {
            Harness::Manifests => &[
                "---\n",
                "apiVersion: spillway.io/v1alpha1\n",
                "kind: BurstPolicy\n",
                "kind: GpuQueue\n",
                "kind: ComputePool\n",
                "kind: Dataset\n",
                "metadata:\n",
                "  name: x\n",
                "spec:\n",
                "  rules:\n",
                "  - name: r\n",
                "    when: ",
                "job.totalGpus > 4",
                "waited > 60.0",
                "job.datasets.exists(d, d.name == 'x')",
                "has(queue.budgetLeftMonthlyUSD)",
                "maxWait: 15m\n",
                "maxWait: -1s\n",
                "maxWait: 99999999999h\n",
                "computeWaitFactor: 1e309\n",
                "forbid: cloud\n",
                "idleTimeout: 0s\n",
                "privateQuota: -3\n",
                "weight: 0\n",
                "&a ",
                "*a",
                "!!binary ",
                "{",
                "}",
                "[",
                "]",
                ": ",
                "- ",
                "\t",
                "'",
                "\"",
                "\\u0000",
                "#",
                "|\n",
                ">\n",
            ],
            Harness::Specs => &[
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "\"spec\"",
                "\"gpusPerReplica\"",
                "\"replicas\"",
                "\"queue\"",
                "\"maxWait\"",
                "\"budget\"",
                "\"rules\"",
                "\"when\"",
                "null",
                "true",
                "-1",
                "1e309",
                "4294967296",
                "\"\"",
                "\"\\u0000\"",
                "\"15m\"",
                "\"-5s\"",
                "\"classification\"",
                "\"Restricted\"",
                "\"aws\"",
                "\"instanceTypes\"",
            ],
            Harness::Trace => &[
                "\n",
                ",",
                "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
                "job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s\n",
                "1e309",
                "NaN",
                "-1",
                "0",
                "4294967296",
                "A100|H100",
                "Running",
                "Succeeded",
                "\r\n",
                "\"",
                "",
            ],
            Harness::Nodes => &[
                "\n",
                ",",
                "sn,cpu_milli,memory_mib,gpu,model\n",
                "x",
                "8",
                "0",
                "-1",
                "4294967296",
                ":",
                "A100",
                "99999x99999",
            ],
            Harness::Catalog => &[
                "\n",
                ",",
                "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone,GpuInfo\n",
                "p4d.24xlarge",
                "A100",
                "8",
                "0",
                "-1",
                "NaN",
                "1e309",
                "us-east-1",
                "\"",
                "{}",
            ],
            Harness::Jwks => &[
                "{",
                "}",
                "[",
                "]",
                "\"keys\"",
                "\"kty\"",
                "\"EC\"",
                "\"RSA\"",
                "\"kid\"",
                "\"alg\"",
                "\"none\"",
                "\"HS256\"",
                "\"n\"",
                "\"e\"",
                "\"x\"",
                "\"y\"",
                "\"crv\"",
                "\"P-256\"",
                "\"AQAB\"",
                "null",
                "\"\"",
            ],
            Harness::Token => &[
                ".",
                "=",
                "-",
                "_",
                "eyJhbGciOiJub25lIn0",
                "eyJ9",
                "AAAA",
                "",
            ],
        };
        let mut out = words.to_vec();
        if !matches!(self, Harness::Token | Harness::Jwks) {
            out.extend_from_slice(NUMBERS);
        }
        out
    }

    /// Runs the product on `input`.
    pub fn run(self, input: &[u8]) -> Verdict {
        let text = String::from_utf8_lossy(input);
        match self {
            Harness::Manifests => manifests(&text),
            Harness::Specs => specs(input),
            Harness::Trace => traces(&text),
            Harness::Nodes => {
                let openb = trace::parse_openb_nodes(&text);
                let spec = trace::parse_private_gpus(&text);
                match (openb, spec) {
                    (Ok(_), _) | (_, Ok(_)) => Verdict::Accepted,
                    (Err(a), Err(b)) => Verdict::Rejected(format!("{a}\n{b}")),
                }
            }
            Harness::Catalog => match catalog::parse(&text) {
                Ok(rows) => {
                    let all = catalog::offerings(&rows, "aws", "us-east-1", &[]);
                    let some =
                        catalog::offerings(&rows, "aws", "us-west-2", &["p4d.*".to_string()]);
                    assert!(some.len() <= rows.len() * 2 && all.len() <= rows.len() * 2);
                    Verdict::Accepted
                }
                Err(e) => Verdict::Rejected(e.to_string()),
            },
            Harness::Jwks => match Verifier::new(input, ISSUER, AUDIENCE) {
                Ok(v) => {
                    let _ = v.verify(&valid_token(), now());
                    Verdict::Accepted
                }
                Err(e) => Verdict::Rejected(e.to_string()),
            },
            Harness::Token => match verifier().verify(&text, now()) {
                Ok(_) => Verdict::Accepted,
                Err(e) => Verdict::Rejected(e.to_string()),
            },
        }
    }

    /// `Ok` when a rejection tells the user what is wrong and where; else why not.
    pub fn clear(self, message: &str) -> Result<(), String> {
        if message.trim().is_empty() {
            return Err("empty message".into());
        }
        // `file:line:` (and maybe `col:`) then a message.
        let positioned = |line: &str, prefix: &str| -> bool {
            let Some(rest) = line.strip_prefix(prefix) else {
                return false;
            };
            rest.split_once(':').is_some_and(|(l, m)| {
                !l.is_empty()
                    && l.bytes().all(|b| b.is_ascii_digit())
                    && l != "0"
                    && !m.trim().is_empty()
            })
        };
        let bad = match self {
            // file:line: message (with the column where there is one), for every problem.
            Harness::Manifests => message
                .lines()
                .find(|l| !positioned(l, "fuzz.yaml:"))
                .map(|l| format!("no file:line:col in {l:?}")),
            // line: message.
            Harness::Trace | Harness::Catalog => message
                .lines()
                .find(|l| {
                    !l.split_once(": ").is_some_and(|(n, m)| {
                        n.parse::<usize>().is_ok_and(|n| n > 0) && !m.trim().is_empty()
                    })
                })
                .map(|l| format!("no line number in {l:?}")),
            _ => message
                .lines()
                .any(|l| l.trim().is_empty())
                .then(|| "an empty line in the message".to_string()),
        };
        match bad {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

fn manifests(text: &str) -> Verdict {
    let file = Path::new("fuzz.yaml");
    // `spillway policy lint` on the same text: every finding has a position.
    for d in spillway_policy::lint::lint_str(file, text) {
        assert!(
            d.line >= 1 && d.column >= 1,
            "lint finding without a position: {d}"
        );
    }
    let m = match Manifests::parse_str(file, text) {
        Ok(m) => m,
        Err(e) => return Verdict::Rejected(e.to_string()),
    };
    // As `spillway simulate` reports them: the policy's file and line, then the rule, the
    // field and the position in its expression.
    let engine = match PolicyEngine::compile_manifests(&m) {
        Ok(e) => e,
        Err(e) => return Verdict::Rejected(e),
    };
    let nodes = trace::parse_private_gpus("2x8").expect("inventory");
    let mut snap = match setup::snapshot(Some(&m), &nodes, catalog_rows()) {
        Ok(s) => s,
        Err(e) => return Verdict::Rejected(e),
    };
    let queues: Vec<String> = snap.queues.iter().map(|q| q.name.clone()).collect();
    for (i, q) in queues.iter().enumerate() {
        let mut job = Job::new(
            format!("ns/j{i}"),
            q.clone(),
            1 + i as u32 % 8,
            Time::from_millis(0),
        );
        job.estimated_runtime = Some(Duration::from_secs(3600));
        snap.jobs.push(job);
    }
    let _ = decide(&snap, &engine, Time::from_millis(3_600_000));
    Verdict::Accepted
}

/// `input` read as a `T`, then `check`ed; any error as the user would read it.
fn object<T: serde::de::DeserializeOwned>(
    input: &[u8],
    check: impl FnOnce(T) -> Result<(), String>,
) -> Result<(), String> {
    check(serde_json::from_slice::<T>(input).map_err(|e| e.to_string())?)
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn specs(input: &[u8]) -> Verdict {
    let results = [
        object(input, |j: GpuJob| {
            validate::gpu_job(&j.spec).map_err(text)?;
            convert::job(&j, Time::from_millis(0))
                .map(drop)
                .map_err(text)
        }),
        object(input, |q: GpuQueue| {
            validate::gpu_queue(&q.spec).map_err(text)?;
            convert::queue(&q).map(drop).map_err(text)
        }),
        object(input, |p: ComputePool| {
            validate::compute_pool(&p.spec).map_err(text)?;
            convert::pool(&p).map(drop).map_err(text)
        }),
        object(input, |d: Dataset| {
            validate::dataset(&d.spec).map_err(text)?;
            convert::dataset(&d).map(drop).map_err(text)
        }),
        object(input, |p: BurstPolicy| {
            validate::burst_policy(&p.spec).map_err(text)?;
            PolicyEngine::compile(std::slice::from_ref(&p))
                .map(drop)
                .map_err(|errs| errs.iter().map(text).collect::<Vec<_>>().join("; "))
        }),
    ];
    if results.iter().any(Result::is_ok) {
        Verdict::Accepted
    } else {
        let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        Verdict::Rejected(errors.join("\n"))
    }
}

fn traces(text: &str) -> Verdict {
    let _ = trace::detect_format(text);
    let mut errors = Vec::new();
    let mut accepted = false;
    for format in [TraceFormat::Openb, TraceFormat::Spillway] {
        match trace::parse(text, format) {
            Ok(mut jobs) => {
                accepted = true;
                trace::drop_censored(&mut jobs);
                if !jobs.is_empty() && jobs.len() <= 8 {
                    let strategy = Strategy::from_str("spillway").expect("strategy");
                    let out = spillway_sim::replay(
                        example_world(),
                        &jobs,
                        &strategy,
                        &Options::default(),
                        &NoPolicy,
                        &mut |_, _| {},
                    );
                    drop(out);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if accepted {
        Verdict::Accepted
    } else {
        Verdict::Rejected(errors.join("\n"))
    }
}
