// The `avx512bf16` set (AVX-512 F/BW/VL/DQ + AVX512_BF16 + AVX512_VNNI):
// the generic kernels instantiated on avx512/vec.h (with its BF16 dot products) and the
// ymm int8 layer in vpdpbusd, compiled with the set's own flags; the 512-bit decode tiles
// of the K formats (avx512/), and the VNNI decode tiles of the 32-value formats and int8
// prefill panels, Q6_K's among them (this folder).
#include "kernels/cpu/avx512/vec.h"
#include "kernels/cpu/x86_int8/ymm_int8_vnni.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The int8 layer: register tiles of 4 weight rows x 4 activation rows (32 registers).
struct I8 : YmmInt8Vnni {
  static constexpr int kTileW = 4, kTileX = 4;
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/avx512/int8_k_rows.h"         // decode of Q4_K, Q5_K, Q6_K in zmm
#include "kernels/cpu/avx512bf16/int8_pair_rows.h"  // decode of the 32-value formats in zmm
#include "kernels/cpu/avx512bf16/int8_panels.h"     // prefill in int8
#include "kernels/cpu/avx512bf16/int8_q6k_panels.h"  // ... and Q6_K's own panel
#include "kernels/cpu/generic/kernel_set.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// Decode: the K formats on the zmm tiles, the 32-value formats on the block-pair tiles,
// every other format on generic/int8_gemm.h's.
inline void int8_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  if (i8wide::rows(a, p0, p1, i0, i1)) return;
  if (i8pair::rows(a, p0, p1, i0, i1)) return;
  i8gemm::rows(a, p0, p1, i0, i1);
}

const CpuKernels& kernel_set() {
  static constexpr CpuKernels kTable = kernel_table({
      .gemm_int8_rows = int8_rows,
      .int8_panel_type = i8panel::takes_with_q6_k,
      .gemm_int8_panels = i8panel::rows_with_q6_k,
  });
  return kTable;
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
