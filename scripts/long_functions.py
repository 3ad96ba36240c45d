#!/usr/bin/env python3
"""Lists functions over a length limit in prefixd's own code (not tests/, not third-party).

Prints `file:line name lines` for each, longest first. A function may stay long
when a comment line starting `// Stays long:` sits within the few lines above
its signature (its reason); those are listed only with --all. Exits 1 when an
undocumented one is found. Needs universal-ctags (`ctags` with JSON output).

  scripts/long_functions.py [--limit 60] [--all]
"""
import argparse
import json
import os
import subprocess
import sys

FOLDERS = ["client", "common", "daemon", "engine", "kernels", "storage"]
MARKER = "// Stays long:"
LOOKBACK = 6  # lines above the signature searched for MARKER


def functions(root):
    """(path, first line, last line, qualified name) of every function body."""
    folders = [f for f in FOLDERS if os.path.isdir(os.path.join(root, f))]
    out = subprocess.run(
        ["ctags", "-R", "--output-format=json", "--fields=+ne", "--kinds-C++=f",
         "--languages=C++", "--langmap=C++:+.cu.cuh", "-f", "-"] + folders,
        cwd=root, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or tag.get("kind") != "function" or "end" not in tag:
            continue
        # Lambdas and local classes' members are part of their enclosing function.
        if tag["name"].startswith("__anon") or tag.get("scopeKind") == "function":
            continue
        # Anonymous namespaces: ctags names them __anon<hash>.
        scope = "::".join(p for p in tag.get("scope", "").split("::") if not p.startswith("__anon"))
        name = f"{scope}::{tag['name']}" if scope else tag["name"]
        yield tag["path"], tag["line"], tag["end"], name


def documented(root, path, line, cache={}):
    if path not in cache:
        with open(os.path.join(root, path), errors="replace") as f:
            cache[path] = f.read().splitlines()
    above = cache[path][max(0, line - 1 - LOOKBACK):line - 1]
    return any(l.strip().startswith(MARKER) for l in above)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=60, help="most lines a function may take")
    parser.add_argument("--all", action="store_true", help="also list documented ones")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    long_ones = []
    for path, first, last, name in functions(root):
        n = last - first + 1
        if n > args.limit:
            long_ones.append((n, path, first, name, documented(root, path, first)))
    undocumented = 0
    for n, path, first, name, doc in sorted(long_ones, key=lambda r: (-r[0], r[1], r[2])):
        if doc and not args.all:
            continue
        undocumented += not doc
        print(f"{path}:{first} {name} {n}{' (stays long)' if doc else ''}")
    return 1 if undocumented else 0


if __name__ == "__main__":
    sys.exit(main())
