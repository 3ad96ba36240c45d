// short_conv: LFM2's gated short convolution (Backend::short_conv) in plain
// C++, the same on every instruction set: per row 3·L multiply-adds a channel,
// a few hundredths of the layer's in- and out-projections. Its state is a
// ring of F32 B·x rows in the pool (kernels/conv_tail.h), so a prefix read
// back from the ring gives the same values as the rows computed in the batch
// and a cached prefix plus its suffix equals the uncached run bit for bit.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/conv_tail.h"
#include "kernels/cpu/cpu_backend.h"

namespace prefixd::cpu {

namespace {

constexpr int32_t kChannelsPerTask = 64;

// The convolution of one sequence's rows [row0, row0 + n) at positions
// [pos0, pos0 + n). On entry out holds their bx rows; prev (L - 1, channels)
// the bx rows of positions pos0 - (L - 1) .. pos0 - 1 (oldest first, zero
// below position 0). Rows go from last to first so that a row's predecessors
// are still bx when it reads them.
void convolve_rows(ThreadPool& pool, const float* bcx, const float* kernel, const float* prev, float* out,
                   int32_t row0, int32_t n, int32_t channels, int32_t l_cache) {
  const int64_t n_tasks = (channels + kChannelsPerTask - 1) / kChannelsPerTask;
  const int64_t bcx_cols = 3 * static_cast<int64_t>(channels);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int32_t c0 = static_cast<int32_t>(task) * kChannelsPerTask;
    const int32_t c1 = std::min(channels, c0 + kChannelsPerTask);
    for (int32_t i = n - 1; i >= 0; --i) {
      const int64_t row = row0 + i;
      float* o = out + row * channels;
      const float* c_gate = bcx + row * bcx_cols + channels;  // C
      for (int32_t c = c0; c < c1; ++c) {
        float acc = 0.0f;
        for (int32_t j = 0; j < l_cache; ++j) {
          const int32_t k = i - (l_cache - 1) + j;  // row of the tap within the sequence
          const float v = k >= 0 ? out[(row0 + k) * static_cast<int64_t>(channels) + c]
                                 : prev[static_cast<int64_t>(l_cache - 1 + k) * channels + c];
          acc += kernel[static_cast<int64_t>(c) * l_cache + j] * v;
        }
        o[c] = c_gate[c] * acc;
      }
    }
  });
}

}  // namespace

void short_conv(ThreadPool& pool, const CpuBatch& batch, KvPool& kv, int32_t layer, const float* bcx,
                const float* kernel, float* out, int32_t channels, int32_t l_cache) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  PREFIXD_CHECK(conv_tail::fits(g, channels, l_cache), "a block's layer area does not hold the convolution tail");
  const int64_t bcx_cols = 3 * static_cast<int64_t>(channels);
  const size_t row_bytes = conv_tail::row_bytes(channels);
  std::vector<float> prev(static_cast<size_t>(l_cache - 1) * channels);  // (L - 1, channels) f32
  for (const BatchSeq& s : batch.seqs) {
    const int32_t* table = batch.block_tables.data() + s.table_start;
    PREFIXD_CHECK(s.n_table * g.block_size >= s.pos0 + s.n_q, "block table too short for the sequence");
    for (int32_t i = 0; i < s.n_table; ++i) {
      PREFIXD_CHECK(table[i] >= 0 && table[i] < g.n_blocks, "block id out of range");
    }
    // Predecessors of the first row, read before this batch writes the ring.
    for (int32_t i = 0; i < l_cache - 1; ++i) {
      const int32_t p = s.pos0 - (l_cache - 1) + i;
      float* dst = prev.data() + static_cast<size_t>(i) * channels;
      if (p < 0) {
        std::memset(dst, 0, row_bytes);
      } else {
        std::memcpy(dst, conv_tail::pos_ptr(kv, layer, table, p, channels, l_cache), row_bytes);
      }
    }
    // bx = B ⊙ x of every row, into out and into the ring.
    for (int32_t i = 0; i < s.n_q; ++i) {
      const int64_t row = s.q_start + i;
      const float* b = bcx + row * bcx_cols;
      const float* x = b + 2 * static_cast<int64_t>(channels);
      float* o = out + row * channels;
      for (int32_t c = 0; c < channels; ++c) o[c] = b[c] * x[c];
      std::memcpy(conv_tail::pos_ptr(kv, layer, table, s.pos0 + i, channels, l_cache), o, row_bytes);
    }
    convolve_rows(pool, bcx, kernel, prev.data(), out, s.q_start, s.n_q, channels, l_cache);
  }
}

}  // namespace prefixd::cpu
