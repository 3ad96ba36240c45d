// Paging arithmetic shared by the host (batch builder, batch validation, CPU
// tests) and the CUDA kernels (PREFIXD_HD): the pool slot of a position, the
// first key of a sliding window, the causal bound of a query suffix, the
// split-KV partition of a key range, and the log-sum-exp merge of partial
// softmax results. Plain C++ without CUDA types; tests/test_paging.cpp checks
// each function against a brute-force or F64 reference.
//
// Lives in kernels/ (not kernels/cuda/) so that engine/ (the batch builder)
// and the CPU tests include it in builds without nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/op_math.h"

namespace prefixd::paging {

// --- positions and slots -------------------------------------------------------

// Pool slot of position `pos` of a sequence whose block table is `table`
// (logical block i -> pool block table[i]): block_id * block_size + pos % block_size.
// Pools hold fewer than 2^31 slots (the CUDA backend checks it at allocation).
PREFIXD_HD int32_t slot_of(const int32_t* table, int32_t block_size, int32_t pos) {
  return table[pos / block_size] * block_size + pos % block_size;
}

// First key a query at position `q_pos` reads with a sliding window of
// `window` tokens (keys (q_pos - window, q_pos]); 0 when window <= 0 (no window).
PREFIXD_HD int32_t window_first_key(int32_t q_pos, int32_t window) {
  if (window <= 0) return 0;
  const int32_t k = q_pos - window + 1;
  return k > 0 ? k : 0;
}

// Causal bound with a query offset: n_q queries that are the last n_q of
// n_kv positions (a suffix over a cached prefix; bottom-right aligned). Query
// row `row` (0 <= row < n_q) sits at position n_kv - n_q + row and reads keys
// [.., causal_key_end), i.e. up to and including its own position.
PREFIXD_HD int32_t causal_key_end(int32_t row, int32_t n_q, int32_t n_kv) {
  return n_kv - n_q + row + 1;
}

// --- split-KV partition ----------------------------------------------------------

// A half-open range of key positions [begin, end).
struct KeyRange {
  int32_t begin = 0;
  int32_t end = 0;
};

// Splits that carry keys when n_keys keys are cut into chunks of `chunk` keys
// and dealt to at most `max_splits` splits: min(max_splits, ceil(n_keys /
// chunk)); 0 when n_keys <= 0. Splits from this count up to max_splits are
// empty (their thread blocks exit at once, and nothing reads their partials).
PREFIXD_HD int32_t split_count(int32_t n_keys, int32_t chunk, int32_t max_splits) {
  if (n_keys <= 0) return 0;
  const int32_t n_chunks = (n_keys - 1) / chunk + 1;
  return n_chunks < max_splits ? n_chunks : max_splits;
}

// Keys of split `split` of `n_splits` over [first, end), in chunks of `chunk`
// keys counted from `first`: split s takes chunks [s * C / n, (s + 1) * C / n)
// of the C = ceil((end - first) / chunk) chunks (the last chunk may be short).
// Over s = 0 .. n_splits - 1 the ranges are contiguous, in order and cover
// [first, end) exactly once; each holds floor(C / n) or ceil(C / n) chunks, so
// none is empty when n_splits <= C (split_count). split >= n_splits: empty.
PREFIXD_HD KeyRange split_range(int32_t first, int32_t end, int32_t chunk, int32_t split,
                                int32_t n_splits) {
  KeyRange r;
  r.begin = r.end = end;
  if (split < 0 || split >= n_splits || end <= first) return r;
  const int64_t n_chunks = (int64_t(end) - first - 1) / chunk + 1;
  const int64_t c0 = n_chunks * split / n_splits, c1 = n_chunks * (split + 1) / n_splits;
  const int64_t b = first + c0 * chunk, e = first + c1 * chunk;
  r.begin = static_cast<int32_t>(b < end ? b : end);
  r.end = static_cast<int32_t>(e < end ? e : end);
  return r;
}

// --- log-sum-exp merge of partial softmax results ---------------------------------
//
// A partial is the softmax-weighted sum over a set of keys, unnormalised and
// kept with its own reference: (m, l, acc[0 .. n_dims)) with m the largest
// score of the set, l = sum_j exp(s_j - m), acc = sum_j exp(s_j - m) v_j. An
// empty set is (-inf, 0, 0). Partials are stored as floats [m, l, acc...], one
// every `stride` floats (stride >= 2 + n_dims). Merging n partials of disjoint
// key sets: M = max m_i, w_i = exp(m_i - M), l = sum w_i l_i, acc = sum w_i acc_i;
// the attention output is acc / l.

inline constexpr int32_t kPartialHeaderFloats = 2;  // m, l before acc

// Weight of a partial with max m_i when the merged max is m (0 for an empty one).
PREFIXD_HD float partial_weight(float m_i, float m) {
  return m_i == -INFINITY ? 0.0f : expf(m_i - m);
}

// The merged max M of n partials (-inf when all are empty).
PREFIXD_HD float partials_max(const float* parts, int32_t n, int32_t stride) {
  float m = -INFINITY;
  for (int32_t i = 0; i < n; ++i)
    m = parts[int64_t(i) * stride] > m ? parts[int64_t(i) * stride] : m;
  return m;
}

// Merged (M, l) of n partials.
PREFIXD_HD op::SoftmaxState merge_partial_states(const float* parts, int32_t n, int32_t stride) {
  const float m = partials_max(parts, n, stride);
  float l = 0.0f;
  for (int32_t i = 0; i < n; ++i)
    l += partial_weight(parts[int64_t(i) * stride], m) * parts[int64_t(i) * stride + 1];
  return op::SoftmaxState{m, l};
}

// Merged acc[d] of n partials relative to the merged max m (merge_partial_states).
PREFIXD_HD float merge_partial_acc(const float* parts, int32_t n, int32_t stride, int32_t d,
                                   float m) {
  float acc = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float* p = parts + int64_t(i) * stride;
    acc += partial_weight(p[0], m) * p[kPartialHeaderFloats + d];
  }
  return acc;
}

// The attention output from a merged accumulator and sum (0 when nothing was
// attended to, instead of 0 / 0).
PREFIXD_HD float normalise(float acc, float l) { return l > 0.0f ? acc / l : 0.0f; }

}  // namespace prefixd::paging
