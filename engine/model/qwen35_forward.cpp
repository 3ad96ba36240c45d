// Qwen3.5's decoder: each layer is attn_norm, a Gated DeltaNet or gated
// attention mixer, the residual add, post_attention_norm, a SwiGLU FFN and
// its residual add.
#include "engine/model/qwen35_forward.h"

namespace prefixd {

Qwen35Forward::Qwen35Forward(const Model& model, int32_t max_tokens, int32_t max_outputs)
    : model_(model), backend_(model.backend()) {
  const ModelConfig& c = model.config();
  const DeltaNetShape& d = c.delta_net;
  auto buf = [&](int64_t rows, int64_t cols) {
    return static_cast<float*>(backend_.alloc(static_cast<size_t>(rows) * cols * sizeof(float)));
  };
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const int64_t value_dim = static_cast<int64_t>(d.n_v_heads) * d.d_v;
  x_ = buf(max_tokens, c.n_embd);
  h_ = buf(max_tokens, c.n_embd);
  proj_ = buf(max_tokens, c.n_embd);
  qkv_ = buf(max_tokens, d.conv_channels());
  z_ = buf(max_tokens, value_dim);
  g_ = buf(max_tokens, d.n_v_heads);
  beta_ = buf(max_tokens, d.n_v_heads);
  core_ = buf(max_tokens, value_dim);
  qg_ = buf(max_tokens, 2 * q_dim);
  q_ = buf(max_tokens, q_dim);
  gate_ = buf(max_tokens, q_dim);
  k_ = buf(max_tokens, kv_dim);
  v_ = buf(max_tokens, kv_dim);
  attn_ = buf(max_tokens, q_dim);
  ff_gate_ = buf(max_tokens, c.n_ff);
  ff_up_ = buf(max_tokens, c.n_ff);
  out_x_ = buf(max_outputs, c.n_embd);
}

Qwen35Forward::~Qwen35Forward() {
  for (float* p : {x_, h_, proj_, qkv_, z_, g_, beta_, core_, qg_, q_, gate_, k_, v_, attn_, ff_gate_,
                   ff_up_, out_x_}) {
    backend_.free(p);
  }
}

void Qwen35Forward::delta_net_layer(int32_t il, KvPool& pool, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& l = model_.layer(il);
  const DeltaNetShape d = c.delta_net_of(il);
  const Matrix* ws[] = {l.w_qkv.get(), l.w_z.get(), l.w_beta.get(), l.w_alpha.get()};
  float* ys[] = {qkv_, z_, beta_, g_};
  backend_.matmul_same_x(ws, h_, ys, 4, n);
  backend_.delta_gates(g_, beta_, l.dt_bias, l.ssm_a, n, d.n_v_heads);
  backend_.delta_conv(pool, d, l.conv_w, qkv_);
  backend_.delta_rule(pool, d, qkv_, g_, beta_, core_, c.rms_eps);
  // Gated RMS norm: each value head's output normed by ssm_norm, times silu(z).
  backend_.rmsnorm(core_, l.ssm_norm, core_, n * d.n_v_heads, d.d_v, c.rms_eps);
  backend_.swiglu(z_, core_, core_, n * d.n_v_heads * d.d_v);
  backend_.matmul(*l.w_ssm_out, core_, proj_, n);
}

void Qwen35Forward::attention_layer(int32_t il, KvPool& pool, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& l = model_.layer(il);
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  backend_.matmul(*l.wq, h_, qg_, n);
  backend_.split_pairs(qg_, q_, gate_, n * c.n_heads, c.head_dim);
  const Matrix* kv_ws[] = {l.wk.get(), l.wv.get()};
  float* kv_out[] = {k_, v_};
  backend_.matmul_same_x(kv_ws, h_, kv_out, 2, n);
  backend_.rmsnorm(q_, l.attn_q_norm, q_, n * c.n_heads, c.head_dim, c.rms_eps);
  backend_.rmsnorm(k_, l.attn_k_norm, k_, n * c.n_kv_heads, c.head_dim, c.rms_eps);
  // Partial M-RoPE: a text token has one position in every section, so the
  // first rope_dim dims of each head rotate as NeoX RoPE does.
  backend_.rope(q_, c.n_heads, c.head_dim, c.rope_dim, c.rope_base, nullptr, RopeStyle::kNeox);
  backend_.rope(k_, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_base, nullptr, RopeStyle::kNeox);
  const int32_t kv_layer = c.kv_layer_of(il);
  backend_.kv_store(pool, kv_layer, k_, v_);
  backend_.attention(pool, kv_layer, q_, attn_, c.n_heads, c.attn_scale, 0);
  backend_.sigmoid_mul(attn_, gate_, n * q_dim);
  backend_.matmul(*l.wo, attn_, proj_, n);
}

void Qwen35Forward::compute(const Batch& batch, KvPool& pool, float* logits) {
  const ModelConfig& c = model_.config();
  const int64_t n = batch.n_tokens();
  const int64_t n_out = static_cast<int64_t>(batch.output_rows.size());
  backend_.embed(model_.token_embd(), x_);
  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& l = model_.layer(il);
    backend_.rmsnorm(x_, l.attn_norm, h_, n, c.n_embd, c.rms_eps);
    if (c.is_recurrent(il)) {
      delta_net_layer(il, pool, n);
    } else {
      attention_layer(il, pool, n);
    }
    backend_.add(x_, proj_, n * c.n_embd);
    backend_.rmsnorm(x_, l.ffn_norm, h_, n, c.n_embd, c.rms_eps);
    const Matrix* gate_up[] = {l.w_gate.get(), l.w_up.get()};
    float* gate_up_out[] = {ff_gate_, ff_up_};
    backend_.matmul_same_x(gate_up, h_, gate_up_out, 2, n);
    backend_.swiglu(ff_gate_, ff_up_, ff_gate_, n * c.n_ff);
    backend_.matmul(*l.w_down, ff_gate_, proj_, n);
    backend_.add(x_, proj_, n * c.n_embd);
  }
  if (n_out == 0) return;
  backend_.gather_output_rows(x_, out_x_, c.n_embd);
  backend_.rmsnorm(out_x_, model_.output_norm(), out_x_, n_out, c.n_embd, c.rms_eps);
  backend_.matmul(model_.output(), out_x_, logits, n_out);
}

}  // namespace prefixd
