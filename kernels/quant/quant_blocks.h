// The ggml block formats as they lie in a GGUF file, and the dequantization of
// one block to F32 with ggml's own arithmetic (same operations, same order), so
// a row dequantized here equals llama.cpp's dequantization (within one rounding
// where the compiler fuses a multiply-add).
//
// Usable from host and device code (PREFIXD_HD). Each CPU instruction set's
// translation unit includes this file with PREFIXD_ISA_NS defined; the
// functions then live in that set's namespace so code compiled with one set's
// flags is never linked in for another (see tests/scripts/test_cpu_isa_isolation.sh).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/q4_0.h"
#include "kernels/quant/formats/q4_k.h"
#include "kernels/quant/formats/q5_0.h"
#include "kernels/quant/weight_type.h"

#if defined(PREFIXD_ISA_NS)
namespace prefixd::cpu::PREFIXD_ISA_NS::quant {
#else
namespace prefixd::quant {
#endif

// kQK, kQKK: formats/decode_ops.h. Formats with their own header there:
// Q4_0, Q4_1 (q4_0.h), Q5_0, Q5_1 (q5_0.h), Q4_K, Q5_K (q4_k.h).

// w = d * q, q signed 8 bits.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// Q8_0 plus s = d * sum(q) (activations of the *_1 formats).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK];
};
// 16 sub-blocks of 16: 4-bit scale and 4-bit min each; w = d*sc*q - dmin*m, q 2 bits.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16 with 6-bit signed scales; q 3 bits (2 in qs, 1 in hmask).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 16 sub-blocks of 16 with 8-bit signed scales; q 6 bits (4 in ql, 2 in qh), offset 32.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// Activations of the K formats: F32 scale, and the sums of each 16 values.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
// 4-bit indices into the non-linear table kIq4nlValues, scaled by d.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// IQ4_NL values in 8 sub-blocks of 32, each with a 6-bit scale (low 4 bits in
// scales_l, high 2 in scales_h), offset 32.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// The IQ4_NL / IQ4_XS code book.
PREFIXD_HD int8_t iq4nl_value(int i) {
  constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return kValues[i];
}

// The 16 signed 6-bit scales of a Q3_K block (stored biased by 32).
PREFIXD_HD void q3_k_scales(const uint8_t* packed, int8_t* out) {
  uint32_t aux[4];
  memcpy(aux, packed, 12);
  const uint32_t kmask1 = 0x03030303u, kmask2 = 0x0f0f0f0fu;
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  memcpy(out, aux, 16);
}

PREFIXD_HD void dequant_q8_0(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

PREFIXD_HD void dequant_q2_k(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < kQKK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = b.scales[is++];
      float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
      sc = b.scales[is++];
      dl = d * static_cast<float>(sc & 0xF);
      ml = dmin * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
      shift += 2;
    }
    q += 32;
  }
}

PREFIXD_HD void dequant_q3_k(const BlockQ3_K& b, float* y) {
  const float d_all = f16_to_f32(b.d);
  int8_t scales[16];
  q3_k_scales(b.scales, scales);
  const uint8_t* q = b.qs;
  const uint8_t* hm = b.hmask;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < kQKK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * static_cast<float>(scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      dl = d_all * static_cast<float>(scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      shift += 2;
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

PREFIXD_HD void dequant_q6_k(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kQKK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

PREFIXD_HD void dequant_iq4_nl(const BlockIQ4_NL& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(iq4nl_value(b.qs[j] & 0xF));
    y[j + kQK / 2] = d * static_cast<float>(iq4nl_value(b.qs[j] >> 4));
  }
}

PREFIXD_HD void dequant_iq4_xs(const BlockIQ4_XS& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* qs = b.qs;
  for (int ib = 0; ib < kQKK / 32; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b.scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(iq4nl_value(qs[j] & 0xF));
      y[j + 16] = dl * static_cast<float>(iq4nl_value(qs[j] >> 4));
    }
    y += 32;
    qs += 16;
  }
}

// One block of `type` (block_elements values; F32/F16/BF16: one value) to F32.
// The block is read through memcpy-free casts: `src` needs no alignment beyond
// 2 bytes (GGUF data is 32-byte aligned and every block size is even).
PREFIXD_HD void dequant_block(WeightType type, const void* src, float* y) {
  switch (type) {
    case WeightType::F32: memcpy(y, src, 4); return;
    case WeightType::F16: y[0] = f16_to_f32(*static_cast<const uint16_t*>(src)); return;
    case WeightType::BF16: y[0] = bf16_to_f32(*static_cast<const uint16_t*>(src)); return;
    case WeightType::Q4_0: dequant_q4_0(*static_cast<const BlockQ4_0*>(src), y); return;
    case WeightType::Q4_1: dequant_q4_1(*static_cast<const BlockQ4_1*>(src), y); return;
    case WeightType::Q5_0: dequant_q5_0(*static_cast<const BlockQ5_0*>(src), y); return;
    case WeightType::Q5_1: dequant_q5_1(*static_cast<const BlockQ5_1*>(src), y); return;
    case WeightType::Q8_0: dequant_q8_0(*static_cast<const BlockQ8_0*>(src), y); return;
    case WeightType::Q2_K: dequant_q2_k(*static_cast<const BlockQ2_K*>(src), y); return;
    case WeightType::Q3_K: dequant_q3_k(*static_cast<const BlockQ3_K*>(src), y); return;
    case WeightType::Q4_K: dequant_q4_k(*static_cast<const BlockQ4_K*>(src), y); return;
    case WeightType::Q5_K: dequant_q5_k(*static_cast<const BlockQ5_K*>(src), y); return;
    case WeightType::Q6_K: dequant_q6_k(*static_cast<const BlockQ6_K*>(src), y); return;
    case WeightType::IQ4_NL: dequant_iq4_nl(*static_cast<const BlockIQ4_NL*>(src), y); return;
    case WeightType::IQ4_XS: dequant_iq4_xs(*static_cast<const BlockIQ4_XS*>(src), y); return;
    case WeightType::Q8_1:
    case WeightType::Q8_K: return;  // activation formats: never dequantized as weights
  }
}

}  // namespace
