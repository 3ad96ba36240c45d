// What the format headers of kernels/quant/formats/ share: the block sizes,
// and the host/device arithmetic of their chunk decoders (8 consecutive values
// of a block at a time), which compute with the operations of the scalar
// reference in the same order and never fused into a multiply-add, so a chunk
// equals quant::dequantize_row's values bit for bit on host and device.
//
// Every format header here follows one protocol: its block structs carry
// kValues (values per block) and decode_chunk(block bytes, c, v), and
// dequant_by_chunks() below is the scalar reference for all of them, so the
// CPU reference and the CUDA decoder (kernels/cuda/quant_chunk.h) are one code.
//
// Block addresses only need 2-byte alignment (every block size is even and
// rows are runs of whole blocks), so multi-byte fields are read as 16-bit
// words. Host and device (PREFIXD_HD). A CPU set's translation unit includes
// the format headers with PREFIXD_ISA_NS defined; they then live in that
// set's namespace (PREFIXD_QUANT_NS, as quant_blocks.h), so code compiled with
// one set's flags is never linked in for another.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"

#if defined(__CUDA_ARCH__)
#define PREFIXD_UNROLL _Pragma("unroll")
#else
#define PREFIXD_UNROLL
#endif

// The namespace of the format headers: the set's own in a set's translation unit.
#if defined(PREFIXD_ISA_NS)
#define PREFIXD_QUANT_NS prefixd::cpu::PREFIXD_ISA_NS::quant
#else
#define PREFIXD_QUANT_NS prefixd::quant
#endif

namespace PREFIXD_QUANT_NS {

constexpr int kQK = 32;    // values per block of the 32-value formats
constexpr int kQKK = 256;  // values per super-block of the K and XS formats

namespace chunk {

// A product / sum rounded on its own, as the host evaluates the reference
// (nvcc would otherwise contract `a * b - c` into one FMA).
PREFIXD_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PREFIXD_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PREFIXD_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Little-endian 16-bit word at a 2-byte aligned address.
PREFIXD_HD uint32_t u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
#endif
}
PREFIXD_HD float f16(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(u16(p))); }
PREFIXD_HD uint32_t u32(const uint8_t* p) { return u16(p) | (u16(p + 2) << 16); }

// Eight consecutive bytes at a 2-byte aligned address, held in two words.
struct Bytes8 {
  uint32_t lo, hi;  // bytes 0-3 and 4-7, little-endian
  PREFIXD_HD uint32_t operator[](int t) const {
    return ((t < 4 ? lo : hi) >> (8 * (t & 3))) & 0xFFu;
  }
};
PREFIXD_HD Bytes8 bytes8(const uint8_t* p) { return {u32(p), u32(p + 4)}; }

// Nibble t of the 8 bytes q, low nibbles when shift is 0, high when 4.
PREFIXD_HD int nibble(const Bytes8& q, int t, int shift) {
  return static_cast<int>((q[t] >> shift) & 0xFu);
}

}  // namespace chunk

// Bytes side by side in a 64-bit word (the CPU sets' scale unpacks).
namespace swar {

// Eight 6-bit values (bytes 0..63) minus 32 each, as signed bytes, without a
// borrow crossing bytes: (x | 0x80) - 32 = x + 0x60, then bit 7 flipped.
PREFIXD_HD uint64_t minus32_bytes(uint64_t v) {
  const uint64_t top = 0x8080808080808080ull;
  return ((v | top) - 0x2020202020202020ull) ^ top;
}

}  // namespace swar

// The scalar reference of a format: y (Block::kValues) f32 = the block's
// values, decoded chunk by chunk as the device decodes them.
template <typename Block>
PREFIXD_HD void dequant_by_chunks(const Block& b, float* y) {
  const auto* p = reinterpret_cast<const uint8_t*>(&b);
  for (int c = 0; c < Block::kValues / 8; ++c) {
    float v[8];
    Block::decode_chunk(p, c, v);
    for (int t = 0; t < 8; ++t) y[8 * c + t] = v[t];
  }
}

#if defined(PREFIXD_ISA_NS)
// A CPU set's F32 rows of a block: y (Block::kValues) f32. The scalar
// reference unless the format's header has a vector decoder: an overload
// dequant_vec<Vec>(const BlockX&, float*) over the set's vector layer Vec.
template <class Vec, typename Block>
inline void dequant_vec(const Block& b, float* y) {
  dequant_by_chunks(b, y);
}
#endif

}  // namespace
