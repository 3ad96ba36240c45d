// A loaded model: its configuration and its weights held by a backend.
// Immutable after load; used by the engine thread only (backends are not
// thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"

namespace prefixd {

struct LayerWeights {
  float* attn_norm = nullptr;        // (n_embd) f32, backend memory
  std::unique_ptr<Matrix> wq;        // (n_heads * head_dim, n_embd)
  std::unique_ptr<Matrix> wk;        // (n_kv_heads * head_dim, n_embd)
  std::unique_ptr<Matrix> wv;        // (n_kv_heads * head_dim, n_embd)
  std::unique_ptr<Matrix> wo;        // (n_embd, n_heads * head_dim)
  float* bq = nullptr;               // (n_heads * head_dim) f32, qwen2 only
  float* bk = nullptr;               // (n_kv_heads * head_dim) f32, qwen2 only
  float* bv = nullptr;               // (n_kv_heads * head_dim) f32, qwen2 only
  float* attn_q_norm = nullptr;      // (head_dim) f32, per-head RMS norm of Q, qwen3 and gemma3
  float* attn_k_norm = nullptr;      // (head_dim) f32, per-head RMS norm of K, qwen3 and gemma3
  float* post_attn_norm = nullptr;   // (n_embd) f32, norm of the attention output, gemma3 only
  float* ffn_norm = nullptr;         // (n_embd) f32
  float* post_ffw_norm = nullptr;    // (n_embd) f32, norm of the FFN output, gemma3 only
  std::unique_ptr<Matrix> w_gate;    // (n_ff, n_embd)
  std::unique_ptr<Matrix> w_up;      // (n_ff, n_embd)
  std::unique_ptr<Matrix> w_down;    // (n_embd, n_ff)
  // qwen35 Gated DeltaNet layers only (qwen35_weights.cpp; DeltaNetShape d =
  // config.delta_net). Their attention fields above stay empty; ffn_norm
  // holds the file's post_attention_norm (qwen35's norm before the FFN).
  std::unique_ptr<Matrix> w_qkv;     // (d.conv_channels(), n_embd) attn_qkv
  std::unique_ptr<Matrix> w_z;       // (n_v_heads * d_v, n_embd) attn_gate: the output gate
  std::unique_ptr<Matrix> w_beta;    // (n_v_heads, n_embd) ssm_beta
  std::unique_ptr<Matrix> w_alpha;   // (n_v_heads, n_embd) ssm_alpha
  std::unique_ptr<Matrix> w_ssm_out; // (n_embd, n_v_heads * d_v) ssm_out
  float* conv_w = nullptr;           // (d.conv_channels(), conv_width) f32 ssm_conv1d
  float* dt_bias = nullptr;          // (n_v_heads) f32 ssm_dt.bias
  float* ssm_a = nullptr;            // (n_v_heads) f32, negative
  float* ssm_norm = nullptr;         // (d_v) f32
  // lfm2 convolution layers (no wq..wo): in-projection to B | C | x, the
  // depthwise kernel, out-projection.
  std::unique_ptr<Matrix> conv_in;   // (3 * n_embd, n_embd)
  float* conv_kernel = nullptr;      // (n_embd, conv_l_cache) f32, tap 0 the oldest
  std::unique_ptr<Matrix> conv_out;  // (n_embd, n_embd)
};

class Model {
 public:
  // Validates the configuration and every tensor's shape and type, then
  // uploads the weights. `file` must stay alive while the model lives (CPU
  // weights may point into its mapping).
  static Result<std::unique_ptr<Model>> load(std::shared_ptr<GgufFile> file, Backend& backend);
  ~Model();

  const ModelConfig& config() const { return config_; }
  // The KV cache type `--kv-dtype auto` picks: BF16 when the K and V
  // projections are BF16 (the model's own precision, as vLLM's `auto`; on
  // CPUs with a BF16 dot product attention then multiplies BF16 operands,
  // about 1.7x faster than F32), else F16.
  DType auto_kv_dtype() const;
  const GgufFile& file() const { return *file_; }
  Backend& backend() const { return *backend_; }

  const Matrix& token_embd() const { return *token_embd_; }  // (n_vocab, n_embd)
  const Matrix& output() const { return output_ ? *output_ : *token_embd_; }  // (n_vocab, n_embd)
  const float* output_norm() const { return output_norm_; }  // (n_embd) f32
  const LayerWeights& layer(int i) const { return layers_[i]; }

 private:
  Model() = default;
  Status load_weights();
  Result<std::unique_ptr<Matrix>> matrix(const std::string& name, int64_t rows, int64_t cols);
  Result<float*> vector(const std::string& name, int64_t n);
  // qwen35_weights.cpp: layer il's tensors, DeltaNet or gated attention.
  Status load_qwen35_layer(int il);
  // A tensor of dims (ggml order, fastest first) as f32 in backend memory.
  Result<float*> f32_tensor(const std::string& name, const std::vector<int64_t>& dims);
  // A 2-D tensor of (outer, inner) values (ggml dims [inner, outer]) as f32.
  Result<float*> table(const std::string& name, int64_t outer, int64_t inner);
  Status load_attention(LayerWeights& l, const std::string& prefix);
  Status load_conv(LayerWeights& l, const std::string& prefix);

  ModelConfig config_;
  std::shared_ptr<GgufFile> file_;
  Backend* backend_ = nullptr;
  std::vector<void*> owned_buffers_;  // backend allocations freed on destruction
  std::unique_ptr<Matrix> token_embd_;
  std::unique_ptr<Matrix> output_;  // null when tied
  float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
};

}  // namespace prefixd
