#!/usr/bin/env bash
# The user documentation points at things that exist: in README.md,
# SECURITY.md, docs/*.md and the folders' own READMEs and API contract, every
# relative link names a file of the tree (and, with #anchor, a heading of it),
# and every `path` in backticks that starts with a folder of the repository
# names a file or folder that exists (or a build output git ignores). The
# README stays a page a user reads in five minutes: at most 250 lines.
# Usage: bash tests/scripts/test_doc_links.sh [BUILD_DIR] (run from the repository root).
set -euo pipefail
command -v python3 >/dev/null || { echo "skipped: python3 not found"; exit 77; }
exec python3 - "$@" <<'PY'
import fnmatch, os, re, sys

DOCS = ["README.md", "SECURITY.md", "daemon/api.md", "kernels/cuda/README.md",
        "ops/haproxy/README.md", "models/README.md"]
DOCS += sorted("docs/" + f for f in os.listdir("docs") if f.endswith(".md"))
FOLDERS = ("common/", "kernels/", "storage/", "engine/", "daemon/", "client/", "tests/",
           "scripts/", "ops/", "docs/", "models/", "cmake/")
MAX_README_LINES = 250

def slug(heading):
    # GitHub's anchors: lower case, punctuation other than '-' and '_' dropped, spaces to '-'.
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

def anchors(path):
    out, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                out.add(slug(line.lstrip("#")))
    return out

IGNORED = [l.strip().rstrip("/") for l in open(".gitignore", encoding="utf-8")
           if l.strip() and not l.startswith("#")]

def ignored(path):  # a build output: the path or a folder above it matches .gitignore
    parts = path.rstrip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p.split("/")[-1], pat)
               for p in prefixes for pat in IGNORED)

failures = []
for doc in DOCS:
    if not os.path.exists(doc):
        failures.append(f"{doc}: listed here but missing")
        continue
    base = os.path.dirname(doc)
    text = open(doc, encoding="utf-8").read()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks are examples
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(base, file)) if file else doc
        if not os.path.exists(full):
            failures.append(f"{doc}: link to {target}: {full} does not exist")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            failures.append(f"{doc}: link to {target}: no heading '#{anchor}' in {full}")
    for token in re.findall(r"`([^`\s]+)`", prose):
        if not token.startswith(FOLDERS) or re.search(r"[<>*{}$]|\.\.\.", token):
            continue
        path = token.rstrip(".,:;)")
        if not os.path.exists(path) and not ignored(path):
            failures.append(f"{doc}: `{token}` does not exist")

n_lines = sum(1 for _ in open("README.md", encoding="utf-8"))
if n_lines > MAX_README_LINES:
    failures.append(f"README.md: {n_lines} lines, more than {MAX_README_LINES}: move detail to docs/")

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print(f"ok: {len(DOCS)} documents, their links and paths")
PY
