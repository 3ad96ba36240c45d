// An lfm2 convolution layer as llama.cpp's lfm2 graph computes it: pre-norm,
// in-projection to B | C | x, C ⊙ depthwise causal convolution of B ⊙ x (its
// last rows kept in the pool: kernels/conv_tail.h), out-projection, residual;
// then the SwiGLU feed-forward sub-layer.
#include "engine/model/forward.h"

namespace prefixd {

void ForwardPass::conv_layer(int32_t il, KvPool& pool, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& l = model_.layer(il);
  backend_.rmsnorm(x_, l.attn_norm, h_, n, c.n_embd, c.rms_eps);
  backend_.matmul(*l.conv_in, h_, bcx_, n);
  backend_.short_conv(pool, il, bcx_, l.conv_kernel, conv_y_, c.n_embd, c.conv_l_cache);
  backend_.matmul(*l.conv_out, conv_y_, proj_, n);
  backend_.add(x_, proj_, n * c.n_embd);
  feed_forward(il, x_, n);
}

}  // namespace prefixd
