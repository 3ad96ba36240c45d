// The `avx2` set (AVX2 + FMA + F16C):
// the generic kernels instantiated on avx2/vec.h and the ymm int8 layer, compiled with the
// set's own flags, and the 256-bit decode tiles of the K formats and int8 prefill panels.
#include "kernels/cpu/avx2/vec.h"
#include "kernels/cpu/x86_int8/ymm_int8.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The int8 layer: register tiles of 2 weight rows x 4 activation rows (16 ymm registers).
struct I8 : YmmInt8 {
  static constexpr int kTileW = 2, kTileX = 4;
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/avx2/int8_k_rows.h"  // decode of Q4_K, Q5_K, Q6_K in ymm
#include "kernels/cpu/avx2/int8_panels.h"      // prefill of the 4- and 5-bit block formats in int8
#include "kernels/cpu/avx2/int8_q6k_panels.h"  // ... and of Q6_K
#include "kernels/cpu/generic/kernel_set.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// Decode: the K formats on the ymm tiles, every other format on generic/int8_gemm.h's.
inline void int8_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  if (i8wide::rows(a, p0, p1, i0, i1)) return;
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
