#!/usr/bin/env bash
# Packs a relocatable bundle of a build for a GPU host that has only the NVIDIA
# driver and the CUDA 13 runtime (no -dev packages, no compiler):
#
#   scripts/bundle.sh OUT.tar.xz [--build DIR] [--xz-level 0-9] [--max-mib N]
#
# OUT.tar.xz unpacks to prefixd-bundle/:
#   bin/        prefixd, prefixctl, the GPU test and benchmark programs
#               (stripped), and `run`, the launcher: bin/run PROGRAM ARGS
#   lib/        the non-system shared libraries they link (from ldd)
#   lib/fallback/  libstdc++ and libgcc_s of the build machine, used only when
#               the host's are missing or too old (the launcher asks ldd)
#   shared/models/  the test models and golden outputs the tests read
#   models/     stories260K.gguf, the daemon's default model
#   scripts/    gpu_check.sh, bench_restart.sh
#
# Left out, expected on the host: glibc (libc, libm, libdl, libpthread, librt,
# ld-linux), the NVIDIA driver (libcuda, libnvidia-*), and the CUDA runtime
# and cuBLAS (libcudart, libcublas, libcublasLt: the host's CUDA 13 toolkit;
# cuBLAS + cuBLASLt are about 600 MB, far over the bundle's 60 MiB, and cudart
# comes from the same toolkit as the cuBLAS it serves).
# bin/run sets PREFIXD_SHARED_DIR and PREFIXD_MODELS_DIR to the bundle's
# folders (unless already set) and LD_LIBRARY_PATH to lib/ plus the host's CUDA
# library folders. Fails when a program is missing or the archive is larger
# than --max-mib (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/bundle.sh OUT.tar.xz [--build DIR] [--xz-level 0-9] [--max-mib N]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
out=$1; shift
build=build
level=9
max_mib=60
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --xz-level) level="$2"; shift 2 ;;
    --max-mib) max_mib="$2"; shift 2 ;;
    *) echo "bundle: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$level" =~ ^[0-9]$ ]] || { echo "bundle: --xz-level '$level' is not 0-9" >&2; exit 2; }
