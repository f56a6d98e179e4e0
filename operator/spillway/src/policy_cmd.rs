//! `spillway policy lint PATH...`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use spillway_policy::lint::{self, Severity};

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Print the CEL variables rules can read, with their fields and types (Markdown).
    Variables,
    /// Check policy files: YAML, field names and types, CEL syntax, unknown variables and
    /// fields, shadowed rules. Prints
    /// `file:line:col: error|warning: text`; exit status 1 on errors.
    Lint {
        /// Files, or directories whose .yaml/.yml files are checked.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Run the `tests` of policy files through the decision core: a PASS or FAIL line per
    /// test, expected against actual, and a summary; exit status 1 on any failure.
    Test {
        /// Files, or directories whose .yaml/.yml files are read. Each file's tests run with
        /// that file's policies in force.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
}

fn yaml_files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    }
}

pub fn run(cmd: PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Variables => {
            print!("{}", spillway_policy::variables::markdown());
            ExitCode::SUCCESS
        }
        PolicyCommand::Lint { paths } => {
            let (mut errors, mut warnings) = (0, 0);
            for path in &paths {
                for file in yaml_files(path) {
                    let text = match std::fs::read_to_string(&file) {
                        Ok(t) => t,
                        Err(e) => {
                            println!("{}:1:1: error: cannot read: {e}", file.display());
                            errors += 1;
                            continue;
                        }
                    };
                    for d in lint::lint_str(&file, &text) {
                        match d.severity {
                            Severity::Error => errors += 1,
                            Severity::Warning => warnings += 1,
                        }
                        println!("{d}");
                    }
                }
            }
            eprintln!("{errors} error(s), {warnings} warning(s)");
            if errors > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        PolicyCommand::Test { paths } => test(&paths),
    }
}

fn test(paths: &[PathBuf]) -> ExitCode {
    // Each file is tested with its own policies in force: an example file is one complete
    // setup, reviewed and adopted as a unit.
    let mut files: Vec<(PathBuf, Vec<spillway_api::BurstPolicy>)> = Vec::new();
    for path in paths {
        match spillway_api::manifests::Manifests::load(path) {
            Ok(m) => {
                for p in m.policies {
                    match files.iter_mut().find(|(f, _)| *f == p.file) {
                        Some((_, list)) => list.push(p.object),
                        None => files.push((p.file, vec![p.object])),
                    }
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    let (mut passed, mut failed) = (0, 0);
    for (file, policies) in &files {
        let engine = match spillway_policy::PolicyEngine::compile(policies) {
            Ok(e) => e,
            Err(errors) => {
                for e in errors {
                    eprintln!("{}: error: {e}", file.display());
                }
                return ExitCode::from(2);
            }
        };
        for r in spillway_policy::testing::run_tests(&engine, policies) {
            if r.passed() {
                passed += 1;
            } else {
                failed += 1;
            }
            println!("{r}");
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
