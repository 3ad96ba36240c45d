// The portable vector layer of the CPU kernels: 4 float lanes as a GCC/Clang
// generic vector, the width every baseline target has in registers (SSE2 on
// x86-64, NEON on aarch64). Wider generic vectors than the target's registers
// are lowered through the stack (measured: 3.6 GFLOP/s for 8 lanes on SSE2
// against 20+ for 4). No intrinsics; F16/BF16 conversions are the scalar ones
// of kernels/dtype.h, lane by lane.
// Only kernels/cpu/portable/kernels.cpp includes this file.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp2_poly.h"
#include "kernels/dtype.h"

#define PREFIXD_VEC_INLINE inline __attribute__((always_inline))

namespace prefixd::cpu::PREFIXD_ISA_NS {

struct Vec {
  typedef float T __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
  typedef uint32_t U __attribute__((vector_size(16)));
  static constexpr int N = 4;
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmVecs = 2;
  // F32 panels are copied into per-thread scratch before many x rows use
  // them (the panel is read in 4 column groups; the copy keeps it in L2).
  static constexpr bool kCopyF32Panels = true;
  // attention: register tiles of 3 keys (or head-dim rows) x 4 lane groups,
  // keys per online-softmax step.
  static constexpr int kAttnRowTile = 3;
  static constexpr int kAttnGroupTile = 4;
  static constexpr int kAttnChunk = 48;
  static constexpr int kRegisters = 16;  // vector registers of the target
  static constexpr bool kHasBf16Dot = false;

