// The 8-bit integer layer of the portable set: the operations of
// x86_int8/ymm_int8.h on 32-byte generic vectors and plain loops, same results bit
// for bit (the dot products are exact integers; the activation quantizer uses
// the same float operations and nearest-even rounding).
// Included by kernels/cpu/portable/vec.h only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace prefixd::cpu::PREFIXD_ISA_NS {

struct I8 {
  typedef uint8_t B __attribute__((vector_size(32)));
  typedef uint16_t H __attribute__((vector_size(32)));
  struct F {
    float v[8];
  };
  static constexpr int kTileW = 2, kTileX = 2;  // int8_gemm.h's register tile

  static PREFIXD_VEC_INLINE B load(const void* p) {
    B b;
    std::memcpy(&b, p, sizeof(b));
    return b;
  }
  static PREFIXD_VEC_INLINE B nibbles16(const uint8_t* p) {
    B b;
    for (int j = 0; j < 16; ++j) {
      b[j] = p[j] & 0x0F;
      b[16 + j] = p[j] >> 4;
    }
    return b;
  }
  static PREFIXD_VEC_INLINE B lo4(B v) { return v & 0x0F; }
  static PREFIXD_VEC_INLINE B hi4(B v) { return v >> 4; }
  static PREFIXD_VEC_INLINE B and_c(B v, uint8_t m) { return v & m; }
  static PREFIXD_VEC_INLINE B or_(B a, B b) { return a | b; }
  template <int S>
  static PREFIXD_VEC_INLINE B shr16(B v) {
    H h;
    std::memcpy(&h, &v, sizeof(h));
    h = h >> S;
    std::memcpy(&v, &h, sizeof(v));
    return v;
  }
  template <int S>
  static PREFIXD_VEC_INLINE B shl16(B v) {
    H h;
    std::memcpy(&h, &v, sizeof(h));
    h = h << S;
    std::memcpy(&v, &h, sizeof(v));
    return v;
  }
  static PREFIXD_VEC_INLINE B bits32(uint32_t word, uint8_t value) {
    B b;
    for (int j = 0; j < 32; ++j) b[j] = ((word >> j) & 1u) ? value : 0;
    return b;
  }
  static PREFIXD_VEC_INLINE B test(B v, uint8_t bit, uint8_t value) {
    B b;
    for (int j = 0; j < 32; ++j) b[j] = (v[j] & bit) ? value : 0;
    return b;
  }
  static PREFIXD_VEC_INLINE B lut16(const int8_t* table16, B idx) {
    B b;
    for (int j = 0; j < 32; ++j) b[j] = static_cast<uint8_t>(table16[idx[j] & 15]);
    return b;
  }
  static PREFIXD_VEC_INLINE B abs(B v) {
    B b;
    for (int j = 0; j < 32; ++j) {
      const int s = static_cast<int8_t>(v[j]);
      b[j] = static_cast<uint8_t>(s < 0 ? -s : s);
    }
    return b;
  }
  static PREFIXD_VEC_INLINE B sign(B s, B w) {
    B b;
    for (int j = 0; j < 32; ++j) {
      const int wj = static_cast<int8_t>(w[j]);
      const int sj = static_cast<int8_t>(s[j]);
      b[j] = static_cast<uint8_t>(wj < 0 ? -sj : wj == 0 ? 0 : sj);
    }
    return b;
  }
  static PREFIXD_VEC_INLINE F dot(B u, B s) {
    F f;
    for (int l = 0; l < 8; ++l) {
      int32_t acc = 0;
      for (int k = 0; k < 4; ++k) acc += static_cast<int32_t>(u[4 * l + k]) * static_cast<int8_t>(s[4 * l + k]);
      f.v[l] = static_cast<float>(acc);
    }
    return f;
  }

  static PREFIXD_VEC_INLINE float half(uint16_t h) { return f16_to_f32(h); }

  static PREFIXD_VEC_INLINE void scale_u8x8(const uint8_t* p, float s, float* out) {
    for (int j = 0; j < 8; ++j) out[j] = static_cast<float>(p[j]) * s;
  }
  static PREFIXD_VEC_INLINE void scale_i8x16(const int8_t* p, float s, float* out) {
    for (int j = 0; j < 16; ++j) out[j] = static_cast<float>(p[j]) * s;
  }

