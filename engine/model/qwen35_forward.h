// qwen35's forward step (Qwen3.5's dense hybrid), run by ForwardPass for
// qwen35 models: Gated DeltaNet layers that carry each sequence's state in its
// slot of the pool (KvPool::state, BatchSeq::state_slot), and gated attention
// layers whose K/V go to the paged pool as usual (KV layer = index among the
// attention layers).
//
// Thread: the engine thread only (it owns the backend).
#pragma once

#include "engine/model/model.h"
#include "kernels/backend.h"

namespace prefixd {

class Qwen35Forward {
 public:
  // Scratch for at most max_tokens rows and max_outputs output rows.
  Qwen35Forward(const Model& model, int32_t max_tokens, int32_t max_outputs);
  ~Qwen35Forward();
  Qwen35Forward(const Qwen35Forward&) = delete;
  Qwen35Forward& operator=(const Qwen35Forward&) = delete;

  // Every layer over the current batch (prepared by the backend); the logits
  // of its output rows into logits (n_out, n_vocab) f32 in backend memory.
  // Every row runs every layer (the recurrent state needs each row anyway).
  void compute(const Batch& batch, KvPool& pool, float* logits);

 private:
  // proj_ (n, n_embd) = the DeltaNet mixer of layer il over h_ (n, n_embd).
  void delta_net_layer(int32_t il, KvPool& pool, int64_t n);
  // proj_ (n, n_embd) = the gated attention of layer il over h_ (n, n_embd).
  void attention_layer(int32_t il, KvPool& pool, int64_t n);

  const Model& model_;
  Backend& backend_;
  float* x_ = nullptr;      // (max_tokens, n_embd) residual stream
  float* h_ = nullptr;      // (max_tokens, n_embd) normed input of a sub-layer
  float* proj_ = nullptr;   // (max_tokens, n_embd) sub-layer output
  float* qkv_ = nullptr;    // (max_tokens, conv_channels) DeltaNet q, k, v
  float* z_ = nullptr;      // (max_tokens, n_v_heads * d_v) DeltaNet output gate
  float* g_ = nullptr;      // (max_tokens, n_v_heads) log decay (alpha)
  float* beta_ = nullptr;   // (max_tokens, n_v_heads)
  float* core_ = nullptr;   // (max_tokens, n_v_heads * d_v) delta rule output
  float* qg_ = nullptr;     // (max_tokens, n_heads, 2 * head_dim) query and gate per head
  float* q_ = nullptr;      // (max_tokens, n_heads * head_dim)
  float* gate_ = nullptr;   // (max_tokens, n_heads * head_dim) attention output gate
  float* k_ = nullptr;      // (max_tokens, n_kv_heads * head_dim)
  float* v_ = nullptr;      // (max_tokens, n_kv_heads * head_dim)
  float* attn_ = nullptr;   // (max_tokens, n_heads * head_dim)
  float* ff_gate_ = nullptr;  // (max_tokens, n_ff)
  float* ff_up_ = nullptr;    // (max_tokens, n_ff)
  float* out_x_ = nullptr;  // (max_outputs, n_embd)
};

}  // namespace prefixd
