// Llama/Qwen2/Qwen3/Gemma3/LFM2 decoder: pre-norm attention and gated
// feed-forward blocks (SwiGLU; Gemma 3: GeGLU, a norm on each block's output
// before its residual add, sliding-window attention on its window layers;
// LFM2: gated short convolutions in place of attention in some layers).
#include "engine/model/forward.h"

#include <algorithm>
#include <cmath>

namespace prefixd {

ForwardPass::ForwardPass(const Model& model, int32_t max_tokens, int32_t max_outputs)
    : model_(model), backend_(model.backend()), max_tokens_(max_tokens), max_outputs_(max_outputs) {
  const ModelConfig& c = model.config();
  auto buf = [&](int64_t rows, int64_t cols) {
    return static_cast<float*>(backend_.alloc(static_cast<size_t>(rows) * cols * sizeof(float)));
  };
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  x_ = buf(max_tokens, c.n_embd);
  h_ = buf(max_tokens, c.n_embd);
  q_ = buf(max_tokens, q_dim);
  k_ = buf(max_tokens, kv_dim);
  v_ = buf(max_tokens, kv_dim);
  attn_ = buf(max_tokens, q_dim);
  proj_ = buf(max_tokens, c.n_embd);
  gate_ = buf(max_tokens, c.n_ff);
  up_ = buf(max_tokens, c.n_ff);
  out_q_ = buf(max_outputs, q_dim);
  out_x_ = buf(max_outputs, c.n_embd);
  logits_ = buf(max_outputs, c.n_vocab);
  if (c.arch == Arch::kQwen35) qwen35_ = std::make_unique<Qwen35Forward>(model, max_tokens, max_outputs);
  if (!c.layer_is_conv.empty()) {
    bcx_ = buf(max_tokens, 3 * int64_t{c.n_embd});
    conv_y_ = buf(max_tokens, c.n_embd);
  }
}

ForwardPass::~ForwardPass() {
  for (float* p : {x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, out_q_, out_x_, logits_})
    backend_.free(p);
  for (float* p : {bcx_, conv_y_})
    if (p != nullptr) backend_.free(p);
}

Batch ForwardPass::output_batch(const Batch& batch) {
  Batch out;
  out.block_tables = batch.block_tables;
  out.window_block_tables = batch.window_block_tables;
  size_t s = 0;
  for (int32_t row : batch.output_rows) {
    while (batch.seqs[s].q_start + batch.seqs[s].n_q <= row) ++s;  // rows are ascending
    const BatchSeq& seq = batch.seqs[s];
    const int32_t i = static_cast<int32_t>(out.tokens.size());
    out.tokens.push_back(batch.tokens[row]);
    out.positions.push_back(batch.positions[row]);
    out.slots.push_back(batch.slots[row]);
    if (!batch.window_slots.empty()) out.window_slots.push_back(batch.window_slots[row]);
    out.seqs.push_back(BatchSeq{i, 1, batch.positions[row], seq.table_start, seq.n_table});
    out.output_rows.push_back(i);
  }
  return out;
}

void ForwardPass::finish_layer(int32_t il, KvPool& pool, const float* q, float* x, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& l = model_.layer(il);
  backend_.attention(pool, il, q, attn_, c.n_heads, c.attn_scale, c.window_of(il));
  backend_.matmul(*l.wo, attn_, proj_, n);
  if (c.has_post_norms) backend_.rmsnorm(proj_, l.post_attn_norm, proj_, n, c.n_embd, c.rms_eps);
  backend_.add(x, proj_, n * c.n_embd);
  feed_forward(il, x, n);
}

void ForwardPass::feed_forward(int32_t il, float* x, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& l = model_.layer(il);
  backend_.rmsnorm(x, l.ffn_norm, h_, n, c.n_embd, c.rms_eps);
  const Matrix* gate_up[] = {l.w_gate.get(), l.w_up.get()};
  float* gate_up_out[] = {gate_, up_};
  backend_.matmul_same_x(gate_up, h_, gate_up_out, 2, n);
  if (c.ffn_activation == FfnActivation::kGeluTanh) {
    backend_.geglu(gate_, up_, gate_, n * c.n_ff);
  } else {
    backend_.swiglu(gate_, up_, gate_, n * c.n_ff);
  }
  backend_.matmul(*l.w_down, gate_, proj_, n);
  if (c.has_post_norms) backend_.rmsnorm(proj_, l.post_ffw_norm, proj_, n, c.n_embd, c.rms_eps);
  backend_.add(x, proj_, n * c.n_embd);
}

void ForwardPass::run(const Batch& batch, KvPool& pool, std::vector<float>* logits_out) {
  const ModelConfig& c = model_.config();
  const int64_t n = batch.n_tokens();
  const int64_t n_out = static_cast<int64_t>(batch.output_rows.size());
  PREFIXD_CHECK(n > 0 && n <= max_tokens_, "batch size out of range");
  PREFIXD_CHECK(n_out <= max_outputs_, "too many output rows");
  StepInfo info;
  info.owner = this;
  info.max_rows = std::min(max_tokens_, max_outputs_);
  info.token_limit = model_.token_embd().rows;
  info.logits = logits_;
  info.logit_cols = c.n_vocab;
  backend_.run_step(batch, pool, info, [&](const Batch& step) { compute(step, pool); });
  if (n_out == 0) {
    logits_out->clear();
    backend_.synchronize();
    return;
  }
  logits_out->resize(static_cast<size_t>(n_out) * c.n_vocab);
  backend_.download(logits_out->data(), logits_, logits_out->size() * sizeof(float));
  if (c.final_logit_softcap > 0) {  // on the host copy: cap * tanh(logit / cap)
    const float cap = c.final_logit_softcap;
    for (float& v : *logits_out) v = cap * std::tanh(v / cap);
  }
}

void ForwardPass::compute(const Batch& batch, KvPool& pool) {
  const ModelConfig& c = model_.config();
  const int64_t n = batch.n_tokens();
  const int64_t n_out = static_cast<int64_t>(batch.output_rows.size());
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  if (qwen35_) {
    qwen35_->compute(batch, pool, logits_);
    return;
  }

  backend_.embed(model_.token_embd(), x_);
  if (c.embed_scale != 1.0f) backend_.scale(x_, c.embed_scale, n * c.n_embd);
  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& l = model_.layer(il);
    if (c.is_conv(il)) {  // lfm2: every row (its tail is the next chunk's input)
      conv_layer(il, pool, n);
      if (il + 1 == c.n_layers && n_out < n) {
        if (n_out == 0) return;
        backend_.gather_output_rows(x_, out_x_, c.n_embd);
      }
      continue;
    }
    // Attention sub-layer: Q, K, V of every row, K and V into the pool.
    backend_.rmsnorm(x_, l.attn_norm, h_, n, c.n_embd, c.rms_eps);
    const Matrix* qkv[] = {l.wq.get(), l.wk.get(), l.wv.get()};
    float* qkv_out[] = {q_, k_, v_};
    backend_.matmul_same_x(qkv, h_, qkv_out, 3, n);
    if (c.has_qkv_bias) {
      backend_.add_bias(q_, l.bq, n, q_dim);
      backend_.add_bias(k_, l.bk, n, kv_dim);
      backend_.add_bias(v_, l.bv, n, kv_dim);
    }
    if (c.has_qk_norm) {  // qwen3, gemma3: each head's rows normalised on their own
      backend_.rmsnorm(q_, l.attn_q_norm, q_, n * c.n_heads, c.head_dim, c.rms_eps);
      backend_.rmsnorm(k_, l.attn_k_norm, k_, n * c.n_kv_heads, c.head_dim, c.rms_eps);
    }
    const float rope_base = c.rope_base_of(il);
    const float* rope_factors = c.rope_factors_of(il);
    backend_.rope(q_, c.n_heads, c.head_dim, c.rope_dim, rope_base, rope_factors, c.rope_style);
    backend_.rope(k_, c.n_kv_heads, c.head_dim, c.rope_dim, rope_base, rope_factors, c.rope_style);
    backend_.kv_store(pool, il, k_, v_);
    if (il + 1 < c.n_layers || n_out == n) {
      finish_layer(il, pool, q_, x_, n);
      continue;
    }
    // The last layer, with rows whose output nothing reads: only the output
    // rows (their Q and residual gathered) go on, as a batch of their own.
    if (n_out == 0) return;
    backend_.gather_output_rows(q_, out_q_, q_dim);
    backend_.gather_output_rows(x_, out_x_, c.n_embd);
    backend_.prepare_batch(output_batch(batch), pool.geom.block_size);
    finish_layer(il, pool, out_q_, out_x_, n_out);
  }
  if (n_out == n) backend_.gather_output_rows(x_, out_x_, c.n_embd);
  backend_.rmsnorm(out_x_, model_.output_norm(), out_x_, n_out, c.n_embd, c.rms_eps);
  backend_.matmul(model_.output(), out_x_, logits_, n_out);
}

}  // namespace prefixd
