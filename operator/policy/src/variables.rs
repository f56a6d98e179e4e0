//! The CEL variables a rule can read, with their types: the one list that `policy lint`
//! checks expressions against, `spillway policy variables` prints, and docs/policy.md carries
//! (a test fails when the doc and this list differ, and another when this list and the values
//! the engine builds differ).

/// A field of a map variable.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Field {
    pub name: &'static str,
    pub ty: &'static str,
    /// Absent when unknown: test with `has(...)` first.
    pub optional: bool,
    pub doc: &'static str,
}

/// A variable.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Variable {
    pub name: &'static str,
    pub ty: &'static str,
    /// Only readable in this rule field (`offeringFilter`), else in every expression.
    pub only_in: Option<&'static str>,
    pub doc: &'static str,
    pub fields: &'static [Field],
}

const fn f(name: &'static str, ty: &'static str, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        optional: false,
        doc,
    }
}

const fn opt(name: &'static str, ty: &'static str, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        optional: true,
        doc,
    }
}

/// Every variable, in the order the docs list them.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "job",
        ty: "map",
        only_in: None,
        doc: "the GpuJob being decided",
        fields: &[
            f("name", "string", "the GpuJob's name"),
            f("namespace", "string", "its namespace"),
            f("queue", "string", "its GpuQueue"),
            f("priority", "int", "`spec.priority`"),
            f("replicas", "int", "gang size"),
            f("gpusPerReplica", "int", "GPUs per replica"),
            f("totalGpus", "int", "replicas x gpusPerReplica"),
            f(
                "gpuModels",
                "list(string)",
                "acceptable GPU models, normalised; empty = any",
            ),
            f(
                "datasets",
                "list(map)",
                "datasets read that exist: `name` (string), `classification` (string), `sizeGiB` (double)",
            ),
            f("restartable", "bool", "`spec.restartable`"),
            f(
                "placement",
                "string",
                "`Auto`, `PrivateOnly` or `CloudOnly`",
            ),
            opt(
                "estimatedRuntimeSeconds",
                "double",
                "`spec.estimatedRuntime` in seconds",
            ),
            opt(
                "maxRuntimeSeconds",
                "double",
                "`spec.maxRuntime` in seconds",
            ),
            opt(
                "maxHourlyCost",
                "double",
                "`spec.maxHourlyCost`, USD per hour",
            ),
            f(
                "requirements",
                "map",
                "`spec.requirements`: `minDriverVersion` and `minCudaVersion` (string), `gpuProducts` (list(string)), `minGpuMemoryGiB` (int), each absent when not set",
            ),
            f("labels", "map(string, string)", "the GpuJob's labels"),
            f(
                "kind",
                "string",
                "`GpuJob`, or the kind of the workload it stands for (`Job`; docs/workloads.md)",
            ),
            f(
                "topology",
                "map",
                "`spec.topology`: `required` or `preferred` (string, a topology level's label key), each absent when not set (docs/topology.md)",
            ),
        ],
    },
    Variable {
        name: "queue",
        ty: "map",
        only_in: None,
        doc: "the job's GpuQueue and its state now",
        fields: &[
            f("name", "string", "the GpuQueue's name"),
            f("pendingJobs", "int", "jobs waiting in it"),
            f("runningJobs", "int", "jobs running from it"),
            f("privateGpusInUse", "int", "private GPUs its jobs hold"),
            f("cloudGpusInUse", "int", "cloud GPUs its jobs hold"),
            f(
                "remoteGpusInUse",
                "int",
                "GPUs its jobs hold in other clusters (`cluster` pools)",
            ),
            f(
                "hourlyUSD",
                "double",
                "the spend rate its budget counts (cloud, other clusters, private with `budget.countsPrivate`), USD per hour",
            ),
            f(
                "spentThisMonthUSD",
                "double",
                "its spend this month as its budget counts it, USD",
            ),
            opt(
                "budgetLeftHourlyUSD",
                "double",
                "`budget.hourlyUSD` minus the rate, when set",
            ),
            opt(
                "budgetLeftMonthlyUSD",
                "double",
                "`budget.monthlyUSD` minus the month's spend, when set",
            ),
        ],
    },
    Variable {
        name: "waited",
        ty: "double",
        only_in: None,
        doc: "seconds the job has been queued",
        fields: &[],
    },
    Variable {
        name: "now",
        ty: "double",
        only_in: None,
        doc: "seconds since the Unix epoch (the trace's clock in the simulator)",
        fields: &[],
    },
    Variable {
        name: "offering",
        ty: "map",
        only_in: Some("offeringFilter"),
        doc: "the cloud offering, or the cluster pool, being filtered",
        fields: &[
            f("pool", "string", "its ComputePool"),
            f(
                "poolKind",
                "string",
                "`aws` (an EC2 offering) or `cluster` (another cluster's GPUs: the fields below describe one replica's share there)",
            ),
            f(
                "instanceType",
                "string",
                "EC2 instance type (empty for a cluster pool)",
            ),
            f("gpuModel", "string", "its GPU model"),
            f("gpus", "int", "GPUs per instance"),
            f("capacityType", "string", "`on-demand` or `spot`"),
            f(
                "region",
                "string",
                "region (a cluster pool's `location`, empty when unset)",
            ),
            f("zone", "string", "zone (empty for a cluster pool)"),
            f(
                "hourlyPrice",
                "double",
                "USD per hour for one instance (a cluster pool: for one replica's GPUs)",
            ),
            f(
                "gpuMemoryGiB",
                "double",
                "memory of one GPU, GiB (EC2's DescribeInstanceTypes, else Spillway's table; 0 if unknown)",
            ),
            f(
                "recentInterruptions",
                "int",
                "spot interruptions of this offering in the last 24 hours (0 for on-demand)",
            ),
        ],
    },
];

/// The variable `name`, if there is one.
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// The variables table of docs/policy.md.
pub fn markdown() -> String {
    let mut out = String::from(
        "| variable | type | field | field type | meaning |\n| --- | --- | --- | --- | --- |\n",
    );
    for v in VARIABLES {
        let scope = v
            .only_in
            .map(|f| format!(" (only in `{f}`)"))
            .unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | | | {}{scope} |\n",
            v.name, v.ty, v.doc
        ));
        for fl in v.fields {
            let optional = if fl.optional {
                "; optional: test with `has()`"
            } else {
                ""
            };
            out.push_str(&format!(
                "| | | `{}.{}` | {} | {}{optional} |\n",
                v.name, fl.name, fl.ty, fl.doc
            ));
        }
    }
    out
}