  static PREFIXD_VEC_INLINE T zero() { return T{}; }
  static PREFIXD_VEC_INLINE T set1(float f) { return T{f, f, f, f}; }
  static PREFIXD_VEC_INLINE T load(const float* p) {
    T v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static PREFIXD_VEC_INLINE void store(float* p, T v) { std::memcpy(p, &v, sizeof(v)); }
  static PREFIXD_VEC_INLINE T load_n(const float* p, int64_t n) {
    if (n >= N) return load(p);
    T v{};
    std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
    return v;
  }
  static PREFIXD_VEC_INLINE void store_n(float* p, T v, int64_t n) {
    std::memcpy(p, &v, static_cast<size_t>(n < N ? n : N) * sizeof(float));
  }

  static PREFIXD_VEC_INLINE T add(T a, T b) { return a + b; }
  static PREFIXD_VEC_INLINE T sub(T a, T b) { return a - b; }
  static PREFIXD_VEC_INLINE T mul(T a, T b) { return a * b; }
  static PREFIXD_VEC_INLINE T div(T a, T b) { return a / b; }
  static PREFIXD_VEC_INLINE T max(T a, T b) { return a > b ? a : b; }
  static PREFIXD_VEC_INLINE bool all_equal(T a, float c) {
    for (int i = 0; i < N; ++i) {
      if (a[i] != c) return false;
    }
    return true;
  }
  static PREFIXD_VEC_INLINE T fmadd(T a, T b, T c) { return a * b + c; }
  static PREFIXD_VEC_INLINE T fmsub(T a, T b, T c) { return a * b - c; }
  static PREFIXD_VEC_INLINE float reduce_add(T a) {
    float s = 0.0f;
    for (int i = 0; i < N; ++i) s += a[i];
    return s;
  }
  static PREFIXD_VEC_INLINE T select_gt(T a, T b, T t, T f) { return a > b ? t : f; }

  // exp(x) with the reduction and polynomial of the AVX2 set; 2^k from its exponent bits.
  static PREFIXD_VEC_INLINE T exp(T x) {
    const I under = x < set1(-87.3365478515625f);
    T xc = x < set1(88.0f) ? x : set1(88.0f);
    xc = xc > set1(-87.3365478515625f) ? xc : set1(-87.3365478515625f);
    const T kf = xc * 1.44269504088896341f;
    // Round to nearest (ties away; the result only picks the reduction interval).
    const I ki = __builtin_convertvector(kf + (kf < 0.0f ? set1(-0.5f) : set1(0.5f)), I);
    const T k = __builtin_convertvector(ki, T);
    T r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    T p = set1(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + (r + 1.0f);
    const I e = (ki + 127) << 23;
    T two_k;
    std::memcpy(&two_k, &e, sizeof(two_k));
    const T y = p * two_k;
    return under ? zero() : y;
  }

  // 2^x for x <= 0 as the AVX2 set computes it (clamp to -127, floor, the
  // degree-5 polynomial of exp2_poly.h, 2^floor from exponent bits): -inf
  // and NaN give 0.
  static PREFIXD_VEC_INLINE T exp2_nonpositive(T x) {
    x = x >= set1(-127.0f) ? x : set1(-127.0f);  // a NaN x compares false
    I ki = __builtin_convertvector(x, I);        // truncates toward 0 ...
    T k = __builtin_convertvector(ki, T);
    const I below = k > x;  // ... so negative non-integers step down one
    ki = ki + below;        // (true lanes are -1)
    k = __builtin_convertvector(ki, T);
    const T r = x - k;
    T p = set1(kExp2Degree5[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 5; ++i) p = p * r + kExp2Degree5[i];
    p = p * r + 1.0f;
    const I e = (ki + 127) << 23;
    T two_k;
    std::memcpy(&two_k, &e, sizeof(two_k));
    return p * two_k;
  }

  static PREFIXD_VEC_INLINE T load_f16(const uint16_t* p) { return load_f16_n(p, N); }
  // Branch-free F16 widening: the 15 magnitude bits shifted into F32
  // position and scaled by 2^112 rebase the exponent (subnormals included);
  // Inf/NaN get the all-ones exponent back; then the sign.
  static PREFIXD_VEC_INLINE T load_f16_n(const uint16_t* p, int64_t n) {
    U h{};
    for (int i = 0; i < N && i < n; ++i) h[i] = p[i];
    const U mag_bits = (h & 0x7fffu) << 13;
    T mag;
    std::memcpy(&mag, &mag_bits, sizeof(mag));
    mag = mag * 0x1p112f;
    U bits;
    std::memcpy(&bits, &mag, sizeof(bits));
    bits = bits | ((h & 0x7fffu) >= 0x7c00u ? U{} + 0x7f800000u : U{});
    bits = bits | ((h & 0x8000u) << 16);
    T v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  static PREFIXD_VEC_INLINE void store_f16(uint16_t* p, T v) { store_f16_n(p, v, N); }
  static PREFIXD_VEC_INLINE void store_f16_n(uint16_t* p, T v, int64_t n) {
    for (int i = 0; i < N && i < n; ++i) p[i] = f32_to_f16(v[i]);
  }
  // BF16 widening is a shift, so it vectorises without help.
  static PREFIXD_VEC_INLINE T load_bf16(const uint16_t* p) { return load_bf16_n(p, N); }
  static PREFIXD_VEC_INLINE T load_bf16_n(const uint16_t* p, int64_t n) {
    U u{};
    for (int i = 0; i < N && i < n; ++i) u[i] = static_cast<uint32_t>(p[i]) << 16;
    T v;
    std::memcpy(&v, &u, sizeof(v));
    return v;
  }
  static PREFIXD_VEC_INLINE void store_bf16(uint16_t* p, T v) { store_bf16_n(p, v, N); }
  static PREFIXD_VEC_INLINE void store_bf16_n(uint16_t* p, T v, int64_t n) {
    for (int i = 0; i < N && i < n; ++i) p[i] = f32_to_bf16(v[i]);
  }

  static PREFIXD_VEC_INLINE void load_bf16_pairs(const uint16_t* p, T& even, T& odd) {
    U u;
    std::memcpy(&u, p, sizeof(u));
    const U e = u << 16;
    const U o = u & 0xffff0000u;
    std::memcpy(&even, &e, sizeof(even));
    std::memcpy(&odd, &o, sizeof(odd));
  }
  // --- small integers of the block formats (N lanes of int32) ---------------
  using QI = I;
  static PREFIXD_VEC_INLINE QI q_u8(const uint8_t* p) { return QI{p[0], p[1], p[2], p[3]}; }
  static PREFIXD_VEC_INLINE QI q_i8(const int8_t* p) { return QI{p[0], p[1], p[2], p[3]}; }
  static PREFIXD_VEC_INLINE QI q_and(QI a, int m) { return a & m; }
  static PREFIXD_VEC_INLINE QI q_or(QI a, QI b) { return a | b; }
  static PREFIXD_VEC_INLINE QI q_sub(QI a, int c) { return a - c; }
  // Shifts of non-negative lanes (every use here), so arithmetic equals logical.
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shr(QI a) { return a >> S; }
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shl(QI a) { return a << S; }
  static PREFIXD_VEC_INLINE QI q_shr_n(QI a, int s) { return a >> s; }
  // Lane i = bit (first + i) of word.
  static PREFIXD_VEC_INLINE QI q_bits(uint32_t word, int first) {
    const U w = U{word, word, word, word} >> (U{0, 1, 2, 3} + static_cast<uint32_t>(first));
    return reinterpret_cast<const QI&>(w) & 1;
  }
  static PREFIXD_VEC_INLINE T q_float(QI a) { return __builtin_convertvector(a, T); }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/portable/int8_vec.h"
