// Gated DeltaNet kernels: plain loops, one row or head at a time (see the header).
#include "kernels/cpu/delta_net.h"

#include <algorithm>
#include <cmath>

#include "common/result.h"

namespace prefixd::cpu::delta_net {

namespace {

constexpr int32_t kMaxConvWidth = 16;

float silu(float z) { return z / (1.0f + std::exp(-z)); }

}  // namespace

void conv_silu(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
               int64_t c0, int64_t c1) {
  PREFIXD_CHECK(width >= 2 && width <= kMaxConvWidth, "convolution width out of range");
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

void rule_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
               float scale, float* out, int32_t d_k, int32_t d_v) {
  const float decay = std::exp(g);
  for (int32_t j = 0; j < d_v; ++j) {
    float* s = state + static_cast<int64_t>(j) * d_k;  // (d_k)
    float sk = 0.0f;
    for (int32_t i = 0; i < d_k; ++i) {
      s[i] *= decay;
      sk += s[i] * k[i];
    }
    const float d = beta * (v[j] - sk);
    float sq = 0.0f;
    for (int32_t i = 0; i < d_k; ++i) {
      s[i] += d * k[i];
      sq += s[i] * q[i];
    }
    out[j] = scale * sq;
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
