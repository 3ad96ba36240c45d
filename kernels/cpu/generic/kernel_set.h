// Assembles one instruction set's CpuKernels table from the generic kernels,
// instantiated on the `Vec` and `I8` its own headers defined. A set's
// kernels.cpp includes its layers and its own tiles, then this file, and then
// fills the table with kernel_table(), saying by name what it runs in place of
// the generic kernels and what it has none of (OwnKernels); a set that
// replaces another entry assigns it in its own file (a constexpr copy of
// kernel_table()'s result with that field set). Nothing else
// includes this file: every function here lives in that set's namespace
// (PREFIXD_ISA_NS), so each set's copies stay apart.
#pragma once

#include "kernels/cpu/generic/attention_task.h"
#include "kernels/cpu/generic/delta_net_lanes.h"
#include "kernels/cpu/generic/gemm_tiles.h"
#include "kernels/cpu/generic/int8_gemm.h"
#include "kernels/cpu/generic/quant_gemm.h"
#include "kernels/cpu/generic/row_ops.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// The entries a set's kernels.cpp gives itself, every one by name (nullptr
// where the set has none, with a comment saying so).
struct OwnKernels {
  // The integer products of the decode shape: the set's own tiles for the
  // formats they take, the generic i8gemm::rows for the rest (or i8gemm::rows
  // alone).
  decltype(CpuKernels::gemm_int8_rows) gemm_int8_rows;
  // Prefill in int8 panels (<set>/int8_panels.h: i8panel::takes, i8panel::rows).
  decltype(CpuKernels::int8_panel_type) int8_panel_type;
  decltype(CpuKernels::gemm_int8_panels) gemm_int8_panels;
};

// PREFIXD_ISA_ENUM: this set's CpuIsa enumerator (from the build, isa_sets.def).
constexpr CpuKernels kernel_table(const OwnKernels& own) {
  return {
      .isa = CpuIsa::PREFIXD_ISA_ENUM,
      .gemm_bf16_x = Vec::kHasBf16Dot,
      .gemm_scratch_floats = qgemm::scratch_floats,  // covers gemm::scratch_floats too
      .gemm_panels = gemm::panels,
      .gemm_rows = qgemm::rows,
      .gemm_int8_rows = own.gemm_int8_rows,
      .int8_panel_type = own.int8_panel_type,
      .gemm_int8_panels = own.gemm_int8_panels,
      .quantize_x_q8 = i8gemm::quantize_x,
      .quantize_x_q8k = i8gemm::quantize_x_k,
      .attn_task_lanes = attn::kGroups * attn::kLanes,
      .attn_tile_lanes = attn::kGroupTile * attn::kLanes,
      .attn_group_lanes = attn::kLanes,
      .attn_chunk_keys = attn::kChunk,
      .attn_scratch_floats = attn::scratch_floats,
      .attention_task = attn::run_task,
      .attn_bf16_operands = attn::bf16_operands,
      .attn_key_bytes = attn::key_bytes,
      .attn_put_keys = attn::put_keys,
      .attn_zero_keys = attn::zero_keys,
      .rmsnorm_rows = rows::rmsnorm_rows,
      .add_n = rows::add_n,
      .add_bias_rows = rows::add_bias_rows,
      .swiglu_n = rows::swiglu_n,
      .geglu_n = rows::geglu_n,
      .scale_n = rows::scale_n,
      .rope_neox_rows = rows::rope_neox_rows,
      .f16_to_f32_n = rows::f16_to_f32_n,
      .f32_to_f16_n = rows::f32_to_f16_n,
      .bf16_to_f32_n = rows::bf16_to_f32_n,
      .f32_to_bf16_n = rows::f32_to_bf16_n,
      .delta_conv_silu = dnet::conv_silu,
      .delta_rule_steps = dnet::rule_steps,
  };
}

// The set's table (kernels.cpp defines it with kernel_table; dispatch.cpp calls it).
const CpuKernels& kernel_set();

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
