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

// PREFIXD_ISA_ENUM: this set's CpuIsa enumerator (from the build).
const CpuKernels kKernelSet = {
      CpuIsa::PREFIXD_ISA_ENUM,
      Vec::kHasBf16Dot,
      qgemm::scratch_floats,  // covers gemm::scratch_floats too
      gemm::panels,
      qgemm::rows,
      i8gemm::rows,
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
