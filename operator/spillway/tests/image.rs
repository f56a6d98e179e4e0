//! The operator image (Dockerfile) runs the binary on `gcr.io/distroless/cc-debian12`. No image
//! can be built here (no container engine), so this checks instead that the binary needs
//! nothing that image lacks: only glibc's and libgcc_s's shared objects, and no glibc symbol
//! newer than Debian 12's 2.36.

use std::process::Command;

const RUNTIME: &str = "gcr.io/distroless/cc-debian12";
/// What the runtime image ships of the libraries a Rust binary links.
const SHIPPED: &[&str] = &[
    "linux-vdso.so.1",
    "libgcc_s.so.1",
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];
/// Debian 12's glibc.
const GLIBC: (u32, u32) = (2, 36);

fn output(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} (from libc-bin / binutils) cannot run: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_dockerfile_runs_on_the_image_this_test_checks_against() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Dockerfile"))
            .expect("the Dockerfile at the repository root");
    let last_from = dockerfile
        .lines()
        .rfind(|l| l.starts_with("FROM "))
        .expect("a FROM line");
    assert!(
        last_from.contains(RUNTIME),
        "the runtime stage is {last_from:?}: update this test's library list for it"
    );
    assert!(
        dockerfile.contains("USER 65532"),
        "the image runs as non-root"
    );
}

#[test]
fn the_binary_links_only_what_the_runtime_image_ships() {
    let bin = env!("CARGO_BIN_EXE_spillway");
    let ldd = output("ldd", &[bin]);
    let mut libs = Vec::new();
    for line in ldd.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name = line.split_whitespace().next().unwrap();
        let base = name.rsplit('/').next().unwrap();
        libs.push(base.to_string());
        assert!(
            SHIPPED.contains(&base),
            "{base} is not in {RUNTIME}: {line}\n(the whole list:\n{ldd})"
        );
    }
    assert!(
        libs.iter().any(|l| l == "libc.so.6"),
        "ldd read nothing: {ldd}"
    );
}

#[test]
fn the_binary_needs_no_glibc_newer_than_the_runtime_image() {
    let bin = env!("CARGO_BIN_EXE_spillway");
    let symbols = output("objdump", &["-T", bin]);
    let mut newest = (0, 0);
    for v in symbols.split("GLIBC_").skip(1) {
        let version: String = v
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = version.split('.').filter_map(|p| p.parse::<u32>().ok());
        let (Some(major), minor) = (parts.next(), parts.next().unwrap_or(0)) else {
            continue;
        };
        newest = newest.max((major, minor));
    }
    assert!(newest >= (2, 2), "no glibc versions found in:\n{symbols}");
    assert!(
        newest <= GLIBC,
        "the binary needs GLIBC_{}.{}; {RUNTIME} has {}.{}",
        newest.0,
        newest.1,
        GLIBC.0,
        GLIBC.1
    );
}
