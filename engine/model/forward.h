// The model's forward pass, written once against the Backend interface: one
// call runs every layer over a varlen batch (prefill chunks and decode tokens
// of many sequences), writes their K/V into the paged pool, and returns the
// logits of the batch's output rows.
//
// Thread: the engine thread only (it owns the backend).
#pragma once

#include <vector>

#include "engine/model/model.h"
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
  void run(const Batch& batch, KvPool& pool, std::vector<float>* logits_out);

 private:
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
  float* out_x_ = nullptr;   // (max_outputs, n_embd)
  float* logits_ = nullptr;  // (max_outputs, n_vocab)
};

}  // namespace prefixd
