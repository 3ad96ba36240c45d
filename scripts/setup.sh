#!/usr/bin/env bash
# Installs what prefixd needs to build and test on a plain Debian 12 machine.
# Idempotent: packages already present are skipped, so a second run is quick.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  clang                    # libFuzzer target for the GGUF parser
  libclang-rt-14-dev       # libFuzzer/ASan runtimes (only a Recommends of clang-14)
  libxxhash-dev            # block hashes (XXH3-128)
  librocksdb-dev           # disk tier
  libmemcached-dev         # remote tier (a memcached pool shared by replicas)
  libcpp-httplib-dev       # HTTP server and client
  doctest-dev              # unit tests
  nlohmann-json3-dev       # JSON for the API and test oracles
  libpcre2-dev             # Unicode regex for BPE pre-tokenizers
  libcli11-dev             # command-line flags
  libssl-dev openssl       # TLS (cpp-httplib's OpenSSL support) and the disk records' MACs
  curl
)
if [[ "${PREFIXD_WITH_TEST_TOOLS:-0}" == "1" ]]; then
  packages+=(prometheus chromium nodejs npm
    qemu-user                # runs the tests as a CPU without AVX-512 (-cpu Haswell) and as aarch64
    g++-aarch64-linux-gnu    # cross-builds the portable kernels and forward pass for aarch64
    haproxy                  # the shipped proxies (front, replica routing), tested in tests/
    memcached                # the remote tier's servers in the cluster test
    python3 jq               # the proxy and cluster test scripts
    zstd                     # reads the build's compressed PTX (tests/scripts/test_cuda_ptxas.sh)
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs from another source (e.g. nodesource) provides npm itself.
if command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == npm || "$p" == nodejs ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
