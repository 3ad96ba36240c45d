// The Gated DeltaNet's two hot loops for one instruction set (Qwen3.5's
// linear-attention layers; kernels/cpu/delta_net.h says what each computes):
// the causal depthwise convolution with SiLU over a block of channels
// (conv_silu) and the gated delta rule over n tokens of one value head
// (rule_steps). They work on 16-float values of GCC's vector extension,
// whose lanes do the scalar operations in a fixed order, with contraction
// off (a fused multiply-add rounds differently from a multiply then an add):
// every set computes the same bits as the portable one, on whatever
// registers its flags give (four xmm in the baseline, one zmm with AVX-512).
// Included by generic/kernel_set.h only: every function lives in the set's
// namespace (PREFIXD_ISA_NS).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/result.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic push
// The helpers are always inlined, so no call passes a 64-byte vector (what
// -Wpsabi warns of for their signatures: the baseline build passes them in
// memory, an AVX-512 build would not).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace prefixd::cpu::PREFIXD_ISA_NS::dnet {

constexpr int32_t kMaxConvWidth = 16;

inline float silu(float z) { return z / (1.0f + std::exp(-z)); }

// 16 floats as one value of GCC's vector extension: lane l of an operation is
// the scalar operation on lane l, whatever registers the set's flags give.
using F16x = float __attribute__((vector_size(64)));
constexpr int32_t kLanes = 16;

[[gnu::always_inline]] inline F16x load(const float* p) {
  F16x v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

[[gnu::always_inline]] inline void store(float* p, const F16x& v) { std::memcpy(p, &v, sizeof(v)); }

// The 16 lanes' sum in one fixed tree: lanes l and l + 8 added, then l and
// l + 4 of those, then l and l + 2, then the last two (vector shuffles: the
// same tree through memory cost more than the dot product it ends).
[[gnu::always_inline]] inline float reduce_lanes(const F16x& v) {
  using F8x = float __attribute__((vector_size(32)));
  using F4x = float __attribute__((vector_size(16)));
  const F8x a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const F4x b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}

// conv_silu over channels [c0, c1) one at a time: the reference order of the
// operations, and the path of a block narrower than kLanes.
inline void conv_silu_scalar(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
                      int64_t c0, int64_t c1) {
  const int32_t n_hist = width - 1;
  for (int64_t c = c0; c < c1; ++c) {
    const float* wc = w + c * width;  // (width)
    float hist[kMaxConvWidth];        // the n_hist inputs before row t, oldest first
    for (int32_t j = 0; j < n_hist; ++j) hist[j] = tail[j * channels + c];
    for (int64_t t = 0; t < n; ++t) {
      float* xt = x + t * channels + c;
      const float in = *xt;
      float acc = 0.0f;
      for (int32_t j = 0; j < n_hist; ++j) acc += wc[j] * hist[j];
      acc += wc[n_hist] * in;
      for (int32_t j = 0; j + 1 < n_hist; ++j) hist[j] = hist[j + 1];
      hist[n_hist - 1] = in;
      *xt = silu(acc);
    }
    for (int32_t j = 0; j < n_hist; ++j) tail[j * channels + c] = hist[j];
  }
}

// The same over kLanes channels from c at once: each lane does exactly the
// scalar path's operations, in its order, on contiguous rows.
inline void conv_silu_lanes(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
                     int64_t c) {
  const int32_t n_hist = width - 1;
  F16x wj[kMaxConvWidth];    // tap j of the kLanes channels
  F16x hist[kMaxConvWidth];  // the n_hist inputs before row t, oldest first
  for (int32_t j = 0; j < width; ++j) {
    float lanes[kLanes];
    for (int32_t l = 0; l < kLanes; ++l) lanes[l] = w[(c + l) * width + j];
    wj[j] = load(lanes);
  }
  for (int32_t j = 0; j < n_hist; ++j) hist[j] = load(tail + j * channels + c);
  for (int64_t t = 0; t < n; ++t) {
    float* xt = x + t * channels + c;
    const F16x in = load(xt);
    F16x acc = {};
    for (int32_t j = 0; j < n_hist; ++j) acc += wj[j] * hist[j];
    acc += wj[n_hist] * in;
    for (int32_t j = 0; j + 1 < n_hist; ++j) hist[j] = hist[j + 1];
    hist[n_hist - 1] = in;
    float out[kLanes];
    store(out, acc);
    for (int32_t l = 0; l < kLanes; ++l) xt[l] = silu(out[l]);
  }
  for (int32_t j = 0; j < n_hist; ++j) store(tail + j * channels + c, hist[j]);
}

// kernels/cpu/delta_net.h's conv_silu (CpuKernels::delta_conv_silu).
inline void conv_silu(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
                      int64_t c0, int64_t c1) {
  PREFIXD_CHECK(width >= 2 && width <= kMaxConvWidth, "convolution width out of range");
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) conv_silu_lanes(x, n, channels, w, width, tail, c);
  conv_silu_scalar(x, n, channels, w, width, tail, c, c1);
}

