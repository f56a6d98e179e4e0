//! Checks that an OpenAPI schema cannot express, each reported with its field path.
//!
//! The API server rejects what the schema can catch (ranges, enums, required fields, exactly
//! one of `private`/`aws`). Everything else is checked here, so the operator can set an
//! `Invalid` condition that lists every problem at once, and `spillway simulate`, `policy lint`
//! and `explain` can reject the same files offline. The schema's checks are repeated here too,
//! because files read offline never pass through an API server.

use std::collections::BTreeSet;
use std::fmt;

use spillway_core::{CapacityType, Classification, Duration};

use crate::dataset::{DatasetSpec, LocationEnvironment};
use crate::job::GpuJobSpec;
use crate::policy::BurstPolicySpec;
use crate::pool::ComputePoolSpec;
use crate::queue::GpuQueueSpec;

/// One problem in a resource, at a field path such as `spec.burst.maxWait`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn into_result(self) -> Result<(), FieldErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }

    fn duration(&mut self, path: &str, value: Option<&str>) -> Option<Duration> {
        let value = value?;
        match Duration::parse(value) {
            Ok(d) => Some(d),
            Err(e) => {
                self.push(path, e.to_string());
                None
            }
        }
    }

    fn version(&mut self, path: &str, value: Option<&str>) {
        if let Some(v) = value
            && let Err(e) = v.parse::<spillway_core::Version>()
        {
            self.push(path, e.to_string());
        }
    }

    fn non_negative(&mut self, path: &str, value: Option<f64>) {
        if let Some(v) = value
            && !(v.is_finite() && v >= 0.0)
        {
            self.push(path, format!("must be a number >= 0, got {v}"));
        }
    }

    fn unique<'a, T: Ord + fmt::Display + 'a>(
        &mut self,
        path: &str,
        items: impl IntoIterator<Item = &'a T>,
    ) {
        let mut seen = BTreeSet::new();
        for (i, item) in items.into_iter().enumerate() {
            if !seen.insert(item) {
                self.push(
                    format!("{path}[{i}]"),
                    format!("duplicate value {item:?}", item = item.to_string()),
                );
            }
        }
    }

    /// An http:// or https:// URL, when set.
    fn url(&mut self, path: &str, value: Option<&str>) {
        if let Some(v) = value
            && !(v.starts_with("http://") || v.starts_with("https://"))
                | v.contains(char::is_whitespace)
        {
            self.push(path, format!("{v:?} must be an http:// or https:// URL"));
        }
    }

    fn dns_names(&mut self, path: &str, names: &[String]) {
        for (i, name) in names.iter().enumerate() {
            if let Err(why) = check_dns_subdomain(name) {
                self.push(format!("{path}[{i}]"), why);
            }
        }
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}

impl FieldErrors {
    /// Always [`ErrorCategory::InvalidInput`]: the object must change before it can be used.
    pub fn category(&self) -> spillway_core::ErrorCategory {
        spillway_core::ErrorCategory::InvalidInput
    }
}

