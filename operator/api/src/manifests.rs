//! Reading Spillway manifests from YAML files: one or more documents per file, each a
//! GpuQueue, ComputePool, Dataset, BurstPolicy or GpuJob (other kinds are skipped, so a file
//! can also hold the Namespaces or ConfigMaps of a setup).
//!
//! Every error names the file, line and column, the way compilers print them. Each object is
//! also checked with [`crate::validate`], and its problems are reported at the line where its
//! document starts, with the field path.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{BurstPolicy, ComputePool, Dataset, GpuJob, GpuQueue, validate};

/// Objects read from manifests, each with where it came from.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub queues: Vec<Located<GpuQueue>>,
    pub pools: Vec<Located<ComputePool>>,
    pub datasets: Vec<Located<Dataset>>,
    pub policies: Vec<Located<BurstPolicy>>,
    pub jobs: Vec<Located<GpuJob>>,
}

/// An object and the place its document starts.
#[derive(Clone, Debug)]
pub struct Located<T> {
    pub object: T,
    pub file: PathBuf,
    pub line: usize,
}

/// A problem in a manifest file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: error: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

impl std::error::Error for ManifestError {}

/// All problems found while loading.
#[derive(Clone, Debug, Default)]
pub struct ManifestErrors(pub Vec<ManifestError>);

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestErrors {}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

/// A YAML document of a file: its text and the 1-based line it starts on.
pub struct Document<'a> {
    pub text: &'a str,
    pub first_line: usize,
}

