#!/usr/bin/env bash
# Several replicas, one cache (issue 12), for real on loopback: 2 memcached
# servers, 3 prefixd replicas (stories260K, one deployment secret, the remote
# tier on both servers, --restore-policy always so that a restore is never
# traded for a recompute) and HAProxy with ops/haproxy/haproxy.cfg. Checks:
#   1. a prompt computed on replica A is restored on replica B from the remote
#      tier (cached_tokens >= its full blocks, remote_tokens > 0), with the
#      same greedy output;
#   2. a record forged in memcached under a real key (record and checksums
#      intact, MAC trailer replaced) is rejected and counted
#      (prefixd_corrupt_records_total{tier="remote"}), the answer unchanged;
#   3. a replica with another model on the same pool and secret gets no
#      remote hits;
#   4. kill -9 of a replica during a stream of requests through HAProxy: no
#      request fails but those in flight at the kill; each system prompt
#      stays on one replica, the victim's move and come from the remote tier
#      (remote_tokens > 0, never recomputed), the others do not move;
#   5. a memcached server stopped with SIGSTOP leaves a replica's ring after a
#      bounded number of timeouts (its lookups keep answering) and rejoins after
#      SIGCONT; kill -9 of a memcached server: no request fails, the lost share is
#      recomputed, and once written again every prompt is a full remote hit;
#   6. DELETE /v1/cache on one replica makes another miss the cleared prompts
#      in the pool (a generation bump), DELETE ?scope=local leaves the pool.
# Every wait is bounded. Exit 77 = skipped (memcached, haproxy, curl or
# python3 missing).
# Usage: test_cluster.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_cluster.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
config="$root/ops/haproxy/haproxy.cfg"
helper="$root/tests/scripts/lib/cluster_helper.py"
shared="${PREFIXD_SHARED_DIR:-$root/../shared}"
model="$shared/models/stories260K.gguf"
other_model="$shared/models/rand-qwen3-bf16.gguf"
source "$(dirname "$0")/lib/prefixd_test.sh"

for tool in memcached haproxy curl python3 jq; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found (Debian packages memcached, haproxy, curl, python3, jq); skipping"
    exit 77
  fi
done
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }
for f in "$config" "$model" "$other_model"; do [[ -f "$f" ]] || { echo "missing $f"; exit 1; }; done
[[ $("$build_dir/prefixd" --help) == *--remote-cache* ]] ||
  { echo "$build_dir/prefixd has no --remote-cache"; exit 1; }

