// The `amx` set (the avx512bf16 set's features and AMX-TILE, AMX-BF16,
// AMX-INT8): the avx512bf16 set's kernels, with the BF16 panel products
// (BF16 weights, and the block formats dequantized to BF16 panels in prefill)
// and the int8 panels of prefill on the AMX tiles (amx/bf16_tiles.h,
// amx/int8_tiles.h). Decode of the block formats stays on the zmm VNNI tiles:
// a product of one x row gains nothing from the tile unit.
#include "kernels/cpu/avx512/vec.h"
#include "kernels/cpu/x86_int8/ymm_int8_vnni.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The int8 layer: register tiles of 4 weight rows x 4 activation rows (32 registers).
struct I8 : YmmInt8Vnni {
  static constexpr int kTileW = 4, kTileX = 4;
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/amx/bf16_tiles.h"             // BF16 panels on the tile unit
#include "kernels/cpu/avx512/int8_k_rows.h"         // decode of Q4_K, Q5_K, Q6_K in zmm
#include "kernels/cpu/avx512bf16/int8_pair_rows.h"  // decode of the 32-value formats in zmm
#include "kernels/cpu/avx512bf16/int8_panels.h"     // the formats of the int8 panels (i8panel::takes)
#include "kernels/cpu/amx/int8_tiles.h"             // prefill in int8 on the tile unit
#include "kernels/cpu/generic/kernel_set.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// Decode: as the avx512bf16 set.
inline void int8_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  if (i8wide::rows(a, p0, p1, i0, i1)) return;
  if (i8pair::rows(a, p0, p1, i0, i1)) return;
  i8gemm::rows(a, p0, p1, i0, i1);
}

// Panels: BF16 ones on the tile unit (every count of x rows), F32 and F16
// ones on the avx512bf16 set's FMA tiles (gemm_tiles.h).
inline void panels(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  if (a.dtype == DType::BF16) {
    bf16_tiles::panels(a, p0, p1, i0, i1);
    return;
  }
  gemm::panels(a, p0, p1, i0, i1, scratch);
}

constexpr CpuKernels table() {
  CpuKernels k = kernel_table({
      .gemm_int8_rows = int8_rows,
      .int8_panel_type = i8panel::takes,
      .gemm_int8_panels = int8_tiles::rows,
  });
  k.gemm_panels = panels;
  return k;
}

const CpuKernels& kernel_set() {
  static constexpr CpuKernels kTable = table();
  return kTable;
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
