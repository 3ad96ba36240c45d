// qwen35's hyper-parameters (Qwen3.5's dense hybrid): which layers are Gated
// DeltaNet, their shape, and the refusals of what this engine cannot run.
#include <string>

#include "engine/model/model_config.h"

namespace prefixd {

namespace {

Result<int32_t> small_uint(const GgufFile& f, const std::string& key, int64_t max_value) {
  Result<uint64_t> v = f.get_uint(key);
  if (!v.ok()) return v.status();
  if (*v == 0 || static_cast<int64_t>(*v) > max_value) {
    return Status::error("metadata key '" + key + "' = " + std::to_string(*v) + " is out of range (1.." +
                         std::to_string(max_value) + ")");
  }
  return static_cast<int32_t>(*v);
}

// Multi-token prediction, experts and vision are refused by the name that shows them.
Status refuse_unsupported_parts(const GgufFile& f, const std::string& p) {
  if (const GgufValue* v = f.find(p + "nextn_predict_layers"); v != nullptr && (v->u > 0 || v->i > 0)) {
    return Status::error("multi-token-prediction layers (" + p + "nextn_predict_layers) are not supported");
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    const char* what = nullptr;
    if (n.find(".nextn.") != std::string::npos || n.find("mtp") != std::string::npos) {
      what = "multi-token-prediction";
    } else if (n.find("_exps") != std::string::npos || n.find("ffn_gate_inp") != std::string::npos ||
               n.find("_shexp") != std::string::npos) {
      what = "mixture-of-experts";
    } else if (n.rfind("v.", 0) == 0 || n.rfind("mm.", 0) == 0) {
      what = "vision";
    }
    if (what != nullptr) return Status::error(std::string(what) + " tensor '" + n + "' is not supported");
  }
  return Status();
}

}  // namespace

Status read_qwen35(const GgufFile& f, const std::string& p, ModelConfig* c) {
  if (Status s = refuse_unsupported_parts(f, p); !s.ok()) return s;
  DeltaNetShape& d = c->delta_net;
  const std::string s = p + "ssm.";
  Result<int32_t> width = small_uint(f, s + "conv_kernel", 16);
  Result<int32_t> inner = small_uint(f, s + "inner_size", 1 << 20);
  Result<int32_t> state = small_uint(f, s + "state_size", 4096);
  Result<int32_t> v_heads = small_uint(f, s + "time_step_rank", 4096);
  Result<int32_t> k_heads = small_uint(f, s + "group_count", 4096);
  for (const Result<int32_t>* r : {&width, &inner, &state, &v_heads, &k_heads}) {
    if (!r->ok()) return r->status();
  }
  if (*width < 2) return Status::error(s + "conv_kernel must be at least 2");
  if (*v_heads % *k_heads != 0) {
    return Status::error(s + "time_step_rank (value heads) must be a multiple of " + s + "group_count (key heads)");
  }
  if (*inner % *v_heads != 0) return Status::error(s + "inner_size must be a multiple of " + s + "time_step_rank");
  d.conv_width = *width;
  d.n_k_heads = *k_heads;
  d.n_v_heads = *v_heads;
  d.d_k = *state;
  d.d_v = *inner / *v_heads;
  d.state_offset = 0;
  if (d.d_v != d.d_k) return Status::error("DeltaNet value head size differs from " + s + "state_size");

  int32_t interval = 4;  // llama.cpp's default
  if (f.find(p + "full_attention_interval")) {
    Result<int32_t> v = small_uint(f, p + "full_attention_interval", 4096);
    if (!v.ok()) return v.status();
    interval = *v;
  }
  c->layer_is_recurrent.assign(c->n_layers, 0);
  for (int32_t i = 0; i < c->n_layers; ++i) c->layer_is_recurrent[i] = (i + 1) % interval != 0 ? 1 : 0;
  if (c->n_kv_layers() == 0) return Status::error("qwen35 model without an attention layer");
  // M-RoPE sections: a text token sees the same position in every section, so
  // the rotation is plain NeoX RoPE over rope.dimension_count dims; the
  // sections must cover exactly those dims' pairs.
  if (f.find(p + "rope.dimension_sections")) {
    Result<std::vector<int64_t>> sections = f.get_int_array(p + "rope.dimension_sections");
    if (!sections.ok()) return sections.status();
    int64_t pairs = 0;
    for (int64_t v : *sections) pairs += v;
    if (pairs != c->rope_dim / 2) {
      return Status::error(p + "rope.dimension_sections cover " + std::to_string(pairs) +
                           " pairs, not rope.dimension_count / 2 = " + std::to_string(c->rope_dim / 2));
    }
  }
  return Status();
}

int32_t ModelConfig::n_kv_layers() const {
  int32_t n = 0;
  for (int32_t il = 0; il < n_layers; ++il) n += is_recurrent(il) ? 0 : 1;
  return n;
}

int32_t ModelConfig::kv_layer_of(int32_t il) const {
  int32_t n = 0;
  for (int32_t i = 0; i < il; ++i) n += is_recurrent(i) ? 0 : 1;
  return n;
}

int64_t ModelConfig::state_floats() const {
  int64_t n = 0;
  for (int32_t il = 0; il < n_layers; ++il) n += is_recurrent(il) ? delta_net.state_floats() : 0;
  return n;
}

DeltaNetShape ModelConfig::delta_net_of(int32_t il) const {
  DeltaNetShape d = delta_net;
  int32_t before = 0;
  for (int32_t i = 0; i < il; ++i) before += is_recurrent(i) ? 1 : 0;
  d.state_offset = before * delta_net.state_floats();
  return d;
}

}  // namespace prefixd
