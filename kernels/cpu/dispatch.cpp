// cpu_kernels(): the table of each instruction set built for this architecture.
// Each set's kernel_set() lives in its own namespace (see generic/kernel_set.h).
#include "kernels/cpu/cpu_kernels.h"

namespace prefixd::cpu {

namespace portable { const CpuKernels& kernel_set(); }
#if defined(__x86_64__)
namespace avx2 { const CpuKernels& kernel_set(); }
namespace avx512 { const CpuKernels& kernel_set(); }
namespace avx512bf16 { const CpuKernels& kernel_set(); }
#endif

const CpuKernels& cpu_kernels(CpuIsa isa) {
  PREFIXD_CHECK(cpu_supports(isa), "CPU kernels requested for an instruction set this CPU lacks");
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512Bf16: return avx512bf16::kernel_set();
    case CpuIsa::kAvx512: return avx512::kernel_set();
    case CpuIsa::kAvx2: return avx2::kernel_set();
#endif
    default: return portable::kernel_set();
  }
}

}  // namespace prefixd::cpu
