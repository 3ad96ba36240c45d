// lfm2 (Liquid LFM2) hyper-parameters beyond the common ones: which layers are
// gated short convolutions (lfm2.attention.head_count_kv, one count per
// layer, 0 for a convolution layer) and the convolution width
// (lfm2.shortconv.l_cache).
#pragma once

#include <string>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"

namespace prefixd {

// Sets c->layer_is_conv, c->n_kv_heads (the attention layers' count, which
// must be the same for all of them) and c->conv_l_cache; `p` is "lfm2.".
// Called after the common dimensions are read (n_layers, n_heads).
Status read_lfm2_layers(const GgufFile& f, const std::string& p, ModelConfig* c);

}  // namespace prefixd