/// Splits a YAML stream at `---` lines.
pub fn documents(text: &str) -> Vec<Document<'_>> {
    let mut docs = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1usize;
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") {
            docs.push(Document {
                text: &text[start..offset],
                first_line: start_line,
            });
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    docs.push(Document {
        text: &text[start..],
        first_line: start_line,
    });
    docs.retain(|d| {
        d.text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// Turns a serde-saphyr error in a document into a located error.
pub fn yaml_error(file: &Path, doc: &Document<'_>, e: &serde_saphyr::Error) -> ManifestError {
    let (line, column) = e
        .location()
        .map(|l| (l.line() as usize, l.column() as usize))
        .unwrap_or((1, 1));
    ManifestError {
        file: file.to_path_buf(),
        line: doc.first_line + line.saturating_sub(1),
        column: column.max(1),
        message: first_line_of(&e.to_string()),
    }
}

/// serde-saphyr's messages can carry a source snippet after the first line; keep the message.
fn first_line_of(message: &str) -> String {
    let mut first = message.lines().next().unwrap_or(message).trim();
    // Drop a leading "error: line X column Y: " and a trailing " at line X column Y": we
    // print the location (in the file, not the document) in front.
    first = first.strip_prefix("error: ").unwrap_or(first);
    if let Some(rest) = first.strip_prefix("line ")
        && let Some((location, tail)) = rest.split_once(": ")
        && location
            .split(" column ")
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        first = tail;
    }
    match first.rfind(" at line ") {
        Some(p) => first[..p].to_string(),
        None => first.to_string(),
    }
}

impl Manifests {
    /// Loads a file, or every `.yaml`/`.yml` file of a directory (not recursive, sorted).
    pub fn load(path: &Path) -> Result<Manifests, ManifestErrors> {
        let mut out = Manifests::default();
        let mut errors = ManifestErrors::default();
        let files = if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(entries) => {
                    let mut files: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| {
                            p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                        })
                        .collect();
                    files.sort();
                    files
                }
                Err(e) => {
                    errors.0.push(ManifestError {
                        file: path.to_path_buf(),
                        line: 1,
                        column: 1,
                        message: format!("cannot read directory: {e}"),
                    });
                    return Err(errors);
                }
            }
        } else {
            vec![path.to_path_buf()]
        };
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => out.add_str(&file, &text, &mut errors),
                Err(e) => errors.0.push(ManifestError {
                    file: file.clone(),
                    line: 1,
                    column: 1,
                    message: format!("cannot read file: {e}"),
                }),
            }
        }
        if errors.0.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    /// Parses one YAML stream named `file`.
    pub fn parse_str(file: &Path, text: &str) -> Result<Manifests, ManifestErrors> {
        let mut out = Manifests::default();
        let mut errors = ManifestErrors::default();
        out.add_str(file, text, &mut errors);
        if errors.0.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    fn add_str(&mut self, file: &Path, text: &str, errors: &mut ManifestErrors) {
        for doc in documents(text) {
            let meta: TypeMeta = match serde_saphyr::from_str(doc.text) {
                Ok(m) => m,
                Err(e) => {
                    errors.0.push(yaml_error(file, &doc, &e));
                    continue;
                }
            };
            let at = |message: String| ManifestError {
                file: file.to_path_buf(),
                line: doc.first_line,
                column: 1,
                message,
            };
            let Some(kind) = meta.kind else {
                errors.0.push(at("document has no `kind`".into()));
                continue;
            };
            let group_ok = meta.api_version.as_deref() == Some("spillway.io/v1alpha1");
            let ours = matches!(
                kind.as_str(),
                "GpuQueue" | "ComputePool" | "Dataset" | "BurstPolicy" | "GpuJob"
            );
            if !ours {
                continue;
            }
            if !group_ok {
                errors.0.push(at(format!(
                    "{kind} must have apiVersion spillway.io/v1alpha1, not {:?}",
                    meta.api_version.unwrap_or_default()
                )));
                continue;
            }
            macro_rules! take {
                ($ty:ty, $list:ident, $check:path) => {
                    match serde_saphyr::from_str::<$ty>(doc.text) {
                        Err(e) => errors.0.push(yaml_error(file, &doc, &e)),
                        Ok(obj) => {
                            let name = obj.metadata.name.clone().unwrap_or_default();
                            if name.is_empty() {
                                errors.0.push(at(format!("{kind} has no metadata.name")));
                            } else if let Err(problems) = $check(&obj.spec) {
                                for p in problems.0 {
                                    errors.0.push(at(format!("{kind} {name}: {p}")));
                                }
                            } else {
                                self.$list.push(Located {
                                    object: obj,
                                    file: file.to_path_buf(),
                                    line: doc.first_line,
                                });
                            }
                        }
                    }
                };
            }
            match kind.as_str() {
                "GpuQueue" => take!(GpuQueue, queues, validate::gpu_queue),
                "ComputePool" => take!(ComputePool, pools, validate::compute_pool),
                "Dataset" => take!(Dataset, datasets, validate::dataset),
                "BurstPolicy" => take!(BurstPolicy, policies, validate::burst_policy),
                _ => take!(GpuJob, jobs, validate::gpu_job),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_locations_are_not_repeated_in_the_message() {
        assert_eq!(
            first_line_of("error: line 11 column 5: missing field `instanceTypes`"),
            "missing field `instanceTypes`"
        );
        assert_eq!(
            first_line_of(
                "invalid type: string \"lots\", expected i32 at line 5 column 10\n  snippet"
            ),
            "invalid type: string \"lots\", expected i32"
        );
        assert_eq!(
            first_line_of("line of sight: blocked"),
            "line of sight: blocked"
        );
    }

    #[test]
    fn reads_several_documents_and_reports_lines() {
        let text = "\
apiVersion: spillway.io/v1alpha1
kind: GpuQueue
metadata: {name: research}
spec:
  burst: {enabled: true, maxWait: 10m}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: spillway.io/v1alpha1
kind: ComputePool
metadata: {name: onprem}
spec:
  private:
    nodeSelector: {gpu: \"true\"}
";
        let m = Manifests::parse_str(Path::new("setup.yaml"), text).unwrap();
        assert_eq!(m.queues.len(), 1);
        assert_eq!(m.pools.len(), 1);
        assert_eq!(m.pools[0].line, 11);
    }

    #[test]
    fn errors_carry_file_line_and_column() {
        let text = "\
apiVersion: spillway.io/v1alpha1
kind: GpuQueue
metadata: {name: q}
spec: {weight: 1}
---
apiVersion: spillway.io/v1alpha1
kind: GpuQueue
metadata: {name: bad}
spec:
  weight: heavy
";
        let errs = Manifests::parse_str(Path::new("q.yaml"), text).unwrap_err();
        assert_eq!(errs.0.len(), 1, "{errs}");
        let e = &errs.0[0];
        assert_eq!((e.line, e.column), (10, 11), "{e}");
        assert!(e.to_string().starts_with("q.yaml:10:11: error:"), "{e}");
    }

    #[test]
    fn semantic_problems_name_the_document_and_field() {
        let text = "\
apiVersion: spillway.io/v1alpha1
kind: GpuQueue
metadata: {name: q}
spec:
  burst: {maxWait: soon}
";
        let errs = Manifests::parse_str(Path::new("q.yaml"), text).unwrap_err();
        let msg = errs.to_string();
        assert!(
            msg.starts_with("q.yaml:1:1: error: GpuQueue q: spec.burst.maxWait:"),
            "{msg}"
        );
    }
}