shared=$(sed -n 's/^PREFIXD_SHARED_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
[[ -n "$shared" ]] || shared=$(cd .. && pwd)/shared

# Programs: path in the build -> name in bin/.
programs=(prefixd prefixctl tests/test_cuda_ops tests/test_cuda_launch tests/test_forward_golden
          tests/bench_forward tests/bench_engine)
# Built only where cuDNN's headers were found: carried when present (its
# --dump mode saves the GPU's device description for the deviceless plan test).
[[ -x "$build/tests/test_cudnn_deviceless" ]] && programs+=(tests/test_cudnn_deviceless)
# The child-process check of each cuDNN plan bucket (the backend looks for it
# beside the running program: bin/).
[[ -x "$build/prefixd-cudnn-probe" ]] && programs+=(prefixd-cudnn-probe)
# The models the bundled tests read: golden_models() and quant_golden_models()
# of tests/golden.h, with their golden outputs.
ggufs=(stories260K rand-mqa-f16 rand-qwen2-bf16 rand-llama3rope-f16 rand-qwen3-bf16 rand-gemma3-bf16)
models=(README.md quant)
for g in "${ggufs[@]}"; do models+=("$g.gguf" "golden/$g.json"); done

missing=()
for p in "${programs[@]}"; do [[ -x "$build/$p" ]] || missing+=("$build/$p"); done
for m in "${models[@]}"; do [[ -e "$shared/models/$m" ]] || missing+=("$shared/models/$m"); done
if ((${#missing[@]})); then
  echo "bundle: missing: ${missing[*]}" >&2
  echo "  build them with: cmake --build $build --target prefixd prefixctl test_cuda_ops test_cuda_launch" \
       "test_forward_golden bench_forward bench_engine" >&2
  exit 1
fi
for tool in ldd strip tar xz; do
  command -v "$tool" >/dev/null || { echo "bundle: '$tool' is not installed" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b="$work/prefixd-bundle"
mkdir -p "$b/bin" "$b/lib/fallback" "$b/shared/models" "$b/models" "$b/scripts"

# On the host, never from the bundle: glibc, the dynamic loader, the driver, CUDA.
system_lib='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libcuda|libnvidia-|libcudart|libcublas|libcublasLt)\.'
for p in "${programs[@]}"; do
  cp "$build/$p" "$b/bin/"
  strip --strip-unneeded "$b/bin/$(basename "$p")"
  # "name => /path (addr)" lines; a "not found" stops the bundle.
  if ldd "$build/$p" | grep -q "not found"; then
    echo "bundle: $build/$p has unresolved libraries:" >&2
    ldd "$build/$p" | grep "not found" >&2
    exit 1
  fi
  ldd "$build/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if [[ "$name" =~ $system_lib ]]; then continue; fi
    dest="$b/lib"
    [[ "$name" =~ ^(libstdc\+\+|libgcc_s)\. ]] && dest="$b/lib/fallback"
    [[ -e "$dest/$name" ]] || cp -L "$path" "$dest/$name"
  done
done

for m in "${models[@]}"; do
  mkdir -p "$b/shared/models/$(dirname "$m")"
  cp -r "$shared/models/$m" "$b/shared/models/$m"
done
ln -s ../shared/models/stories260K.gguf "$b/models/stories260K.gguf"
cp scripts/gpu_check.sh scripts/bench_restart.sh "$b/scripts/"

cat >"$b/bin/run" <<'EOF'
#!/bin/sh
# bin/run PROGRAM [ARGS]: runs bin/PROGRAM (or PROGRAM from PATH, e.g. bash)
# with the bundle's libraries and test data: LD_LIBRARY_PATH = lib/, the
# host's CUDA library folders, then lib/fallback only when ldd finds a library
# missing or too old without it; PREFIXD_SHARED_DIR = shared/ and
# PREFIXD_MODELS_DIR = models/ unless they are set.
B=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $B/bin/run PROGRAM [ARGS]" >&2; exit 2; }
export PREFIXD_SHARED_DIR="${PREFIXD_SHARED_DIR:-$B/shared}"
export PREFIXD_MODELS_DIR="${PREFIXD_MODELS_DIR:-$B/models}"
export PREFIXD_BUNDLE_DIR="$B"
libs="$B/lib"
for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libs="$libs:$d"
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
prog=$1
shift
if [ -f "$B/bin/$prog" ]; then prog="$B/bin/$prog"; fi
path=$(command -v "$prog") || { echo "bin/run: no program '$prog' in $B/bin or PATH" >&2; exit 127; }
if ldd "$path" 2>&1 | grep -q "not found"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/lib/fallback"
fi
exec "$path" "$@"
EOF
chmod +x "$b/bin/run"

mkdir -p "$(dirname "$out")"
# One xz thread: one block, so at -9 (a 64 MiB dictionary) the programs'
# common bytes (the CUDA kernels' fatbin in each, ~14 MB) are stored once.
tar -C "$work" -cf - prefixd-bundle/bin prefixd-bundle/lib prefixd-bundle/shared prefixd-bundle/models \
  prefixd-bundle/scripts | xz -T1 "-$level" >"$out.tmp"
mv "$out.tmp" "$out"
bytes=$(stat -c %s "$out")
mib=$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b / 1048576}')
echo "bundle: $out, $mib MiB (xz -$level): $(ls "$b/bin" | tr '\n' ' ')"
echo "  lib: $(ls "$b/lib" | grep -v fallback | tr '\n' ' ')"
echo "  lib/fallback: $(ls "$b/lib/fallback" | tr '\n' ' ')"
if ((bytes > max_mib * 1048576)); then
  echo "bundle: $mib MiB is over the limit of $max_mib MiB" >&2
  exit 1
fi
