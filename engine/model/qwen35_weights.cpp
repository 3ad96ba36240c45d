// Loading qwen35's layers: Gated DeltaNet layers (attn_qkv, attn_gate, ssm_*)
// and gated attention layers (attn_q with query and gate per head, Q/K norms);
// every layer's FFN norm is the file's post_attention_norm.
#include "engine/model/model.h"
#include "engine/model/try_assign.h"

namespace prefixd {


Status Model::load_qwen35_layer(int il) {
  const ModelConfig& c = config_;
  LayerWeights& l = layers_[il];
  const std::string b = "blk." + std::to_string(il) + ".";
  PREFIXD_TRY_ASSIGN(l.attn_norm, vector(b + "attn_norm.weight", c.n_embd));
  PREFIXD_TRY_ASSIGN(l.ffn_norm, vector(b + "post_attention_norm.weight", c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_gate, matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_up, matrix(b + "ffn_up.weight", c.n_ff, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_down, matrix(b + "ffn_down.weight", c.n_embd, c.n_ff));
  if (!c.is_recurrent(il)) {
    const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
    PREFIXD_TRY_ASSIGN(l.wq, matrix(b + "attn_q.weight", 2 * q_dim, c.n_embd));  // query and gate
    PREFIXD_TRY_ASSIGN(l.wk, matrix(b + "attn_k.weight", kv_dim, c.n_embd));
    PREFIXD_TRY_ASSIGN(l.wv, matrix(b + "attn_v.weight", kv_dim, c.n_embd));
    PREFIXD_TRY_ASSIGN(l.wo, matrix(b + "attn_output.weight", c.n_embd, q_dim));
    PREFIXD_TRY_ASSIGN(l.attn_q_norm, vector(b + "attn_q_norm.weight", c.head_dim));
    PREFIXD_TRY_ASSIGN(l.attn_k_norm, vector(b + "attn_k_norm.weight", c.head_dim));
    return Status();
  }
  const DeltaNetShape& d = c.delta_net;
  const int64_t value_dim = static_cast<int64_t>(d.n_v_heads) * d.d_v;
  PREFIXD_TRY_ASSIGN(l.w_qkv, matrix(b + "attn_qkv.weight", d.conv_channels(), c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_z, matrix(b + "attn_gate.weight", value_dim, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_beta, matrix(b + "ssm_beta.weight", d.n_v_heads, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_alpha, matrix(b + "ssm_alpha.weight", d.n_v_heads, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.w_ssm_out, matrix(b + "ssm_out.weight", c.n_embd, value_dim));
  PREFIXD_TRY_ASSIGN(l.conv_w, f32_tensor(b + "ssm_conv1d.weight", {d.conv_width, d.conv_channels()}));
  PREFIXD_TRY_ASSIGN(l.dt_bias, vector(b + "ssm_dt.bias", d.n_v_heads));
  PREFIXD_TRY_ASSIGN(l.ssm_a, vector(b + "ssm_a", d.n_v_heads));
  PREFIXD_TRY_ASSIGN(l.ssm_norm, vector(b + "ssm_norm.weight", d.d_v));
  return Status();
}

}  // namespace prefixd
