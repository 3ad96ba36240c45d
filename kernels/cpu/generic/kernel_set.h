// Assembles one instruction set's CpuKernels table from the generic kernels,
// instantiated on the `Vec` its vec.h defined. A set's kernels.cpp includes its
// vec.h and then this file, and nothing else does: every function here lives
// in that set's namespace (PREFIXD_ISA_NS), so each set's copies stay apart.
#pragma once

#include "kernels/cpu/generic/attention_task.h"
#include "kernels/cpu/generic/gemm_tiles.h"
#include "kernels/cpu/generic/int8_gemm.h"
#include "kernels/cpu/generic/quant_gemm.h"
#include "kernels/cpu/generic/row_ops.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The integer products of the decode shape: the set's own tiles where it has
// them (avx512/int8_k_rows.h, avx512/int8_pair_rows.h, avx2/int8_k_rows.h),
// generic/int8_gemm.h's otherwise.
inline void int8_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
#if defined(PREFIXD_HAS_WIDE_K_ROWS)
  if (i8wide::rows(a, p0, p1, i0, i1)) return;
#endif
#if defined(PREFIXD_HAS_PAIR_ROWS)
  if (i8pair::rows(a, p0, p1, i0, i1)) return;
#endif
  i8gemm::rows(a, p0, p1, i0, i1);
}

// PREFIXD_ISA_ENUM: this set's CpuIsa enumerator (from the build).
const CpuKernels kKernelSet = {
      CpuIsa::PREFIXD_ISA_ENUM,
      Vec::kHasBf16Dot,
      qgemm::scratch_floats,  // covers gemm::scratch_floats too
      gemm::panels,
      qgemm::rows,
      int8_rows,
#if defined(PREFIXD_HAS_INT8_PANELS)  // the set's kernels.cpp included its int8 panels
      i8panel::takes,
      i8panel::rows,
#else
      nullptr,
      nullptr,
#endif
      i8gemm::quantize_x,
      i8gemm::quantize_x_k,
      attn::kGroups * attn::kLanes,
      attn::kGroupTile * attn::kLanes,
      attn::kLanes,
      attn::kChunk,
      attn::scratch_floats,
      attn::run_task,
      attn::bf16_operands,
      attn::key_bytes,
      attn::put_keys,
      attn::zero_keys,
      rows::rmsnorm_rows,
      rows::add_n,
      rows::add_bias_rows,
      rows::swiglu_n,
      rows::geglu_n,
      rows::scale_n,
      rows::rope_neox_rows,
      rows::f16_to_f32_n,
      rows::f32_to_f16_n,
      rows::bf16_to_f32_n,
      rows::f32_to_bf16_n,
};

const CpuKernels& kernel_set() { return kKernelSet; }

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
