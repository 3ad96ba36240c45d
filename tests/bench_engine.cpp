// Engine benchmark for the RAG shape (prints numbers; not a test): a shared
// system prompt followed by a distinct question, through the real engine
// thread, scheduler and prefix cache. Prints cold TTFT (nothing cached), warm
// TTFT (system prompt in the pool), their ratio, the bare forward-pass time of
// the question's prefill at that context (the floor warm TTFT can reach),
// hashing + index lookup cost, and decode throughput at 1, 4 and 16
// concurrent sequences.
//
// With --tiers DIR it also measures TTFT when the system prompt comes back
// from the host tier, from the disk tier, and from disk after the tiers are
// reopened (a restart), with the onboard bandwidth of each.
//
// Usage: bench_engine [--model smol-135m:bf16] [--threads 2] [--system 2000]
//                     [--question 100] [--out 16] [--reps 3] [--suffix-only 1] [--kv auto] [--tiers DIR]
//                     [--max-running N] [--snapshots N] [--snapshot-interval BLOCKS] (recurrent models)
//                     [--cpu-isa auto|avx512bf16|avx512|avx2|portable (default $PREFIXD_CPU_ISA)]
//                     [--backend cpu|cuda (cuda: device 0, builds with the CUDA backend only)]
//                     [--cuda-graphs on|off (default on: decode steps replayed as CUDA graphs)]
// The model is written on first use to $TMPDIR/prefixd-bench-models/PRESET-TYPE.gguf
// (`prefixd gen-model` may write the file there beforehand).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/kv/block_hash.h"
#include "engine/engine.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/model_presets.h"
#include "kernels/cpu/cpu_isa.h"
#include "storage/tier_manager.h"
#include "tests/bench_backend.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Deterministic distinct token runs: stream `salt` of the vocabulary.
std::vector<int32_t> tokens_for(int32_t n, int32_t salt, int32_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(salt + 1);
  for (int32_t i = 0; i < n; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t[static_cast<size_t>(i)] = 3 + static_cast<int32_t>((x * 2685821657736338717ull) % (n_vocab - 3));
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The command line (see the usage above).
struct Args {
  std::string model_spec = "smol-135m:bf16", kv_name = "auto", tier_dir, backend_name = "cpu";
  bool cuda_graphs = true;
  std::string isa_name = "auto", isa_source = "PREFIXD_CPU_ISA";
  int threads = 2, n_system = 2000, n_question = 100, n_out = 16, reps = 3;
  // EngineOptions: max_running, state_snapshots, snapshot_interval_blocks (-1: the engine's default).
  int max_running = -1, snapshots = -1, snapshot_interval = -1;
  bool suffix_only = false;  // profiling aid: only the bare suffix prefill, `reps` times
};

// 0, or 2 after telling stderr about a bad flag.
int parse_args(int argc, char** argv, Args* a) {
  if (const char* isa_env = std::getenv("PREFIXD_CPU_ISA")) a->isa_name = isa_env;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--model") a->model_spec = argv[i + 1];
    else if (f == "--threads") a->threads = std::atoi(argv[i + 1]);
    else if (f == "--system") a->n_system = std::atoi(argv[i + 1]);
    else if (f == "--question") a->n_question = std::atoi(argv[i + 1]);
    else if (f == "--out") a->n_out = std::atoi(argv[i + 1]);
    else if (f == "--reps") a->reps = std::atoi(argv[i + 1]);
    else if (f == "--max-running") a->max_running = std::atoi(argv[i + 1]);
    else if (f == "--snapshots") a->snapshots = std::atoi(argv[i + 1]);
    else if (f == "--snapshot-interval") a->snapshot_interval = std::atoi(argv[i + 1]);
    else if (f == "--kv") a->kv_name = argv[i + 1];
    else if (f == "--suffix-only") a->suffix_only = std::atoi(argv[i + 1]) != 0;
    else if (f == "--tiers") a->tier_dir = argv[i + 1];
    else if (f == "--backend") a->backend_name = argv[i + 1];
    else if (f == "--cuda-graphs") {
      const std::string v = argv[i + 1];
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "--cuda-graphs '%s' is not one of on, off\n", v.c_str());
        return 2;
      }
      a->cuda_graphs = v == "on";
    } else if (f == "--cpu-isa") {
      a->isa_name = argv[i + 1];
      a->isa_source = "--cpu-isa";
    } else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (a->kv_name != "auto" && a->kv_name != "f32" && a->kv_name != "f16" && a->kv_name != "bf16") {
    std::fprintf(stderr, "--kv '%s' is not one of auto, f32, f16, bf16\n", a->kv_name.c_str());
    return 2;
  }
  return 0;
}

