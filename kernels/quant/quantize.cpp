// llama.cpp's quantizers (ggml-quants.c: the *_ref functions, and for IQ4_NL /
// IQ4_XS the search that quantize_iq4_nl / quantize_iq4_xs run without an
// importance matrix), written again operation by operation: the same float
// expressions in the same order and FP16 rounding to nearest even, so the
// bytes match llama-quantize's. Comments name the ggml function each follows.
#include "kernels/quant/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/result.h"
#include "kernels/dtype.h"
#include "kernels/quant/quant_blocks.h"

namespace prefixd::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: an all-zero group

// Round to nearest, ties to even, by adding 1.5 * 2^23 (ggml's nearest_int);
// valid for |x| <= 4194303.
int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// ---- 32-value formats (quantize_row_q{4,5,8}_{0,1}_ref) ----

// The value of largest magnitude in x[0, n) with its sign (the first of equal
// magnitudes; 0 when all are 0), its magnitude in *amax.
float signed_max(const float* x, int n, float* amax) {
  float max = 0.0f;
  *amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > *amax) {
      *amax = ax;
      max = x[j];
    }
  }
  return max;
}

// The 32 values q (0 .. 2^kBits - 1) into a block: low nibbles into qs (value
// j and j + 16 in byte j), Q5's fifth bits into qh (bit j = value j).
template <int kBits, typename Block>
void pack_q(const int* q, Block* b) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    b->qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kQK / 2] & 0x0F) << 4));
    qh |= ((static_cast<uint32_t>(q[j]) & 0x10u) >> 4) << j;
    qh |= ((static_cast<uint32_t>(q[j + kQK / 2]) & 0x10u) >> 4) << (j + kQK / 2);
  }
  if constexpr (kBits == 5) std::memcpy(b->qh, &qh, 4);
}

// Q4_0 and Q5_0: d = max / -2^(kBits - 1) (max: the value of largest
// magnitude), q = min(2^kBits - 1, (int)(x / d + 2^(kBits - 1) + 0.5)).
template <typename Block>
  requires(Block::kValues == kQK && !Block::kMin)
void quantize_blocks(const float* x, Block* y, int64_t nb) {
  constexpr int kBits = Block::kBits, kOffset = 1 << (kBits - 1), kMaxQ = (1 << kBits) - 1;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax;
    const float d = signed_max(x, kQK, &amax) / -kOffset;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min(kMaxQ, static_cast<int>(x[j] * id + (kOffset + 0.5f)));
    pack_q<kBits>(q, &y[i]);
  }
}

// Q4_1 and Q5_1: d = (max - min) / (2^kBits - 1), m = min,
// q = (int)((x - min) / d + 0.5) (Q4_1 capped at 15, as ggml does; Q5_1 not).
template <typename Block>
  requires(Block::kValues == kQK && Block::kMin)
void quantize_blocks(const float* x, Block* y, int64_t nb) {
  constexpr int kBits = Block::kBits;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << kBits) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) {
      const float v = (x[j] - min) * id + 0.5f;
      if constexpr (kBits == 4) {
        q[j] = std::min(15, static_cast<int>(v));
      } else {
        q[j] = static_cast<uint8_t>(v);
      }
    }
    pack_q<kBits>(q, &y[i]);
  }
}

// Q8_0 and Q8_1 share the scale and rounding; Q8_1 also stores s = d * sum(q).
template <typename Block>
  requires(std::is_same_v<Block, BlockQ8_0> || std::is_same_v<Block, BlockQ8_1>)
