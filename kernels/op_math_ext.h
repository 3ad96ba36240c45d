// Scalar arithmetic added for the CUDA backend's kernels, shared with host code
// (PREFIXD_HD) so that CPU tests can exercise the same expressions: RoPE angles
// reduced in double precision, and tile-wise online-softmax merging.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/op_math.h"

namespace prefixd::op {

// Inverse frequency of RoPE pair i: base^(-2i / rope_dim), in double. The
// backends compute it once per (rope_dim, base) on the host.
inline double rope_inv_freq(int32_t i, int32_t rope_dim, double base) {
  return std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
}

// cos and sin of theta = pos * inv_freq. The product and its reduction to
// [-pi, pi] are done in double so that large positions keep full float accuracy
// (a float product at pos 4096 would be off by ~1e-4 rad); the reduced angle is
// then rounded to float for cosf/sinf.
PREFIXD_HD void rope_cos_sin(int32_t pos, double inv_freq, float* c, float* s) {
  const double kTwoPi = 6.283185307179586476925286766559;
  double theta = static_cast<double>(pos) * inv_freq;
  theta -= kTwoPi * rint(theta / kTwoPi);
  const float t = static_cast<float>(theta);
  *c = cosf(t);
  *s = sinf(t);
}

// Online softmax over a tile of scores at once: folds the tile's maximum into
// `st` and returns the factor by which the existing accumulator and st->l must
// be scaled (already applied to st->l). The caller then adds
// p_j = expf(score_j - st->m) to st->l and p_j * v_j to the accumulator.
// Equal, up to rounding, to softmax_push() over each score in turn.
PREFIXD_HD float softmax_fold_max(SoftmaxState* st, float tile_max) {
  const float m_new = tile_max > st->m ? tile_max : st->m;
  if (m_new == -INFINITY) return 1.0f;  // nothing seen yet and an all-masked tile
  const float scale = expf(st->m - m_new);  // expf(-inf) == 0 for the first tile
  st->l *= scale;
  st->m = m_new;
  return scale;
}

// Merges two partial softmax states (of disjoint key sets): returns the merged
// state and the factors to apply to each side's accumulator.
PREFIXD_HD SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b, float* scale_a,
                                      float* scale_b) {
  const float m = a.m > b.m ? a.m : b.m;
  if (m == -INFINITY) {
    *scale_a = 0.0f;
    *scale_b = 0.0f;
    return SoftmaxState{-INFINITY, 0.0f};
  }
  *scale_a = expf(a.m - m);
  *scale_b = expf(b.m - m);
  return SoftmaxState{m, a.l * *scale_a + b.l * *scale_b};
}

// Q8_0 weights: blocks of 32 int8 values sharing one F16 scale d; value = d * q.
inline constexpr int32_t kQ8_0BlockValues = 32;
inline constexpr int32_t kQ8_0BlockBytes = 34;  // 2 (f16 d) + 32 (int8 q)
PREFIXD_HD float q8_0_value(uint16_t d_f16, int8_t q) {
  return f16_to_f32(d_f16) * static_cast<float>(q);
}

}  // namespace prefixd::op