/// A Kubernetes object name (RFC 1123 subdomain).
pub fn check_dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let ends_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok_chars || !ends_ok(name.bytes().next()) || !ends_ok(name.bytes().last()) {
        return Err(format!(
            "{name:?} is not a valid name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A namespace name (RFC 1123 label): a subdomain of at most 63 characters without dots.
pub fn check_dns_label(name: &str) -> Result<(), String> {
    check_dns_subdomain(name)?;
    if name.len() > 63 || name.contains('.') {
        return Err(format!(
            "{name:?} is not a namespace name: at most 63 lower-case letters, digits and '-'"
        ));
    }
    Ok(())
}

/// Checks a GpuJob spec.
pub fn gpu_job(spec: &GpuJobSpec) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    if let Err(why) = check_dns_subdomain(&spec.queue) {
        errs.push("spec.queue", why);
    }
    if !(1..=crate::job::MAX_REPLICAS).contains(&spec.replicas) {
        errs.push(
            "spec.replicas",
            format!(
                "must be between 1 and {}, got {}",
                crate::job::MAX_REPLICAS,
                spec.replicas
            ),
        );
    }
    if !(1..=16).contains(&spec.gpus_per_replica) {
        errs.push(
            "spec.gpusPerReplica",
            format!("must be between 1 and 16, got {}", spec.gpus_per_replica),
        );
    }
    for (i, m) in spec.gpu_models.iter().enumerate() {
        if m.trim().is_empty() {
            errs.push(format!("spec.gpuModels[{i}]"), "must not be empty");
        }
    }
    errs.unique("spec.gpuModels", &spec.gpu_models);
    if let Some(t) = &spec.topology {
        check_topology(t, &mut errs);
    }
    errs.dns_names("spec.datasets", &spec.datasets);
    errs.unique("spec.datasets", &spec.datasets);
    errs.duration(
        "spec.checkpointInterval",
        spec.checkpoint_interval.as_deref(),
    );
    let estimated = errs.duration("spec.estimatedRuntime", spec.estimated_runtime.as_deref());
    let max = errs.duration("spec.maxRuntime", spec.max_runtime.as_deref());
    if let (Some(est), Some(max)) = (estimated, max)
        && est > max
    {
        errs.push(
            "spec.estimatedRuntime",
            format!("estimated runtime {est} exceeds maxRuntime {max}: the job would be stopped before it is expected to finish"),
        );
    }
    if max == Some(Duration::ZERO) {
        errs.push("spec.maxRuntime", "must be longer than 0");
    }
    errs.non_negative("spec.maxHourlyCost", spec.max_hourly_cost);
    if let Some(r) = &spec.requirements {
        errs.version(
            "spec.requirements.minDriverVersion",
            r.min_driver_version.as_deref(),
        );
        errs.version(
            "spec.requirements.minCudaVersion",
            r.min_cuda_version.as_deref(),
        );
        for (i, g) in r.gpu_products.iter().enumerate() {
            if g.trim().is_empty() {
                errs.push(
                    format!("spec.requirements.gpuProducts[{i}]"),
                    "must not be empty",
                );
            }
        }
        errs.unique("spec.requirements.gpuProducts", &r.gpu_products);
        if let Some(m) = r.min_gpu_memory_gib
            && !(1..=4096).contains(&m)
        {
            errs.push(
                "spec.requirements.minGpuMemoryGiB",
                format!("must be between 1 and 4096, got {m}"),
            );
        }
    }
    match (&spec.template, &spec.workload_ref) {
        (Some(_), Some(_)) => errs.push(
            "spec.workloadRef",
            "set exactly one of template (the pods Spillway makes) or workloadRef (the workload whose pods are run)",
        ),
        (None, Some(_)) => {}
        (None, None) => errs.push(
            "spec.template",
            "set exactly one of template (the pods Spillway makes) or workloadRef (the workload whose pods are run)",
        ),
        (Some(t), None) => match &t.spec {
            Some(pod) if !pod.containers.is_empty() => {}
            _ => errs.push(
                "spec.template.spec.containers",
                "the pod template needs at least one container",
            ),
        },
    }
    errs.into_result()
}

/// Checks a GpuQueue spec.
pub fn gpu_queue(spec: &GpuQueueSpec) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    if !spec.namespaces.is_empty() && spec.namespace_selector.is_some() {
        errs.push(
            "spec.namespaceSelector",
            "set either namespaces or namespaceSelector, not both",
        );
    }
    errs.dns_names("spec.namespaces", &spec.namespaces);
    errs.unique("spec.namespaces", &spec.namespaces);
    if let Some(q) = &spec.private_quota
        && q.gpus < 0
    {
        errs.push(
            "spec.privateQuota.gpus",
            format!("must be >= 0, got {}", q.gpus),
        );
    }
    if spec.weight < 1 {
        errs.push(
            "spec.weight",
            format!("must be at least 1, got {}", spec.weight),
        );
    }
    if let Some(idle) = &spec.idle {
        if let Some(t) = idle.threshold
            && !(t.is_finite() && (0.0..=100.0).contains(&t))
        {
            errs.push(
                "spec.idle.threshold",
                format!("must be a percentage between 0 and 100, got {t}"),
            );
        }
        errs.duration("spec.idle.after", idle.after.as_deref());
    }
    if let Some(burst) = &spec.burst {
        errs.duration("spec.burst.maxWait", Some(&burst.max_wait));
        errs.non_negative("spec.burst.computeWaitFactor", burst.compute_wait_factor);
        errs.non_negative("spec.burst.waitCostPerHour", burst.wait_cost_per_hour);
        if burst.wait_cost_per_hour == Some(0.0) {
            errs.push(
                "spec.burst.waitCostPerHour",
                "must be above 0 (an hour of waiting worth nothing would wait forever)",
            );
        }
        errs.dns_names("spec.burst.pools", &burst.pools);
        errs.unique("spec.burst.pools", &burst.pools);
        unique_capacity(&mut errs, "spec.burst.capacityTypes", &burst.capacity_types);
    }
    if let Some(p) = &spec.preemption {
        errs.duration(
            "spec.preemption.maxGracePeriod",
            p.max_grace_period.as_deref(),
        );
        errs.duration("spec.preemption.minRuntime", p.min_runtime.as_deref());
    }
    if let Some(b) = &spec.budget {
        errs.non_negative("spec.budget.monthlyUSD", b.monthly_usd);
        errs.non_negative("spec.budget.hourlyUSD", b.hourly_usd);
        if let (Some(month), Some(hour)) = (b.monthly_usd, b.hourly_usd)
            && hour > month
        {
            errs.push(
                "spec.budget.hourlyUSD",
                format!("{hour} exceeds monthlyUSD {month}: the month's budget would be spent within the hour"),
            );
        }
    }
    errs.url(
        "spec.telemetry.otlpEndpoint",
        spec.telemetry
            .as_ref()
            .and_then(|t| t.otlp_endpoint.as_deref()),
    );
    if let Some(id) = &spec.identity {
        errs.unique("spec.identity.audiences", &id.audiences);
        for (i, a) in id.audiences.iter().enumerate() {
            if a.trim().is_empty() {
                errs.push(format!("spec.identity.audiences[{i}]"), "must not be empty");
            }
        }
        if let Some(arn) = &id.aws_role_arn {
            let parts: Vec<&str> = arn.splitn(6, ':').collect();
            let ok = parts.len() == 6
                && parts[0] == "arn"
                && parts[1].starts_with("aws")
                && parts[2] == "iam"
                && parts[5].starts_with("role/")
                && parts[5].len() > "role/".len();
            if !ok {
                errs.push(
                    "spec.identity.awsRoleArn",
                    format!("{arn:?} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)"),
                );
            }
        }
    }
    errs.into_result()
}

fn unique_capacity(errs: &mut FieldErrors, path: &str, types: &[CapacityType]) {
    let names: Vec<&'static str> = types.iter().map(|c| c.as_str()).collect();
    errs.unique(path, &names);
}

/// Checks a ComputePool spec.
pub fn compute_pool(spec: &ComputePoolSpec) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    let kinds = [
        spec.private.is_some(),
        spec.aws.is_some(),
        spec.cluster.is_some(),
    ];
    if kinds.iter().filter(|&&k| k).count() != 1 {
        errs.push("spec", "set exactly one of private, aws and cluster");
    }
    if let Some(t) = spec.private.as_ref().and_then(|p| p.topology.as_ref()) {
        check_pool_topology(t, &mut errs);
    }
    if let Some(c) = &spec.cluster {
        let r = &c.kubeconfig_secret_ref;
        for (field, v) in [
            ("name", &r.name),
            ("namespace", &r.namespace),
            ("key", &r.key),
        ] {
            if v.trim().is_empty() {
                errs.push(
                    format!("spec.cluster.kubeconfigSecretRef.{field}"),
                    "must not be empty",
                );
            }
        }
        if let Err(why) = check_dns_label(&c.namespace) {
            errs.push("spec.cluster.namespace", why);
        }
        if !(c.gpu_cost_per_hour.is_finite() && c.gpu_cost_per_hour >= 0.0) {
            errs.push(
                "spec.cluster.gpuCostPerHour",
                "must be a number of at least 0",
            );
        }
        if c.location.as_ref().is_some_and(|l| l.trim().is_empty()) {
            errs.push("spec.cluster.location", "must not be empty when set");
        }
        if c.lost_after != "never" {
            errs.duration("spec.cluster.lostAfter", Some(&c.lost_after));
        }
    }
    if let Some(p) = &spec.private {
        if p.node_selector.is_empty() {
            errs.push(
                "spec.private.nodeSelector",
                "must name at least one label, or the pool would claim every node of the cluster",
            );
        }
        errs.non_negative("spec.private.gpuCostPerHour", p.gpu_cost_per_hour);
    }
    if let Some(aws) = &spec.aws {
        if aws.region.trim().is_empty() {
            errs.push("spec.aws.region", "must not be empty");
        }
        if let Some(e) = &aws.environment {
            errs.version(
                "spec.aws.environment.driverVersion",
                e.driver_version.as_deref(),
            );
            errs.version(
                "spec.aws.environment.cudaVersion",
                e.cuda_version.as_deref(),
            );
        }
        match (&aws.ami_id, &aws.launch_template) {
            (None, None) => errs.push("spec.aws", "set amiId or launchTemplate"),
            (Some(ami), _) if !ami.starts_with("ami-") => errs.push(
                "spec.aws.amiId",
                format!("{ami:?} is not an AMI id (ami-...)"),
            ),
            _ => {}
        }
        if let Some(lt) = &aws.launch_template
            && lt.id.is_some() == lt.name.is_some()
        {
            errs.push("spec.aws.launchTemplate", "set exactly one of id and name");
        }
        if aws.instance_types.is_empty() {
            errs.push("spec.aws.instanceTypes", "list at least one instance type");
        }
        for (i, t) in aws.instance_types.iter().enumerate() {
            if !t.contains('.') || t.contains(char::is_whitespace) {
                errs.push(
                    format!("spec.aws.instanceTypes[{i}]"),
                    format!("{t:?} is not an EC2 instance type such as p4d.24xlarge"),
                );
            }
        }
        errs.unique("spec.aws.instanceTypes", &aws.instance_types);
        errs.unique("spec.aws.availabilityZones", &aws.availability_zones);
        unique_capacity(&mut errs, "spec.aws.capacityTypes", &aws.capacity_types);
        if let Some(q) = &aws.interruption_queue
            && !(q.starts_with("https://") || q.starts_with("http://"))
        {
            errs.push(
                "spec.aws.interruptionQueue",
                format!(
                    "{q:?} is not an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
                ),
            );
        }
        errs.duration(
            "spec.aws.rebalanceDeadline",
            aws.rebalance_deadline.as_deref(),
        );
    }
    if let Some(l) = &spec.limits {
        for (path, v) in [
            ("spec.limits.maxNodes", l.max_nodes),
            ("spec.limits.maxGpus", l.max_gpus),
        ] {
            if let Some(v) = v
                && v < 0
            {
                errs.push(path, format!("must be >= 0, got {v}"));
            }
        }
        errs.non_negative("spec.limits.maxHourlyUSD", l.max_hourly_usd);
    }
    errs.duration("spec.idleTimeout", Some(&spec.idle_timeout));
    for (i, t) in spec.node_taints.iter().enumerate() {
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            errs.push(
                format!("spec.nodeTaints[{i}].effect"),
                format!(
                    "{:?} is not NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            );
        }
        if t.key.is_empty() {
            errs.push(format!("spec.nodeTaints[{i}].key"), "must not be empty");
        }
    }
    errs.url(
        "spec.telemetry.otlpEndpoint",
        spec.telemetry
            .as_ref()
            .and_then(|t| t.otlp_endpoint.as_deref()),
    );
    errs.into_result()
}

/// Checks a Dataset spec.
pub fn dataset(spec: &DatasetSpec) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    for (i, loc) in spec.locations.iter().enumerate() {
        if loc.environment == LocationEnvironment::Aws
            && loc.region.as_deref().is_none_or(|r| r.trim().is_empty())
        {
            errs.push(
                format!("spec.locations[{i}].region"),
                "an aws location needs a region",
            );
        }
        if loc.environment == LocationEnvironment::Remote
            && loc.region.as_deref().is_none_or(|r| r.trim().is_empty())
        {
            errs.push(
                format!("spec.locations[{i}].region"),
                "a remote location needs a region: the location of its cluster pool",
            );
        }
    }
    errs.non_negative("spec.sizeGiB", spec.size_gib);
    errs.non_negative("spec.egressUSDPerGiB", spec.egress_usd_per_gib);
    errs.into_result()
}

