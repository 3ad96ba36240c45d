// Reading and validating model hyper-parameters from GGUF metadata.
#include "engine/model/model_config.h"

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

}  // namespace

Result<ModelConfig> load_model_config(const GgufFile& f) {
  ModelConfig c;
  Result<std::string> arch = f.get_string("general.architecture");
  if (!arch.ok()) return arch.status();
  c.arch_name = *arch;
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kNormal;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.has_qkv_bias = true;
  } else {
    return Status::error("unsupported architecture '" + c.arch_name +
                         "' (general.architecture); supported: llama, qwen2");
  }
  if (Result<std::string> n = f.get_string("general.name"); n.ok()) c.name = *n;
  const std::string p = c.arch_name + ".";

  // Features this engine does not implement are refused, never ignored.
  if (const GgufValue* e = f.find(p + "expert_count"); e && e->u > 0) {
    return Status::error("mixture-of-experts models (" + p + "expert_count) are not supported");
  }
  if (Result<std::string> s = f.get_string(p + "rope.scaling.type"); s.ok() && *s != "none") {
    return Status::error("RoPE scaling '" + *s + "' (" + p + "rope.scaling.type) is not supported");
  }
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    return Status::error("RoPE frequency factors (tensor rope_freqs.weight) are not supported");
  }
  if (const GgufValue* w = f.find(p + "attention.sliding_window"); w && w->u > 0) {
    return Status::error("sliding-window attention (" + p + "attention.sliding_window) is not supported");
  }

  constexpr int64_t kMaxDim = 1 << 20;
  auto dim = [&](const char* key, int32_t* out, int64_t max_value) -> Status {
    Result<int32_t> v = get_dim(f, p + key, max_value);
    if (!v.ok()) return v.status();
    *out = *v;
    return Status();
  };
  if (Status s = dim("context_length", &c.n_ctx_train, 1 << 24); !s.ok()) return s;
  if (Status s = dim("embedding_length", &c.n_embd, kMaxDim); !s.ok()) return s;
  if (Status s = dim("block_count", &c.n_layers, 4096); !s.ok()) return s;
  if (Status s = dim("feed_forward_length", &c.n_ff, kMaxDim); !s.ok()) return s;
  if (Status s = dim("attention.head_count", &c.n_heads, 4096); !s.ok()) return s;
  c.n_kv_heads = c.n_heads;
  if (f.find(p + "attention.head_count_kv")) {
    if (Status s = dim("attention.head_count_kv", &c.n_kv_heads, 4096); !s.ok()) return s;
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::error("head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                         std::to_string(c.n_kv_heads));
  }
  if (c.n_embd % c.n_heads != 0 && !f.find(p + "attention.key_length")) {
    return Status::error("embedding_length " + std::to_string(c.n_embd) +
                         " is not a multiple of head_count " + std::to_string(c.n_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  if (f.find(p + "attention.key_length")) {
    int32_t k = 0, v = 0;
    if (Status s = dim("attention.key_length", &k, 4096); !s.ok()) return s;
    v = k;
    if (f.find(p + "attention.value_length")) {
      if (Status s = dim("attention.value_length", &v, 4096); !s.ok()) return s;
    }
    if (k != v) return Status::error("different key and value head sizes are not supported");
    c.head_dim = k;
  }
  if (c.head_dim % 2 != 0) return Status::error("head size " + std::to_string(c.head_dim) + " is odd");
  c.rope_dim = c.head_dim;
  if (f.find(p + "rope.dimension_count")) {
    if (Status s = dim("rope.dimension_count", &c.rope_dim, c.head_dim); !s.ok()) return s;
    if (c.rope_dim % 2 != 0) return Status::error(p + "rope.dimension_count must be even");
  }
  if (const GgufValue* v = f.find(p + "attention.layer_norm_rms_epsilon")) {
    Result<double> e = f.get_float(p + "attention.layer_norm_rms_epsilon");
    if (!e.ok()) return e.status();
    if (!(*e > 0 && *e < 1)) return Status::error(p + "attention.layer_norm_rms_epsilon out of range");
    c.rms_eps = static_cast<float>(*e);
    (void)v;
  } else {
    return Status::error("metadata key '" + p + "attention.layer_norm_rms_epsilon' is missing");
  }
  if (f.find(p + "rope.freq_base")) {
    Result<double> b = f.get_float(p + "rope.freq_base");
    if (!b.ok()) return b.status();
    if (!(*b > 1)) return Status::error(p + "rope.freq_base must be > 1");
    c.rope_base = static_cast<float>(*b);
  }

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return Status::error("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.n_embd) {
    return Status::error("tensor 'token_embd.weight' must have shape [" + std::to_string(c.n_embd) +
                         ", n_vocab]");
  }
  c.n_vocab = static_cast<int32_t>(embd->dims[1]);
  if (const GgufValue* vs = f.find(p + "vocab_size"); vs && static_cast<int64_t>(vs->u) != c.n_vocab) {
    return Status::error(p + "vocab_size " + std::to_string(vs->u) + " disagrees with token_embd.weight (" +
                         std::to_string(c.n_vocab) + " rows)");
  }
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace prefixd
