// Hyper-parameters of a supported model architecture, read from GGUF metadata.
// Supported: `llama` (Llama 2/3, Mistral, TinyLlama, SmolLM) and `qwen2`.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "kernels/backend.h"

namespace prefixd {

enum class Arch : uint8_t { kLlama, kQwen2 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;      // "llama" or "qwen2"
  std::string name;           // general.name, for display
  int32_t n_ctx_train = 0;    // context length the model was trained for
  int32_t n_embd = 0;         // hidden size
  int32_t n_layers = 0;
  int32_t n_ff = 0;           // feed-forward inner size
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;     // GQA/MQA when < n_heads
  int32_t head_dim = 0;
  int32_t rope_dim = 0;       // leading dims of each head that RoPE rotates
  int32_t n_vocab = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  RopeStyle rope_style = RopeStyle::kNormal;
  bool tied_output = false;   // output projection shares token_embd.weight
  bool has_qkv_bias = false;  // qwen2
};

// Reads and validates every hyper-parameter; refuses architectures and
// features this engine does not implement with a message naming them.
Result<ModelConfig> load_model_config(const GgufFile& file);

}  // namespace prefixd
