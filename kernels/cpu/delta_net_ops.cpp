// The CPU backend's recurrent-layer ops (Backend::delta_conv, delta_rule,
// delta_gates, sigmoid_mul, split_pairs): each sequence of the current batch
// runs from its state slot, split over the pool by channel block or value head;
// the convolution and the rule through the base set's table (CpuKernels).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/delta_net.h"

namespace prefixd::cpu {

namespace {

// The slot of `seq` at s.state_offset: its convolution tail then its delta state.
float* layer_state(KvPool& pool, const DeltaNetShape& s, const BatchSeq& seq) {
  const KvGeometry& g = pool.geom;
  PREFIXD_CHECK(pool.state != nullptr, "the KV pool has no state slots");
  PREFIXD_CHECK(seq.state_slot >= 0 && seq.state_slot < g.n_state_slots, "state slot out of range");
  PREFIXD_CHECK(s.state_offset >= 0 && s.state_offset + s.state_floats() <= g.state_floats,
                "recurrent layer state outside the slot");
  return pool.state + static_cast<int64_t>(seq.state_slot) * g.state_floats + s.state_offset;
}

// Channels per convolution task.
constexpr int64_t kConvChannelBlock = 64;

}  // namespace

void CpuBackend::delta_conv(KvPool& pool, const DeltaNetShape& s, const float* conv_w, float* x) {
  const int64_t channels = s.conv_channels();
  const int64_t n_blocks = (channels + kConvChannelBlock - 1) / kConvChannelBlock;
  for (const BatchSeq& seq : batch_.seqs) {
    float* tail = layer_state(pool, s, seq);  // (conv_width - 1, channels)
    if (seq.pos0 == 0) std::memset(tail, 0, s.conv_state_floats() * sizeof(float));
    float* rows = x + static_cast<int64_t>(seq.q_start) * channels;
    pool_.parallel_for(n_blocks, [&](int64_t b, int) {
      const int64_t c0 = b * kConvChannelBlock;
      const int64_t c1 = std::min(channels, c0 + kConvChannelBlock);
      k_.delta_conv_silu(rows, seq.n_q, channels, conv_w, s.conv_width, tail, c0, c1);
    });
  }
}

void CpuBackend::delta_rule(KvPool& pool, const DeltaNetShape& s, float* qkv, const float* g,
                            const float* beta, float* out, float eps) {
  const int64_t channels = s.conv_channels();
  const int64_t n = batch_.n_tokens();
  // q and k heads L2-normalised, row by row.
  pool_.parallel_for(n, [&](int64_t t, int) {
    float* row = qkv + t * channels;
    for (int32_t h = 0; h < 2 * s.n_k_heads; ++h) delta_net::l2_normalize(row + h * s.d_k, s.d_k, eps);
  });
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d_k));
  const int64_t k_off = static_cast<int64_t>(s.n_k_heads) * s.d_k;
  const int64_t v_off = 2 * k_off;
  const int64_t head_floats = static_cast<int64_t>(s.d_v) * s.d_k;
  const int64_t out_cols = static_cast<int64_t>(s.n_v_heads) * s.d_v;
  for (const BatchSeq& seq : batch_.seqs) {
    float* delta = layer_state(pool, s, seq) + s.conv_state_floats();  // (n_v_heads, d_v, d_k)
    if (seq.pos0 == 0) std::memset(delta, 0, s.delta_state_floats() * sizeof(float));
    pool_.parallel_for(s.n_v_heads, [&](int64_t h, int) {
      const int64_t kh = h % s.n_k_heads;
      const float* row = qkv + static_cast<int64_t>(seq.q_start) * channels;
      const int64_t gb = static_cast<int64_t>(seq.q_start) * s.n_v_heads + h;
      k_.delta_rule_steps(delta + h * head_floats, row + kh * s.d_k, row + k_off + kh * s.d_k, channels,
                          row + v_off + h * s.d_v, channels, g + gb, beta + gb, s.n_v_heads, scale,
                          out + static_cast<int64_t>(seq.q_start) * out_cols + h * s.d_v, out_cols, seq.n_q,
                          s.d_k, s.d_v);
    });
  }
}

void CpuBackend::delta_gates(float* alpha, float* beta, const float* dt_bias, const float* a, int64_t n,
                             int32_t n_heads) {
  for (int64_t t = 0; t < n; ++t) delta_net::gates(alpha + t * n_heads, beta + t * n_heads, dt_bias, a, n_heads);
}

void CpuBackend::sigmoid_mul(float* y, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

void CpuBackend::split_pairs(const float* x, float* first, float* second, int64_t n_rows, int64_t width) {
  const size_t bytes = static_cast<size_t>(width) * sizeof(float);
  for (int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(first + r * width, x + 2 * r * width, bytes);
    std::memcpy(second + r * width, x + (2 * r + 1) * width, bytes);
  }
}

}  // namespace prefixd::cpu
