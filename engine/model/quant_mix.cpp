// llama.cpp's tensor type choice (src/llama-quant.cpp: tensor_allows_quantization,
// llama_tensor_get_type_impl, tensor_type_fallback), reduced to the mixes in
// quant_mixes() and to dense models (no experts, no Falcon, no 70B special case).
#include "engine/model/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

namespace prefixd {
namespace {

enum class Category {
  kTokenEmbd,
  kOutput,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQkv,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOther
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight") return Category::kTokenEmbd;
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight"))
    return Category::kAttnQkv;
  if (contains(name, "attn_v.weight")) return Category::kAttnV;
  if (contains(name, "attn_k.weight")) return Category::kAttnK;
  if (contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_up")) return Category::kFfnUp;
  if (contains(name, "ffn_gate")) return Category::kFfnGate;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// The layer of "blk.N.*", or -1 (llama.cpp sorts tensors by this, then by name).
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

bool fits(WeightType type, int64_t cols) {
  return cols % weight_type_traits(type).block_elements == 0;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<QuantMix>& quant_mixes() {
  static const std::vector<QuantMix> kMixes = {
      {"Q8_0", 7, WeightType::Q8_0},    {"Q4_0", 2, WeightType::Q4_0},
      {"Q4_1", 3, WeightType::Q4_1},    {"Q5_0", 8, WeightType::Q5_0},
      {"Q5_1", 9, WeightType::Q5_1},    {"Q4_K_S", 14, WeightType::Q4_K},
      {"Q4_K_M", 15, WeightType::Q4_K}, {"Q5_K_S", 16, WeightType::Q5_K},
      {"Q5_K_M", 17, WeightType::Q5_K}, {"Q6_K", 18, WeightType::Q6_K},
  };
  return kMixes;
}

std::string quant_mix_names() {
  std::string out;
  for (const QuantMix& m : quant_mixes()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

Result<QuantMix> find_quant_mix(const std::string& name) {
  const std::string want = upper(name);
  for (const QuantMix& m : quant_mixes()) {
    if (m.name == want) return m;
  }
  return Status::error("unknown quantization type '" + name +
                       "' (accepted, any case: " + quant_mix_names() + ")");
}

bool is_quantizable_tensor(const TensorShape& t) {
  int n_dims = static_cast<int>(t.dims.size());  // ggml_n_dims: trailing 1s do not count
  while (n_dims > 1 && t.dims[n_dims - 1] == 1) --n_dims;
  if (n_dims < 2) return false;
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  for (const char* keep :
       {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight", "time_mix_", "position_embd", "token_types.weight"}) {
    if (contains(n, keep)) return false;
  }
  return true;
}

WeightType quant_fallback_type(WeightType type, int64_t cols) {
  if (fits(type, cols)) return type;
  WeightType out = WeightType::F16;
  switch (type) {
    case WeightType::Q2_K:
    case WeightType::Q3_K:
    case WeightType::IQ4_XS:
      out = WeightType::IQ4_NL;
      break;
    case WeightType::Q4_K:
      out = WeightType::Q5_0;
      break;
    case WeightType::Q5_K:
      out = WeightType::Q5_1;
      break;
    case WeightType::Q6_K:
      out = WeightType::Q8_0;
      break;
    default:
      break;
  }
  return fits(out, cols) ? out : WeightType::F16;
}

std::vector<WeightType> plan_quant_types(const QuantMix& mix,
                                         const std::vector<TensorShape>& tensors, int n_layers) {
  const bool tied = std::none_of(tensors.begin(), tensors.end(),
                                 [](const TensorShape& t) { return t.name == "output.weight"; });
  int n_attn_v = 0;
  for (const TensorShape& t : tensors) {
    const Category c = category_of(t.name);
    n_attn_v += c == Category::kAttnV || c == Category::kAttnQkv;
  }
  // llama.cpp visits tensors by layer, then by name; its counters follow that order.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });

  const bool q4_k_s = mix.name == "Q4_K_S", q4_k_m = mix.name == "Q4_K_M",
             q5_k_m = mix.name == "Q5_K_M";
  int i_attn_v = 0, i_ffn_down = 0;
  std::vector<WeightType> out(tensors.size(), WeightType::F32);
  for (size_t idx : order) {
    const TensorShape& t = tensors[idx];
    if (!is_quantizable_tensor(t)) continue;
    const Category c = category_of(t.name);
    const int64_t cols = t.dims[0];
    WeightType type = mix.base;
    if (c == Category::kOutput || (tied && c == Category::kTokenEmbd)) {
      if (!fits(type, cols))
        type = WeightType::Q8_0;
      else if (type != WeightType::Q8_0)
        type = WeightType::Q6_K;
    } else if (c == Category::kAttnV || c == Category::kAttnQkv) {  // fused QKV follows attn_v
      if ((q4_k_m || q5_k_m) && use_more_bits(i_attn_v, n_attn_v)) {
        type = WeightType::Q6_K;
      } else if (q4_k_s && i_attn_v < 4) {
        type = WeightType::Q5_K;
      }
      ++i_attn_v;
    } else if (c == Category::kFfnDown) {
      if ((q4_k_m || q5_k_m) && use_more_bits(i_ffn_down, n_layers))
        type = WeightType::Q6_K;
      else if (q4_k_s && i_ffn_down < n_layers / 8)
        type = WeightType::Q5_K;
      ++i_ffn_down;
    }
    out[idx] = quant_fallback_type(type, cols);
  }
  return out;
}

}  // namespace prefixd
