// The `avx512` set (AVX-512 F/BW/VL/DQ, without AVX512_BF16 and AVX512_VNNI):
// the generic kernels instantiated on avx512/vec.h and the ymm int8 layer, compiled with
// the set's own flags, and the 512-bit decode tiles of the K formats.
#include "kernels/cpu/avx512/vec.h"
#include "kernels/cpu/x86_int8/ymm_int8.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The int8 layer: register tiles of 4 weight rows x 4 activation rows (32 registers).
struct I8 : YmmInt8 {
  static constexpr int kTileW = 4, kTileX = 4;
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/avx512/int8_k_rows.h"  // decode of Q4_K, Q5_K, Q6_K in zmm
#include "kernels/cpu/generic/kernel_set.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// Decode: the K formats on the zmm tiles, every other format on generic/int8_gemm.h's.
inline void int8_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  if (i8wide::rows(a, p0, p1, i0, i1)) return;
  i8gemm::rows(a, p0, p1, i0, i1);
}

const CpuKernels& kernel_set() {
  static constexpr CpuKernels kTable = kernel_table({
      .gemm_int8_rows = int8_rows,
      // No int8 prefill panels (the VNNI ones are avx512bf16's): prefill dequantizes
      // block formats to float panels.
      .int8_panel_type = nullptr,
      .gemm_int8_panels = nullptr,
  });
  return kTable;
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
