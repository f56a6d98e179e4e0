//! Child processes that cannot outlive the test process.
//!
//! Each server runs under a small `sh` watchdog that polls the test process and kills the
//! server once the test process is gone, however it ended (a Rust test binary never drops its
//! statics, and may be killed). Output goes to a log file, whose tail is shown when a server
//! fails to start.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const WATCHDOG: &str = r#"
parent="$1"; log="$2"; shift 2
"$@" >>"$log" 2>&1 &
child=$!
while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.5; done
kill "$child" 2>/dev/null
for _ in 1 2 3 4 5 6; do kill -0 "$child" 2>/dev/null || exit 0; sleep 0.5; done
kill -9 "$child" 2>/dev/null
"#;

const CLEANUP: &str = r#"
parent="$1"; dir="$2"
while kill -0 "$parent" 2>/dev/null; do sleep 1; done
sleep 4
rm -rf "$dir"
"#;

/// A server started under a watchdog.
pub struct Server {
    pub name: String,
    pub log: PathBuf,
    watchdog: Child,
}

impl Server {
    /// Starts `program args...` with `env`, logging to `dir/<name>.log`.
    pub fn start(
        dir: &Path,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Server> {
        let log = dir.join(format!("{name}.log"));
        // Appended to: a server started again keeps its earlier log.
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("spillway-watchdog")
            .arg(std::process::id().to_string())
            .arg(&log)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let watchdog = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {name} ({}): {e}", program.display()))?;
        Ok(Server {
            name: name.to_string(),
            log,
            watchdog,
        })
    }

    /// Kills the server at once (SIGKILL, as a crash), and waits for its watchdog to end.
    pub fn crash(&mut self) -> anyhow::Result<()> {
        let status = Command::new("pkill")
            .args(["-KILL", "-P", &self.watchdog.id().to_string()])
            .status()?;
        if !status.success() {
            anyhow::bail!("{} was not running", self.name);
        }
        self.watchdog.wait()?;
        Ok(())
    }

    /// The server's process id (the watchdog's child running its program), while it runs.
    pub fn pid(&self) -> Option<u32> {
        let out = Command::new("pgrep")
            .args(["-P", &self.watchdog.id().to_string()])
            .output()
            .ok()?;
        // The watchdog's other child is its `sleep`.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .find(|pid| {
                fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "sleep")
            })
    }

    /// Whether the server (its watchdog) has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.watchdog.try_wait(), Ok(Some(_)))
    }

    /// The last `max` bytes of the server's log.
    pub fn log_tail(&self, max: u64) -> String {
        let mut out = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
            let _ = f.read_to_string(&mut out);
        }
        out
    }
}

/// Removes `dir` a few seconds after this process exits.
pub fn remove_on_exit(dir: &Path) -> anyhow::Result<()> {
    Command::new("sh")
        .arg("-c")
        .arg(CLEANUP)
        .arg("spillway-cleanup")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(())
}

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A fresh directory under the system temp dir, removed after this process exits.
pub fn temp_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(crate::unique_name(prefix));
    fs::create_dir_all(&dir)?;
    remove_on_exit(&dir)?;
    Ok(dir)
}

/// Finds an executable: in `dir` if given, else on `PATH`.
pub fn find_binary(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