/// Checks a BurstPolicy spec (the CEL expressions are checked by `spillway-policy`).
pub fn burst_policy(spec: &BurstPolicySpec) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    let mut names = BTreeSet::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if rule.name.trim().is_empty() {
            errs.push(format!("{at}.name"), "must not be empty");
        } else if !names.insert(rule.name.as_str()) {
            errs.push(
                format!("{at}.name"),
                format!("duplicate rule name {:?}", rule.name),
            );
        }
        if let (Some(f), Some(r)) = (rule.forbid, rule.require)
            && f == r
        {
            errs.push(at.clone(), format!("forbids and requires {f} at once"));
        }
        errs.duration(&format!("{at}.maxWait"), rule.max_wait.as_deref());
        errs.non_negative(&format!("{at}.computeWaitFactor"), rule.compute_wait_factor);
        errs.non_negative(&format!("{at}.maxHourlyCost"), rule.max_hourly_cost);
        unique_capacity(
            &mut errs,
            &format!("{at}.capacityTypes"),
            &rule.capacity_types,
        );
        for (j, c) in rule.allow_classifications.iter().enumerate() {
            if *c == Classification::Restricted {
                errs.push(
                    format!("{at}.allowClassifications[{j}]"),
                    "Restricted data never leaves private nodes and cannot be allowed in the cloud",
                );
            }
        }
    }
    let mut tests = BTreeSet::new();
    for (i, t) in spec.tests.iter().enumerate() {
        if !tests.insert(t.name.as_str()) {
            errs.push(
                format!("spec.tests[{i}].name"),
                format!("duplicate test name {:?}", t.name),
            );
        }
    }
    errs.into_result()
}

