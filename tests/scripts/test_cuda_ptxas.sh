#!/usr/bin/env bash
# Static checks of the CUDA backend that need nvcc but no GPU:
#  1. the attention kernels (prefill, decode, decode reduce) and the quantized
#     weight kernels (matvec, dequantize, embed of every block format), for
#     sm_80 and sm_90, use no local memory: ptxas -v reports 0 bytes stack
#     frame and 0 bytes of spill stores/loads (the documented allowance is
#     zero). The PTX is the build's own (BUILD_DIR's library embeds it beside
#     the cubins; zstd-compressed by CUDA 13), so only ptxas runs here, on the
#     code the build ships; without that library or zstd the files are
#     compiled here instead (-O3, both architectures);
#  2. the built library holds sm_80 and sm_90 cubins for every kernel file
#     (cuobjdump --list-elf when installed, else the .nv_fatbin entries are read
#     directly with objcopy + od).
# Usage: bash tests/scripts/test_cuda_ptxas.sh BUILD_DIR  (from the repo root).
# Exit 77 (skipped): no nvcc; or the ptxas check passed but BUILD_DIR was not
# configured with CUDA, so there is no library to inspect.
set -euo pipefail
build="${1:-build}"

nvcc="$(command -v nvcc || true)"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [[ -z "$nvcc" && -f "$build/CMakeCache.txt" ]]; then
  nvcc="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
fi
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
  echo "skipped: nvcc not found"
  exit 77
fi
cuda_bin="$(dirname "$nvcc")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
lib="$build/kernels/cuda/libprefixd_kernels_cuda.a"
lib_abs="$(realpath -m "$lib")"  # $lib may be absolute (ctest passes the build dir)
mkdir -p "$tmp/objs"
if [[ -f "$lib" ]]; then (cd "$tmp/objs" && ar x "$lib_abs"); fi

# Prints "kind arch payload_offset payload_size compressed_size" for each entry
# of a .nv_fatbin section dumped to a file (kind 1: PTX, 2: ELF cubin).
fatbin_entries() {
  local fb="$1" size off hs fs end ehs
  size=$(stat -c %s "$fb")
  u() { od -An -t "u$1" -j "$2" -N "$1" "$fb" | tr -d ' '; }
  off=0
  while (( off + 16 <= size )); do
    [[ "$(u 4 "$off")" == 3126193488 ]] || break  # 0xBA55ED50
    hs=$(u 2 $((off + 6)))
    fs=$(u 8 $((off + 8)))
    end=$((off + hs + fs))
    off=$((off + hs))
    while (( off < end )); do
      ehs=$(u 4 $((off + 4)))
      echo "$(u 2 "$off") $(u 4 $((off + 28))) $((off + ehs)) $(u 8 $((off + 8))) $(u 4 $((off + 16)))"
      off=$((off + ehs + $(u 8 $((off + 8)))))
    done
    off=$(( (off + 7) / 8 * 8 ))
  done
}

# Writes the build's PTX for sm_$2 of library object $1 to $3; fails when the
# object holds none that can be read here.
build_ptx() {
  local obj="$1" arch="$2" out="$3" fb="$tmp/fb.bin" entries entry kind a poff psize csize
  objcopy -O binary --only-section=.nv_fatbin "$obj" "$fb" 2>/dev/null || return 1
  mapfile -t entries < <(fatbin_entries "$fb")
  for entry in "${entries[@]}"; do
    read -r kind a poff psize csize <<<"$entry"
    [[ "$kind" == 1 && "$a" == "$arch" ]] || continue
    if [[ "$(od -An -t x1 -j "$poff" -N 4 "$fb" | tr -d ' ')" == 28b52ffd ]]; then
      command -v zstd >/dev/null || return 1
      dd if="$fb" iflag=skip_bytes,count_bytes skip="$poff" count="$csize" bs=1M status=none |
        zstd -q -d -c | tr -d '\0' > "$out" || return 1
    else
      dd if="$fb" iflag=skip_bytes,count_bytes skip="$poff" count="$psize" bs=1M status=none |
        tr -d '\0' > "$out" || return 1
    fi
    grep -q "^\.target sm_$arch" "$out" && return 0
  done
  return 1
}

# --- 1. register and local-memory use of the attention and quantized kernels ---
fail=0
sources=(attention_prefill attention_decode attention_decode_simple quant_matvec quant_dequantize)
from_build=1
for name in "${sources[@]}"; do
  for arch in 80 90; do
    build_ptx "$tmp/objs/$name.cu.o" "$arch" "$tmp/$name.sm_$arch.ptx" || from_build=0
  done
