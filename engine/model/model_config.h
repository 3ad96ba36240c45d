// Hyper-parameters of a supported model architecture, read from GGUF metadata.
// Supported: `llama` (Llama 2/3/3.1+ with RoPE frequency factors, Mistral,
// TinyLlama, SmolLM), `qwen2`, `qwen3`, `gemma3` (sliding-window attention) and
// `qwen35` (Qwen3.5's dense hybrid: Gated DeltaNet and gated attention layers)
// and `lfm2` (Liquid LFM2: gated short-convolution layers beside attention layers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "kernels/backend.h"

namespace prefixd {

enum class Arch : uint8_t { kLlama, kQwen2, kQwen3, kGemma3, kQwen35, kLfm2 };

// The feed-forward block's gate activation.
enum class FfnActivation : uint8_t {
  kSilu,      // SwiGLU: silu(gate) * up (llama, qwen2, qwen3)
  kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (gemma3)
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;      // "llama", "qwen2", "qwen3", "gemma3" or "lfm2"
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
  bool has_qk_norm = false;   // qwen3, gemma3: per-head RMS norms on Q and K before RoPE
  // gemma3: RMS norms of the attention output (post_attention_norm) and of the
  // FFN output (post_ffw_norm), each before its residual add.
  bool has_post_norms = false;
  FfnActivation ffn_activation = FfnActivation::kSilu;
  float embed_scale = 1.0f;   // input embeddings times this (gemma3: sqrt(n_embd))
  float attn_scale = 0.0f;    // attention score scale (1/sqrt(head_dim); see load_model_config)
  // Logits become cap * tanh(logits / cap) when > 0 (final_logit_softcapping).
  float final_logit_softcap = 0.0f;
  // Sliding-window attention (gemma3): a window layer's query at position p
  // reads keys (p - sliding_window, p]; 0 means every layer is global.
  int32_t sliding_window = 0;
  // [n_layers] 1 for a window layer, 0 for a global one (all 0 without a window).
  std::vector<uint8_t> layer_is_window;
  float rope_base_window = 10000.0f;  // RoPE base of the window layers (rope.freq_base_swa)
  // gemma3 with linear RoPE scaling (rope.scaling.factor F, Gemma 3 4B and
  // larger): (rope_dim / 2) copies of F, the global layers' frequency factors
  // (angles divided by F); the window layers are not scaled. Empty otherwise.
  std::vector<float> rope_factors_global;
  // qwen35 (engine/model/qwen35_config.cpp): [n_layers] 1 for a Gated
  // DeltaNet layer, 0 for a gated attention layer; empty for other models.
  std::vector<uint8_t> layer_is_recurrent;
  DeltaNetShape delta_net;  // every DeltaNet layer's shape (state_offset 0)

  bool is_recurrent(int32_t il) const { return !layer_is_recurrent.empty() && layer_is_recurrent[il]; }
  // Layers with K/V in the pool (KvGeometry::n_layers), and layer il's index
  // among them (il must be an attention layer).
  int32_t n_kv_layers() const;
  int32_t kv_layer_of(int32_t il) const;
  // f32 of one sequence's recurrent state (KvGeometry::state_floats); 0 without
  // recurrent layers. DeltaNet layer il's shape with its offset in the slot.
  int64_t state_floats() const;
  DeltaNetShape delta_net_of(int32_t il) const;
  // lfm2: [n_layers] 1 for a gated short-convolution layer (no attention, no
  // K/V: its convolution tail lives in the layer's pool area,
  // kernels/conv_tail.h), 0 for an attention layer; empty for other models.
  std::vector<uint8_t> layer_is_conv;
  int32_t conv_l_cache = 0;  // convolution kernel width L (lfm2.shortconv.l_cache)

  bool is_conv(int32_t il) const { return !layer_is_conv.empty() && layer_is_conv[il] != 0; }

  // Attention window of layer `il` in positions; 0: global.
  int32_t window_of(int32_t il) const { return layer_is_window[il] ? sliding_window : 0; }
  // RoPE frequency factors of layer `il` (see Backend::rope), nullptr for none.
  const float* rope_factors_of(int32_t il) const {
    if (!rope_factors_global.empty() && !layer_is_window[il]) return rope_factors_global.data();
    return rope_freq_factors.empty() ? nullptr : rope_freq_factors.data();
  }
  // RoPE base of layer `il`.
  float rope_base_of(int32_t il) const {
    return layer_is_window[il] ? rope_base_window : rope_base;
  }
};

// Reads and validates every hyper-parameter (and the RoPE frequency factors,
// the one tensor that is configuration); refuses architectures and features
// this engine does not implement (other RoPE scaling, sliding windows outside
// gemma3, logit soft-capping in attention, mixtures of experts) with a message
// naming them.
Result<ModelConfig> load_model_config(const GgufFile& file);

// qwen35_config.cpp: the qwen35 keys (layer kinds from full_attention_interval,
// the DeltaNet shape, M-RoPE sections); refuses multi-token-prediction layers,
// experts and vision tensors by name. Called after the common keys.
Status read_qwen35(const GgufFile& file, const std::string& prefix, ModelConfig* config);

}  // namespace prefixd
