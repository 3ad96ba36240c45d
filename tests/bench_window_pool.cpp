// Pool bytes per cached token (prints numbers; not a test): sends N distinct
// prompts of L tokens through the real engine with a fixed KV budget, then
// reads the engine's own figures: the pool's used and capacity bytes
// (EngineStats) and how many tokens of the prompts it holds (Engine::lookup),
// for a sliding-window model with and without the window space
// (EngineOptions::window_share) or any other model.
//
// Usage: bench_window_pool --model FILE.gguf [--pool-mib 64] [--prompts 3] [--tokens 2000]
//                          [--window-share 0.5] [--threads 2] [--kv f16]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

// Token ids in [3, 1003), BOS (1) first; distinct per seed.
std::vector<int32_t> prompt_of(int seed, int32_t n) {
  std::vector<int32_t> t{1};
  for (int32_t i = 1; i < n; ++i) t.push_back(3 + (seed * 7919 + i * 613 + (i * i) % 11) % 1000);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string model_path, kv_name = "f16";
  int pool_mib = 64, n_prompts = 3, n_tokens = 2000, threads = 2;
  double share = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model_path = argv[i + 1];
    else if (a == "--pool-mib") pool_mib = std::atoi(argv[i + 1]);
    else if (a == "--prompts") n_prompts = std::atoi(argv[i + 1]);
    else if (a == "--tokens") n_tokens = std::atoi(argv[i + 1]);
    else if (a == "--window-share") share = std::atof(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--kv") kv_name = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "--model FILE.gguf is required\n");
    return 2;
  }
  EngineOptions o;
  o.kv_pool_bytes = static_cast<size_t>(pool_mib) << 20;
  o.kv_dtype = kv_name == "f32" ? DType::F32 : kv_name == "bf16" ? DType::BF16 : DType::F16;
  o.window_share = share;
  EngineUnderTest e(model_path, o, nullptr, threads);
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < n_prompts; ++p) {
    prompts.push_back(prompt_of(p + 1, n_tokens));
    const Collected c = e.run(greedy_request(prompts.back(), 1));
    if (c.finish == FinishReason::kError) {
      std::printf("prompt %d: %s\n", p, c.error.c_str());
      return 1;
    }
  }
  int64_t cached = 0;
  for (const auto& p : prompts) cached += e.engine->lookup(p, "").device_tokens;
  const EngineStats s = e.engine->stats();
  std::printf("model %s  kv %s  budget %d MiB  window_share %.2f  prompts %d x %d tokens\n", model_path.c_str(),
              kv_name.c_str(), pool_mib, share, n_prompts, n_tokens);
  std::printf("pool capacity %lld B  used %lld B  blocks %d (cached %d)  window blocks %d (cached %d, evictions %lld)\n",
              static_cast<long long>(s.pool_capacity_bytes), static_cast<long long>(s.pool_used_bytes),
              s.pool_blocks_total, s.pool_blocks_cached, s.pool_window_blocks_total, s.pool_window_blocks_cached,
              static_cast<long long>(s.pool_window_evictions));
  std::printf("cached tokens in the pool %lld  used bytes per cached token %.0f  capacity bytes per cached token %.0f\n",
              static_cast<long long>(cached), cached > 0 ? static_cast<double>(s.pool_used_bytes) / cached : 0.0,
              cached > 0 ? static_cast<double>(s.pool_capacity_bytes) / cached : 0.0);
  return 0;
}
