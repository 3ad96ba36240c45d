// Gated DeltaNet kernels: one row, head or block of 16 channels at a time (see
// the header).
#include "kernels/cpu/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/result.h"

// Contraction off for the whole file: a fused multiply-add rounds differently
// from a multiply then an add, and results must not depend on how this file
// was compiled (the x86-64 baseline, another architecture).
#pragma GCC optimize("fp-contract=off")

namespace prefixd::cpu::delta_net {

namespace {

constexpr int32_t kMaxConvWidth = 16;

float silu(float z) { return z / (1.0f + std::exp(-z)); }

// 16 floats as one value of GCC's vector extension: lane l of an operation is
// the scalar operation on lane l, whatever registers the compiler picks (four
// xmm in the baseline x86-64 build this file gets: ISA-specific code lives
// only in the sets' folders, tests/scripts/test_cpu_isa_isolation.sh), so
// every build computes the same bits.
using F16x = float __attribute__((vector_size(64)));
constexpr int32_t kLanes = 16;

// The helpers below are always inlined, so no call passes a 64-byte vector
// (what -Wpsabi warns of for their signatures: the baseline build passes
// them in memory, an AVX-512 build would not).
#pragma GCC diagnostic ignored "-Wpsabi"

[[gnu::always_inline]] inline F16x load(const float* p) {
  F16x v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

[[gnu::always_inline]] inline void store(float* p, F16x v) { std::memcpy(p, &v, sizeof(v)); }

// The 16 lanes' sum in one fixed tree: lanes l and l + 8 added, then l and
// l + 4 of those, then l and l + 2, then the last two (vector shuffles: the
// same tree through memory cost more than the dot product it ends).
[[gnu::always_inline]] inline float reduce_lanes(F16x v) {
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
void conv_silu_scalar(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
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
void conv_silu_lanes(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
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

}  // namespace

void conv_silu(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
               int64_t c0, int64_t c1) {
  PREFIXD_CHECK(width >= 2 && width <= kMaxConvWidth, "convolution width out of range");
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) conv_silu_lanes(x, n, channels, w, width, tail, c);
  conv_silu_scalar(x, n, channels, w, width, tail, c, c1);
}

void l2_normalize(float* x, int64_t dim, float eps) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::fmax(std::sqrt(sum_sq), eps);
  for (int64_t i = 0; i < dim; ++i) x[i] *= inv;
}

void gates(float* alpha, float* beta, const float* dt_bias, const float* a, int32_t n_heads) {
  for (int32_t h = 0; h < n_heads; ++h) {
    const float z = alpha[h] + dt_bias[h];
    const float softplus = z > 20.0f ? z : std::log1p(std::exp(z));
    alpha[h] = softplus * a[h];
    beta[h] = 1.0f / (1.0f + std::exp(-beta[h]));
  }
}

namespace {

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

}  // namespace

void rule_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
               float scale, float* out, int32_t d_k, int32_t d_v) {
  const float decay = std::exp(g);
  for (int32_t j = 0; j < d_v; ++j) {
    out[j] = row_step(state + static_cast<int64_t>(j) * d_k, q, k, v[j], decay, beta, scale, d_k);
  }
}

void rule_steps(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
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

int64_t chunk_scratch_floats(int32_t chunk, int32_t d_v) {
  return static_cast<int64_t>(chunk) * (1 + 2 * chunk + d_v);
}

namespace {

// One chunk of c tokens (see rule_chunked). gam (c): cumulative log decay;
// kk, kq (c, c): k_s·k_t and k_s·q_t for s <= t; u (c, d_v): the corrections.
void rule_one_chunk(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                    int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                    float* out, int64_t out_stride, int32_t c, int32_t d_k, int32_t d_v, float* scratch) {
  float* gam = scratch;            // (c)
  float* kk = gam + c;             // (c, c), row t: s < t
  float* kq = kk + c * c;          // (c, c), row t: s <= t
  float* u = kq + c * c;           // (c, d_v)
  float acc = 0.0f;
  for (int32_t t = 0; t < c; ++t) gam[t] = acc += g[t * gb_stride];
  auto dot = [&](const float* a, const float* b) {
    float s = 0.0f;
    for (int32_t i = 0; i < d_k; ++i) s += a[i] * b[i];
    return s;
  };
  for (int32_t t = 0; t < c; ++t) {
    const float* kt = k + t * qk_stride;
    const float* qt = q + t * qk_stride;
    for (int32_t s = 0; s <= t; ++s) {
      const float* ks = k + s * qk_stride;
      const float decay = std::exp(gam[t] - gam[s]);
      kk[t * c + s] = s < t ? decay * dot(ks, kt) : 0.0f;
      kq[t * c + s] = decay * dot(ks, qt);
    }
  }
  // u_t = β_t (v_t − e^{γ_t} S_0 k_t − Σ_{s<t} e^{γ_t−γ_s} (k_s·k_t) u_s);
  // o_t = scale (e^{γ_t} S_0 q_t + Σ_{s<=t} e^{γ_t−γ_s} (k_s·q_t) u_s).
  for (int32_t j = 0; j < d_v; ++j) {
    const float* s0 = state + static_cast<int64_t>(j) * d_k;  // (d_k) row j at chunk start
    for (int32_t t = 0; t < c; ++t) {
      const float e = std::exp(gam[t]);
      float corr = e * dot(s0, k + t * qk_stride);
      for (int32_t s = 0; s < t; ++s) corr += kk[t * c + s] * u[s * d_v + j];
      u[t * d_v + j] = beta[t * gb_stride] * (v[t * v_stride + j] - corr);
      float o = e * dot(s0, q + t * qk_stride);
      for (int32_t s = 0; s <= t; ++s) o += kq[t * c + s] * u[s * d_v + j];
      out[t * out_stride + j] = scale * o;
    }
  }
  // S_c = e^{γ_c} S_0 + Σ_s e^{γ_c−γ_s} u_s k_sᵀ.
  const float last = gam[c - 1];
  for (int32_t j = 0; j < d_v; ++j) {
    float* sj = state + static_cast<int64_t>(j) * d_k;
    const float e = std::exp(last);
    for (int32_t i = 0; i < d_k; ++i) sj[i] *= e;
    for (int32_t s = 0; s < c; ++s) {
      const float w = std::exp(last - gam[s]) * u[s * d_v + j];
      const float* ks = k + s * qk_stride;
      for (int32_t i = 0; i < d_k; ++i) sj[i] += w * ks[i];
    }
  }
}

}  // namespace

void rule_chunked(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                  int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                  float* out, int64_t out_stride, int64_t n, int32_t pos0, int32_t chunk, int32_t d_k,
                  int32_t d_v, float* scratch) {
  PREFIXD_CHECK(chunk >= 1, "chunk size must be positive");
  int64_t t = 0;
  while (t < n) {
    const int64_t pos = pos0 + t;
    const int64_t end = std::min<int64_t>(n, t + (chunk - pos % chunk));  // next multiple of chunk
    const auto c = static_cast<int32_t>(end - t);
    rule_one_chunk(state, q + t * qk_stride, k + t * qk_stride, qk_stride, v + t * v_stride, v_stride,
                   g + t * gb_stride, beta + t * gb_stride, gb_stride, scale, out + t * out_stride,
                   out_stride, c, d_k, d_v, scratch);
    t = end;
  }
}

}  // namespace prefixd::cpu::delta_net
