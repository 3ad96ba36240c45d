// The AMX tile configuration: LDTILECFG's 64-byte operand (palette 1: eight
// tiles tmm0..tmm7 of up to 16 rows x 64 bytes) and loading it on the calling
// thread only when it differs from the one that thread loaded last, so that
// each thread configures once per tile shape, not once per call. The OS
// permission (arch_prctl XCOMP_PERM) is per process and is requested by
// detection (cpu_isa.cpp): call these only where cpu_supports(CpuIsa::kAmx).
// Header-only, with per-function target attributes, so that the amx set's
// kernels and the tests (built without -mamx-tile) run the same code. x86-64 only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace prefixd::cpu::amx::tiles {

#define PREFIXD_AMX_TILE_TARGET __attribute__((target("amx-tile")))

// LDTILECFG / STTILECFG memory layout (Intel SDM, "TILECFG").
struct alignas(64) TileConfig {
  uint8_t palette = 1;   // 1: 8 tiles of 16 rows x 64 bytes at most
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile t (0: unused)
  uint8_t rows[16] = {};    // rows of tile t (0: unused)

  void set(int tile, int n_rows, int bytes_per_row) {
    rows[tile] = static_cast<uint8_t>(n_rows);
    colsb[tile] = static_cast<uint16_t>(n_rows > 0 ? bytes_per_row : 0);
  }
  bool operator==(const TileConfig& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Loads `cfg` into the tile unit. The barrier makes the compiler write every
// byte of cfg before LDTILECFG reads it: GCC 12 sees no read of the struct in
// the builtin and drops the stores that fill it (ggml-org/llama.cpp#26954).
PREFIXD_AMX_TILE_TARGET inline void load_config(const TileConfig& cfg) {
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// The configuration the tile unit holds (STTILECFG; all zero when none is loaded).
PREFIXD_AMX_TILE_TARGET inline TileConfig stored_config() {
  TileConfig out;
  _tile_storeconfig(&out);
  __asm__ __volatile__("" : : "r"(&out) : "memory");
  return out;
}

// The configuration this thread loaded last through use_config (none: all zero).
inline TileConfig& thread_config() {
  static thread_local TileConfig last{.palette = 0};
  return last;
}

// Makes `cfg` this thread's configuration, loading it only when it differs
// from the one this thread loaded last (LDTILECFG also zeroes every tile).
PREFIXD_AMX_TILE_TARGET inline void use_config(const TileConfig& cfg) {
  TileConfig& last = thread_config();
  if (last == cfg) return;
  load_config(cfg);
  last = cfg;
}

// Releases this thread's tile state (TILERELEASE) and forgets its configuration.
PREFIXD_AMX_TILE_TARGET inline void release() {
  _tile_release();
  thread_config() = TileConfig{.palette = 0};
}

}  // namespace prefixd::cpu::amx::tiles
