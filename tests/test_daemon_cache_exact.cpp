// The README's promise through the real daemon: for F32, F16 and BF16 weights
// a cached prefix plus a new suffix gives the uncached prompt's answer bit for
// bit (token ids and every logprob), under `auto` and under each mixed
// per-family plan (--cpu-isa PLAN) that this CPU can run — the plans a Xeon
// and a cross of every family choose (tests/CMakeLists.txt runs the kernel,
// golden and engine tests under the same plans).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sstream>

#include "kernels/cpu/cpu_isa.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/greedy_answers.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

constexpr int32_t kPrefixTokens = 400;

// "" is auto; the others are --cpu-isa plans (kernels/cpu/isa_plan.h).
const std::vector<std::string> kPlans = {
    "",
    "avx512bf16,bf16_tiles=avx512",  // what auto chooses on a Sapphire/Emerald Rapids Xeon
    "avx512,f32_tiles=avx2,bf16_tiles=avx512bf16,block_formats=avx512bf16,attention=avx2",
};

// Whether this CPU has every set a plan names.
bool cpu_runs(const std::string& plan) {
  std::string words = plan;
  for (char& c : words)
    if (c == ',' || c == '=') c = ' ';
  std::istringstream in(words);
  for (std::string w; in >> w;)
    for (cpu::CpuIsa isa : cpu::all_cpu_isas())
      if (w == cpu::cpu_isa_name(isa) && !cpu::cpu_supports(isa)) return false;
  return true;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("a cached prefix gives the uncached logprobs bit for bit: F32, F16 and BF16 weights, auto and mixed plans") {
  const std::vector<std::string> models = {"models/stories260K.gguf", "models/rand-llama3rope-f16.gguf",
                                           "models/rand-qwen2-bf16.gguf"};
  const std::vector<int32_t> prefix = tokens(1, kPrefixTokens, true);
  for (const std::string& plan : kPlans) {
    if (!cpu_runs(plan)) {
      MESSAGE("plan '" << plan << "' skipped: this CPU lacks one of its sets (" << cpu::cpu_feature_string() << ")");
      continue;
    }
    for (const std::string& model : models) {
      CAPTURE(plan);
      CAPTURE(model);
      // Two threads (tasks split as in serving), the model's own KV dtype.
      std::vector<std::string> args = {"--model", shared_path(model), "--threads", "2", "--block-size", "16"};
      if (!plan.empty()) args.insert(args.end(), {"--cpu-isa", plan});
      auto d = start_or_fail(args);
      auto c = d->client();
      for (int32_t suffix_len : {3, 20}) {
        CAPTURE(suffix_len);
        const std::vector<int32_t> first = concat(prefix, tokens(10 + suffix_len, suffix_len, false));
        const std::vector<int32_t> second = concat(prefix, tokens(20 + suffix_len, suffix_len, false));
        REQUIRE(c->Delete("/v1/cache")->status == 200);
        CHECK(ask(*c, first).prefix_cache["cached_tokens"] == 0);
        const Answer warm = ask(*c, second);  // the prefix's blocks from the pool
        CHECK(warm.prefix_cache["cached_tokens"] == kPrefixTokens / 16 * 16);
        REQUIRE(c->Delete("/v1/cache")->status == 200);
        const Answer cold = ask(*c, second);
        CHECK(cold.prefix_cache["cached_tokens"] == 0);
        CHECK(warm.ids == cold.ids);
        CHECK(warm.logprobs == cold.logprobs);
      }
      CHECK(d->stop() == 0);
    }
  }
}