// One token of the rule on one state row s (d_k): the operations of
// rule_step's row j. Each dot product keeps 16 partial sums, lane l taking
// elements l, l + 16, ...; a single accumulator would wait 4 cycles an
// element on its own adds.
[[gnu::always_inline]] inline float row_step(float* s, const float* q, const float* k, float v, float decay,
                                             float beta, float scale, int32_t d_k) {
  const int32_t d_main = d_k - d_k % kLanes;
  F16x part = {};
  for (int32_t i = 0; i < d_main; i += kLanes) {
    const F16x si = load(s + i) * decay;
    store(s + i, si);
    part += si * load(k + i);
  }
  if (d_main < d_k) {  // the last d_k % 16 elements: lanes 0.. of one more term
    float tail[kLanes] = {};
    for (int32_t i = d_main; i < d_k; ++i) {
      s[i] *= decay;
      tail[i - d_main] = s[i] * k[i];
    }
    part += load(tail);
  }
  const float d = beta * (v - reduce_lanes(part));
  F16x qpart = {};
  for (int32_t i = 0; i < d_main; i += kLanes) {
    const F16x si = load(s + i) + d * load(k + i);
    store(s + i, si);
    qpart += si * load(q + i);
  }
  if (d_main < d_k) {
    float qtail[kLanes] = {};
    for (int32_t i = d_main; i < d_k; ++i) {
      s[i] += d * k[i];
      qtail[i - d_main] = s[i] * q[i];
    }
    qpart += load(qtail);
  }
  return scale * reduce_lanes(qpart);
}

// rule_steps' tiles: kTileTokens tokens' q and k (2 x 32 x 512 bytes at
// d_k = 128) and kTileRows state rows stay in L1 while every row of the tile
// takes every token of it.
constexpr int64_t kTileTokens = 32;
constexpr int32_t kTileRows = 8;

// kernels/cpu/delta_net.h's rule_steps (CpuKernels::delta_rule_steps).
inline void rule_steps(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                       int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                       float* out, int64_t out_stride, int64_t n, int32_t d_k, int32_t d_v) {
  float decay[kTileTokens];
  for (int64_t t0 = 0; t0 < n; t0 += kTileTokens) {
    const int64_t nt = std::min(kTileTokens, n - t0);
    for (int64_t t = 0; t < nt; ++t) decay[t] = std::exp(g[(t0 + t) * gb_stride]);
    for (int32_t j0 = 0; j0 < d_v; j0 += kTileRows) {
      const int32_t j1 = std::min(d_v, j0 + kTileRows);
      for (int64_t t = t0; t < t0 + nt; ++t) {
        const float* qt = q + t * qk_stride;
        const float* kt = k + t * qk_stride;
        const float bt = beta[t * gb_stride];
        for (int32_t j = j0; j < j1; ++j) {
          out[t * out_stride + j] = row_step(state + static_cast<int64_t>(j) * d_k, qt, kt,
                                             v[t * v_stride + j], decay[t - t0], bt, scale, d_k);
        }
      }
    }
  }
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS::dnet

#pragma GCC diagnostic pop
#pragma GCC pop_options
