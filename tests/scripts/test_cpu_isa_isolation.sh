#!/usr/bin/env bash
# Static proof that no ISA-specific instruction sits outside its set: every
# function of the prefixd binary is disassembled, and, for the sets of
# kernels/cpu/isa_sets.def,
#   - outside the namespaces prefixd::cpu::<set>:: of the x86 sets (those
#     requiring cpuid features; `portable` is none of them) no AVX at all (no
#     VEX or EVEX instruction: nothing a baseline x86-64 CPU would fault on);
#   - inside a set that does not require avx512f: no AVX-512 (zmm, mask or
#     xmm16+ registers);
#   - outside the sets that require amx_tile: no AMX tile instruction.
# Catches what the qemu test can miss: a shared inline function or template
# emitted by an ISA unit and picked by the linker for everyone.
# Usage: bash tests/scripts/test_cpu_isa_isolation.sh BUILD_DIR (from the repo
# root). Exit 77 off x86-64.
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

# "name features..." per x86 set of isa_sets.def (one line each).
sets=$(sed -n 's/^PREFIXD_CPU_ISA_SET(\([a-z0-9_]*\), *[A-Za-z0-9_]*, *x86_64, *"\([^"]*\)".*/\1 \2/p' \
  kernels/cpu/isa_sets.def)
[[ -n "$sets" ]] || { echo "no x86 sets read from kernels/cpu/isa_sets.def"; exit 1; }

objdump -d --no-show-raw-insn -C "$binary" | awk -v sets="$sets" '
  BEGIN {
    n = split(sets, lines, "\n")
    for (i = 1; i <= n; ++i) {
      split(lines[i], words, " "); name = words[1]; names[i] = name; count[name] = 0
      evex_ok[name] = (" " lines[i] " " ~ / avx512f /)
      amx_ok[name] = (" " lines[i] " " ~ / amx_tile /)
    }
  }
  /^[0-9a-f]+ <.*>:$/ {
    fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn)
    set = ""; at = 0
    for (i = 1; i <= n; ++i) {
      p = index(fn, "prefixd::cpu::" names[i] "::")
      if (p > 0 && (at == 0 || p < at)) { at = p; set = names[i] }
    }
    if (set != "") count[set]++
    next
  }
  /^ +[0-9a-f]+:\t/ {
    insn = $0; sub(/^ +[0-9a-f]+:\t/, "", insn)
    split(insn, words, " "); mnemonic = words[1]
    evex = (insn ~ /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\>|\{1to/)
    vex = (mnemonic ~ /^v/ || insn ~ /%ymm/)
    amx = (mnemonic ~ /^(ldtilecfg|sttilecfg|tileload|tilestore|tilezero|tilerelease|tdp)/)
    if (amx && (set == "" || !amx_ok[set])) { if (!(fn in seen)) { seen[fn] = 1; print "AMX outside the amx_tile sets: " fn ": " insn; bad++ } }
    if (set == "" && (vex || evex)) { if (!(fn in seen)) { seen[fn] = 1; print "AVX outside the sets: " fn ": " insn; bad++ } }
    else if (set != "" && !evex_ok[set] && evex) { if (!(fn in seen)) { seen[fn] = 1; print "AVX-512 in the " set " set: " fn ": " insn; bad++ } }
  }
  END {
    summary = ""; missing = 0
    for (i = 1; i <= n; ++i) {
      summary = summary (i > 1 ? ", " : "") names[i] " " count[names[i]]
      if (count[names[i]] == 0) missing = 1
    }
    print "functions per set: " summary
    if (missing) { print "expected functions of every x86 set in the binary"; exit 1 }
    if (bad) { printf "%d functions break the ISA isolation\n", bad; exit 1 }
    print "ISA isolation holds"
  }'
