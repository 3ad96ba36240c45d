#!/usr/bin/env bash
# Runtime proof that a CPU without AVX-512 never reaches AVX-512 code: runs the
# built BUILD_DIR/tests/test_forward_golden under `qemu-x86_64 -cpu Haswell`
# (AVX2 + FMA + F16C, no AVX-512; QEMU's TCG has no AVX-512 at all, so one such
# instruction is a SIGILL) with the automatic choice of instruction set, on the
# stories260K golden cases only (--subcase=stories260K; emulation is slow), and
# checks that
#   - the emulator really faults on an AVX-512 instruction (a control run),
#   - the automatic choice is avx2 and every golden check passes (exit 0),
#   - so do the sliding-window model's whole-prompt cases (rand-gemma3-bf16),
#   - forcing PREFIXD_CPU_ISA=avx512 or avx512bf16 is refused as unsupported
#     (exit 77 from the test binary).
# The static counterpart is tests/scripts/test_cpu_isa_isolation.sh.
# Usage: bash tests/scripts/test_cpu_isa_qemu_haswell.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) off x86-64 or without qemu-x86_64 (Debian: qemu-user).
set -euo pipefail
build_dir="${1:-build}"
if [[ "$(uname -m)" != "x86_64" ]]; then
  echo "not x86-64: the x86 instruction sets are not built here; skipping"
  exit 77
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "qemu-x86_64 not found (Debian: qemu-user); skipping the emulated-Haswell test"
  exit 77
fi
binary="$build_dir/tests/test_forward_golden"
[[ -x "$binary" ]] || { echo "no $binary: build first"; exit 1; }
work="$build_dir/qemu-haswell"
mkdir -p "$work"
qemu=(qemu-x86_64 -cpu Haswell)
ulimit -c 0  # an emulated crash would leave a qemu_*.core in the source tree
start=$SECONDS

# Prints a log's last lines and fails.
fail() {
  echo "FAIL: $1"
  [[ -n "${2:-}" && -f "$2" ]] && { echo "--- last lines of $2:"; tail -n 40 "$2"; }
  exit 1
}

# Control: the emulated CPU must fault on AVX-512 (else a pass below proves nothing).
if command -v cc >/dev/null 2>&1; then
  printf '%s\n' 'int main(void) { __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0" ::: "xmm0"); return 0; }' \
    > "$work/avx512_probe.c"
  cc -O0 "$work/avx512_probe.c" -o "$work/avx512_probe"
  rc=0
  # (In a subshell that waits, so that its "Illegal instruction" line goes to /dev/null.)
  ("${qemu[@]}" "$work/avx512_probe"; exit $?) 2>/dev/null || rc=$?
  ((rc == 128 + 4)) || fail "an AVX-512 instruction under ${qemu[*]} gave exit $rc, expected SIGILL (132)"
  echo "control: an AVX-512 instruction under ${qemu[*]} is a SIGILL"
fi

# The automatic choice on an emulated Haswell: avx2, and the stories260K goldens pass.
log="$work/auto.log"
rc=0
# About 1 min on an idle 2-core machine; several times that on a loaded one (the
# thread pool spin-waits, and emulated spinning is costly). The timeout stays under
# ctest's 900 s so that a hang is reported with its log.
timeout 800 env -u PREFIXD_CPU_ISA "${qemu[@]}" "$binary" --subcase=stories260K >"$log" 2>&1 || rc=$?
((rc != 124)) || fail "test_forward_golden under ${qemu[*]} ran past 800 s" "$log"
if ((rc == 128 + 4)); then
  fail "SIGILL: an instruction this CPU lacks (AVX-512?) was reached under ${qemu[*]}" "$log"
fi
((rc == 0)) || fail "test_forward_golden under ${qemu[*]} exited $rc" "$log"
line=$(grep -m1 '^CPU instruction set under test:' "$log" || true)
echo "$line"
[[ "$line" == "CPU instruction set under test: avx2 "* ]] ||
  fail "expected the automatic choice to be avx2 on Haswell" "$log"
if grep -q 'avx512' <<<"$line"; then fail "the emulated CPU reports AVX-512 features" "$log"; fi
grep -q '^\[doctest\] Status: SUCCESS!' "$log" || fail "doctest did not report success" "$log"
summary=$(grep -m1 '^\[doctest\] assertions:' "$log" || true)
echo "$summary"
passed=$(sed -n 's/^\[doctest\] assertions: *[0-9]* | *\([0-9]*\) passed.*/\1/p' <<<"$summary")
[[ -n "$passed" ]] && ((passed > 0)) || fail "no assertions ran" "$log"
# The golden cases themselves ran (not only the model-free test case).
grep -q 'MESSAGE: stories260K/.*max logit error' "$log" ||
  fail "no stories260K golden case ran (does --subcase=stories260K select nothing?)" "$log"
# Only stories260K ran (the other models' subcases are filtered out).
if grep -q 'rand-' "$log"; then fail "models other than stories260K ran" "$log"; fi

# The sliding-window model (rand-gemma3-bf16): its golden cases, whole
# prompts only (the split and KV-dtype variants would take many minutes here).
log="$work/gemma3.log"
rc=0
timeout 600 env -u PREFIXD_CPU_ISA "${qemu[@]}" "$binary" --subcase=rand-gemma3-bf16 \
  --test-case='full forward pass*' >"$log" 2>&1 || rc=$?
((rc == 0)) || fail "test_forward_golden (rand-gemma3-bf16) under ${qemu[*]} exited $rc" "$log"
grep -q '^CPU instruction set under test: avx2 ' "$log" || fail "expected avx2 for rand-gemma3-bf16" "$log"
grep -q '^\[doctest\] Status: SUCCESS!' "$log" || fail "rand-gemma3-bf16: doctest did not report success" "$log"
grep -q 'MESSAGE: rand-gemma3-bf16/long-700: max logit error' "$log" ||
  fail "the rand-gemma3-bf16 700-token case did not run" "$log"
echo "rand-gemma3-bf16 (sliding window) golden: passed on avx2"

# Forcing an AVX-512 set on this CPU is refused as unsupported (exit 77), not run.
for isa in avx512 avx512bf16; do
  log="$work/forced-$isa.log"
  rc=0
  PREFIXD_CPU_ISA=$isa timeout 600 "${qemu[@]}" "$binary" --subcase=stories260K >"$log" 2>&1 || rc=$?
  ((rc == 77)) || fail "PREFIXD_CPU_ISA=$isa under ${qemu[*]}: exit $rc, expected 77 (unsupported)" "$log"
  grep -q "^skipped: this CPU has no $isa" "$log" || fail "PREFIXD_CPU_ISA=$isa: no 'skipped' message" "$log"
  echo "PREFIXD_CPU_ISA=$isa: reported unsupported (exit 77)"
done

echo "ok: emulated Haswell runs avx2 and never reaches AVX-512 ($((SECONDS - start)) s)"
