//! Spillway's BurstPolicy engine.
//!
//! Owns the semantics of BurstPolicy rules: each rule's CEL expressions are compiled once, when
//! the policies load, and evaluated many times into the core's [`Effects`]. This crate
//! implements [`spillway_core::Policy`]; the core never sees CEL.
//!
//! Semantics (docs/policy.md has the full reference):
//! - Policies are evaluated in ascending `spec.order`, then by name; rules top to bottom.
//! - A rule applies when its `when` is true (no `when`: always).
//! - Effects combine so that the most restrictive wins for permissions and caps: every
//!   `forbid` holds, `maxHourlyCost` takes the lowest, `capacityTypes` and `regions` the
//!   intersection, each `instanceTypes` list must match. For values the first applying rule
//!   wins: `require`, `maxWait`, `waitMode`/`computeWaitFactor`. `allowClassifications` grants
//!   add up.
//! - When no rule applies, the queue and pool settings decide alone.
//! - A rule whose expression fails at run time (a missing field, a type mismatch) does not
//!   apply; the failure is counted per rule ([`PolicyEngine::runtime_errors`]). Nothing panics.

pub mod lint;
mod reads;
pub mod testing;
pub mod variables;
mod vars;

use vars::{Vars, vars};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cel::{Context, Program, Value};
use spillway_api::BurstPolicy;
use spillway_api::policy::PolicyRule;
use spillway_api::queue::WaitMode as ApiWaitMode;
use spillway_core::policy::Ruled;
use spillway_core::{Duration, Effects, Offering, Policy, PolicyContext, WaitMode};

/// The longest expression accepted, in bytes (bounds parse and evaluation cost).
pub const MAX_EXPRESSION_LEN: usize = 4096;

/// The deepest nesting of parentheses, brackets and braces accepted (bounds the parser's
/// recursion).
pub const MAX_NESTING: usize = 32;

