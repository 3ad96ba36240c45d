// Row-wise and elementwise kernels (RMSNorm, residual add, bias, SwiGLU, GeGLU, scale, NeoX
// RoPE) and the bulk F16/BF16 conversions, written once over a set's vector
// layer `Vec` around the scalar math of kernels/op_math.h. Each processes whole
// vectors and then the tail with partial loads/stores.
// Included by kernels/cpu/<isa>/kernels.cpp only.
#pragma once

#include <cstdint>

#include "kernels/op_math.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace rows {

using V = typename Vec::T;
constexpr int N = Vec::N;

// Applies v = op(i, n) over [0, n) in vectors, the tail with `lanes` < N.
template <typename Op>
inline void for_vectors(int64_t n, Op op) {
  int64_t i = 0;
  for (; i + N <= n; i += N) op(i, N);
  if (i < n) op(i, n - i);
}

inline V load(const float* p, int64_t lanes) { return lanes == N ? Vec::load(p) : Vec::load_n(p, lanes); }
inline void store(float* p, V v, int64_t lanes) {
  if (lanes == N) {
    Vec::store(p, v);
  } else {
    Vec::store_n(p, v, lanes);
  }
}

inline void rmsnorm_rows(const float* x, const float* weight, float* out, int64_t r0, int64_t r1,
                         int64_t dim, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    V acc = Vec::zero();
    for_vectors(dim, [&](int64_t i, int64_t lanes) {
      const V v = load(xr + i, lanes);
      acc = Vec::fmadd(v, v, acc);
    });
    const V inv = Vec::set1(op::rms_inv(Vec::reduce_add(acc), dim, eps));
    for_vectors(dim, [&](int64_t i, int64_t lanes) {
      store(yr + i, Vec::mul(Vec::mul(load(xr + i, lanes), inv), load(weight + i, lanes)), lanes);
    });
  }
}

inline void add_n(float* y, const float* x, int64_t n) {
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    store(y + i, Vec::add(load(y + i, lanes), load(x + i, lanes)), lanes);
  });
}

inline void add_bias_rows(float* y, const float* bias, int64_t r0, int64_t r1, int64_t dim) {
  for (int64_t r = r0; r < r1; ++r) add_n(y + r * dim, bias, dim);
}

// op::swiglu: g / (1 + exp(-g)) * u
inline void swiglu_n(const float* gate, const float* up, float* out, int64_t n) {
  const V one = Vec::set1(1.0f);
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    const V g = load(gate + i, lanes);
    const V e_neg = Vec::exp(Vec::sub(Vec::zero(), g));
    store(out + i, Vec::mul(Vec::div(g, Vec::add(one, e_neg)), load(up + i, lanes)), lanes);
  });
}

// op::geglu: g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u
inline void geglu_n(const float* gate, const float* up, float* out, int64_t n) {
  const V one = Vec::set1(1.0f);
  const V neg_k = Vec::set1(-op::kGeluTwoSqrt2OverPi);
  const V cubic = Vec::set1(op::kGeluCubic);
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    const V g = load(gate + i, lanes);
    const V g3 = Vec::mul(Vec::mul(g, g), g);
    const V e_neg = Vec::exp(Vec::mul(neg_k, Vec::fmadd(cubic, g3, g)));
    store(out + i, Vec::mul(Vec::div(g, Vec::add(one, e_neg)), load(up + i, lanes)), lanes);
  });
}

// y (n) *= factor
inline void scale_n(float* y, float factor, int64_t n) {
  const V f = Vec::set1(factor);
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    store(y + i, Vec::mul(load(y + i, lanes), f), lanes);
  });
}

// Pairs (i, i + half): contiguous halves, N pairs per vector.
inline void rope_neox_rows(float* x, const float* cos, const float* sin, int64_t t0, int64_t t1,
                           int32_t n_heads, int32_t head_dim, int32_t half) {
  const int64_t row = static_cast<int64_t>(n_heads) * head_dim;
  for (int64_t t = t0; t < t1; ++t) {
    const float* cs = cos + t * half;
    const float* sn = sin + t * half;
    for (int32_t h = 0; h < n_heads; ++h) {
      float* xh = x + t * row + static_cast<int64_t>(h) * head_dim;
      for_vectors(half, [&](int64_t i, int64_t lanes) {
        const V x0 = load(xh + i, lanes);
        const V x1 = load(xh + half + i, lanes);
        const V c = load(cs + i, lanes);
        const V s = load(sn + i, lanes);
        store(xh + i, Vec::fmsub(x0, c, Vec::mul(x1, s)), lanes);
        store(xh + half + i, Vec::fmadd(x0, s, Vec::mul(x1, c)), lanes);
      });
    }
  }
}

inline void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    store(dst + i, lanes == N ? Vec::load_f16(src + i) : Vec::load_f16_n(src + i, lanes), lanes);
  });
}

inline void f32_to_f16_n(const float* src, uint16_t* dst, int64_t n) {
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    if (lanes == N) {
      Vec::store_f16(dst + i, Vec::load(src + i));
    } else {
      Vec::store_f16_n(dst + i, Vec::load_n(src + i, lanes), lanes);
    }
  });
}

inline void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    store(dst + i, lanes == N ? Vec::load_bf16(src + i) : Vec::load_bf16_n(src + i, lanes), lanes);
  });
}

inline void f32_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
  for_vectors(n, [&](int64_t i, int64_t lanes) {
    if (lanes == N) {
      Vec::store_bf16(dst + i, Vec::load(src + i));
    } else {
      Vec::store_bf16_n(dst + i, Vec::load_n(src + i, lanes), lanes);
    }
  });
}

}  // namespace rows

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
