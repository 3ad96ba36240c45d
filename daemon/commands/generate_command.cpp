// Greedy generation over the forward pass with a contiguous block table.
#include "daemon/commands/generate_command.h"

#include <chrono>
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "daemon/model_source.h"
#include "engine/batch_builder.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/text/stream_decoder.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "prefixd generate: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int run_generate(const GenerateOptions& opts) {
  Result<cpu::CpuIsa> isa = opts.cpu_isa_option.choose();
  if (!isa.ok()) {
    fail(isa.message());
    return 2;  // an invalid option, as in serve mode
  }
  std::fprintf(stderr, "prefixd generate: %s\n", opts.cpu_isa_option.describe(isa.value()).c_str());
  Result<std::string> path = resolve_model_path(opts.model, opts.cache_dir);
  if (!path.ok()) return fail(path.message());
  auto file = GgufFile::open(*path);
  if (!file.ok()) return fail(file.message());
  std::unique_ptr<Backend> backend = make_cpu_backend(opts.n_threads, isa.value());
  auto model = Model::load(file.value(), *backend);
  if (!model.ok()) return fail(model.message());
  const ModelConfig& cfg = model.value()->config();

  std::unique_ptr<Tokenizer> tokenizer;
  if (auto t = Tokenizer::from_gguf(*file.value()); t.ok()) tokenizer = std::move(t.value());
  std::vector<int32_t> prompt = opts.prompt_ids;
  if (!opts.prompt.empty()) {
    if (!tokenizer) return fail("the model has no usable tokenizer; use --prompt-ids");
    prompt = tokenizer->encode(opts.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  if (prompt.empty()) return fail("empty prompt: give --prompt or --prompt-ids");
  for (int32_t id : prompt) {
    if (id < 0 || id >= cfg.n_vocab) {
      return fail("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(cfg.n_vocab - 1) + ")");
    }
  }
  if (opts.n_predict < 0) return fail("-n must be >= 0");
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.n_predict;
  if (total > cfg.n_ctx_train) {
    return fail("prompt (" + std::to_string(prompt.size()) + " tokens) + -n (" +
                std::to_string(opts.n_predict) + ") exceeds the context length " +
                std::to_string(cfg.n_ctx_train));
  }
  DType kv = DType::F32;
  if (opts.kv_dtype == "f16") kv = DType::F16;
  else if (opts.kv_dtype == "bf16") kv = DType::BF16;
  else if (opts.kv_dtype != "f32") return fail("unknown --kv-dtype '" + opts.kv_dtype + "'");

  constexpr int32_t kBlock = 16;
  KvGeometry g;
  g.n_layers = cfg.n_layers;
  g.n_blocks = static_cast<int32_t>((total + kBlock - 1) / kBlock) + 1;
  g.block_size = kBlock;
  g.n_kv_heads = cfg.n_kv_heads;
  g.head_dim = cfg.head_dim;
  g.dtype = kv;
  auto pool = backend->allocate_kv_pool(g);
  if (!pool.ok()) return fail(pool.message());
  std::vector<int32_t> table(g.n_blocks);
  for (int32_t i = 0; i < g.n_blocks; ++i) table[i] = i;
  ForwardPass fwd(*model.value(), static_cast<int32_t>(prompt.size()), 1);

  std::vector<int32_t> out_ids;
  std::string text;
  std::unique_ptr<StreamDecoder> decoder;
  if (tokenizer) decoder = std::make_unique<StreamDecoder>(*tokenizer);
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  BatchBuilder b(kBlock);
  b.add(prompt, 0, table, LogitsWanted::kLast);
  fwd.run(b.batch(), pool.value(), &logits);
  const double prefill_s = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int32_t step = 0; step < opts.n_predict; ++step) {
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tokenizer && tokenizer->is_end_of_generation(next)) break;
    out_ids.push_back(next);
    if (decoder) {
      std::string piece = decoder->push(next);
      text += piece;
      if (!opts.json) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      }
    } else if (!opts.json) {
      std::printf("%d ", next);
      std::fflush(stdout);
    }
    if (step + 1 == opts.n_predict) break;
    b.clear();
    b.add(std::span<const int32_t>(&next, 1), pos++, table, LogitsWanted::kLast);
    fwd.run(b.batch(), pool.value(), &logits);
  }
  if (decoder) text += decoder->flush();
  const double decode_s = seconds_since(t1);
  const double prefill_tps = prompt.size() / std::max(prefill_s, 1e-9);
  const double decode_tps = out_ids.size() > 1 ? (out_ids.size() - 1) / std::max(decode_s, 1e-9) : 0.0;
  backend->free_kv_pool(pool.value());
  if (opts.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = out_ids;
    if (tokenizer) j["text"] = text;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["cpu_isa"] = cpu::cpu_isa_name(isa.value());
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\n\nprompt %zu tokens, prefill %.1f tokens/s; generated %zu tokens, decode %.1f tokens/s\n",
                prompt.size(), prefill_tps, out_ids.size(), decode_tps);
  }
  return 0;
}

}  // namespace prefixd
