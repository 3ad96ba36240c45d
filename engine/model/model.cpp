// Loading weights: shape and type checks per tensor, then upload to the backend.
#include "engine/model/model.h"
#include "engine/model/try_assign.h"

#include <cstring>

namespace prefixd {

Result<std::unique_ptr<Model>> Model::load(std::shared_ptr<GgufFile> file, Backend& backend) {
  Result<ModelConfig> config = load_model_config(*file);
  if (!config.ok()) return config.status();
  std::unique_ptr<Model> m(new Model());
  m->config_ = *config;
  m->file_ = std::move(file);
  m->backend_ = &backend;
  if (!m->config_.layer_is_recurrent.empty() && !backend.supports_recurrent_layers()) {
    return Status::error("the " + backend.name() + " backend cannot run the recurrent layers of '" +
                         m->config_.arch_name + "' models");
  }
  if (Status s = m->load_weights(); !s.ok()) return s;
  return m;
}

DType Model::auto_kv_dtype() const {
  size_t i = 0;  // the first layer with K and V (qwen35's DeltaNet, lfm2's convolution layers have none)
  while (i + 1 < layers_.size() && !layers_[i].wk) ++i;
  const LayerWeights& l = layers_[i];
  const bool bf16 = l.wk->source_type == WeightType::BF16 && l.wv->source_type == WeightType::BF16;
  return bf16 ? DType::BF16 : DType::F16;
}

Model::~Model() {
  layers_.clear();
  token_embd_.reset();
  output_.reset();
  for (void* p : owned_buffers_) backend_->free(p);
}

Result<std::unique_ptr<Matrix>> Model::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensorInfo* t = file_->find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    std::string got;
    for (int64_t d : t->dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return Status::error("tensor '" + name + "' has shape [" + got + "], expected [" +
                         std::to_string(cols) + ", " + std::to_string(rows) + "]");
  }
  std::unique_ptr<Matrix> m = backend_->upload_matrix(t->type, rows, cols, t->data, /*host_data_outlives=*/true);
  file_->release_pages(t->data, t->n_bytes);  // the backend holds its own copy
  return m;
}

Result<float*> Model::f32_tensor(const std::string& name, const std::vector<int64_t>& dims) {
  const GgufTensorInfo* t = file_->find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  if (t->dims != dims) {
    std::string want;
    for (int64_t d : dims) want += (want.empty() ? "" : ", ") + std::to_string(d);
    return Status::error("tensor '" + name + "' must have shape [" + want + "]");
  }
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> host(n);  // (n) f32
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t->type) {
      case GgmlType::F32: std::memcpy(&host[i], t->data + 4 * i, 4); break;
      case GgmlType::F16: std::memcpy(&h, t->data + 2 * i, 2); host[i] = f16_to_f32(h); break;
      case GgmlType::BF16: std::memcpy(&h, t->data + 2 * i, 2); host[i] = bf16_to_f32(h); break;
      default: return Status::error("tensor '" + name + "' must be F32, F16 or BF16");
    }
  }
  float* dev = static_cast<float*>(backend_->alloc(n * sizeof(float)));
  owned_buffers_.push_back(dev);
  backend_->upload(dev, host.data(), n * sizeof(float));
  return dev;
}

Result<float*> Model::vector(const std::string& name, int64_t n) { return f32_tensor(name, {n}); }

Result<float*> Model::table(const std::string& name, int64_t outer, int64_t inner) {
  return f32_tensor(name, {inner, outer});
}

Status Model::load_attention(LayerWeights& l, const std::string& b) {
  const ModelConfig& c = config_;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  PREFIXD_TRY_ASSIGN(l.wq, matrix(b + "attn_q.weight", q_dim, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.wk, matrix(b + "attn_k.weight", kv_dim, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.wv, matrix(b + "attn_v.weight", kv_dim, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.wo, matrix(b + "attn_output.weight", c.n_embd, q_dim));
  if (c.has_qkv_bias) {
    PREFIXD_TRY_ASSIGN(l.bq, vector(b + "attn_q.bias", q_dim));
    PREFIXD_TRY_ASSIGN(l.bk, vector(b + "attn_k.bias", kv_dim));
    PREFIXD_TRY_ASSIGN(l.bv, vector(b + "attn_v.bias", kv_dim));
  }
  if (c.has_qk_norm) {
    PREFIXD_TRY_ASSIGN(l.attn_q_norm, vector(b + "attn_q_norm.weight", c.head_dim));
    PREFIXD_TRY_ASSIGN(l.attn_k_norm, vector(b + "attn_k_norm.weight", c.head_dim));
  }
  return Status();
}

Status Model::load_conv(LayerWeights& l, const std::string& b) {
  const ModelConfig& c = config_;
  PREFIXD_TRY_ASSIGN(l.conv_in, matrix(b + "shortconv.in_proj.weight", 3 * int64_t{c.n_embd}, c.n_embd));
  PREFIXD_TRY_ASSIGN(l.conv_kernel, table(b + "shortconv.conv.weight", c.n_embd, c.conv_l_cache));
  PREFIXD_TRY_ASSIGN(l.conv_out, matrix(b + "shortconv.out_proj.weight", c.n_embd, c.n_embd));
  return Status();
}

Status Model::load_weights() {
  const ModelConfig& c = config_;
  if (!c.layer_is_conv.empty() && !backend_->supports_short_conv()) {
    return Status::error("the " + backend_->name() + " backend has no short convolution (" + c.arch_name +
                         "'s convolution layers); run it on the CPU backend");
  }
  PREFIXD_TRY_ASSIGN(token_embd_, matrix("token_embd.weight", c.n_vocab, c.n_embd));
  if (!c.tied_output) PREFIXD_TRY_ASSIGN(output_, matrix("output.weight", c.n_vocab, c.n_embd));
  // lfm2 names its final norm token_embd_norm (llama.cpp's name for it there).
  const char* final_norm = c.arch == Arch::kLfm2 ? "token_embd_norm.weight" : "output_norm.weight";
  PREFIXD_TRY_ASSIGN(output_norm_, vector(final_norm, c.n_embd));
  layers_.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.arch == Arch::kQwen35) {
      if (Status s = load_qwen35_layer(i); !s.ok()) return s;
      continue;
    }
    LayerWeights& l = layers_[i];
    const std::string b = "blk." + std::to_string(i) + ".";
    PREFIXD_TRY_ASSIGN(l.attn_norm, vector(b + "attn_norm.weight", c.n_embd));
    Status s = c.is_conv(i) ? load_conv(l, b) : load_attention(l, b);
    if (!s.ok()) return s;
    PREFIXD_TRY_ASSIGN(l.ffn_norm, vector(b + "ffn_norm.weight", c.n_embd));
    if (c.has_post_norms) {  // stored as llama.cpp's converter writes them (Gemma's 1 + w)
      PREFIXD_TRY_ASSIGN(l.post_attn_norm, vector(b + "post_attention_norm.weight", c.n_embd));
      PREFIXD_TRY_ASSIGN(l.post_ffw_norm, vector(b + "post_ffw_norm.weight", c.n_embd));
    }
    PREFIXD_TRY_ASSIGN(l.w_gate, matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd));
    PREFIXD_TRY_ASSIGN(l.w_up, matrix(b + "ffn_up.weight", c.n_ff, c.n_embd));
    PREFIXD_TRY_ASSIGN(l.w_down, matrix(b + "ffn_down.weight", c.n_embd, c.n_ff));
  }
  return Status();
}


}  // namespace prefixd
