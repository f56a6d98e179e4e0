//! BurstPolicies: compiled once per change of their set, each one alone first so one broken
//! policy leaves the others in force, and each one's validity kept for its status.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use spillway_api::BurstPolicy;
use spillway_api::validate;
use spillway_policy::{CompileError, PolicyEngine};

use crate::world::Inputs;

/// What one policy came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// In force, with this many rules.
    Valid { rules: usize },
    /// Left out whole, because of this (fields named).
    Invalid(String),
}

/// The compiled policies and the key of the set they were compiled from.
#[derive(Default)]
pub struct Compiled {
    key: Vec<(String, String)>,
    engine: Option<Arc<PolicyEngine>>,
    /// Every policy's verdict, by name (cluster objects and files alike).
    pub verdicts: BTreeMap<String, Verdict>,
}

impl Compiled {
    /// The engine for this turn's policies: the files' and the cluster's, a cluster object
    /// winning over a file of the same name.
    pub fn engine(&mut self, inputs: &Inputs) -> Arc<PolicyEngine> {
        let mut all: BTreeMap<String, &BurstPolicy> = inputs
            .file_policies
            .iter()
            .map(|p| (p.name_any(), p.as_ref()))
            .collect();
        for p in &inputs.policies {
            all.insert(p.name_any(), p.as_ref());
        }
        let key: Vec<(String, String)> = all
            .values()
            .map(|p| {
                (
                    p.name_any(),
                    p.resource_version()
                        .unwrap_or_else(|| serde_json::to_string(&p.spec).unwrap_or_default()),
                )
            })
            .collect();
        if let Some(engine) = &self.engine
            && self.key == key
        {
            return engine.clone();
        }
        let mut good = Vec::new();
        self.verdicts.clear();
        for (name, p) in &all {
            let verdict = verdict(p);
            if let Verdict::Invalid(why) = &verdict {
                tracing::error!(policy = %name, error = %why, "BurstPolicy is invalid; it is left out");
            } else {
                good.push((*p).clone());
            }
            self.verdicts.insert(name.clone(), verdict);
        }
        // Each compiled alone, so together they compile too; `empty` keeps this total.
        let engine =
            Arc::new(PolicyEngine::compile(&good).unwrap_or_else(|_| PolicyEngine::empty()));
        self.key = key;
        self.engine = Some(engine.clone());
        engine
    }
}

/// Whether a policy can be used: its fields, then each rule's expressions.
pub(crate) fn verdict(p: &BurstPolicy) -> Verdict {
    if let Err(errors) = validate::burst_policy(&p.spec) {
        return Verdict::Invalid(errors.to_string());
    }
    match PolicyEngine::compile(std::slice::from_ref(p)) {
        Ok(engine) => Verdict::Valid {
            rules: engine.len(),
        },
        Err(errors) => Verdict::Invalid(
            errors
                .iter()
                .map(|e| describe(p, e))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// `spec.rules[2].when (rule "cheap", column 17): CEL syntax error: ...`
fn describe(p: &BurstPolicy, e: &CompileError) -> String {
    let index = p
        .spec
        .rules
        .iter()
        .position(|r| r.name == e.rule)
        .map(|i| format!("[{i}]"))
        .unwrap_or_default();
    let at = match e.position {
        Some((1, column)) => format!(", column {column}"),
        Some((line, column)) => format!(", line {line}, column {column}"),
        None => String::new(),
    };
    format!(
        "spec.rules{index}.{} (rule {:?}{at}): {}",
        e.field, e.rule, e.message
    )
}
