#!/usr/bin/env bash
# Runtime proof that a CPU without AVX-512 never reaches AVX-512 code: runs the
# built BUILD_DIR/tests/test_forward_golden under `qemu-x86_64 -cpu Haswell`
# (AVX2 + FMA + F16C, no AVX-512; QEMU's TCG has no AVX-512 at all, so one such
# instruction is a SIGILL) with the automatic choice of instruction set, on the
# whole-prompt golden case of one model per kernel family (emulation is slow),
# and checks that
#   - the emulator really faults on an AVX-512 instruction (a control run),
#   - the automatic choice is avx2 and every golden check passes (exit 0),
#   - forcing each set of kernels/cpu/isa_sets.def that needs a feature
#     Haswell lacks (avx512, avx512bf16) is refused as unsupported (exit 77
#     from the test binary).
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

# The automatic choice on an emulated Haswell: avx2, and one whole-prompt
# golden case of one model per kernel family passes: stories260K (F32 tiles,
# llama), rand-gemma3-bf16 (BF16 tiles, the sliding window), the Q4_K_M file
# (block formats: the int8 decode tiles and panels, Q6_K beside Q4_K); every
# model runs attention. The split-prompt, last-layer and KV-dtype cases repeat
# the same kernels and run natively (test_forward_golden.avx2) instead.
log="$work/auto.log"
rc=0
models=stories260K,rand-gemma3-bf16,quant/rand-q-q4-k-m,rand-qwen35-bf16,rand-lfm2-bf16
# One prompt each: stories260K's longest (204 tokens, 64 greedy steps), gemma3's
# shortest that crosses its 64-token window (100 tokens: the last query sees
# positions 36..99 only; BF16 tiles under emulation are the
# run's slowest part, 200 tokens took half as long again), and Q4_K_M's 17-token
# one (int8 panels in prefill, the int8 decode tiles for 32 steps).
# The hybrids (Qwen3.5's DeltaNet, LFM2's short convolutions): their 17-token
# prompt, the recurrent state carried over a block boundary and 32 decode steps.
cases=long,rand-100,rand-17,len17
# The timeout stays under ctest's 900 s so that a hang is reported with its log.
timeout 800 env -u PREFIXD_CPU_ISA PREFIXD_GOLDEN_CASES="$cases" "${qemu[@]}" "$binary" --test-case='full forward pass*' \
  --subcase="$models" >"$log" 2>&1 || rc=$?
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
# Each model's golden cases ran (a filter that selects nothing passes vacuously).
for m in stories260K/long rand-gemma3-bf16/rand-100 quant/rand-q-q4-k-m/rand-17 rand-qwen35-bf16/len17 rand-lfm2-bf16/len17; do
  grep -q "MESSAGE: $m.*max logit error" "$log" || fail "no $m golden case ran" "$log"
done
others=$(grep 'MESSAGE: .*max logit error' "$log" |
  grep -v -e 'MESSAGE: stories260K/' -e 'MESSAGE: rand-gemma3-bf16/' -e 'MESSAGE: quant/rand-q-q4-k-m/' \
    -e 'MESSAGE: rand-qwen35-bf16/' -e 'MESSAGE: rand-lfm2-bf16/' || true)
[[ -z "$others" ]] || fail "models other than $models ran: $(head -n1 <<<"$others")" "$log"
echo "golden whole-prompt cases of $models: passed on avx2 ($((SECONDS - start)) s so far)"

# Forcing a set that needs more than Haswell's features on this CPU is refused
# as unsupported (exit 77), not run.
beyond_haswell=$(sed -n 's/^PREFIXD_CPU_ISA_SET(\([a-z0-9_]*\), *[A-Za-z0-9_]*, *x86_64, *"\([^"]*\)".*/\1 \2/p' \
  kernels/cpu/isa_sets.def | awk '{ for (i = 2; i <= NF; ++i) if ($i !~ /^(avx2|fma|f16c)$/) { print $1; next } }')
[[ -n "$beyond_haswell" ]] || fail "no set beyond Haswell's features read from kernels/cpu/isa_sets.def"
for isa in $beyond_haswell; do
  log="$work/forced-$isa.log"
  rc=0
  PREFIXD_CPU_ISA=$isa timeout 600 "${qemu[@]}" "$binary" --subcase=stories260K >"$log" 2>&1 || rc=$?
  ((rc == 77)) || fail "PREFIXD_CPU_ISA=$isa under ${qemu[*]}: exit $rc, expected 77 (unsupported)" "$log"
  grep -q "^skipped: this CPU has no $isa" "$log" || fail "PREFIXD_CPU_ISA=$isa: no 'skipped' message" "$log"
  echo "PREFIXD_CPU_ISA=$isa: reported unsupported (exit 77)"
done

echo "ok: emulated Haswell runs avx2 and never reaches AVX-512 ($((SECONDS - start)) s)"
