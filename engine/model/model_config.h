// Hyper-parameters of a supported model architecture, read from GGUF metadata.
// Supported: `llama` (Llama 2/3/3.1+ with RoPE frequency factors, Mistral,
// TinyLlama, SmolLM), `qwen2` and `qwen3`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "kernels/backend.h"

namespace prefixd {

enum class Arch : uint8_t { kLlama, kQwen2, kQwen3 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;      // "llama", "qwen2" or "qwen3"
  std::string name;           // general.name, for display
  int32_t n_ctx_train = 0;    // context length the model was trained for
  int32_t n_embd = 0;         // hidden size
  int32_t n_layers = 0;
  int32_t n_ff = 0;           // feed-forward inner size
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;     // GQA/MQA when < n_heads
  int32_t head_dim = 0;       // attention.key_length if set (qwen3: n_heads * head_dim != n_embd)
  int32_t rope_dim = 0;       // leading dims of each head that RoPE rotates
  int32_t n_vocab = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  RopeStyle rope_style = RopeStyle::kNormal;
  // (rope_dim / 2) f32 from tensor rope_freqs.weight (llama 3.1+): pair i's
  // frequency is divided by factor i. Empty when the file has none.
  std::vector<float> rope_freq_factors;
  bool tied_output = false;   // output projection shares token_embd.weight
  bool has_qkv_bias = false;  // qwen2
  bool has_qk_norm = false;   // qwen3: per-head RMS norms on Q and K before RoPE
};

// Reads and validates every hyper-parameter (and the RoPE frequency factors,
// the one tensor that is configuration); refuses architectures and features
// this engine does not implement (other RoPE scaling, sliding windows,
// mixtures of experts) with a message naming them.
Result<ModelConfig> load_model_config(const GgufFile& file);

}  // namespace prefixd
