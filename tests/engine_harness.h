// Test support: an engine over one of the shared models, and a synchronous
// helper that submits a request and collects everything it produces.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "tests/golden.h"

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
                           int n_threads = 2) {
    file = GgufFile::open(model_path).value();
    backend = make_cpu_backend(n_threads);
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

inline Request greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace prefixd::testing
