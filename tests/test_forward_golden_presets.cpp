// The CPU forward pass of Qwen3.5 and LFM2 on `prefixd gen-model` presets
// (qwen35-tiny, lfm2-tiny; F32, BF16 and Q8_0) against llama.cpp's logits
// and greedy continuations (tests/golden/), computed whole and split at block
// boundaries and in mid-block: the recurrent state handed from one call to
// the next gives what the whole prompt gives. Runs once per CPU instruction
// set (tests/CMakeLists.txt), like test_forward_golden on the shared files.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa_plan.h"
#include "tests/cpu_isa_under_test.h"
#include "tests/golden_check.h"
#include "tests/preset_golden.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

// Whether the set under test rounds or quantizes a file's activations where
// llama.cpp does: BF16 weights through a BF16 dot product, block formats
// through int8 panels in prefill too (both: the avx512bf16 and amx sets).
bool activations_as_llama_cpp(const std::string& dtype) {
  const cpu::CpuIsaPlan plan = cpu::plan_for_isa(isa_under_test());
  auto int8_or_bf16_set = [](cpu::CpuIsa s) { return s == cpu::CpuIsa::kAvx512Bf16 || s == cpu::CpuIsa::kAmx; };
  if (dtype == "f32") return true;
  if (dtype == "bf16") return int8_or_bf16_set(plan.of(cpu::KernelFamily::kBf16Tiles));
  return int8_or_bf16_set(plan.of(cpu::KernelFamily::kBlockFormats));
}

// The largest logit error over a case's prompt, its rows computed in calls
// that start at each of `cuts` (ascending; 0 first), then the greedy check.
double check_in_pieces(const LoadedGolden& l, const GoldenModel& g, const GoldenCase& c, const std::vector<int32_t>& cuts) {
  const int32_t n = static_cast<int32_t>(c.ids.size());
  SequenceRunner r(*l.model, DType::F32, n + static_cast<int32_t>(c.greedy_ids.size()) + 1);
  double worst = 0;
  std::vector<float> logits;
  for (size_t k = 0; k < cuts.size(); ++k) {
    const int32_t begin = cuts[k], end = k + 1 < cuts.size() ? cuts[k + 1] : n;
    logits = r.run(std::vector<int32_t>(c.ids.begin() + begin, c.ids.begin() + end), begin, true);
    for (int32_t p = begin; p < end; ++p)
      worst = std::max(worst, logit_error(c.positions[size_t(p)], &logits[size_t(p - begin) * g.n_vocab], g.n_vocab));
  }
  check_greedy(r, g, c, std::vector<float>(logits.end() - g.n_vocab, logits.end()), g.logit_tol);
  return worst;
}

}  // namespace

TEST_CASE("Qwen3.5 and LFM2 presets match llama.cpp whole and split (F32 KV)") {
  TempDir dir;
  for (const PresetGolden& m : preset_golden_models()) {
    SUBCASE(m.name.c_str()) {
      GoldenModel g = load_preset_golden(m.name, m.tol, dir.path);
      LoadedGolden l = load_golden_model(g);
      REQUIRE(l.model->config().n_vocab == g.n_vocab);
      REQUIRE(g.cases.size() == 8);  // len1 .. len700
      for (const GoldenCase& c : g.cases) {
        CAPTURE(m.name);
        CAPTURE(c.name);
        const int32_t n = static_cast<int32_t>(c.ids.size());
        g.logit_tol = std::max(m.tol, activations_as_llama_cpp(g.raw["dtype"]) ? 0.0f : m.float_tol);
        const double whole = check_in_pieces(l, g, c, {0});
        MESSAGE(m.name << "/" << c.name << ": max logit error " << whole);
        CHECK(whole <= g.logit_tol);
        // Split after one token, one block, in mid-block and at half the
        // prompt (the 700-token case whole only: its pieces are the 100-token case's).
        if (n < 2 || n > 100) continue;
        std::vector<int32_t> cuts = {0};
        for (int32_t cut : {1, 16, 23, n / 2})
          if (cut > cuts.back() && cut < n) cuts.push_back(cut);
        CAPTURE(cuts.size());
        CHECK(check_in_pieces(l, g, c, cuts) <= g.logit_tol);
      }
    }
  }
}

int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