// What every step below shares: the arguments, the model file, the engine
// options, and a way to make a fresh backend.
struct Bench {
  Args args;
  std::string preset, type;
  std::string path;  // the model file
  EngineOptions opts;
  std::function<std::unique_ptr<Backend>()> new_backend;

  // A prompt: n_system tokens of `system_salt`, then n_question of `question_salt`.
  std::vector<int32_t> prompt(int32_t system_salt, int32_t question_salt, int32_t n_vocab) const {
    std::vector<int32_t> p = tokens_for(args.n_system, system_salt, n_vocab);
    std::vector<int32_t> q = tokens_for(args.n_question, question_salt, n_vocab);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  }
};

// Writes the preset model on first use. Returns 0 or 1 (told on stderr).
int prepare_model(Bench* b) {
  const size_t colon = b->args.model_spec.find(':');
  b->preset = b->args.model_spec.substr(0, colon);
  b->type = colon == std::string::npos ? "bf16" : b->args.model_spec.substr(colon + 1);
  const WeightType wt =
      b->type == "f32" ? WeightType::F32 : b->type == "f16" ? WeightType::F16 : WeightType::BF16;
  const std::string dir = std::filesystem::temp_directory_path() / "prefixd-bench-models";
  std::filesystem::create_directories(dir);
  b->path = dir + "/" + b->preset + "-" + b->type + ".gguf";
  if (!std::filesystem::exists(b->path)) {
    if (Status s = write_preset_model(b->preset, wt, b->path); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
  }
  return 0;
}

// Cold and warm TTFT per rep: a fresh system prompt (cold), then a second
// question on the same system prompt (warm, its blocks are in the pool),
// then a third (a recurrent model resumes the second at a snapshot before
// the system prompt's end, and takes one at its end for the third).
struct TtftRuns {
  std::vector<double> cold_ms, warm_ms, warm_prefill_tokens, third_ms;
};
TtftRuns measure_ttft(const Bench& b, EngineUnderTest& e) {
  const ModelConfig& c = e.model->config();
  TtftRuns t;
  for (int r = 0; r < b.args.reps; ++r) {
    Collected cold = e.run(greedy_request(b.prompt(1000 + r, 2000 + 2 * r, c.n_vocab), b.args.n_out));
    Collected warm = e.run(greedy_request(b.prompt(1000 + r, 2001 + 2 * r, c.n_vocab), b.args.n_out));
    Collected third = e.run(greedy_request(b.prompt(1000 + r, 5000 + r, c.n_vocab), b.args.n_out));
    t.cold_ms.push_back(cold.usage.ttft_ms);
    t.warm_ms.push_back(warm.usage.ttft_ms);
    t.warm_prefill_tokens.push_back(warm.usage.prefill_tokens);
    t.third_ms.push_back(third.usage.ttft_ms);
    if (r == 0) {
      std::printf("  cold: cached %d, prefilled %d; warm: cached %d, prefilled %d; third: cached %d, prefilled %d\n",
                  cold.usage.cached_tokens, cold.usage.prefill_tokens, warm.usage.cached_tokens,
                  warm.usage.prefill_tokens, third.usage.cached_tokens, third.usage.prefill_tokens);
    }
  }
  return t;
}

// The floor: the bare forward pass over the uncached suffix (n_suffix tokens
// at context n_ctx), reps + 2 times. Fills the median and the best, in ms.
void bare_suffix_prefill(const Bench& b, EngineUnderTest& e, DType kv, int32_t n_suffix, int32_t n_ctx,
                         double* median_ms, double* best_ms) {
  const ModelConfig& c = e.model->config();
  Backend& backend = e.model->backend();
  KvGeometry g;
  g.n_layers = c.n_kv_layers();
  g.block_size = 16;
  g.n_blocks = (b.args.n_system + b.args.n_question) / 16 + 2;
  g.n_kv_heads = c.n_kv_heads;
  g.head_dim = c.head_dim;
  g.dtype = kv;
  // A recurrent model's state in slot 0 (each timed rep continues it: the
  // same work as from the context's state).
  g.n_state_slots = c.state_floats() > 0 ? 1 : 0;
  g.state_floats = c.state_floats();
  KvPool pool = backend.allocate_kv_pool(g).value();
  std::vector<int32_t> table(static_cast<size_t>(g.n_blocks));
  for (int32_t i = 0; i < g.n_blocks; ++i) table[static_cast<size_t>(i)] = i;
  ForwardPass fwd(*e.model, b.opts.max_batch_tokens, 1);
  BatchBuilder bb(16);
  std::vector<float> logits;
  std::vector<int32_t> all = tokens_for(b.args.n_system + b.args.n_question, 7, c.n_vocab);
  for (int32_t p = 0; p < n_ctx; p += b.opts.max_batch_tokens) {
    const int32_t n = std::min(b.opts.max_batch_tokens, n_ctx - p);
    bb.clear();
    bb.add(std::span<const int32_t>(all.data() + p, n), p, table, LogitsWanted::kNone);
    if (g.n_state_slots > 0) bb.set_last_state_slot(0);
    fwd.run(bb.batch(), pool, &logits);
  }
  std::vector<double> t;
  for (int r = 0; r < b.args.reps + 2; ++r) {
    const double t0 = now_s();
    for (int32_t p = n_ctx; p < n_ctx + n_suffix; p += b.opts.max_batch_tokens) {  // in passes, as the engine
      const int32_t n = std::min(b.opts.max_batch_tokens, n_ctx + n_suffix - p);
      bb.clear();
      bb.add(std::span<const int32_t>(all.data() + p, n), p, table,
             p + n == n_ctx + n_suffix ? LogitsWanted::kLast : LogitsWanted::kNone);
      if (g.n_state_slots > 0) bb.set_last_state_slot(0);
      fwd.run(bb.batch(), pool, &logits);
    }
    t.push_back((now_s() - t0) * 1e3);
  }
  *median_ms = median(t);
  *best_ms = *std::min_element(t.begin(), t.end());
  backend.free_kv_pool(pool);
}

// Hashing and index lookup of the whole prompt (what admission adds), ms per prompt.
void hash_and_lookup(const Bench& b, EngineUnderTest& e, double* hash_ms, double* lookup_ms) {
  const std::vector<int32_t> prompt = b.prompt(1000, 2000, e.model->config().n_vocab);
  const int n_iter = 200;
  double t0 = now_s();
  size_t sink = 0;
  for (int i = 0; i < n_iter; ++i) sink += hash_blocks(prompt, 16, 12345 + i).size();
  *hash_ms = (now_s() - t0) * 1e3 / n_iter;
  t0 = now_s();
  for (int i = 0; i < n_iter; ++i) sink += static_cast<size_t>(e.engine->lookup(prompt, "").device_tokens);
  *lookup_ms = (now_s() - t0) * 1e3 / n_iter;
  if (sink == 0) std::printf("(nothing hashed)\n");
}

// Decode throughput with N concurrent sequences (distinct 32-token prompts).
void decode_throughput(EngineUnderTest& e) {
  const int32_t n_vocab = e.model->config().n_vocab;
  std::printf("\n%-12s %14s %14s\n", "concurrency", "tokens/s total", "per sequence");
  const int32_t n_decode = 64;
  for (int n_seq : {1, 4, 16}) {
    std::vector<std::shared_ptr<RequestChannel>> chs;
    for (int i = 0; i < n_seq; ++i) {
      chs.push_back(e.engine->submit(greedy_request(tokens_for(32, 5000 + 100 * n_seq + i, n_vocab), n_decode)));
    }
    int64_t tokens = 0;
    double longest_ms = 0;
    for (auto& ch : chs) {
      Collected r = collect(ch);
      tokens += r.usage.completion_tokens - 1;  // the first token belongs to prefill
      longest_ms = std::max(longest_ms, r.usage.decode_ms);
    }
    const double tps = tokens / (longest_ms / 1e3);
    std::printf("%-12d %14.1f %14.1f\n", n_seq, tps, tps / n_seq);
  }
}

// Host and disk tiers in `dir` (4 GiB of host RAM, 8 GiB of disk); with
// build_bound_bytes = 0 every record is built on the engine thread. As a
// daemon does at start-up, the first record memory is faulted in while idle.
std::unique_ptr<TierManager> make_tiers(const Bench& b, const ModelConfig& c, const std::string& dir,
                                        std::optional<uint64_t> build_bound_bytes = std::nullopt) {
  TierManagerOptions to;
  to.geometry = b.opts.record_geometry(c);
  to.host_capacity_bytes = 4ull << 30;
  DiskTierOptions d;
  d.path = dir;
  d.capacity_bytes = 8ull << 30;
  to.disk = d;
  if (build_bound_bytes) to.max_pending_build_bytes = *build_bound_bytes;
  return TierManager::create(to).value();
}
void prefault(TierManager& tiers) {
  const uint64_t bytes = 256ull << 20;
  tiers.prefault_async(bytes);
  for (int i = 0; i < 200 && tiers.reserved_record_bytes() < bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// An engine on `tiers` (their fingerprint and secret), its pool touched once
// (and the onboard policy's prefill estimate warmed); with `settle`, the
// tiers' writes of that first request are waited for.
std::unique_ptr<EngineUnderTest> engine_on(const Bench& b, TierManager& tiers, int32_t warm_salt,
                                           bool settle) {
  EngineOptions o = b.opts;
  o.model_fingerprint = tiers.model_fingerprint();
  o.deployment_secret = tiers.deployment_secret();
  auto e = std::make_unique<EngineUnderTest>(b.path, o, &tiers, b.new_backend());
  e->run(greedy_request(tokens_for(256, warm_salt, e->model->config().n_vocab), 1));
  if (settle) tiers.wait_idle();
  return e;
}

// Cold TTFT with write-through against the engine without tiers, in turns,
// each on a fresh prompt of the same shape (issue 14: <= 1.01x): records built
// on the tiers' offload thread (the default), and built on the engine thread
// (a build bound of 0 refuses every deferred build). Leaves the system prompt
// of `system_prompt` in `tiers` (host and disk).
void write_through_overhead(const Bench& b, EngineUnderTest& no_tiers, TierManager& tiers,
                            const std::vector<int32_t>& system_prompt) {
  const ModelConfig& c = no_tiers.model->config();
  std::unique_ptr<EngineUnderTest> first = engine_on(b, tiers, 78, /*settle=*/true);
  const std::string sync_dir = b.args.tier_dir + "-sync";
  std::filesystem::remove_all(sync_dir);
  std::unique_ptr<TierManager> sync_tiers = make_tiers(b, c, sync_dir, 0);
  prefault(*sync_tiers);
  std::unique_ptr<EngineUnderTest> on_engine_thread = engine_on(b, *sync_tiers, 79, /*settle=*/true);
  std::vector<double> deferred, synchronous, without;
  for (int rep = 0; rep < b.args.reps; ++rep) {
    without.push_back(
        no_tiers.run(greedy_request(b.prompt(7000 + 2 * rep, 7001 + 2 * rep, c.n_vocab), b.args.n_out)).usage.ttft_ms);
    deferred.push_back(
        first->run(greedy_request(b.prompt(8000 + 2 * rep, 8001 + 2 * rep, c.n_vocab), b.args.n_out)).usage.ttft_ms);
    tiers.wait_idle();
    synchronous.push_back(
        on_engine_thread->run(greedy_request(b.prompt(9000 + 2 * rep, 9001 + 2 * rep, c.n_vocab), b.args.n_out))
            .usage.ttft_ms);
    sync_tiers->wait_idle();
  }
  const double w = median(deferred), ws = median(synchronous), wo = median(without);
  std::printf("  %-40s TTFT %8.2f ms\n", "cold, no tiers", wo);
  std::printf("  %-40s TTFT %8.2f ms (%.3fx of no tiers; goal <= 1.01x)\n",
              "cold, write-through, records built on the offload thread", w, w / wo);
  std::printf("  %-40s TTFT %8.2f ms (%.3fx of no tiers)\n",
              "cold, write-through, records built on the engine thread", ws, ws / wo);
  std::printf("  (deferred builds %llu, refused %llu)\n",
              static_cast<unsigned long long>(tiers.stats().builds_deferred),
              static_cast<unsigned long long>(tiers.stats().builds_refused));
  // The system prompt the onboard cases onboard.
  first->run(greedy_request(system_prompt, b.args.n_out));
  tiers.wait_idle();
}

// --tiers: the write-through cost, then TTFT when the system prompt comes
// back from host, from disk, and from disk after the tiers are reopened.
void tier_benchmarks(const Bench& b, EngineUnderTest& e, double cold_ms) {
  const ModelConfig& c = e.model->config();
  const std::string& tier_dir = b.args.tier_dir;
  std::printf("\ntiers (host RAM, RocksDB in %s), restore policy auto:\n", tier_dir.c_str());
  std::filesystem::remove_all(tier_dir);
  std::unique_ptr<TierManager> tiers = make_tiers(b, c, tier_dir);
  prefault(*tiers);
  const double record_bytes = static_cast<double>(tiers->record_bytes());
  int question_salt = 9100;
  auto prompt = [&]() { return b.prompt(9000, question_salt++, c.n_vocab); };
  // Each case runs `reps` times on a fresh engine (empty pool) after
  // `prepare`; the median TTFT and onboard time are printed.
  auto run_on_new_engine = [&](const char* what, const std::function<void()>& prepare) {
    std::vector<double> ttft, onboard;
    Collected r;
    for (int rep = 0; rep < b.args.reps; ++rep) {
      prepare();
      // Warm the onboard policy's prefill estimate as a running daemon would have.
      std::unique_ptr<EngineUnderTest> fresh = engine_on(b, *tiers, 77, /*settle=*/false);
      r = fresh->run(greedy_request(prompt(), b.args.n_out));
      ttft.push_back(r.usage.ttft_ms);
      onboard.push_back(r.usage.onboard_ms);
      tiers->wait_idle();
    }
    const int32_t onboarded = r.usage.host_tokens + r.usage.disk_tokens;
    const double onboard_ms = median(onboard), ttft_ms = median(ttft);
    const double gbps =
        onboard_ms > 0 ? (onboarded / b.opts.block_size) * record_bytes / (onboard_ms / 1e3) / 1e9 : 0;
    std::printf("  %-40s TTFT %8.2f ms (%5.2f %% of cold)  cached %d (device %d, host %d, disk %d) path %s,"
                " restore %.2f ms, %.2f GB/s\n",
                what, ttft_ms, 100.0 * ttft_ms / cold_ms, r.usage.cached_tokens, r.usage.device_tokens,
                r.usage.host_tokens, r.usage.disk_tokens, r.usage.onboard_path.c_str(), onboard_ms, gbps);
  };
  write_through_overhead(b, e, *tiers, prompt());
  // The system prompt's blocks are in host and disk now; each question is new.
  run_on_new_engine("from host RAM (empty pool)", [] {});
  run_on_new_engine("from disk (host emptied)", [&] { tiers->host().clear(); });
  bool dropped = true;
  run_on_new_engine("from disk after reopening the tiers", [&] {
    tiers.reset();
    dropped = dropped && std::system("sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null") == 0;
    tiers = make_tiers(b, c, tier_dir);
  });
  std::printf("  (page cache %s before each reopen)\n", dropped ? "dropped" : "NOT dropped (no permission)");
  tiers.reset();
  std::filesystem::remove_all(tier_dir);
  std::filesystem::remove_all(tier_dir + "-sync");
}

void print_summary(const Bench& b, const TtftRuns& t, double suffix_ms, int32_t n_suffix, int32_t n_ctx,
                   double hash_ms, double lookup_ms) {
  // Medians, and the best of the reps: on a shared machine a neighbour's load
  // only ever adds time, so the best runs show the code's own ratio.
  const int reps = b.args.reps;
  const double cold = median(t.cold_ms), warm = median(t.warm_ms);
  const double cold_best = *std::min_element(t.cold_ms.begin(), t.cold_ms.end());
  const double warm_best = *std::min_element(t.warm_ms.begin(), t.warm_ms.end());
  std::printf("\n%-44s %10.2f ms  (best of %d: %.2f ms)\n", "cold TTFT (nothing cached)", cold, reps, cold_best);
  std::printf("%-44s %10.2f ms  (best of %d: %.2f ms)\n", "warm TTFT (system prompt in the pool)", warm, reps,
              warm_best);
  std::printf("%-44s %10.2f %%   (goal <= 6%%; best / best: %.2f %%)\n", "warm / cold", 100.0 * warm / cold,
              100.0 * warm_best / cold_best);
  const double third = median(t.third_ms), third_best = *std::min_element(t.third_ms.begin(), t.third_ms.end());
  std::printf("%-44s %10.2f ms  (%.2f %% of cold; best / best: %.2f %%)\n", "warm TTFT, a third question", third,
              100.0 * third / cold, 100.0 * third_best / cold_best);
  std::printf("%-44s %10.2f ms  (%d tokens at context %d)\n", "bare prefill of the uncached suffix", suffix_ms,
              n_suffix, n_ctx);
  std::printf("%-44s %10.2f x    (goal <= 1.3x)\n", "warm TTFT / bare suffix prefill", warm / suffix_ms);
  std::printf("%-44s %10.3f ms  (%.3f %% of warm TTFT; goal <= 1%%)\n", "hash the prompt's blocks", hash_ms,
              100.0 * hash_ms / warm);
  std::printf("%-44s %10.3f ms  (%.3f %% of warm TTFT; round trip to the engine thread)\n",
              "engine lookup (hash + index walk)", lookup_ms, 100.0 * lookup_ms / warm);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches a log even if the run is cut short
  Bench b;
  if (int rc = parse_args(argc, argv, &b.args); rc != 0) return rc;
  const Args& a = b.args;
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(a.isa_name);
  if (!isa.ok()) {
    std::fprintf(stderr, "%s: %s\n", a.isa_source.c_str(), isa.message().c_str());
    return 2;
  }
  if (Status s = check_bench_backend(a.backend_name); !s.ok()) {
    std::fprintf(stderr, "bench_engine: %s\n", s.message().c_str());
    return 2;
  }
  // Every engine below (the fresh ones of the tier cases too) gets its own backend.
  b.new_backend = [&]() -> std::unique_ptr<Backend> {
    Result<std::unique_ptr<Backend>> be =
        make_bench_backend(a.backend_name, a.threads, isa.value(), a.cuda_graphs);
    if (!be.ok()) {
      std::fprintf(stderr, "bench_engine: %s\n", be.message().c_str());
      std::exit(1);
    }
    return std::move(be.value());
  };
  if (int rc = prepare_model(&b); rc != 0) return rc;

  b.opts.kv_dtype = a.kv_name == "f32" ? DType::F32 : a.kv_name == "bf16" ? DType::BF16 : DType::F16;  // auto: the model's
  b.opts.kv_pool_bytes = 1024ull << 20;
  if (a.max_running > 0) b.opts.max_running = a.max_running;
  if (a.snapshots >= 0) b.opts.state_snapshots = a.snapshots;
  if (a.snapshot_interval >= 0) b.opts.snapshot_interval_blocks = a.snapshot_interval;
  EngineUnderTest e(b.path, b.opts, nullptr, b.new_backend(), a.kv_name == "auto");
  const DType kv = e.engine->options().kv_dtype;
  b.opts.kv_dtype = kv;  // the tier runs below use the same pool type
  std::printf("bench_engine: %s %s, backend %s, %d threads, cpu_isa %s, kv %s, system %d + question %d tokens,"
              " %d out\n",
              b.preset.c_str(), b.type.c_str(), e.backend->name().c_str(), a.threads, cpu::cpu_isa_name(isa.value()),
              (std::string(dtype_name(kv)) + (a.kv_name == "auto" ? " (auto)" : "")).c_str(), a.n_system,
              a.n_question, a.n_out);

  const TtftRuns ttft = a.suffix_only ? TtftRuns{} : measure_ttft(b, e);
  const int32_t n_suffix = a.suffix_only ? a.n_question : static_cast<int32_t>(ttft.warm_prefill_tokens[0]);
  const int32_t n_ctx = a.n_system + a.n_question - n_suffix;
  double suffix_ms = 0, suffix_best_ms = 0;
  bare_suffix_prefill(b, e, kv, n_suffix, n_ctx, &suffix_ms, &suffix_best_ms);
  if (a.suffix_only) {
    std::printf("bare prefill of %d tokens at context %d: median %.2f ms of %d, best %.2f ms\n",
                n_suffix, n_ctx, suffix_ms, a.reps + 2, suffix_best_ms);
    return 0;
  }
  double hash_ms = 0, lookup_ms = 0;
  hash_and_lookup(b, e, &hash_ms, &lookup_ms);
  print_summary(b, ttft, suffix_ms, n_suffix, n_ctx, hash_ms, lookup_ms);
  decode_throughput(e);
  if (!a.tier_dir.empty()) tier_benchmarks(b, e, median(ttft.cold_ms));
  return 0;
}