done
if [[ $from_build == 1 ]]; then
  echo "ptxas on the PTX in $lib"
else
  echo "compiling the kernels here (no readable PTX in $lib)"
fi
printf '%-6s %5s %6s %8s %8s  %s\n' arch regs stack spill_st spill_ld kernel
for name in "${sources[@]}"; do
  src="kernels/cuda/$name.cu"
  if [[ $from_build == 1 ]]; then
    : > "$tmp/ptxas.log"
    for arch in 80 90; do
      if ! "$cuda_bin/ptxas" -arch="sm_$arch" -v "$tmp/$name.sm_$arch.ptx" -o "$tmp/k.cubin" \
           2>> "$tmp/ptxas.log"; then
        cat "$tmp/ptxas.log"
        echo "FAIL: ptxas rejects the build's sm_$arch PTX of $src"
        exit 1
      fi
    done
  elif ! "$nvcc" -std=c++17 -O3 -I. -gencode arch=compute_80,code=sm_80 \
       -gencode arch=compute_90,code=sm_90 -Xptxas -v -c "$src" -o "$tmp/k.o" 2> "$tmp/ptxas.log"; then
    cat "$tmp/ptxas.log"
    echo "FAIL: $src does not compile"
    exit 1
  fi
  awk -v q="'" '
    /Compiling entry function/ { n = split($0, parts, q); name = parts[2]; arch = parts[4]; next }
    /bytes stack frame/ { stack = $1; st = $5; ld = $9; next }
    /Used [0-9]+ registers/ && name != "" {
      for (i = 1; i <= NF; ++i) if ($i == "Used") regs = $(i + 1);
      print arch, regs, stack, st, ld, name; name = "" }
  ' "$tmp/ptxas.log" > "$tmp/table"
  if [[ ! -s "$tmp/table" ]]; then
    cat "$tmp/ptxas.log"
    echo "FAIL: no ptxas resource lines for $src"
    exit 1
  fi
  while read -r arch regs stack st ld name; do
    pretty="$(echo "$name" | c++filt 2>/dev/null || echo "$name")"
    pretty="$(echo "$pretty" | sed -e 's/prefixd::cuda::(anonymous namespace):://' \
      -e 's/(prefixd::DType)0/F32/; s/(prefixd::DType)1/F16/; s/(prefixd::DType)2/BF16/' \
      -e 's/(prefixd::WeightType)/type /' \
      -e 's/^void //; s/(.*//')"
    printf '%-6s %5s %6s %8s %8s  %s\n' "$arch" "$regs" "$stack" "$st" "$ld" "$pretty"
    if [[ "$stack" != 0 || "$st" != 0 || "$ld" != 0 ]]; then
      echo "FAIL: local memory (stack/spills) in $pretty for $arch"
      fail=1
    fi
  done < "$tmp/table"
done
if [[ $fail != 0 ]]; then exit 1; fi
echo "ptxas: no spills or stack in the attention and quantized kernels (sm_80, sm_90)"

# --- 2. cubins for each architecture in the library ------------------------------
if [[ ! -f "$lib" ]]; then
  echo "skipped: $lib not built (configure $build with nvcc found and PREFIXD_CUDA=ON)"
  exit 77
fi
missing=0
for obj in "$tmp"/objs/*.cu.o; do
  base="$(basename "$obj")"
  if [[ -x "$cuda_bin/cuobjdump" ]] || command -v cuobjdump > /dev/null; then
    tool="$(command -v cuobjdump || echo "$cuda_bin/cuobjdump")"
    archs="$("$tool" --list-elf "$obj" | sed -n 's/.*\.sm_\([0-9]*\)\..*/\1/p' | sort -u | tr '\n' ' ')"
  else
    archs=""
    if objcopy -O binary --only-section=.nv_fatbin "$obj" "$tmp/fb.bin" 2>/dev/null; then
      archs="$(fatbin_entries "$tmp/fb.bin" | awk '$1 == 2 { print $2 }' | sort -u | tr '\n' ' ')"
    fi
  fi
  echo "$base: cubins for sm_ $archs"
  for want in 80 90; do
    if [[ " $archs " != *" $want "* ]]; then
      echo "FAIL: $base has no sm_$want cubin"
      missing=1
    fi
  done
done
if [[ $missing != 0 ]]; then exit 1; fi
echo "library: every kernel object has sm_80 and sm_90 cubins"
