#!/usr/bin/env python3
"""Fails when two source files of one crate import each other, directly or through a ring.

Every `crate::a::b` and `super::x` path in a file's non-test code is an edge from that file's
module to the deepest module the path names. A child's use of its own parent (`super::Thing`
in `world/job.rs`) is the usual Rust shape and is not counted; a parent's dependence on the
children it declares (`mod job;`) is. Prints each ring found and exits
1, or prints nothing and exits 0. Usage: scripts/import-circles.py [CRATE_SRC_DIR...]
(default: every crate's src/ in the workspace).
"""
import glob
import os
import re
import sys

PATH = r"((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)(?:::\{([^}]*)\})?"


def modules(src):
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3]
            if rel.endswith("/mod"):
                rel = rel[:-4]
            if rel in ("lib", "main") or "tests" in rel.split("/"):
                continue
            files[rel.replace("/", "::")] = path
    return files


def edges(files):
    def owner(path):
        parts = path.split("::")
        for k in range(len(parts), 0, -1):
            candidate = "::".join(parts[:k])
            if candidate in files:
                return candidate
        return None

    out = {m: set() for m in files}
    for module, path in files.items():
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"//[^\n]*", "", text).split("#[cfg(test)]")[0]
        parent = "::".join(module.split("::")[:-1])
        paths = []
        for prefix, base in (("crate::", ""), ("super::", parent + "::" if parent else "")):
            for head, group in re.findall(re.escape(prefix) + PATH, text):
                paths.append(base + head)
                paths += [base + head + "::" + x for x in re.findall(r"\b([a-z_][a-z0-9_]*)\b", group)]
        # A module depends on the child modules it declares (and uses by relative paths).
        for child in re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", text, re.M):
            paths.append(module + "::" + child)
        for p in paths:
            target = owner(p)
            if target and target != module and not module.startswith(target + "::"):
                out[module].add(target)
    return out


def rings(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                on.discard(w)
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                found.append(sorted(ring))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    dirs = sys.argv[1:] or sorted(glob.glob(os.path.join(root, "operator/*/src")) + [os.path.join(root, "tests/src")])
    bad = 0
    for src in dirs:
        graph = edges(modules(src))
        for ring in rings(graph):
            bad += 1
            print(f"{os.path.relpath(src, root)}: these modules import each other: {', '.join(ring)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
