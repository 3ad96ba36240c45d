// The `portable` set (the compiler's baseline; also what aarch64 gets):
// the generic kernels instantiated on portable/vec.h, compiled with the set's own flags.
#include "kernels/cpu/portable/vec.h"
#include "kernels/cpu/generic/kernel_set.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

const CpuKernels& kernel_set() {
  static constexpr CpuKernels kTable = kernel_table({
      .gemm_int8_rows = i8gemm::rows,  // no decode tiles of its own: generic/int8_gemm.h's
      .int8_panel_type = nullptr,      // no int8 prefill panels: prefill dequantizes
      .gemm_int8_panels = nullptr,
  });
  return kTable;
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
