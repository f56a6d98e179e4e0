#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would one after another.

Most of the suite's time is spent waiting (control planes, operators, moto and timeouts), not
computing, so a few binaries at once cut its wall time several-fold on two cores. Each binary
runs in its package's directory with cargo's run-time variables, its output is kept and printed
whole when it ends (with cargo's `Running` line, so the summary lines read as cargo's do), and
the exit code is non-zero if any binary failed.

  scripts/run-tests.py [--jobs N] [--env KEY=VALUE ...] [--only NAME ...] -- [CARGO TEST ARGS] [-- TEST ARGS]

Builds with `cargo test --no-run --message-format=json` (CARGO TEST ARGS are passed on, e.g.
`--workspace --locked`), then runs the binaries longest first (the order of LONG below, then
the rest), N at a time (default 3). `--only NAME` runs the binaries whose target name is NAME
(repeatable). `--env` sets a variable for these runs only (e.g. another KUBEBUILDER_ASSETS).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# The binaries that take minutes, longest first: started first so they overlap.
LONG = ["chaos", "aws", "operator", "helm"]


def build(cargo_args):
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"] + cargo_args
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"run-tests: {' '.join(cmd)} failed ({proc.returncode})")
    out = []
    for line in proc.stdout.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m.get("profile", {}).get("test"):
            continue
        target = m["target"]
        manifest = m["manifest_path"]
        kind = target["kind"][0]
        src = os.path.relpath(target["src_path"], os.path.dirname(manifest))
        label = "unittests " + src if kind in ("lib", "bin") else src
        out.append({
            "name": target["name"],
            "label": label,
            "exe": m["executable"],
            "dir": os.path.dirname(manifest),
            "package": m["package_id"],
        })
    return out


def main():
    args = sys.argv[1:]
    jobs, extra_env, only = 3, {}, []
    while args and args[0] != "--":
        a = args.pop(0)
        if a == "--jobs":
            jobs = int(args.pop(0))
        elif a == "--env":
            k, _, v = args.pop(0).partition("=")
            extra_env[k] = v
        elif a == "--only":
            only.append(args.pop(0))
        else:
            sys.exit(f"run-tests: unknown option {a}")
    if args and args[0] == "--":
        args.pop(0)
    cargo_args, test_args = args, []
    if "--" in cargo_args:
        i = cargo_args.index("--")
        cargo_args, test_args = cargo_args[:i], cargo_args[i + 1:]

    binaries = build(cargo_args)
    if only:
        binaries = [b for b in binaries if b["name"] in only]
    rank = {n: i for i, n in enumerate(LONG)}
    binaries.sort(key=lambda b: (rank.get(b["name"], len(LONG)), b["label"]))

    failed, lock, started = [], threading.Lock(), time.time()
    queue = list(binaries)

    def run(b):
        env = dict(os.environ, CARGO_MANIFEST_DIR=b["dir"], **extra_env)
        with tempfile.TemporaryFile(mode="w+") as log:
            t0 = time.time()
            code = subprocess.call([b["exe"]] + test_args, cwd=b["dir"], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
            log.seek(0)
            text = log.read()
        with lock:
            print(f"     Running {b['label']} ({os.path.relpath(b['exe'])}) "
                  f"[{time.time() - t0:.0f} s, at {time.time() - started:.0f} s]", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
            if code != 0:
                failed.append(b["label"])

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                b = queue.pop(0)
            run(b)

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        print(f"run-tests: failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(101)


if __name__ == "__main__":
    main()