  // --- int32 accumulation with 16-bit scales (the K formats) ---
  struct I {
    int32_t v[8];
  };
  static PREFIXD_VEC_INLINE I izero() { return I{}; }
  static PREFIXD_VEC_INLINE I dot_scaled(B u, B s, B sc, I acc) {
    for (int l = 0; l < 8; ++l) {
      for (int p = 0; p < 2; ++p) {
        const int j = 4 * l + 2 * p;  // 16-bit lane 2l + p
        const int pair = u[j] * static_cast<int8_t>(s[j]) + u[j + 1] * static_cast<int8_t>(s[j + 1]);
        const int16_t scale = static_cast<int16_t>(sc[j] | (sc[j + 1] << 8));
        acc.v[l] += pair * scale;
      }
    }
    return acc;
  }
  static PREFIXD_VEC_INLINE F to_float(I v) {
    F f;
    for (int l = 0; l < 8; ++l) f.v[l] = static_cast<float>(v.v[l]);
    return f;
  }
  static PREFIXD_VEC_INLINE B widen_u8x8(const uint8_t* p) {
    B b;
    for (int j = 0; j < 8; ++j) {
      b[2 * j] = b[16 + 2 * j] = p[j];
      b[2 * j + 1] = b[16 + 2 * j + 1] = 0;
    }
    return b;
  }
  static PREFIXD_VEC_INLINE B widen_i8x8(const int8_t* p) {
    B b;
    for (int j = 0; j < 8; ++j) {
      b[2 * j] = b[16 + 2 * j] = static_cast<uint8_t>(p[j]);
      b[2 * j + 1] = b[16 + 2 * j + 1] = p[j] < 0 ? 0xFF : 0;
    }
    return b;
  }
  static PREFIXD_VEC_INLINE B shuffle(B src, const uint8_t* mask) {
    B b;
    for (int j = 0; j < 32; ++j) b[j] = src[(j & 16) + (mask[j] & 15)];
    return b;
  }
  static PREFIXD_VEC_INLINE int32_t dot_i16x8(const int16_t* a, const int16_t* b) {
    int32_t s = 0;
    for (int j = 0; j < 8; ++j) s += a[j] * b[j];
    return s;
  }
  static PREFIXD_VEC_INLINE int32_t dot_i16x16(const int16_t* a, const int16_t* b) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += a[j] * b[j];
    return s;
  }

  static PREFIXD_VEC_INLINE F zero() { return F{}; }
  static PREFIXD_VEC_INLINE F set1(float x) { return F{{x, x, x, x, x, x, x, x}}; }
  static PREFIXD_VEC_INLINE F mul(F a, F b) {
    for (int l = 0; l < 8; ++l) a.v[l] *= b.v[l];
    return a;
  }
  static PREFIXD_VEC_INLINE F fmadd(F a, F b, F c) {
    for (int l = 0; l < 8; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  // The same pairing as avx2's reduce: (l, l+4), then (l, l+2), then (0, 1).
  static PREFIXD_VEC_INLINE float reduce(F a) {
    float s[4];
    for (int l = 0; l < 4; ++l) s[l] = a.v[l] + a.v[l + 4];
    const float t0 = s[0] + s[2], t1 = s[1] + s[3];
    return t0 + t1;
  }

  static PREFIXD_VEC_INLINE void quantize32(const float* x, int8_t* q, float* d_out, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(std::nearbyint(x[j] * id));
      q[j] = static_cast<int8_t>(v);
      s += v;
    }
    *d_out = d;
    *sum = s;
  }
  static PREFIXD_VEC_INLINE void quantize256(const float* x, int8_t* q, float* d_out, int16_t* sums16) {
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) {
        const int v = static_cast<int>(std::nearbyint(x[j] * id));
        q[j] = static_cast<int8_t>(v);
        s += v;
      }
      sums16[g] = static_cast<int16_t>(s);
    }
    *d_out = d;
  }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
