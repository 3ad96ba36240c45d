// The model's forward pass, written once against the Backend interface: one
// call runs every layer over a varlen batch (prefill chunks and decode tokens
// of many sequences), writes their K/V into the paged pool, and returns the
// logits of the batch's output rows.
//
// Thread: the engine thread only (it owns the backend).
#pragma once

#include <memory>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/qwen35_forward.h"
#include "kernels/backend.h"

namespace prefixd {

class ForwardPass {
 public:
  // Scratch sized for at most `max_tokens` rows and `max_outputs` logit rows per call.
  ForwardPass(const Model& model, int32_t max_tokens, int32_t max_outputs);
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  // Runs the batch. `batch.output_rows` selects the rows whose logits are
  // returned in `logits_out`: (output_rows.size(), n_vocab) f32, host memory.
  // The last layer writes every row's K/V, but its attention and
  // feed-forward run for the output rows only (none in a prefill chunk
  // without outputs): no later layer reads the other rows.
  // The step goes to the backend as one Backend::run_step (which may pad a
  // decode step and replay a recording of it; see there).
  void run(const Batch& batch, KvPool& pool, std::vector<float>* logits_out);

 private:
  // Every op of one step over `batch` (made current by the backend): the
  // logits of its output rows into logits_. The StepBody of run().
  void compute(const Batch& batch, KvPool& pool);
  // Attention and feed-forward sub-layers of layer `il` after its K/V are
  // stored: x (n, n_embd) += attention(q); x += FFN(x), over the backend's
  // prepared batch of n rows.
  void finish_layer(int32_t il, KvPool& pool, const float* q, float* x, int64_t n);
  // x (n, n_embd) += FFN(norm(x)) of layer `il`: the feed-forward sub-layer.
  void feed_forward(int32_t il, float* x, int64_t n);
  // A whole lfm2 convolution layer `il` over the batch's n rows in x_: the
  // gated short convolution (its tail in the pool), then the feed-forward
  // sub-layer (short_conv_layer.cpp).
  void conv_layer(int32_t il, KvPool& pool, int64_t n);
  // The batch of the output rows alone: each a one-row sequence at its
  // position, with its sequence's block table.
  static Batch output_batch(const Batch& batch);

  const Model& model_;
  Backend& backend_;
  int32_t max_tokens_;
  int32_t max_outputs_;
  float* x_ = nullptr;       // (max_tokens, n_embd) residual stream
  float* h_ = nullptr;       // (max_tokens, n_embd) normed input of a sub-layer
  float* q_ = nullptr;       // (max_tokens, n_heads * head_dim)
  float* k_ = nullptr;       // (max_tokens, n_kv_heads * head_dim)
  float* v_ = nullptr;       // (max_tokens, n_kv_heads * head_dim)
  float* attn_ = nullptr;    // (max_tokens, n_heads * head_dim)
  float* proj_ = nullptr;    // (max_tokens, n_embd) sub-layer output
  float* gate_ = nullptr;    // (max_tokens, n_ff)
  float* up_ = nullptr;      // (max_tokens, n_ff)
  float* out_q_ = nullptr;   // (max_outputs, n_heads * head_dim)
  float* out_x_ = nullptr;   // (max_outputs, n_embd)
  float* logits_ = nullptr;  // (max_outputs, n_vocab)
  std::unique_ptr<Qwen35Forward> qwen35_;  // qwen35 models only: their step's layers
  // lfm2 only (null otherwise):
  float* bcx_ = nullptr;     // (max_tokens, 3 * n_embd) B | C | x of a convolution layer
  float* conv_y_ = nullptr;  // (max_tokens, n_embd) gated convolution output
};

}  // namespace prefixd
