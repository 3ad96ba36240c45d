// Scalar arithmetic of each op, shared by the CPU and CUDA backends so that the
// CPU golden tests exercise the very expressions the GPU kernels evaluate.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"

namespace prefixd::op {

// RMSNorm: y = x * inv_rms * w, where inv_rms = 1 / sqrt(mean(x^2) + eps).
PREFIXD_HD float rms_inv(float sum_sq, int64_t dim, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
}

// SiLU-gated linear unit: silu(g) * u.
PREFIXD_HD float swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// GELU-gated linear unit (tanh approximation, Gemma's FFN): gelu(g) * u with
// gelu(g) = 0.5 g (1 + tanh(a)), a = sqrt(2/pi) (g + 0.044715 g^3), written
// as g / (1 + exp(-2a)) (the same value; one exp, like swiglu).
constexpr float kGeluTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
PREFIXD_HD float geglu(float g, float u) {
  const float two_a = kGeluTwoSqrt2OverPi * (g + kGeluCubic * g * g * g);
  return g / (1.0f + expf(-two_a)) * u;
}

// RoPE angle of pair i (0 <= i < rope_dim/2) at position pos:
// theta = pos * base^(-2i / rope_dim). Computed in double on the host side of
// the CPU backend's tables; this float form is what kernels use per element.
PREFIXD_HD float rope_theta(int32_t pos, int32_t i, int32_t rope_dim, float base) {
  return static_cast<float>(pos) * powf(base, -2.0f * static_cast<float>(i) / static_cast<float>(rope_dim));
}

// Index pairs rotated by RoPE for pair i of a head.
// kNormal (llama): (2i, 2i+1). kNeox: (i, i + rope_dim/2).
PREFIXD_HD void rope_pair(bool neox, int32_t i, int32_t rope_dim, int32_t* a, int32_t* b) {
  if (neox) {
    *a = i;
    *b = i + rope_dim / 2;
  } else {
    *a = 2 * i;
    *b = 2 * i + 1;
  }
}

// Rotation of one pair by angle theta (cos c, sin s).
PREFIXD_HD void rope_rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

// Online softmax state for one query row: running max m, running sum l of
// exp(score - m), and the accumulator rescale when a new max arrives.
struct SoftmaxState {
  float m;
  float l;
};
PREFIXD_HD SoftmaxState softmax_init() { return SoftmaxState{-INFINITY, 0.0f}; }
// Folds in a score; returns the factor by which the existing accumulator must be
// scaled, and writes the weight of the new value to *p.
PREFIXD_HD float softmax_push(SoftmaxState* st, float score, float* p) {
  float m_new = score > st->m ? score : st->m;
  float scale = expf(st->m - m_new);  // exp(-inf) == 0 on the first push
  *p = expf(score - m_new);
  st->l = st->l * scale + *p;
  st->m = m_new;
  return scale;
}

}  // namespace prefixd::op