void quantize_blocks(const float* x, Block* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    if constexpr (std::is_same_v<Block, BlockQ8_1>)
      y[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

// ---- scale searches shared by the K formats (ggml's make_*_quants) ----

// Symmetric levels L in [0, 2*nmax) (value = scale * (L - nmax)); rmse_type 1
// weights by x^2 and tries 18 scales around the first guess. Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  auto weight = [&](int i) -> float {
    return rmse_type == 1   ? x[i] * x[i]
           : rmse_type == 2 ? 1
           : rmse_type == 3 ? std::fabs(x[i])
                            : std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's sub-block search: levels in [0, 2*nmax), improved one value at a time.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric levels L in [0, nmax] (value = scale * L - the_min), weighted
// least squares over nstep + 1 candidate scales. Returns the scale.
// Stays long: ggml's make_qkx2_quants operation by operation (the bytes must match
// llama-quantize's); split, it would no longer read against its source.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ---- K formats (quantize_row_q{2,3,4,5,6,8}_K_ref) ----

// L[0, 16) = the 16 values x at the stored scale d: rounded, clamped to
// [-offset, offset) and made unsigned (+ offset); Q3_K's and Q6_K's last pass.
void requantize16(const float* x, float d, int offset, int8_t* L) {
  for (int j = 0; j < 16; ++j) {
    const int l = nearest_int(x[j] / d);
    L[j] = static_cast<int8_t>(std::max(-offset, std::min(offset - 1, l)) + offset);
  }
}

// Four 2-bit levels per byte: byte l of each 32-byte group holds values l, l+32, l+64, l+96.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

void quantize_blocks(const float* x, BlockQ2_K* y, int64_t nb) {
  uint8_t L[kQKK], Laux[16];
  float weights[16], mins[kQKK / 16], scales[kQKK / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQKK / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                   0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQKK / 16; ++j)
        y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_f16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQKK / 16; ++j) y[i].scales[j] = 0;
      y[i].d = f32_to_f16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQKK / 16; ++j) {
        y[i].scales[j] =
            static_cast<uint8_t>(y[i].scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      y[i].dmin = f32_to_f16(max_min / q4scale);
    } else {
      y[i].dmin = f32_to_f16(0.f);
    }
    // Requantize with the stored (FP16, 4-bit) scales.
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_blocks(const float* x, BlockQ3_K* y, int64_t nb) {
  int8_t L[kQKK];
  float scales[kQKK / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    for (int j = 0; j < kQKK / 16; ++j) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    float amax;
    const float max_scale = signed_max(scales, kQKK / 16, &amax);
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQKK / 16; ++j) {
        int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] =
            static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = f32_to_f16(1 / iscale);
    } else {
      y[i].d = f32_to_f16(0.f);
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * (static_cast<int>(q3_k_scale(y[i].scales, j)) - 32);  // formats/q3_k.h
      if (d != 0.0f) requantize16(x + 16 * j, d, 4, L + 16 * j);
    }
    // High bit of value j goes to bit j / 32 of hmask[j % 32]; the low two bits to qs.
    std::memset(y[i].hmask, 0, kQKK / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < kQKK; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] = static_cast<uint8_t>(y[i].hmask[m] | hm);
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
      if (++m == kQKK / 8) {
        m = 0;
        hm = static_cast<uint8_t>(hm << 1);
      }
    }
    pack_2bit(reinterpret_cast<const uint8_t*>(L), y[i].qs);
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 with a scale and a
// min each, searched by make_qkx2_quants, then quantized to 6 bits against
// the block's FP16 d and dmin. Writes the levels to L and the header to d,
// dmin, scales.
void quantize_k_scale_min(const float* x, int nmax, float rmin, float rdelta, int nstep,
                          uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[kQKK / 32], scales[kQKK / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQKK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < kQKK / 32; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scale_min_k4(ls, lm, scales_out);  // formats/k_scales.h
  *d_out = f32_to_f16(max_scale / 63.f);
  *dmin_out = f32_to_f16(max_min / 63.f);
  for (int j = 0; j < kQKK / 32; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales_out, &sc, &m);
    const float d = f16_to_f32(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void quantize_blocks(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quantize_k_scale_min(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQKK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_blocks(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quantize_k_scale_min(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQKK / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQKK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] = static_cast<uint8_t>(qh[j] | m1);
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] = static_cast<uint8_t>(qh[j] | m2);
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_blocks(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[kQKK];
  float scales[kQKK / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    for (int ib = 0; ib < kQKK / 16; ++ib) scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
    float max_abs_scale;
    const float max_scale = signed_max(scales, kQKK / 16, &max_abs_scale);
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = f32_to_f16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < kQKK / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = f16_to_f32(y[i].d) * y[i].scales[j];
      if (d != 0.0f) requantize16(x + 16 * j, d, 32, L + 16 * j);
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

void quantize_blocks(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float amax;
    const float max = signed_max(x, kQKK, &amax);
    if (amax == 0.0f) {  // ggml leaves bsums unwritten here; they are zero in ours
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// ---- non-linear 4-bit (quantize_row_iq4_nl_impl with ntry 7, no weights) ----

// Index of the code-book value nearest to x (ties to the larger); `val` sorted.
int best_index_iq4nl(const int8_t* val, float x) {
  constexpr int n = 16;
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav])
      mu = mav;
    else
      ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// One IQ4_NL block (super_block_size 32) or IQ4_XS super-block (256, eight
// sub-blocks of 32 sharing an FP16 d and 6-bit scales). Weights are x^2.
// Stays long: ggml's quantize_row_iq4_nl_impl operation by operation (the bytes must
// match llama-quantize's); split, it would no longer read against its source.
void quantize_iq4_impl(int super_block_size, const float* x, uint16_t* dh, uint8_t* q4,
                       uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int kBlock = 32, kNtry = 7;
  int8_t values[16];
  for (int k = 0; k < 16; ++k) values[k] = iq4nl_value(k);
  uint8_t L[kQKK];
  float scales[kQKK / kBlock], weight[kBlock];

  std::memset(q4, 0, static_cast<size_t>(super_block_size / 2));
  dh[0] = f32_to_f16(0.f);
  float max_scale = 0, amax_scale = 0;
  const int nb = super_block_size / kBlock;
  for (int ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * kBlock;
    uint8_t* Lb = L + ib * kBlock;
    for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      std::memset(Lb, 0, kBlock);
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int l = best_index_iq4nl(values, id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const int l = best_index_iq4nl(values, id * xb[j]);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    const float abs_d = std::fabs(d);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = d;
    }
  }

  if (nb > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    dh[0] = f32_to_f16(d);
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int ib = 0; ib < nb; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * l;
      const float idl = dl != 0.0f ? 1 / dl : 0.f;
      uint8_t* Lb = L + ib * kBlock;
      const float* xb = x + ib * kBlock;
      for (int j = 0; j < kBlock; ++j)
        Lb[j] = static_cast<uint8_t>(best_index_iq4nl(values, idl * xb[j]));
      l += 32;
      const uint8_t l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (l_l << 4));
      *scales_h = static_cast<uint16_t>(*scales_h | (l_h << (2 * (ib % 8))));
    }
  } else {
    dh[0] = f32_to_f16(scales[0]);
    const float id = scales[0] != 0.0f ? 1 / scales[0] : 0;
    for (int j = 0; j < super_block_size; ++j)
      L[j] = static_cast<uint8_t>(best_index_iq4nl(values, id * x[j]));
  }
  for (int i = 0; i < super_block_size / 32; ++i) {
    for (int j = 0; j < 16; ++j)
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

// IQ4_NL and IQ4_XS (quantize_iq4_nl / quantize_iq4_xs without an importance matrix).
void quantize_blocks(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_iq4_impl(kQK, x + i * kQK, &y[i].d, y[i].qs, nullptr, nullptr);
}
void quantize_blocks(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    quantize_iq4_impl(kQKK, x + i * kQKK, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
  }
}

}  // namespace

bool can_quantize(WeightType type) {
  return weight_type_traits(static_cast<uint32_t>(type)) != nullptr;
}

// The plain types here, every block format through its quantize_blocks (formats/registry.h's list).
void quantize_row(WeightType type, const float* src, void* dst, int64_t n) {
  const WeightTypeTraits& t = weight_type_traits(type);
  PREFIXD_CHECK(n % t.block_elements == 0,
                "quantize_row: row length is not a multiple of the block");
  const int64_t nb = n / t.block_elements;
  switch (type) {
    case WeightType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case WeightType::F16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(src[i]);
      return;
    }
    case WeightType::BF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(src[i]);
      return;
    }
#define PREFIXD_QUANTIZE(T, Block) \
  case WeightType::T: quantize_blocks(src, static_cast<Block*>(dst), nb); return;
      PREFIXD_BLOCK_FORMATS(PREFIXD_QUANTIZE)  // formats/registry.h: a quantize_blocks above for each
      PREFIXD_QUANTIZE(Q8_1, BlockQ8_1)
      PREFIXD_QUANTIZE(Q8_K, BlockQ8_K)
#undef PREFIXD_QUANTIZE
  }
  PREFIXD_CHECK(false, "quantize_row: unknown weight type");
}
}  // namespace prefixd::quant