work=$(mktemp -d)
mc_pids=() mc_ports=() pids=() ports=() haproxy_pid=""
cleanup() {
  local p
  for p in "$haproxy_pid" "${pids[@]}" "${mc_pids[@]}"; do
    [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  local f
  for f in "$work"/*.err "$work/haproxy.log"; do
    [[ -s "$f" ]] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; }
  done
  exit 1
}
helper() { python3 "$helper" "$@"; }

# --- memcached x2, prefixd x3, HAProxy ------------------------------------------
head -c 32 /dev/urandom | base64 >"$work/secret"
chmod 600 "$work/secret"
user=()
[[ $(id -u) == 0 ]] && user=(-u root)  # memcached refuses to run as root otherwise
for i in 0 1; do
  port=$(helper port)
  memcached -l 127.0.0.1 -p "$port" -U 0 -m 64 "${user[@]}" >"$work/memcached$i.err" 2>&1 &
  mc_pids+=($!)
  mc_ports+=("$port")
  for _ in $(seq 1 100); do
    helper mc-items "$port" >/dev/null 2>&1 && break
    kill -0 "${mc_pids[$i]}" 2>/dev/null || fail "memcached $i exited"
    sleep 0.05
  done
  helper mc-items "$port" >/dev/null || fail "memcached $i does not answer on :$port"
done
pool="memcached://127.0.0.1:${mc_ports[0]},127.0.0.1:${mc_ports[1]}"
replica_args=(--threads 1 --kv-pool-mib 16 --host-cache-gb 0.0625 --restore-policy always
              --remote-cache "$pool" --cache-secret-file "$work/secret")
for i in 0 1 2; do
  start_prefixd "$build_dir" "$work/r$((i + 1))" -m "$model" "${replica_args[@]}"
  pids+=("$PREFIXD_PID")
  ports+=("$PREFIXD_PORT")
done
PREFIXD_PID=""
url() { echo "http://127.0.0.1:${ports[$1]}"; }

haproxy -c -q -f "$config" 2>/dev/null && fail "haproxy -c accepts $config without replicas"
front_port=$(helper port)
export PREFIXD_CLUSTER_BIND="127.0.0.1:$front_port" PREFIXD_REPLICA_1="127.0.0.1:${ports[0]}" \
  PREFIXD_REPLICA_2="127.0.0.1:${ports[1]}" PREFIXD_REPLICA_3="127.0.0.1:${ports[2]}"
haproxy -c -q -f "$config" || fail "haproxy -c refuses $config"
haproxy -db -f "$config" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
front="http://127.0.0.1:$front_port"
for _ in $(seq 1 100); do
  curl -fsS "$front/health" >/dev/null 2>&1 && break
  kill -0 "$haproxy_pid" 2>/dev/null || fail "haproxy exited"
  sleep 0.1
done
curl -fsS "$front/health" >/dev/null || fail "no /health through HAProxy"
echo "memcached :${mc_ports[*]}, replicas r1-r3 :${ports[*]}, HAProxy :$front_port"

# wait_items N: until the pool holds at least N items, at most 30 s (the
# replicas write at idle CPU priority: on a busy machine that takes a while).
wait_items() {
  local n
  for _ in $(seq 1 300); do
    n=$(helper mc-items "${mc_ports[@]}")
    ((n >= $1)) && return 0
    sleep 0.1
  done
  fail "the pool holds $n items, expected at least $1 (remote writes)"
}
# complete URL PROMPT_JSON: one summary line (cluster_helper.py summary()).
complete() { helper complete "$@"; }
field() { jq -r "$2" <<<"$1"; }
remote_metric() {
  curl -fsS "$1/metrics" | awk -v name="$2" '$1 == name "{tier=\"remote\"}" {print $2; found = 1}
    END {if (!found) print "absent"}'
}

block=16
system_tokens=160  # 10 full blocks
question_tokens=20

# --- 1. computed on A, restored on B ------------------------------------------
prompt=$(python3 -c "import json, sys; sys.path.insert(0, '$(dirname "$helper")')
import cluster_helper as h; print(json.dumps(h.ids(1, $system_tokens) + h.ids(2, $question_tokens)))")
n_prompt=$((system_tokens + question_tokens))
full=$(((n_prompt - 1) / block * block))  # the last token is always computed
items_before=$(helper mc-items "${mc_ports[@]}")
cold=$(complete "$(url 0)" "$prompt")
[[ $(field "$cold" .status) == 200 ]] || fail "cold completion on r1: $cold"
[[ $(field "$cold" .cached_tokens) == 0 ]] || fail "the cold completion had cached tokens: $cold"
wait_items $((items_before + full / block))
# r2 holds nothing of it locally: /v1/cache/lookup asks the pool (existence
# checks on r2's HTTP thread) and reports the remote run.
lookup=$(curl -fsS -X POST "$(url 1)/v1/cache/lookup" -H 'Content-Type: application/json' \
  -d "{\"prompt\": $prompt}") || fail "/v1/cache/lookup on r2"
[[ $(field "$lookup" .remote_tokens) == "$full" && $(field "$lookup" .cached_tokens) == "$full" &&
   $(field "$lookup" .device_tokens) == 0 ]] ||
  fail "r2's lookup does not report the $full tokens in the pool: $lookup"
(($(curl -fsS "$(url 1)/metrics" | awk '$1 == "prefixd_remote_lookup_blocks_total{result=\"hit\"}" {print $2}') ==
  full / block)) || fail "r2's prefixd_remote_lookup_blocks_total{result=\"hit\"} is not $((full / block))"
warm=$(complete "$(url 1)" "$prompt")
[[ $(field "$warm" .status) == 200 ]] || fail "completion on r2: $warm"
echo "1. r1 cold: prefill $(field "$cold" .prefill_tokens); r2: cached $(field "$warm" .cached_tokens)," \
  "remote $(field "$warm" .remote_tokens) of $n_prompt tokens"
(($(field "$warm" .cached_tokens) >= full)) || fail "r2 cached fewer than $full tokens: $warm"
(($(field "$warm" .remote_tokens) > 0)) || fail "r2 took nothing from the remote tier: $warm"
[[ $(field "$warm" .text) == "$(field "$cold" .text)" &&
   $(field "$warm" '.token_ids|tostring') == "$(field "$cold" '.token_ids|tostring')" ]] ||
  fail "restored output differs from the cold one: $cold vs $warm"

# --- 2. a forged record -------------------------------------------------------
helper mc-keys "${mc_ports[@]}" | sort >"$work/keys.before"
forged_prompt=$(python3 -c "import json, sys; sys.path.insert(0, '$(dirname "$helper")')
import cluster_helper as h; print(json.dumps(h.ids(3, $system_tokens) + h.ids(4, $question_tokens)))")
items_before=$(helper mc-items "${mc_ports[@]}")
cold=$(complete "$(url 0)" "$forged_prompt")
[[ $(field "$cold" .status) == 200 ]] || fail "cold completion on r1: $cold"
wait_items $((items_before + full / block))
helper mc-keys "${mc_ports[@]}" | sort >"$work/keys.after"
comm -13 "$work/keys.before" "$work/keys.after" >"$work/keys.new"
(($(wc -l <"$work/keys.new") >= full / block)) || fail "expected $((full / block)) new keys, got:
$(cat "$work/keys.new")"
# Every block of the prompt: its first block fails, so nothing of it can be restored.
while read -r port key; do helper mc-forge "$port" "$key" >/dev/null; done <"$work/keys.new"
corrupt_before=$(remote_metric "$(url 2)" prefixd_corrupt_records_total)
[[ $corrupt_before != absent ]] || fail "r3's /metrics has no prefixd_corrupt_records_total{tier=\"remote\"}"
answer=$(complete "$(url 2)" "$forged_prompt")
corrupt_after=$(remote_metric "$(url 2)" prefixd_corrupt_records_total)
echo "2. forged $(wc -l <"$work/keys.new") records: r3 remote_tokens $(field "$answer" .remote_tokens)," \
  "corrupt records $corrupt_before -> $corrupt_after"
[[ $(field "$answer" .status) == 200 ]] || fail "completion over forged records: $answer"
[[ $(field "$answer" .remote_tokens) == 0 ]] || fail "a forged record was served: $answer"
((corrupt_after > corrupt_before)) || fail "the forged record was not counted"
[[ $(field "$answer" .text) == "$(field "$cold" .text)" ]] || fail "answer over forged records differs: $answer"

# --- 3. another model on the same pool and secret -----------------------------
start_prefixd "$build_dir" "$work/other" -m "$other_model" "${replica_args[@]}"
pids+=("$PREFIXD_PID")
other="http://127.0.0.1:$PREFIXD_PORT"
answer=$(complete "$other" "$prompt")  # the prompt of check 1, in the pool
echo "3. another model, a prompt in the pool: cached $(field "$answer" .cached_tokens)," \
  "remote $(field "$answer" .remote_tokens)"
[[ $(field "$answer" .status) == 200 ]] || fail "completion on the other model: $answer"
[[ $(field "$answer" .remote_tokens) == 0 && $(field "$answer" .cached_tokens) == 0 ]] ||
  fail "another model got cached tokens: $answer"
stop_prefixd "$work/other"
unset 'pids[3]'

# --- 4. kill -9 of a replica during a stream through HAProxy -------------------
n_prompts=6
items_before=$(helper mc-items "${mc_ports[@]}")
python3 - "$helper" "$front" "$n_prompts" "$system_tokens" "$question_tokens" >"$work/phase1.json" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])
import cluster_helper as h
front, n, s, q = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = []
for rnd in range(3):
    for k in range(n):
        prompt = h.ids(100 + k, s) + h.ids(20_000 + rnd * n + k, q)
        r = h.summary(*h.completion(front, prompt, key=f"system-{k}"))
        r["prompt"] = k
        out.append(r)
print(json.dumps(out))
PY
jq -e 'all(.[]; .status == 200)' "$work/phase1.json" >/dev/null || fail "a request failed before the kill"
# prompt -> replica; each prompt on one replica only.
jq -e 'group_by(.prompt) | all(.[]; (map(.replica) | unique | length) == 1)' "$work/phase1.json" \
  >/dev/null || fail "a system prompt was served by several replicas: $(jq -c 'map([.prompt, .replica])' "$work/phase1.json")"
owners=$(jq -c 'group_by(.prompt) | map({key: (.[0].prompt | tostring), value: .[0].replica}) | from_entries' \
  "$work/phase1.json")
(($(jq 'map(.replica) | unique | length' "$work/phase1.json") >= 2)) ||
  fail "every system prompt went to one replica: $owners"
victim=$(jq -r '.["0"]' <<<"$owners")  # r1, r2 or r3
victim_pid=${pids[$((${victim#r} - 1))]}
# Its prompts must be in the pool before the kill: every system prompt's 10
# blocks and each request's own 11th block, at least (bounded wait).
wait_items $((items_before + n_prompts * system_tokens / block + 3 * n_prompts))
# 120 requests, 2 at a time, 50 ms apart: about 3 s, so that some go to the
# dead replica before HAProxy's checks mark it down (retried elsewhere) and
# some after.
echo "4. prompt owners $owners; kill -9 $victim (pid $victim_pid) after 12 of 120 requests"
helper kill-stream "$front" "$n_prompts" "$system_tokens" "$question_tokens" 30000 120 12 \
  "$victim_pid" 2 50 >"$work/phase2.json"
wait "$victim_pid" 2>/dev/null || true
jq -e '.kill_t != null and all(.records[]; . != null)' "$work/phase2.json" >/dev/null ||
  fail "the stream did not finish: $(head -c 500 "$work/phase2.json")"
# Failed requests: only ones in flight at the kill.
failed=$(jq -c '.kill_t as $k | [.records[] | select(.status != 200)]' "$work/phase2.json")
stray=$(jq -c '.kill_t as $k | [.records[] | select(.status != 200 and (.start > $k or .end < $k))]' \
  "$work/phase2.json")
echo "   failed: $(jq length <<<"$failed") (in flight at the kill: allowed)"
[[ $stray == "[]" ]] || fail "requests not in flight at the kill failed: $stray"
(($(jq length <<<"$failed") <= 2)) || fail "more requests failed than were in flight: $failed"
# After the kill: the victim's prompts on other replicas, never recomputed,
# the first on each new replica (perhaps a request in flight at the kill,
# sent again) from the remote tier; the others unmoved.
after=$(jq -c '.kill_t as $k | [.records[] | select(.status == 200 and .start > $k)]' "$work/phase2.json")
moved=$(jq -c --argjson o "$owners" --arg v "$victim" \
  '[.[] | select($o[.prompt | tostring] == $v)]' <<<"$after")
moved_all=$(jq -c --argjson o "$owners" --arg v "$victim" '[.records[] | select(.status == 200
  and $o[.prompt | tostring] == $v and .replica != $v)]' "$work/phase2.json")
kept=$(jq -c --argjson o "$owners" --arg v "$victim" \
  '[.[] | select($o[.prompt | tostring] != $v)]' <<<"$after")
echo "   after the kill: $(jq length <<<"$moved") requests of the victim's prompts on" \
  "$(jq -c 'map(.replica) | unique' <<<"$moved"); first on each from the remote tier:" \
  "$(jq -c 'group_by([.prompt, .replica]) | map([.[0].prompt, .[0].replica, .[0].remote_tokens])' <<<"$moved_all")"
(($(jq length <<<"$moved") > 0)) || fail "no request of the victim's prompts after the kill"
jq -e --arg v "$victim" 'all(.[]; .replica != $v)' <<<"$moved" >/dev/null ||
  fail "a request after the kill was answered by the dead replica: $moved"
jq -e --argjson s "$system_tokens" 'all(.[]; .cached_tokens >= $s)' <<<"$moved" >/dev/null ||
  fail "a moved system prompt was recomputed: $moved"
jq -e 'group_by([.prompt, .replica]) | all(.[]; .[0].remote_tokens > 0)' <<<"$moved_all" >/dev/null ||
  fail "a moved system prompt's first request on its new replica did not come from the remote tier: $moved_all"
grep -q "prefixd_replicas/$victim is DOWN" "$work/haproxy.log" ||
  fail "HAProxy did not mark $victim down during the stream"
jq -e --argjson o "$owners" 'all(.[]; .replica == $o[.prompt | tostring])' <<<"$kept" >/dev/null ||
  fail "a prompt of a live replica moved: $kept"

# --- 5. kill -9 of a memcached server -----------------------------------------
survivors=()
for i in 0 1 2; do [[ r$((i + 1)) != "$victim" ]] && survivors+=("$i"); done
a=${survivors[0]} b=${survivors[1]}
n_mc=8
mc_prompt() {  # mc_prompt K QUESTION_SEED
  python3 -c "import json, sys; sys.path.insert(0, '$(dirname "$helper")')
import cluster_helper as h; print(json.dumps(h.ids(200 + $1, $system_tokens) + h.ids($2, $question_tokens)))"
}
items_before=$(helper mc-items "${mc_ports[@]}")
for k in $(seq 0 $((n_mc - 1))); do
  r=$(complete "$(url "$a")" "$(mc_prompt "$k" $((40000 + k)))")
  [[ $(field "$r" .status) == 200 ]] || fail "completion on r$((a + 1)): $r"
done
wait_items $((items_before + n_mc * system_tokens / block))

# --- 5a. a stalled memcached server (SIGSTOP) leaves the ring and comes back -----
# It accepts connects (the kernel's backlog) and never answers: r$((b + 1))'s
# lookups (which ask the pool, r$((b + 1)) holding none of these prompts) time out
# on its blocks until --remote-cache-timeout-limit (3) timeouts in a row take it
# out of the ring; then they no longer wait on it. Every lookup answers 200.
metric() { curl -fsS "$1/metrics" | awk -v name="$2" '$1 == name {print $2; found = 1}
  END {if (!found) print "absent"}'; }
lookup_prompt() {
  curl -sS -o "$work/lookup.json" -w '%{http_code}' -X POST "$(url "$b")/v1/cache/lookup" \
    -H 'Content-Type: application/json' -d "{\"prompt\": $1}"
}
ejections_before=$(metric "$(url "$b")" prefixd_remote_server_ejections_total)
[[ $ejections_before != absent ]] || fail "r$((b + 1))'s /metrics has no prefixd_remote_server_ejections_total"
kill -STOP "${mc_pids[0]}"
for n_lookups in $(seq 1 40); do
  code=$(lookup_prompt "$(mc_prompt $((n_lookups % n_mc)) 43000)")
  [[ $code == 200 ]] || fail "lookup with a stalled memcached answered $code: $(cat "$work/lookup.json")"
  (($(metric "$(url "$b")" prefixd_remote_server_ejections_total) > ejections_before)) && break
done
(($(metric "$(url "$b")" prefixd_remote_server_ejections_total) > ejections_before)) ||
  fail "the stalled memcached :${mc_ports[0]} was not taken out of the ring after $n_lookups lookups"
[[ $(metric "$(url "$b")" prefixd_remote_servers_in_ring) == 1 ]] ||
  fail "prefixd_remote_servers_in_ring is not 1 with a stalled server out"
out=$(curl -fsS "$(url "$b")/v1/cache/stats" | jq -c '.tiers.remote.servers_out')
[[ $(jq -r '.[0].server' <<<"$out") == "127.0.0.1:${mc_ports[0]}" ]] ||
  fail "/v1/cache/stats does not list the stalled server as out: $out"
echo "5a. SIGSTOP memcached :${mc_ports[0]}: out of r$((b + 1))'s ring after $n_lookups lookups ($out)"
kill -CONT "${mc_pids[0]}"
back=0
for _ in $(seq 1 150); do  # at most 30 s: it is tried again 2 s after it left
  code=$(lookup_prompt "$(mc_prompt 0 43000)")
  [[ $code == 200 ]] || fail "lookup after SIGCONT answered $code: $(cat "$work/lookup.json")"
  if [[ $(metric "$(url "$b")" prefixd_remote_servers_in_ring) == 2 ]] &&
     (($(jq -r .remote_tokens "$work/lookup.json") >= system_tokens)); then
    back=1
    break
  fi
  sleep 0.2
done
((back == 1)) || fail "memcached :${mc_ports[0]} did not rejoin r$((b + 1))'s ring after SIGCONT: $(cat "$work/lookup.json")"
echo "    SIGCONT: back in the ring, a lookup finds all $system_tokens system tokens again"

kill -KILL "${mc_pids[0]}"
wait "${mc_pids[0]}" 2>/dev/null || true
echo "5. killed memcached :${mc_ports[0]}"
remote_sum=0 lost=0
for k in $(seq 0 $((n_mc - 1))); do
  r=$(complete "$(url "$b")" "$(mc_prompt "$k" $((41000 + k)))")
  [[ $(field "$r" .status) == 200 ]] || fail "a request failed after the memcached kill: $r"
  remote_sum=$((remote_sum + $(field "$r" .remote_tokens)))
  (($(field "$r" .remote_tokens) < system_tokens)) && lost=$((lost + 1))
done
echo "   r$((b + 1)): $lost of $n_mc system prompts partly recomputed, $remote_sum tokens from the remote tier"
((lost > 0)) || fail "no block was lost with the memcached server"
# The recomputed blocks are written again, to the surviving server: once the
# pool holds them all, every prompt is a full remote hit again (r$((b + 1)) with its
# own tiers cleared, so that nothing comes from them).
items=$(helper mc-items "${mc_ports[1]}")
for _ in $(seq 1 50); do
  sleep 0.2
  now=$(helper mc-items "${mc_ports[1]}")
  [[ $now == "$items" ]] && break
  items=$now
done
# At most 5 rounds, 1 s apart (libmemcached ejects the dead server after
# failed operations and retries it every few seconds).
for round in 1 2 3 4 5; do
  cleared=$(curl -fsS -X DELETE "$(url "$b")/v1/cache?scope=local") ||
    fail "DELETE /v1/cache?scope=local on r$((b + 1))"
  # This replica's tiers only: the shared pool stays (what this loop relies on).
  [[ $(field "$cleared" .remote.cleared) == false ]] ||
    fail "DELETE /v1/cache?scope=local cleared the remote tier: $cleared"
  recovered=0
  for k in $(seq 0 $((n_mc - 1))); do
    r=$(complete "$(url "$b")" "$(mc_prompt "$k" $((42000 + 100 * round + k)))")
    [[ $(field "$r" .status) == 200 ]] || fail "a request failed after the memcached kill: $r"
    (($(field "$r" .remote_tokens) >= system_tokens)) && recovered=$((recovered + 1))
  done
  ((recovered == n_mc)) && break
  echo "   round $round: $recovered of $n_mc system prompts wholly from the remote tier"
  sleep 1
done
echo "   after $round rounds: $recovered of $n_mc system prompts wholly from the remote tier"
((recovered == n_mc)) || fail "the remote hit ratio did not recover ($recovered of $n_mc);" \
  "r$((b + 1))'s remote tier: $(curl -sS "$(url "$b")/v1/cache/stats" | jq -c '.tiers.remote // .remote')"

# --- 6. DELETE /v1/cache on one replica clears the shared pool for the others --
# r$((a + 1)) with its own tiers emptied finds a system prompt in the pool; after
# DELETE /v1/cache on r$((b + 1)) (a generation bump in the pool) it no longer
# does, within its generation refresh (1 s; waited for at most 10 s).
curl -fsS -X DELETE "$(url "$a")/v1/cache?scope=local" >/dev/null || fail "DELETE ?scope=local on r$((a + 1))"
lookup_on() {
  curl -fsS -X POST "$(url "$1")/v1/cache/lookup" -H 'Content-Type: application/json' \
    -d "{\"prompt\": $2}" || fail "/v1/cache/lookup on r$(($1 + 1))"
}
probe=$(mc_prompt 0 44000)
l=$(lookup_on "$a" "$probe")
(($(field "$l" .remote_tokens) >= system_tokens)) || fail "r$((a + 1)) does not find the prompt in the pool: $l"
cleared=$(curl -fsS -X DELETE "$(url "$b")/v1/cache") || fail "DELETE /v1/cache on r$((b + 1))"
[[ $(field "$cleared" .remote.cleared) == true ]] || fail "DELETE /v1/cache did not clear the pool: $cleared"
gone=0
for _ in $(seq 1 50); do
  l=$(lookup_on "$a" "$probe")
  (($(field "$l" .remote_tokens) == 0)) && { gone=1; break; }
  sleep 0.2
done
((gone == 1)) || fail "r$((a + 1)) still finds the cleared prompt in the pool: $l"
bad=$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE "$(url "$b")/v1/cache?scope=everything")
[[ $bad == 400 ]] || fail "DELETE /v1/cache?scope=everything answered $bad"
echo "6. DELETE /v1/cache on r$((b + 1)): pool generation $(field "$cleared" .remote.generation);" \
  "r$((a + 1)) misses the cleared prompt"

for i in "${!pids[@]}"; do
  [[ r$((i + 1)) == "$victim" ]] && continue
  PREFIXD_PID=${pids[$i]}
  stop_prefixd "$work/r$((i + 1))"
done
pids=()
echo "cluster test passed"
