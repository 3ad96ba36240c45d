#!/usr/bin/env bash
# Static proof that no ISA-specific instruction sits outside its set: every
# function of the prefixd binary is disassembled, and
#   - outside prefixd::cpu::{avx2,avx512,avx512bf16}:: no AVX at all (no VEX or
#     EVEX instruction: nothing a baseline x86-64 CPU would fault on);
#   - inside prefixd::cpu::avx2:: no AVX-512 (zmm, mask or xmm16+ registers).
# Catches what the qemu test can miss: a shared inline function or template
# emitted by an ISA unit and picked by the linker for everyone.
# Usage: bash tests/scripts/test_cpu_isa_isolation.sh BUILD_DIR. Exit 77 off x86-64.
set -euo pipefail
build_dir="${1:-build}"
if [[ "$(uname -m)" != "x86_64" ]]; then
  echo "not x86-64: the x86 instruction sets are not built here; skipping"
  exit 77
fi
if ! command -v objdump >/dev/null 2>&1; then
  echo "objdump (binutils) not found; skipping"
  exit 77
fi
binary="$build_dir/prefixd"
[[ -x "$binary" ]] || { echo "no $binary: build first"; exit 1; }

objdump -d --no-show-raw-insn -C "$binary" | awk '
  /^[0-9a-f]+ <.*>:$/ {
    fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn)
    set = "";
    if (index(fn, "prefixd::cpu::avx512bf16::") || index(fn, "prefixd::cpu::avx512::")) set = "avx512";
    else if (index(fn, "prefixd::cpu::avx2::")) set = "avx2";
    if (set == "avx2") n_avx2++;
    if (set == "avx512") n_avx512++;
    next
  }
  /^ +[0-9a-f]+:\t/ {
    insn = $0; sub(/^ +[0-9a-f]+:\t/, "", insn)
    split(insn, words, " "); mnemonic = words[1]
    evex = (insn ~ /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\>|\{1to/)
    vex = (mnemonic ~ /^v/ || insn ~ /%ymm/)
    if (set == "" && (vex || evex)) { if (!(fn in seen)) { seen[fn] = 1; print "AVX outside the sets: " fn ": " insn; bad++ } }
    else if (set == "avx2" && evex) { if (!(fn in seen)) { seen[fn] = 1; print "AVX-512 in the avx2 set: " fn ": " insn; bad++ } }
  }
  END {
    printf "functions in the avx2 set: %d, in the avx512 sets: %d\n", n_avx2, n_avx512
    if (n_avx2 == 0 || n_avx512 == 0) { print "expected functions of both x86 sets in the binary"; exit 1 }
    if (bad) { printf "%d functions break the ISA isolation\n", bad; exit 1 }
    print "ISA isolation holds"
  }'
