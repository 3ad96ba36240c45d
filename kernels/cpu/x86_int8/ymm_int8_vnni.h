// The 8-bit integer layer of the x86 sets with AVX512_VNNI (and AVX512VL):
// YmmInt8 with its dot product in one vpdpbusd on a ymm instead of vpmaddubsw
// + vpmaddwd; the same sums (no saturation either way: the u * s pair sums
// stay below 2^15), so the same results.
// Included by the kernels.cpp of sets built with AVX512_VNNI only.
#pragma once

#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
#error "x86_int8/ymm_int8_vnni.h needs AVX512_VNNI and AVX512VL"
#endif

#include <immintrin.h>

#include "kernels/cpu/x86_int8/ymm_int8.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

struct YmmInt8Vnni : YmmInt8 {
  // Lane l = sum over bytes 4l..4l+3 of u (unsigned, <= 128) * s (signed, >= -127), as floats.
  static PREFIXD_VEC_INLINE F dot(B u, B s) {
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s));
  }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
