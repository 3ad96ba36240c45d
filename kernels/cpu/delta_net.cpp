// Gated DeltaNet kernels (see the header): the norm, the gates and the chunked
// rule here; the convolution and the rule's steps are the portable set's
// (generic/delta_net_lanes.h, the same bits as every set's).
#include "kernels/cpu/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/result.h"
#include "kernels/cpu/cpu_kernels.h"

// Contraction off for the whole file: a fused multiply-add rounds differently
// from a multiply then an add, and results must not depend on how this file
// was compiled (the x86-64 baseline, another architecture).
#pragma GCC optimize("fp-contract=off")

namespace prefixd::cpu::delta_net {

void conv_silu(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
               int64_t c0, int64_t c1) {
  cpu_kernels(CpuIsa::kPortable).delta_conv_silu(x, n, channels, w, width, tail, c0, c1);
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

}  // namespace

void rule_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
               float scale, float* out, int32_t d_k, int32_t d_v) {
  rule_steps(state, q, k, d_k, v, d_v, &g, &beta, 1, scale, out, d_v, 1, d_k, d_v);
}

void rule_steps(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                float* out, int64_t out_stride, int64_t n, int32_t d_k, int32_t d_v) {
  cpu_kernels(CpuIsa::kPortable)
      .delta_rule_steps(state, q, k, qk_stride, v, v_stride, g, beta, gb_stride, scale, out, out_stride, n, d_k, d_v);
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
