// The int8 panel: 32 weight rows of a block format unpacked once per call into
// unsigned bytes, four consecutive values of a row side by side, so that one
// vector holds 4 values of each of 8 or 16 rows (the operand vpdpbusd and
// vpmaddubsw + vpmaddwd multiply against 4 broadcast x bytes). The sets'
// integer prefill tiles (avx512bf16/int8_panels.h, avx2/int8_panels.h) read it.
//
// Layout, per 32-value group g of the weight rows (kGroupBytes each):
//   q[8][32][4] u8  -- q[t][r][b] is value 4t + b of row r in the group
//   s[32]  f32      -- row r's value = s[r] * q + m[r]
//   m[32]  f32
// Formats with signed values (Q8_0, IQ4_NL) store q + 128 and m = -128 s.
// Included by kernels/cpu/<isa>/int8_panels.h only (after the set's vec.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/int8_gemm.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel {

constexpr int64_t kRows = kGemmPanel;  // weight rows per panel
constexpr int64_t kQBytes = 8 * kRows * 4;  // the q part of a group
constexpr int64_t kGroupBytes = kQBytes + 2 * kRows * static_cast<int64_t>(sizeof(float));

// One 32-value group of one weight row: its 32 values as bytes (signed when
// the format's are), w = s * q + m.
struct Group {
  i8gemm::B q;
  float s, m;
};

// The groups of block b of a row: 1 for the 32-value formats, 8 for Q4_K/Q5_K.
template <class Fmt>
PREFIXD_VEC_INLINE int unpack_block(const typename Fmt::Block& b, Group* g) {
  if constexpr (Fmt::kSuper) {  // Q4_K/Q5_K: the groups, and the scales unpacked once (k_scales.h)
    i8gemm::B q[8];
    quant::int8_groups_k4<I8>(b, q);
    const quant::ScalesMinsK4 sm = quant::scales_mins_k4(b.scales);
    const float d = I8::half(b.d), dmin = I8::half(b.dmin);
    for (int k = 0; k < 8; ++k) {
      g[k] = {q[k], d * static_cast<float>(quant::byte_of(sm.scales, k)),
              -dmin * static_cast<float>(quant::byte_of(sm.mins, k))};
    }
    return 8;
  } else {
    i8gemm::B q[1];
    float sc[1], mn[1] = {0.0f};
    Fmt::unpack(b, q, sc, mn);
    g[0] = {q[0], sc[0], Fmt::kSigned ? -128.0f * sc[0] : mn[0]};
    return 1;
  }
}

// Whether Fmt unpacks to signed bytes (stored in the panel as q + 128).
template <class Fmt>
constexpr bool signed_bytes() {
  if constexpr (Fmt::kSuper) {
    return false;
  } else {
    return Fmt::kSigned;
  }
}

// Weight rows [r0, r0 + valid) of a (Fmt rows) -> panel; rows past `valid` zero.
template <class Fmt>
void build_panel(const GemmArgs& a, int64_t r0, int64_t valid, uint8_t* panel) {
  using Block = typename Fmt::Block;
  constexpr int kPerBlock = Fmt::kSuper ? 8 : 1;
  constexpr uint32_t kFlip = signed_bytes<Fmt>() ? 0x80808080u : 0u;  // q + 128 for signed bytes
  const int64_t n_groups = a.cols / 32;
  const int64_t n_blocks = n_groups / kPerBlock;
  if (valid < kRows) {
    for (int64_t g = 0; g < n_groups; ++g) std::memset(panel + g * kGroupBytes, 0, kGroupBytes);
  }
  for (int64_t r = 0; r < valid; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.rows_data + (r0 + r) * a.row_bytes);
    for (int64_t b = 0; b < n_blocks; ++b) {
      Group groups[8];
      const int n = unpack_block<Fmt>(blocks[b], groups);
      for (int k = 0; k < n; ++k) {
        uint8_t* pg = panel + (b * kPerBlock + k) * kGroupBytes;
        uint32_t words[8];
        std::memcpy(words, &groups[k].q, sizeof(words));
        for (int t = 0; t < 8; ++t) std::memcpy(pg + (t * kRows + r) * 4, &(words[t] ^= kFlip), 4);
        float sm[2] = {groups[k].s, groups[k].m};
        std::memcpy(pg + kQBytes + r * sizeof(float), &sm[0], sizeof(float));
        std::memcpy(pg + kQBytes + (kRows + r) * sizeof(float), &sm[1], sizeof(float));
      }
    }
  }
}

// The panel in 64-byte aligned per-thread scratch (gemm_scratch_floats(cols)
// floats hold cols / 32 groups and the alignment: 144 cols bytes >= 40 cols + 64).
inline uint8_t* panel_in(float* scratch) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
}

// Calls body.template operator()<Fmt>() for a.row_type's format; false for a
// type without an int8 panel.
template <class Body>
bool with_format(WeightType t, Body&& body) {
  switch (t) {
    case WeightType::Q4_0: body.template operator()<i8gemm::Fmt<quant::BlockQ4_0>>(); return true;
    case WeightType::Q4_1: body.template operator()<i8gemm::Fmt<quant::BlockQ4_1>>(); return true;
    case WeightType::Q5_0: body.template operator()<i8gemm::Fmt<quant::BlockQ5_0>>(); return true;
    case WeightType::Q5_1: body.template operator()<i8gemm::Fmt<quant::BlockQ5_1>>(); return true;
    case WeightType::Q8_0: body.template operator()<i8gemm::Fmt<quant::BlockQ8_0>>(); return true;
    case WeightType::IQ4_NL: body.template operator()<i8gemm::Fmt<quant::BlockIQ4_NL>>(); return true;
    case WeightType::Q4_K: body.template operator()<i8gemm::Fmt<quant::BlockQ4_K>>(); return true;
    case WeightType::Q5_K: body.template operator()<i8gemm::Fmt<quant::BlockQ5_K>>(); return true;
    default: return false;
  }
}

// For each row group p in [p0, p1) of a: its panel built in `scratch`, then
// tiles(panel, first weight row, valid rows). False for a type without one.
template <class Tiles>
bool each_panel(const GemmArgs& a, int64_t p0, int64_t p1, float* scratch, Tiles&& tiles) {
  uint8_t* panel = panel_in(scratch);
  return with_format(a.row_type, [&]<class Fmt>() {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r_begin = p * kRows;
      const int64_t valid = a.rows - r_begin < kRows ? a.rows - r_begin : kRows;
      build_panel<Fmt>(a, r_begin, valid, panel);
      tiles(static_cast<const uint8_t*>(panel), r_begin, valid);
    }
  });
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
