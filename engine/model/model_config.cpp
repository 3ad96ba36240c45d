// Reading and validating model hyper-parameters from GGUF metadata.
#include "engine/model/model_config.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/model/lfm2_config.h"

namespace prefixd {
namespace {

Result<int32_t> get_dim(const GgufFile& f, const std::string& key, int64_t max_value) {
  Result<uint64_t> v = f.get_uint(key);
  if (!v.ok()) return v.status();
  if (*v == 0 || static_cast<int64_t>(*v) > max_value) {
    return Status::error("metadata key '" + key + "' = " + std::to_string(*v) +
                         " is out of range (1.." + std::to_string(max_value) + ")");
  }
  return static_cast<int32_t>(*v);
}

// A number as a person would write it: "4", "0.5", "1e-06".
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A count-like metadata value that is set and above zero, whichever integer
// type the writer chose.
bool positive(const GgufValue* v) { return v != nullptr && (v->u > 0 || v->i > 0 || v->f > 0); }

// RoPE scaling: only what changes no angle is accepted (type none, or linear
// with factor 1, llama.cpp's default); Llama 3.1 scaling comes as the
// rope_freqs.weight tensor instead (read_rope_freq_factors). gemma3 also takes
// a linear factor for its global layers (*linear_factor; nullptr: refused).
Status check_rope_scaling(const GgufFile& f, const std::string& p, float* linear_factor) {
  if (f.find(p + "rope.scaling.type")) {
    Result<std::string> type = f.get_string(p + "rope.scaling.type");
    if (!type.ok()) return type.status();
    if (*type != "none" && *type != "linear") {
      return Status::error("RoPE scaling '" + *type + "' (" + p +
                           "rope.scaling.type) is not supported (supported: none, linear with "
                           "factor 1, and Llama 3.1 frequency factors in rope_freqs.weight)");
    }
  }
  for (const char* key : {"rope.scaling.factor", "rope.scale_linear"}) {
    if (!f.find(p + key)) continue;
    Result<double> factor = f.get_float(p + key);
    if (!factor.ok()) return factor.status();
    if (linear_factor != nullptr && std::isfinite(*factor) && *factor >= 1.0) {
      *linear_factor = static_cast<float>(*factor);
      continue;
    }
    if (*factor != 0.0 && *factor != 1.0) {  // llama.cpp reads 0 as "no scaling"
      return Status::error("RoPE scaling factor " + number(*factor) + " (" + p + key +
                           ") is not supported (only 1)");
    }
  }
  if (f.find(p + "rope.scaling.attn_factor")) {
    Result<double> factor = f.get_float(p + "rope.scaling.attn_factor");
    if (!factor.ok()) return factor.status();
    if (*factor != 1.0) {
      return Status::error("RoPE attention factor " + number(*factor) + " (" + p +
                           "rope.scaling.attn_factor) is not supported (only 1)");
    }
  }
  return Status();
}

// The optional rope_freqs.weight tensor: (rope_dim / 2) F32 factors, each
// positive and finite; llama only (llama.cpp loads it for no other of ours).
Status read_rope_freq_factors(const GgufFile& f, ModelConfig* c) {
  const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight");
  if (t == nullptr) return Status();
  if (c->arch != Arch::kLlama) {
    return Status::error("RoPE frequency factors (tensor rope_freqs.weight) are supported for llama "
                         "only, not '" + c->arch_name + "'");
  }
  const int32_t half = c->rope_dim / 2;
  if (t->dims.size() != 1 || t->dims[0] != half) {
    return Status::error("tensor 'rope_freqs.weight' must have shape [" + std::to_string(half) +
                         "] (rope dimension count / 2)");
  }
  if (t->type != GgmlType::F32) {
    return Status::error("tensor 'rope_freqs.weight' must be F32, not " +
                         std::string(ggml_type_name(t->type)));
  }
  c->rope_freq_factors.resize(half);
  std::memcpy(c->rope_freq_factors.data(), t->data, half * sizeof(float));
  for (int32_t i = 0; i < half; ++i) {
    const float v = c->rope_freq_factors[i];
    if (!(std::isfinite(v) && v > 0.0f)) {
      return Status::error("tensor 'rope_freqs.weight' value " + std::to_string(i) + " = " +
                           number(v) + " is not a positive finite factor");
    }
  }
  return Status();
}

// Which layers use the window: gemma3.attention.sliding_window_pattern as a
// period n (layer i is global when (i + 1) % n == 0; default 6, as llama.cpp)
// or as one bool per layer (true: window).
Status read_window_pattern(const GgufFile& f, const std::string& p, ModelConfig* c) {
  const std::string key = p + "attention.sliding_window_pattern";
  c->layer_is_window.assign(c->n_layers, 0);
  const GgufValue* v = f.find(key);
  if (v != nullptr && v->type == GgufType::ARRAY) {
    if (v->elem_type != GgufType::BOOL || static_cast<int64_t>(v->array.size()) != c->n_layers) {
      return Status::error("metadata key '" + key + "' must be a period or " +
                           std::to_string(c->n_layers) + " bools (one per layer)");
    }
    for (int32_t i = 0; i < c->n_layers; ++i) c->layer_is_window[i] = v->array[i].u != 0 ? 1 : 0;
    return Status();
  }
  uint64_t period = 6;
  if (v != nullptr) {
    Result<uint64_t> n = f.get_uint(key);
    if (!n.ok()) return n.status();
    if (*n == 0) {
      return Status::error("metadata key '" + key + "' = 0: the period must be at least 1");
    }
    period = *n;
  }
  for (int32_t i = 0; i < c->n_layers; ++i) c->layer_is_window[i] = (i + 1) % period != 0 ? 1 : 0;
  return Status();
}

// A float key that, when present, is finite and >= 0; *out keeps its default otherwise.
Status read_nonnegative(const GgufFile& f, const std::string& key, float* out) {
  if (!f.find(key)) return Status();
  Result<double> v = f.get_float(key);
  if (!v.ok()) return v.status();
  if (!(std::isfinite(*v) && *v >= 0)) {
    return Status::error("metadata key '" + key + "' = " + number(*v) + " must be finite and >= 0");
  }
  *out = static_cast<float>(*v);
  return Status();
}

// gemma3, as llama.cpp's loader and graph read it: sliding window and its
// layer pattern, the window layers' RoPE base, embedding scale sqrt(n_embd),
// attention scale, final logit soft-capping. Called after the common keys.
Status read_gemma3(const GgufFile& f, const std::string& p, ModelConfig* c) {
  c->embed_scale = std::sqrt(static_cast<float>(c->n_embd));
  // llama.cpp: 1/sqrt(key_length), except for the 62-layer (27B) model whose
  // query_pre_attn_scalar is n_embd / n_heads.
  const int32_t scale_dim = c->n_layers == 62 ? c->n_embd / c->n_heads : c->head_dim;
  c->attn_scale = 1.0f / std::sqrt(static_cast<float>(scale_dim));
  if (const std::string key = p + "attn_logit_softcapping"; positive(f.find(key))) {
    return Status::error("attention logit soft-capping (" + key + ") is not supported");
  }
  Status s = read_nonnegative(f, p + "final_logit_softcapping", &c->final_logit_softcap);
  if (!s.ok()) return s;
  s = read_nonnegative(f, p + "rope.freq_base_swa", &c->rope_base_window);
  if (!s.ok()) return s;
  if (!(c->rope_base_window > 1)) return Status::error(p + "rope.freq_base_swa must be > 1");
  c->layer_is_window.assign(c->n_layers, 0);
  const std::string window_key = p + "attention.sliding_window";
  if (!positive(f.find(window_key))) return Status();  // absent or 0: every layer global
  Result<uint64_t> window = f.get_uint(window_key);
  if (!window.ok()) return window.status();
  if (*window > static_cast<uint64_t>(c->n_ctx_train)) {
    return Status::error("metadata key '" + window_key + "' = " + std::to_string(*window) +
                         " exceeds the context length (" + p + "context_length = " +
                         std::to_string(c->n_ctx_train) + ")");
  }
  c->sliding_window = static_cast<int32_t>(*window);
  return read_window_pattern(f, p, c);
}

// Per-head Q and K norms hold one weight per head element.
Status check_qk_norm_sizes(const GgufFile& f, const std::string& p, const ModelConfig& c) {
  for (int32_t i = 0; i < c.n_layers; ++i) {
    if (c.is_recurrent(i) || c.is_conv(i)) continue;  // qwen35's DeltaNet, lfm2's convolution layers: no Q/K norms
    for (const char* which : {"attn_q_norm", "attn_k_norm"}) {
      const std::string name = "blk." + std::to_string(i) + "." + which + ".weight";
      const GgufTensorInfo* t = f.find_tensor(name);
      if (t == nullptr) return Status::error("tensor '" + name + "' is missing");
      if (t->dims.size() != 1 || t->dims[0] != c.head_dim) {
        return Status::error("tensor '" + name + "' has " + std::to_string(t->n_elements()) +
                             " values; the head size (" + p + "attention.key_length) is " +
                             std::to_string(c.head_dim));
      }
    }
  }
  return Status();
}

// general.architecture and what it implies (RoPE style, biases, norms, activation).
Status read_arch(const GgufFile& f, ModelConfig* c) {
  Result<std::string> arch = f.get_string("general.architecture");
  if (!arch.ok()) return arch.status();
  c->arch_name = *arch;
  if (c->arch_name == "llama") {
    c->arch = Arch::kLlama;
    c->rope_style = RopeStyle::kNormal;
  } else if (c->arch_name == "qwen2") {
    c->arch = Arch::kQwen2;
    c->rope_style = RopeStyle::kNeox;
    c->has_qkv_bias = true;
  } else if (c->arch_name == "qwen3") {
    c->arch = Arch::kQwen3;
    c->rope_style = RopeStyle::kNeox;
    c->has_qk_norm = true;
  } else if (c->arch_name == "gemma3") {
    c->arch = Arch::kGemma3;
    c->rope_style = RopeStyle::kNeox;
    c->has_qk_norm = true;
    c->has_post_norms = true;
    c->ffn_activation = FfnActivation::kGeluTanh;
  } else if (c->arch_name == "qwen35") {
    c->arch = Arch::kQwen35;
    c->rope_style = RopeStyle::kNeox;
    c->has_qk_norm = true;
  } else if (c->arch_name == "lfm2") {
    c->arch = Arch::kLfm2;
    c->rope_style = RopeStyle::kNeox;
    c->has_qk_norm = true;
  } else {
    return Status::error("unsupported architecture '" + c->arch_name +
                         "' (general.architecture); supported: llama, qwen2, qwen3, gemma3, qwen35, lfm2");
  }
  return Status();
}

// Context length, widths, layer and head counts, head size and RoPE dimensions.
Status read_dims(const GgufFile& f, const std::string& p, ModelConfig* c) {
  constexpr int64_t kMaxDim = 1 << 20;
  auto dim = [&](const char* key, int32_t* out, int64_t max_value) -> Status {
    Result<int32_t> v = get_dim(f, p + key, max_value);
    if (!v.ok()) return v.status();
    *out = *v;
    return Status();
  };
  if (Status s = dim("context_length", &c->n_ctx_train, 1 << 24); !s.ok()) return s;
  if (Status s = dim("embedding_length", &c->n_embd, kMaxDim); !s.ok()) return s;
  if (Status s = dim("block_count", &c->n_layers, 4096); !s.ok()) return s;
  if (Status s = dim("feed_forward_length", &c->n_ff, kMaxDim); !s.ok()) return s;
  if (Status s = dim("attention.head_count", &c->n_heads, 4096); !s.ok()) return s;
  c->n_kv_heads = c->n_heads;
  // (A per-layer array, lfm2's, is read by read_lfm2_layers.)
  if (const GgufValue* kv = f.find(p + "attention.head_count_kv"); kv && kv->type != GgufType::ARRAY) {
    if (Status s = dim("attention.head_count_kv", &c->n_kv_heads, 4096); !s.ok()) return s;
  }
  if (c->n_heads % c->n_kv_heads != 0) {
    return Status::error("head_count " + std::to_string(c->n_heads) + " is not a multiple of head_count_kv " +
                         std::to_string(c->n_kv_heads));
  }
  if (c->n_embd % c->n_heads != 0 && !f.find(p + "attention.key_length")) {
    return Status::error("embedding_length " + std::to_string(c->n_embd) +
                         " is not a multiple of head_count " + std::to_string(c->n_heads));
  }
  c->head_dim = c->n_embd / c->n_heads;
  if (f.find(p + "attention.key_length")) {
    int32_t k = 0, v = 0;
    if (Status s = dim("attention.key_length", &k, 4096); !s.ok()) return s;
    v = k;
    if (f.find(p + "attention.value_length")) {
      if (Status s = dim("attention.value_length", &v, 4096); !s.ok()) return s;
    }
    if (k != v) return Status::error("different key and value head sizes are not supported");
    c->head_dim = k;
  }
  if (c->head_dim % 2 != 0) return Status::error("head size " + std::to_string(c->head_dim) + " is odd");
  c->rope_dim = c->head_dim;
  if (f.find(p + "rope.dimension_count")) {
    if (Status s = dim("rope.dimension_count", &c->rope_dim, c->head_dim); !s.ok()) return s;
    if (c->rope_dim % 2 != 0) return Status::error(p + "rope.dimension_count must be even");
  }
  return Status();
}

// The RMS norm epsilon (required) and the RoPE base frequency.
Status read_eps_and_rope_base(const GgufFile& f, const std::string& p, ModelConfig* c) {
  if (!f.find(p + "attention.layer_norm_rms_epsilon")) {
    return Status::error("metadata key '" + p + "attention.layer_norm_rms_epsilon' is missing");
  }
  Result<double> e = f.get_float(p + "attention.layer_norm_rms_epsilon");
  if (!e.ok()) return e.status();
  if (!(*e > 0 && *e < 1)) return Status::error(p + "attention.layer_norm_rms_epsilon out of range");
  c->rms_eps = static_cast<float>(*e);
  if (f.find(p + "rope.freq_base")) {
    Result<double> b = f.get_float(p + "rope.freq_base");
    if (!b.ok()) return b.status();
    if (!(*b > 1)) return Status::error(p + "rope.freq_base must be > 1");
    c->rope_base = static_cast<float>(*b);
  }
  return Status();
}

// The vocabulary size from token_embd.weight (checked against vocab_size when
// present), and whether the output matrix is tied to it.
Status read_vocab(const GgufFile& f, const std::string& p, ModelConfig* c) {
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return Status::error("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c->n_embd) {
    return Status::error("tensor 'token_embd.weight' must have shape [" + std::to_string(c->n_embd) +
                         ", n_vocab]");
  }
  c->n_vocab = static_cast<int32_t>(embd->dims[1]);
  if (const GgufValue* vs = f.find(p + "vocab_size"); vs && static_cast<int64_t>(vs->u) != c->n_vocab) {
    return Status::error(p + "vocab_size " + std::to_string(vs->u) + " disagrees with token_embd.weight (" +
                         std::to_string(c->n_vocab) + " rows)");
  }
  c->tied_output = f.find_tensor("output.weight") == nullptr;
  return Status();
}

}  // namespace

Result<ModelConfig> load_model_config(const GgufFile& f) {
  ModelConfig c;
  if (Status s = read_arch(f, &c); !s.ok()) return s;
  if (Result<std::string> n = f.get_string("general.name"); n.ok()) c.name = *n;
  const std::string p = c.arch_name + ".";

  // Features this engine does not implement are refused, never ignored.
  if (positive(f.find(p + "expert_count"))) {
    return Status::error("mixture-of-experts models (" + p + "expert_count) are not supported");
  }
  float linear_factor = 1.0f;
  Status scaling = check_rope_scaling(f, p, c.arch == Arch::kGemma3 ? &linear_factor : nullptr);
  if (!scaling.ok()) return scaling;
  if (c.arch != Arch::kGemma3 && positive(f.find(p + "attention.sliding_window"))) {
    return Status::error("sliding-window attention (" + p + "attention.sliding_window) is not supported");
  }

  if (Status s = read_dims(f, p, &c); !s.ok()) return s;
  if (c.arch == Arch::kLfm2) {
    if (Status s = read_lfm2_layers(f, p, &c); !s.ok()) return s;
  } else if (const GgufValue* kv = f.find(p + "attention.head_count_kv"); kv && kv->type == GgufType::ARRAY) {
    return Status::error("per-layer KV head counts (" + p + "attention.head_count_kv) are supported for lfm2 only");
  }
  if (Status s = read_eps_and_rope_base(f, p, &c); !s.ok()) return s;
  if (Status s = read_rope_freq_factors(f, &c); !s.ok()) return s;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.layer_is_window.assign(c.n_layers, 0);
  if (c.arch == Arch::kGemma3) {
    if (Status s = read_gemma3(f, p, &c); !s.ok()) return s;
    // Linear scaling (Gemma 3 4B and larger) divides the global layers'
    // angles by the factor, as llama.cpp's freq_scale = 1 / factor does.
    if (linear_factor != 1.0f) c.rope_factors_global.assign(c.rope_dim / 2, linear_factor);
  }
  if (c.arch == Arch::kQwen35) {
    if (Status s = read_qwen35(f, p, &c); !s.ok()) return s;
  }
  if (c.has_qk_norm) {
    if (Status s = check_qk_norm_sizes(f, p, c); !s.ok()) return s;
  }
  if (Status s = read_vocab(f, p, &c); !s.ok()) return s;
  return c;
}

}  // namespace prefixd
