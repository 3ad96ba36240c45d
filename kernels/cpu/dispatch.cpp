// cpu_kernels(): the table of each instruction set built for this architecture.
// Each set's kernel_set() lives in its own namespace (kernels/cpu/<set>/kernels.cpp,
// see generic/kernel_set.h); the sets are isa_sets.def's.
#include "kernels/cpu/cpu_kernels.h"

#include <cstdlib>

namespace prefixd::cpu {

// Declared for every set; defined (and referenced below) only for those built here.
#define PREFIXD_CPU_ISA_SET(name, enumerator, arch, features, flags) \
  namespace name {                                                    \
  const CpuKernels& kernel_set();                                     \
  }
#include "kernels/cpu/isa_sets.def"

const CpuKernels& cpu_kernels(CpuIsa isa) {
  PREFIXD_CHECK(cpu_supports(isa), "CPU kernels requested for an instruction set this CPU lacks");
  switch (isa) {
#define PREFIXD_CPU_ISA_SET(name, enumerator, arch, features, flags) \
  case CpuIsa::enumerator:                                            \
    if constexpr (kIsaArch_##arch) return name::kernel_set();         \
    break;
#include "kernels/cpu/isa_sets.def"
  }
  PREFIXD_CHECK(false, "no CPU kernels built for a supported instruction set");
  std::abort();
}

}  // namespace prefixd::cpu
