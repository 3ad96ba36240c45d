// Test support: an engine over one of the shared models, and a synchronous
// helper that submits a request and collects everything it produces.
#pragma once

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

struct EngineUnderTest {
  std::shared_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;

  explicit EngineUnderTest(const std::string& model_path, EngineOptions opts = {}, TierManager* tiers = nullptr,
                           int n_threads = 2, cpu::CpuIsa isa = cpu::best_cpu_isa()) {
    file = GgufFile::open(model_path).value();
    backend = make_cpu_backend(n_threads, isa);
    model = std::move(Model::load(file, *backend).value());
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
