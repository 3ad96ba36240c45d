// The int8 panel entries of an x86 set with Q6_K's panel (CpuKernels::
// int8_panel_type, gemm_int8_panels): Q6_K on its own panel (the set's
// i8panel::q6k::rows), every other format its int8 panels take on the shared
// one (i8panel::takes, i8panel::rows). Included last by the sets'
// int8_q6k_panels.h, after both are defined.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel {

// The formats the set's int8 panels take: the shared panel's, and Q6_K.
inline bool takes_with_q6_k(WeightType t) { return t == WeightType::Q6_K || takes(t); }

// i8panel::rows, Q6_K on its own panel.
inline void rows_with_q6_k(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  if (a.row_type == WeightType::Q6_K) {
    q6k::rows(a, p0, p1, i0, i1, scratch);
    return;
  }
  rows(a, p0, p1, i0, i1, scratch);
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
