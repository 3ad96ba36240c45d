// Test support: an engine over one of the shared models, and a synchronous
// helper that submits a request and collects everything it produces.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "kernels/cpu/cpu_isa.h"
#include "tests/golden.h"
#include "tests/temp_dir.h"

namespace prefixd::testing {

struct Collected {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<std::vector<float>> logits;  // per sampled token, when requested
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  std::string error;
};

inline Collected collect(const std::shared_ptr<RequestChannel>& ch) {
  Collected c;
  for (;;) {
    for (EngineEvent& e : ch->wait(std::chrono::milliseconds(1000))) {
      if (e.type == EngineEvent::Type::kToken) {
        c.ids.push_back(e.token);
        c.text += e.text;
        if (!e.logits.empty()) c.logits.push_back(std::move(e.logits));
      } else if (e.type == EngineEvent::Type::kFinished) {
        c.text += e.text;
        c.finish = e.finish;
        c.usage = e.usage;
        return c;
      } else {
        c.error = e.error;
        c.finish = FinishReason::kError;
        return c;
      }
    }
  }
}

// The set (or plan: cpu::plan_for_isa) engines under test run by default:
// PREFIXD_CPU_ISA's, as tests/cpu_isa_under_test.h resolves it (ctest runs the
// engine tests under mixed plans too), else the best set (`auto`).
inline cpu::CpuIsa engine_test_isa() {
  const char* env = std::getenv("PREFIXD_CPU_ISA");
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(env != nullptr ? env : "");
  return isa.ok() ? isa.value() : cpu::best_cpu_isa();
}

struct EngineUnderTest {
  std::shared_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;

  // auto_kv_dtype: opts.kv_dtype is replaced by the model's (`--kv-dtype auto`).
  explicit EngineUnderTest(const std::string& model_path, EngineOptions opts = {}, TierManager* tiers = nullptr,
                           int n_threads = 2, cpu::CpuIsa isa = engine_test_isa(), bool auto_kv_dtype = false)
      : EngineUnderTest(model_path, std::move(opts), tiers, make_cpu_backend(n_threads, isa), auto_kv_dtype) {}
  // The same on a backend the caller made (the benchmarks' --backend cuda).
  EngineUnderTest(const std::string& model_path, EngineOptions opts, TierManager* tiers,
                  std::unique_ptr<Backend> on_backend, bool auto_kv_dtype = false) {
    file = GgufFile::open(model_path).value();
    backend = std::move(on_backend);
    model = std::move(Model::load(file, *backend).value());
    if (auto_kv_dtype) opts.kv_dtype = model->auto_kv_dtype();
    if (auto t = Tokenizer::from_gguf(*file); t.ok()) tokenizer = std::move(t.value());
    auto e = Engine::create(*model, tokenizer.get(), tiers, opts);
    if (!e.ok()) {
      std::fprintf(stderr, "engine: %s\n", e.message().c_str());
      std::abort();
    }
    engine = std::move(e.value());
  }

  Collected run(Request r) { return collect(engine->submit(std::move(r))); }
};

// How a cached run's answer compares with the cold one (both with
// return_logits): greedy ids and logits compared up to the cold run's first
// near-tie (top-2 logit gap below twice the tolerance), where a computation
// within tolerance may pick either token (the golden files' rule). Models
// whose rows are computed one way whatever the batch give the same bits
// cached or not; quantized ones multiply short batches (a suffix after a
// cached prefix, decode) with 8-bit products and long ones in BF16 or F32,
// within the tolerance of each other.
struct AnswerDiff {
  size_t compared_steps = 0;  // steps whose ids must agree (before the near-tie)
  bool ids_agree = false;     // every compared id, and the lengths when no near-tie
  double worst_logit = 0;     // largest |logit difference| up to and including the near-tie
};
inline AnswerDiff compare_answers(const Collected& cached, const Collected& cold, int32_t n_vocab, double tol) {
  AnswerDiff d;
  const size_t steps = std::min(cold.logits.size(), cold.ids.size());
  size_t t = 0;
  for (; t < steps; ++t) {
    std::vector<float> top(cold.logits[t].begin(), cold.logits[t].end());
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    if (top[0] - top[1] < 2 * tol) break;  // a near-tie: step t may differ
  }
  d.compared_steps = t;
  d.ids_agree = cached.ids.size() >= t &&
                std::equal(cold.ids.begin(), cold.ids.begin() + static_cast<std::ptrdiff_t>(t), cached.ids.begin()) &&
                (t < steps || cached.ids == cold.ids);
  for (size_t s = 0; s <= t && s < cold.logits.size() && s < cached.logits.size(); ++s) {
    for (int32_t v = 0; v < n_vocab; ++v)
      d.worst_logit = std::max(d.worst_logit, static_cast<double>(std::fabs(cached.logits[s][v] - cold.logits[s][v])));
  }
  return d;
}

// Whether a model's products give a row the same bits whatever the batch
// (F32, F16 and BF16 weights, every set and plan), so that a cached prefix's
// answers equal the uncached ones bit for bit.
inline bool batch_invariant_weights(const Model& m) {
  const WeightType t = m.layer(0).w_down->source_type;  // every architecture's layers have one (qwen35, lfm2: not wq)
  return t == WeightType::F32 || t == WeightType::F16 || t == WeightType::BF16;
}

// The golden case with the most prompt ids.
inline const GoldenCase& longest_case(const GoldenModel& g) {
  const GoldenCase* best = &g.cases[0];
  for (const GoldenCase& c : g.cases) {
    if (c.ids.size() > best->ids.size()) best = &c;
  }
  return *best;
}

inline ModelConfig model_config_of(const std::string& model_path) {
  return load_model_config(*GgufFile::open(model_path).value()).value();
}

// Engine options with an F32 KV cache (bit-stable outputs) of 16-token blocks.
inline EngineOptions f32_engine_options(size_t pool_bytes = 64ull << 20) {
  EngineOptions o;
  o.kv_dtype = DType::F32;
  o.kv_pool_bytes = pool_bytes;
  return o;
}

// Bytes of one pool block of `model_path` under f32_engine_options().
inline size_t f32_block_bytes(const std::string& model_path) {
  return f32_engine_options().pool_geometry(model_config_of(model_path)).block_bytes();
}

inline Request greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace prefixd::testing
