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
#include "engine/sampler.h"
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

// The prompt's ids (--prompt tokenized with BOS, or --prompt-ids), checked
// against the vocabulary and, with -n, the context.
Result<std::vector<int32_t>> prompt_ids(const GenerateOptions& opts, const Tokenizer* tokenizer,
                                        const ModelConfig& cfg) {
  std::vector<int32_t> prompt = opts.prompt_ids;
  if (!opts.prompt.empty()) {
    if (!tokenizer) return Status::error("the model has no usable tokenizer; use --prompt-ids");
    prompt = tokenizer->encode(opts.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  if (prompt.empty()) return Status::error("empty prompt: give --prompt or --prompt-ids");
  for (int32_t id : prompt) {
    if (id < 0 || id >= cfg.n_vocab) {
      return Status::error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                           std::to_string(cfg.n_vocab - 1) + ")");
    }
  }
  if (opts.n_predict < 0) return Status::error("-n must be >= 0");
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.n_predict;
  if (total > cfg.n_ctx_train) {
    return Status::error("prompt (" + std::to_string(prompt.size()) + " tokens) + -n (" +
                         std::to_string(opts.n_predict) + ") exceeds the context length " +
                         std::to_string(cfg.n_ctx_train));
  }
  return prompt;
}

Result<DType> kv_dtype_of(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  return Status::error("unknown --kv-dtype '" + name + "'");
}

// What greedy decoding produced and how long its two phases took.
struct Generated {
  std::vector<int32_t> ids;
  std::string text;  // with a tokenizer
  double prefill_s = 0;
  double decode_s = 0;
};

// Prefills `prompt` into `pool` through the contiguous `table`, then decodes
// up to `n_predict` tokens greedily (argmax), stopping at an end-of-generation
// token; each token is printed as it comes unless `quiet`.
Generated decode_greedy(ForwardPass& fwd, KvPool& pool, const std::vector<int32_t>& table,
                        int32_t block_size, const std::vector<int32_t>& prompt, int32_t n_predict,
                        const Tokenizer* tokenizer, bool quiet) {
  Generated out;
  std::unique_ptr<StreamDecoder> decoder;
  if (tokenizer) decoder = std::make_unique<StreamDecoder>(*tokenizer);
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  BatchBuilder b(block_size);
  b.add(prompt, 0, table, LogitsWanted::kLast);
  fwd.run(b.batch(), pool, &logits);
  out.prefill_s = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int32_t step = 0; step < n_predict; ++step) {
    int32_t next = greedy_token(logits.data(), static_cast<int32_t>(logits.size()));
    if (tokenizer && tokenizer->is_end_of_generation(next)) break;
    out.ids.push_back(next);
    if (decoder) {
      std::string piece = decoder->push(next);
      out.text += piece;
      if (!quiet) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      }
    } else if (!quiet) {
      std::printf("%d ", next);
      std::fflush(stdout);
    }
    if (step + 1 == n_predict) break;
    b.clear();
    b.add(std::span<const int32_t>(&next, 1), pos++, table, LogitsWanted::kLast);
    fwd.run(b.batch(), pool, &logits);
  }
  if (decoder) out.text += decoder->flush();
  out.decode_s = seconds_since(t1);
  return out;
}

// The summary line, or with --json one JSON document.
void print_result(const GenerateOptions& opts, const std::vector<int32_t>& prompt,
                  const Generated& g, bool has_tokenizer, cpu::CpuIsa isa) {
  const double prefill_tps = prompt.size() / std::max(g.prefill_s, 1e-9);
  const double decode_tps =
      g.ids.size() > 1 ? (g.ids.size() - 1) / std::max(g.decode_s, 1e-9) : 0.0;
  if (opts.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = g.ids;
    if (has_tokenizer) j["text"] = g.text;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["cpu_isa"] = cpu::cpu_isa_name(isa);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "\n\nprompt %zu tokens, prefill %.1f tokens/s; generated %zu tokens, decode %.1f "
        "tokens/s\n",
        prompt.size(), prefill_tps, g.ids.size(), decode_tps);
  }
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
  Result<std::vector<int32_t>> prompt = prompt_ids(opts, tokenizer.get(), cfg);
  if (!prompt.ok()) return fail(prompt.message());
  Result<DType> kv = kv_dtype_of(opts.kv_dtype);
  if (!kv.ok()) return fail(kv.message());

  constexpr int32_t kBlock = 16;
  const int64_t total = static_cast<int64_t>(prompt->size()) + opts.n_predict;
  KvGeometry g;
  g.n_layers = cfg.n_kv_layers();
  g.n_state_slots = cfg.state_floats() > 0 ? 1 : 0;  // slot 0: the one sequence's
  g.state_floats = cfg.state_floats();
  g.n_blocks = static_cast<int32_t>((total + kBlock - 1) / kBlock) + 1;
  g.block_size = kBlock;
  g.n_kv_heads = cfg.n_kv_heads;
  g.head_dim = cfg.head_dim;
  g.dtype = kv.value();
  auto pool = backend->allocate_kv_pool(g);
  if (!pool.ok()) return fail(pool.message());
  std::vector<int32_t> table(g.n_blocks);
  for (int32_t i = 0; i < g.n_blocks; ++i) table[i] = i;
  ForwardPass fwd(*model.value(), static_cast<int32_t>(prompt->size()), 1);
  const Generated out = decode_greedy(fwd, pool.value(), table, kBlock, prompt.value(),
                                      opts.n_predict, tokenizer.get(), opts.json);
  backend->free_kv_pool(pool.value());
  print_result(opts, prompt.value(), out, tokenizer != nullptr, isa.value());
  return 0;
}

}  // namespace prefixd