pub(crate) fn nesting(src: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in src.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// A rule that cannot be compiled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("BurstPolicy {policy} rule {rule}: {field}{}: {message}", at(*.position))]
pub struct CompileError {
    pub policy: String,
    pub rule: String,
    /// `when`, `offeringFilter` or `maxWait`.
    pub field: &'static str,
    /// Where inside the expression the problem is: 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

fn at(position: Option<(usize, usize)>) -> String {
    match position {
        Some((1, column)) => format!(" (column {column})"),
        Some((line, column)) => format!(" (line {line}, column {column})"),
        None => String::new(),
    }
}

impl CompileError {
    /// Always [`spillway_core::ErrorCategory::InvalidInput`]: the policy must be fixed.
    pub fn category(&self) -> spillway_core::ErrorCategory {
        spillway_core::ErrorCategory::InvalidInput
    }
}

struct Rule {
    /// `policy/rule`.
    id: String,
    when: Option<Program>,
    offering_filter: Option<Program>,
    spec: PolicyRule,
    max_wait: Option<Duration>,
}

/// Compiled BurstPolicies, ready to evaluate.
pub struct PolicyEngine {
    rules: Vec<Rule>,
    /// Some rule reads `waited` or `now`.
    reads_clock: bool,
    /// The fields of `job`, `queue` and `offering` some rule reads: the only ones built.
    reads: reads::Reads,
    /// The standard functions and macros, shared by every evaluation.
    env: Arc<cel::Env>,
    errors: Mutex<BTreeMap<String, u64>>,
}

fn compile_expr(
    policy: &str,
    rule: &str,
    field: &'static str,
    src: &str,
) -> Result<Program, CompileError> {
    let err_at = |position: Option<(usize, usize)>, message: String| CompileError {
        policy: policy.to_string(),
        rule: rule.to_string(),
        field,
        position,
        message,
    };
    let err = |message: String| err_at(None, message);
    if src.len() > MAX_EXPRESSION_LEN {
        return Err(err(format!(
            "expression is {} bytes long; the limit is {MAX_EXPRESSION_LEN}",
            src.len()
        )));
    }
    if nesting(src) > MAX_NESTING {
        return Err(err(format!(
            "expression nests deeper than {MAX_NESTING} levels"
        )));
    }
    // Unary operators nest too: `!!!!x`, `-----1`.
    if src.chars().filter(|c| matches!(c, '!' | '-')).count() > 4 * MAX_NESTING {
        return Err(err("expression has too many unary operators".to_string()));
    }
    let program = Program::compile(src).map_err(|e| match e.errors.first() {
        // CEL positions are 1-based lines and 1-based columns.
        Some(first) => err_at(
            Some((first.pos.0.max(1) as usize, first.pos.1.max(1) as usize)),
            format!("CEL syntax error: {}", first.msg),
        ),
        None => err(e
            .to_string()
            .lines()
            .next()
            .unwrap_or("syntax error")
            .to_string()),
    })?;
    // Names and types: an unknown variable or field, a variable read where it is not set, a
    // comparison with a literal of another type. A rule that passes syntax but fails here
    // could never match (`jbo.totalGpus > 8` is an error at every evaluation).
    lint::check_names(src, field, &program).map_err(|e| {
        let (line, column) = e.position;
        err_at(Some((line, column + 1)), e.message)
    })?;
    Ok(program)
}

/// Compiles one expression as the operator and `spillway policy lint` both do (syntax, size,
/// names and literal types); the error's position is 1-based inside the expression.
pub fn check_expression(field: &'static str, src: &str) -> Result<(), CompileError> {
    compile_expr("", "", field, src).map(|_| ())
}

impl PolicyEngine {
    /// No rules: queue and pool settings alone decide.
    pub fn empty() -> PolicyEngine {
        PolicyEngine {
            rules: Vec::new(),
            reads_clock: false,
            reads: reads::Reads::default(),
            env: Arc::new(cel::Env::stdlib()),
            errors: Mutex::new(BTreeMap::new()),
        }
    }

    /// Compiles the BurstPolicies of loaded manifests; each error is one line naming the
    /// policy's file and line (`file:line: BurstPolicy p rule r: ...`).
    pub fn compile_manifests(
        m: &spillway_api::manifests::Manifests,
    ) -> Result<PolicyEngine, String> {
        let objects: Vec<BurstPolicy> = m.policies.iter().map(|p| p.object.clone()).collect();
        PolicyEngine::compile(&objects).map_err(|errors| {
            let lines: Vec<String> = errors
                .iter()
                .map(|e| {
                    let at = m
                        .policies
                        .iter()
                        .find(|p| p.object.metadata.name.as_deref() == Some(e.policy.as_str()))
                        .map(|p| format!("{}:{}", p.file.display(), p.line))
                        .unwrap_or_default();
                    format!("{at}: {e}")
                })
                .collect();
            lines.join("\n")
        })
    }

    /// Compiles every rule of `policies`; reports every rule that does not compile.
    pub fn compile(policies: &[BurstPolicy]) -> Result<PolicyEngine, Vec<CompileError>> {
        let mut sorted: Vec<&BurstPolicy> = policies.iter().collect();
        sorted.sort_by(|a, b| {
            a.spec
                .order
                .cmp(&b.spec.order)
                .then(a.metadata.name.cmp(&b.metadata.name))
        });
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for p in sorted {
            let pname = p.metadata.name.clone().unwrap_or_default();
            for r in &p.spec.rules {
                let when = r
                    .when
                    .as_deref()
                    .filter(|w| !w.trim().is_empty())
                    .map(|w| compile_expr(&pname, &r.name, "when", w))
                    .transpose();
                let filter = r
                    .offering_filter
                    .as_deref()
                    .filter(|w| !w.trim().is_empty())
                    .map(|w| compile_expr(&pname, &r.name, "offeringFilter", w))
                    .transpose();
                let max_wait = match r.max_wait.as_deref().map(Duration::parse).transpose() {
                    Ok(d) => d,
                    Err(e) => {
                        errors.push(CompileError {
                            policy: pname.clone(),
                            rule: r.name.clone(),
                            field: "maxWait",
                            position: None,
                            message: e.to_string(),
                        });
                        None
                    }
                };
                match (when, filter) {
                    (Ok(when), Ok(offering_filter)) => rules.push(Rule {
                        id: format!("{pname}/{}", r.name),
                        when,
                        offering_filter,
                        spec: r.clone(),
                        max_wait,
                    }),
                    (w, f) => errors.extend(w.err().into_iter().chain(f.err())),
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let reads_clock = rules.iter().any(|r| {
            [&r.when, &r.offering_filter]
                .into_iter()
                .flatten()
                .any(|p| {
                    p.references()
                        .variables()
                        .iter()
                        .any(|v| matches!(*v, "waited" | "now"))
                })
        });
        let reads = reads::Reads::of(
            rules
                .iter()
                .flat_map(|r| [&r.when, &r.offering_filter])
                .flatten(),
        );
        Ok(PolicyEngine {
            reads_clock,
            reads,
            rules,
            env: Arc::new(cel::Env::stdlib()),
            errors: Mutex::new(BTreeMap::new()),
        })
    }

    /// The error counters; a poisoned lock (a panic elsewhere while counting) still counts.
    fn error_counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many times each rule's expression failed at run time (and so did not apply).
    pub fn runtime_errors(&self) -> BTreeMap<String, u64> {
        self.error_counts().clone()
    }

    /// The number of compiled rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules whose `when` applies to the first job of `snapshot` at `now` (for test and
    /// explain output).
    pub fn applied_rules(
        &self,
        snapshot: &spillway_core::Snapshot,
        now: spillway_core::Time,
    ) -> Vec<String> {
        self.rule_report(snapshot, now)
            .into_iter()
            .filter(|(_, o)| *o == RuleOutcome::Applied)
            .map(|(r, _)| r)
            .collect()
    }

    /// Every rule, in evaluation order, with what it did for the first job of `snapshot`.
    pub fn rule_report(
        &self,
        snapshot: &spillway_core::Snapshot,
        now: spillway_core::Time,
    ) -> Vec<(String, RuleOutcome)> {
        let Some(job) = snapshot.jobs.first() else {
            return Vec::new();
        };
        let Some(queue) = snapshot.queues.iter().find(|q| q.name == job.queue) else {
            return Vec::new();
        };
        let state = spillway_core::QueueState {
            pending_jobs: 1,
            spent_this_month_usd: queue.spent_this_month_usd,
            hourly_usd: snapshot
                .instances
                .iter()
                .filter(|i| i.queue == queue.name)
                .map(|i| i.hourly_price)
                .sum(),
            ..Default::default()
        };
        let ctx = PolicyContext {
            job,
            queue,
            queue_state: &state,
            datasets: snapshot
                .datasets
                .iter()
                .filter(|d| job.datasets.contains(&d.name))
                .collect(),
            waited: now.since(job.queued_at),
            now,
        };
        let v = vars(&ctx, None, &self.reads);
        let scope = self.scope(&v);
        self.rules
            .iter()
            .map(|r| {
                let before = self.error_counts().get(&r.id).copied().unwrap_or(0);
                let applied = self.applies(r, &scope);
                let failed = self.error_counts().get(&r.id).copied().unwrap_or(0) > before;
                let outcome = match (applied, failed) {
                    (true, _) => RuleOutcome::Applied,
                    (false, true) => RuleOutcome::Failed,
                    (false, false) => RuleOutcome::NotApplied,
                };
                (r.id.clone(), outcome)
            })
            .collect()
    }

    /// The context every rule of one job is evaluated in: the engine's functions, and the
    /// variables built for this job lent by reference (no copy per rule).
    fn scope<'v>(&self, vars: &'v Vars<'_, '_>) -> Context<'v, 'v> {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.set_variable_resolver(vars);
        ctx
    }

    fn eval(&self, rule: &Rule, program: &Program, ctx: &Context<'_, '_>) -> bool {
        match program.execute(ctx) {
            Ok(Value::Bool(b)) => b,
            _ => {
                self.count_error(rule);
                false
            }
        }
    }

    fn count_error(&self, rule: &Rule) {
        *self.error_counts().entry(rule.id.clone()).or_default() += 1;
    }

    fn applies(&self, rule: &Rule, ctx: &Context<'_, '_>) -> bool {
        match &rule.when {
            None => true,
            Some(p) => self.eval(rule, p, ctx),
        }
    }
}

/// What a rule did for one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOutcome {
    Applied,
    NotApplied,
    /// Its expression failed at run time, so it did not apply.
    Failed,
}

fn ruled<T>(value: T, rule: &str) -> Ruled<T> {
    Ruled {
        value,
        rule: rule.to_string(),
    }
}

fn intersect<T: PartialEq + Clone>(current: &mut Option<Ruled<Vec<T>>>, values: &[T], rule: &str) {
    match current {
        None => {
            *current = Some(Ruled {
                value: values.to_vec(),
                rule: rule.to_string(),
            })
        }
        Some(c) => c.value.retain(|v| values.contains(v)),
    }
}

impl Policy for PolicyEngine {
    fn effects(&self, ctx: &PolicyContext<'_>) -> Effects {
        let mut out = Effects::default();
        if self.rules.is_empty() {
            return out;
        }
        let v = vars(ctx, None, &self.reads);
        let scope = self.scope(&v);
        for rule in &self.rules {
            if !self.applies(rule, &scope) {
                continue;
            }
            let r = &rule.spec;
            if let Some(env) = r.forbid {
                out.forbid.push(ruled(env, &rule.id));
            }
            if let (Some(env), None) = (r.require, &out.require) {
                out.require = Some(ruled(env, &rule.id));
            }
            if let (Some(d), None) = (rule.max_wait, &out.max_wait) {
                out.max_wait = Some(ruled(d, &rule.id));
            }
            if let (Some(mode), None) = (r.wait_mode, &out.wait_mode) {
                let mode = match mode {
                    ApiWaitMode::Fixed => WaitMode::Fixed,
                    ApiWaitMode::ComputeWait => WaitMode::ComputeWait,
                    ApiWaitMode::CostAware => WaitMode::CostAware,
                    ApiWaitMode::Priced => WaitMode::Priced,
                };
                out.wait_mode = Some(ruled((mode, r.compute_wait_factor), &rule.id));
            }
            if let Some(cap) = r.max_hourly_cost
                && out.max_hourly_cost.as_ref().is_none_or(|c| cap < c.value)
            {
                out.max_hourly_cost = Some(ruled(cap, &rule.id));
            }
            if !r.capacity_types.is_empty() {
                intersect(&mut out.capacity_types, &r.capacity_types, &rule.id);
            }
            if !r.regions.is_empty() {
                intersect(&mut out.regions, &r.regions, &rule.id);
            }
            if !r.instance_types.is_empty() {
                out.instance_types
                    .push(ruled(r.instance_types.clone(), &rule.id));
            }
            for c in &r.allow_classifications {
                out.allowed_classifications.push(ruled(*c, &rule.id));
            }
            if let (Some(r), None) = (r.repatriate, &out.repatriate) {
                let value = match r {
                    spillway_api::policy::Repatriate::Never => spillway_core::Repatriate::Never,
                    spillway_api::policy::Repatriate::WhenCheaper => {
                        spillway_core::Repatriate::WhenCheaper
                    }
                };
                out.repatriate = Some(ruled(value, &rule.id));
            }
        }
        out
    }

    fn offering_allowed(&self, ctx: &PolicyContext<'_>, offering: &Offering) -> Result<(), String> {
        let v = vars(ctx, Some(offering), &self.reads);
        let scope = self.scope(&v);
        for rule in &self.rules {
            let Some(filter) = &rule.offering_filter else {
                continue;
            };
            if self.applies(rule, &scope) && !self.eval(rule, filter, &scope) {
                return Err(rule.id.clone());
            }
        }
        Ok(())
    }

    fn filters_offerings(&self) -> bool {
        self.rules.iter().any(|r| r.offering_filter.is_some())
    }

    fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn reads_clock(&self) -> bool {
        self.reads_clock
    }
}

/// The operator shares one engine between its decision loop and its explain requests.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<PolicyEngine>();
};
