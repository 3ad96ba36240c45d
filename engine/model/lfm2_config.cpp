// Reading lfm2's per-layer kinds and convolution width from GGUF metadata.
#include "engine/model/lfm2_config.h"

#include <algorithm>

namespace prefixd {

namespace {

constexpr int32_t kMaxLCache = 64;  // widest convolution accepted (LFM2 uses 3)

// A non-negative integer array element, whichever integer type the writer chose; -1 otherwise.
int64_t count_of(const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8: case GgufType::UINT16: case GgufType::UINT32: case GgufType::UINT64:
      return static_cast<int64_t>(std::min<uint64_t>(v.u, 1u << 30));
    case GgufType::INT8: case GgufType::INT16: case GgufType::INT32: case GgufType::INT64:
      return v.i >= 0 ? v.i : -1;
    default:
      return -1;
  }
}

}  // namespace

Status read_lfm2_layers(const GgufFile& f, const std::string& p, ModelConfig* c) {
  const std::string kv_key = p + "attention.head_count_kv";
  const GgufValue* kv = f.find(kv_key);
  if (kv == nullptr || kv->type != GgufType::ARRAY || static_cast<int32_t>(kv->array.size()) != c->n_layers) {
    return Status::error("metadata key '" + kv_key + "' must hold one KV head count per layer (" +
                         std::to_string(c->n_layers) + "; 0 for a convolution layer)");
  }
  c->layer_is_conv.assign(c->n_layers, 0);
  int64_t n_kv = 0;
  for (int32_t i = 0; i < c->n_layers; ++i) {
    const int64_t n = count_of(kv->array[static_cast<size_t>(i)]);
    if (n < 0) return Status::error("metadata key '" + kv_key + "' holds a value that is not a count");
    if (n == 0) {
      c->layer_is_conv[i] = 1;
      continue;
    }
    if (n_kv != 0 && n != n_kv) {
      return Status::error("metadata key '" + kv_key + "': attention layers with different KV head counts (" +
                           std::to_string(n_kv) + ", " + std::to_string(n) + ") are not supported");
    }
    n_kv = n;
  }
  if (n_kv == 0) return Status::error("metadata key '" + kv_key + "': a model without attention layers is not supported");
  if (c->n_heads % n_kv != 0) {
    return Status::error("head_count " + std::to_string(c->n_heads) + " is not a multiple of head_count_kv " +
                         std::to_string(n_kv));
  }
  c->n_kv_heads = static_cast<int32_t>(n_kv);
  const std::string l_key = p + "shortconv.l_cache";
  Result<uint64_t> l = f.get_uint(l_key);
  if (!l.ok()) return l.status();
  if (*l < 2 || *l > kMaxLCache) {
    return Status::error("metadata key '" + l_key + "' = " + std::to_string(*l) + " is out of range (2.." +
                         std::to_string(kMaxLCache) + ")");
  }
  c->conv_l_cache = static_cast<int32_t>(*l);
  return Status();
}

}  // namespace prefixd
