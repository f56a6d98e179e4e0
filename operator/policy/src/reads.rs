//! Which fields of `job`, `queue` and `offering` the compiled rules can read, found in their
//! syntax trees once at compile time, so that each evaluation builds only those (building the
//! `job` map of 15 fields for rules that read one of them was a third of an evaluation).
//!
//! A field counts as read when an expression selects it (`job.labels`, `has(job.labels)`) or
//! indexes the variable with a string literal (`job['labels']`; the optional forms count alike
//! should the parser accept them). Any other use of the variable itself (`job == x`, `[job]`, `job[key]`
//! with a computed key, a comprehension variable of that name) counts as reading all of it.
//! The set is never smaller than what an evaluation can reach, so a rule's result does not
//! change; a test evaluates every example rule with both the pruned and the whole variables.

use std::collections::BTreeSet;

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

/// The fields of one variable that some rule can read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    all: bool,
    names: BTreeSet<String>,
}

impl Fields {
    /// Whether an evaluation may read `field`.
    pub(crate) fn wants(&self, field: &str) -> bool {
        self.all || self.names.contains(field)
    }
}

/// One of the structured variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Var {
    Job,
    Queue,
    Offering,
}

impl Var {
    fn named(name: &str) -> Option<Var> {
        match name {
            "job" => Some(Var::Job),
            "queue" => Some(Var::Queue),
            "offering" => Some(Var::Offering),
            _ => None,
        }
    }
}

/// What the rules read of each structured variable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    pub(crate) job: Fields,
    pub(crate) queue: Fields,
    pub(crate) offering: Fields,
    /// Fields selected by name (`job.labels`, not a presence test): (qualified name, variable,
    /// field), each once.
    selected: Vec<(String, Var, String)>,
}

impl Reads {
    /// Every field of every variable (what an engine without the analysis builds).
    #[cfg(test)]
    pub(crate) fn all() -> Reads {
        let all = Fields {
            all: true,
            names: BTreeSet::new(),
        };
        Reads {
            job: all.clone(),
            queue: all.clone(),
            offering: all,
            selected: Vec::new(),
        }
    }

    /// The fields selected by name: (qualified name, variable, field).
    pub(crate) fn selected(&self) -> impl Iterator<Item = (&str, Var, &str)> {
        self.selected
            .iter()
            .map(|(q, v, f)| (q.as_str(), *v, f.as_str()))
    }

    /// What `programs` can read.
    pub(crate) fn of<'p>(programs: impl IntoIterator<Item = &'p Program>) -> Reads {
        let mut reads = Reads::default();
        for p in programs {
            reads.walk(p.expression());
        }
        reads
    }

    fn fields(&mut self, variable: &str) -> Option<&mut Fields> {
        Some(match Var::named(variable)? {
            Var::Job => &mut self.job,
            Var::Queue => &mut self.queue,
            Var::Offering => &mut self.offering,
        })
    }

    /// Records `variable.field` when `operand` is the bare variable; returns whether it was.
    fn field_of(&mut self, operand: &Expr, field: &str) -> bool {
        let Expr::Ident(name) = operand else {
            return false;
        };
        if let Some(f) = self.fields(name) {
            f.names.insert(field.to_string());
        }
        true
    }

    fn walk(&mut self, e: &IdedExpr) {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => {}
            Expr::Ident(name) => {
                if let Some(f) = self.fields(name) {
                    f.all = true;
                }
            }
            Expr::Select(s) => {
                if !self.field_of(&s.operand.expr, &s.field) {
                    self.walk(&s.operand);
                } else if !s.test
                    && let Expr::Ident(name) = &s.operand.expr
                    && let Some(var) = Var::named(name)
                {
                    let qualified = format!("{name}.{}", s.field);
                    if !self.selected.iter().any(|(q, _, _)| *q == qualified) {
                        self.selected.push((qualified, var, s.field.clone()));
                    }
                }
            }
            Expr::Call(c) => {
                let by_literal = matches!(
                    c.func_name.as_str(),
                    operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT
                ) && c.target.is_none()
                    && c.args.len() == 2;
                if by_literal
                    && let Expr::Literal(LiteralValue::String(field)) = &c.args[1].expr
                    && self.field_of(&c.args[0].expr, field.inner())
                {
                    return;
                }
                if let Some(t) = &c.target {
                    self.walk(t);
                }
                for a in &c.args {
                    self.walk(a);
                }
            }
            Expr::Comprehension(c) => {
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    self.walk(x);
                }
                // A loop variable named like one of ours hides it: count it as read whole.
                for v in [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)]
                    .into_iter()
                    .flatten()
                {
                    if let Some(f) = self.fields(v) {
                        f.all = true;
                    }
                }
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.walk(x);
                }
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    self.walk_entry(&entry.expr);
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    self.walk_entry(&entry.expr);
                }
            }
        }
    }

    fn walk_entry(&mut self, e: &EntryExpr) {
        match e {
            EntryExpr::StructField(f) => self.walk(&f.value),
            EntryExpr::MapEntry(m) => {
                self.walk(&m.key);
                self.walk(&m.value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(src: &str) -> Reads {
        Reads::of([&Program::compile(src).expect("compiles")])
    }

    fn only(names: &[&str]) -> Fields {
        Fields {
            all: false,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn selections_and_literal_indexes_read_one_field() {
        let r = reads(
            "job.labels['team'] == 'a' && has(job.deadline) && job['queue'] == queue.name \
             && job.datasets.exists(d, d.classification == 'Restricted')",
        );
        assert_eq!(r.job, only(&["datasets", "deadline", "labels", "queue"]));
        assert_eq!(r.queue, only(&["name"]));
        assert_eq!(r.offering, Fields::default());
        assert!(!r.job.wants("priority"));
    }

    #[test]
    fn any_other_use_reads_the_whole_variable() {
        for src in [
            "job == {}",
            "size(job) > 3",
            "[job].exists(j, j.restartable)",
            "job[queue.name] == 'x'",
            "[1].exists(job, job > 0)",
            "has(job.labels) && job.labels.exists(k, job[k] == 'x')",
        ] {
            assert!(reads(src).job.wants("anything"), "{src}");
        }
        // The loop variable `d` is not `job`: only the selected field counts.
        assert!(
            !reads("job.datasets.exists(d, d.sizeGiB > 1.0)")
                .job
                .wants("labels")
        );
    }

    #[test]
    fn offering_filters_count_too() {
        let r = Reads::of([
            &Program::compile("job.restartable").unwrap(),
            &Program::compile("offering.capacityType == 'spot' || offering.gpus > 4u").unwrap(),
        ]);
        assert_eq!(r.job, only(&["restartable"]));
        assert_eq!(r.offering, only(&["capacityType", "gpus"]));
        assert_eq!(r.queue, Fields::default());
    }
}
