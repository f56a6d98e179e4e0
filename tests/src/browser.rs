//! Debian's Chromium, headless (installed by scripts/test.sh, named by `SPILLWAY_CHROMIUM`): a
//! report page loads without console errors and fits a laptop-width window.

use std::path::Path;
use std::process::{Command, Output};

fn chromium() -> String {
    std::env::var("SPILLWAY_CHROMIUM").unwrap_or_else(|_| {
        panic!("SPILLWAY_CHROMIUM is not set: run the tests with scripts/test.sh, which installs Chromium (scripts/chromium.sh)")
    })
}

fn headless(dir: &Path, extra: &[&str], page: &str) -> Output {
    Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--allow-file-access-from-files",
            "--window-size=1366,900",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(format!("file://{}", dir.join(page).display()))
        .output()
        .expect("run chromium")
}

/// Loads `index.html` of `dir` at 1366 px: checks the console and the layout, takes a
/// screenshot (`dir/screenshot.png`).
pub fn check_in_browser(dir: &Path) {
    // A page that loads the report in a laptop-wide frame and writes what it measured into
    // its own DOM, which --dump-dom prints.
    std::fs::write(
        dir.join("check.html"),
        r#"<!doctype html><html><body><iframe id="f" src="index.html" style="width:1366px;height:900px;border:0"></iframe>
<script>
document.getElementById('f').onload = () => {
  const d = document.getElementById('f').contentDocument;
  const r = { scroll: d.documentElement.scrollWidth, client: d.documentElement.clientWidth,
              svgs: d.querySelectorAll('svg').length, tables: d.querySelectorAll('table').length };
  const p = document.createElement('pre'); p.id = 'result'; p.textContent = JSON.stringify(r);
  document.body.appendChild(p);
};
</script></body></html>"#,
    )
    .unwrap();
    let out = headless(dir, &["--dump-dom"], "check.html");
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("<pre id=\"result\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "the check page measured nothing:\n{dom}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let r: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(r["svgs"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["tables"].as_u64().unwrap() >= 1, "{r}");
    assert!(
        r["scroll"].as_u64().unwrap() <= r["client"].as_u64().unwrap(),
        "the report scrolls sideways at 1366 px: {r}"
    );

    let shot = dir.join("screenshot.png");
    let out = headless(
        dir,
        &[&format!("--screenshot={}", shot.display())],
        "index.html",
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(
        console.is_empty(),
        "console messages:\n{}",
        console.join("\n")
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