/// `spec.topology` of a GpuJob.
fn check_topology(t: &crate::topology::JobTopology, errs: &mut FieldErrors) {
    match (&t.required, &t.preferred) {
        (Some(_), Some(_)) | (None, None) => {
            errs.push("spec.topology", "set exactly one of required and preferred")
        }
        (Some(level), None) => label_key("spec.topology.required", level, errs),
        (None, Some(level)) => label_key("spec.topology.preferred", level, errs),
    }
}

/// `spec.private.topology` of a ComputePool.
fn check_pool_topology(t: &crate::topology::PoolTopology, errs: &mut FieldErrors) {
    const FIELD: &str = "spec.private.topology.levels";
    if t.levels.is_empty() || t.levels.len() > crate::topology::MAX_LEVELS {
        errs.push(
            FIELD,
            format!(
                "name 1 to {} levels, got {}",
                crate::topology::MAX_LEVELS,
                t.levels.len()
            ),
        );
    }
    for (i, level) in t.levels.iter().enumerate() {
        label_key(&format!("{FIELD}[{i}]"), level, errs);
    }
    errs.unique(FIELD, &t.levels);
}

/// A Kubernetes label key: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters, alphanumeric at both ends, with `-`, `_` and `.` inside.
fn label_key(field: &str, key: &str, errs: &mut FieldErrors) {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && let Err(why) = check_dns_subdomain(p)
    {
        errs.push(field, format!("{key:?}: its prefix {why}"));
        return;
    }
    let ok_inside = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > 63
        || !name.chars().all(ok_inside)
        || !ends(name.chars().next())
        || !ends(name.chars().last())
    {
        errs.push(
            field,
            format!(
                "{key:?} is not a label key (a name of 1 to 63 letters, digits, '-', '_' or '.', alphanumeric at both ends, after an optional DNS prefix and '/')"
            ),
        );
    }
}
