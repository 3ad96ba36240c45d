#!/usr/bin/env bash
# Fuzzes the daemon's HTTP body parsing and validation with libFuzzer +
# AddressSanitizer + UBSan for ${PREFIXD_FUZZ_SECONDS:-30} seconds, seeded
# with valid and invalid completion, chat, cache, tokenize and Anthropic
# messages bodies.
# Usage: bash tests/scripts/test_fuzz_request_validation.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) when clang++ is missing; non-zero on any crash.
set -euo pipefail
build_dir="${1:-build}"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "clang++ not found: skipping the request validation fuzzer"
  exit 77
fi
src_dir="$(pwd)"
work="$build_dir/fuzz_request_validation"
mkdir -p "$work/corpus"
pcre_flags="$(pkg-config --cflags --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)"

clang++ -std=c++20 -gline-tables-only -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src_dir" "$src_dir/tests/fuzz/fuzz_request_validation.cpp" \
  "$src_dir/daemon/validation/request_validation.cpp" "$src_dir/daemon/validation/messages_request.cpp" \
  "$src_dir/daemon/validation/cache_breakpoints.cpp" "$src_dir/engine/sampler.cpp" \
  "$src_dir/engine/model/gguf.cpp" "$src_dir/engine/text/chat_template.cpp" "$src_dir"/engine/text/tokenizer*.cpp "$src_dir/engine/text/stream_decoder.cpp" \
  $pcre_flags -o "$work/fuzz_request_validation"

i=0
seed() { i=$((i + 1)); printf '%s' "$1" > "$work/corpus/seed_$i"; }
seed '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "stream": true}'
seed '{"prompt": [1, 403, 407], "max_tokens": 500, "stop": ["a", "b"], "seed": 7, "top_k": 3}'
seed '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<|im_end|>hi"}], "max_completion_tokens": 8}'
seed '{"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "n": 2}'
seed '{"prompt": [[1, 2]], "cache_salt": "t", "model": "stories260K", "stream_options": {"include_usage": true}}'
seed '{"content": "Lily and Tom", "add_special": true, "parse_special": false}'
seed '{"tokens": [1, 2, 511, 512, -1]}'
seed '{"model": "stories260K", "max_tokens": 8, "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}], "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]}'
seed '{"model": "stories260K", "max_tokens": 0, "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}], "tools": [{}]}'
seed '{"prompt": "", "max_tokens": -1, "temperature": "hot", "top_p": 1e400}'
seed '{"prompt": [1, 403], "echo": true, "logprobs": 5, "max_tokens": 0, "return_tokens_as_token_ids": true}'
seed '{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21}'

seconds="${PREFIXD_FUZZ_SECONDS:-30}"
PREFIXD_FUZZ_MODEL="$src_dir/../shared/models/stories260K.gguf" \
  "$work/fuzz_request_validation" -max_total_time="$seconds" -max_len=2048 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 15
exit "${PIPESTATUS[0]}"
