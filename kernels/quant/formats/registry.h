// The registry of the ggml weight block formats: one line per format, naming
// its WeightType and its block struct, whose header in this folder holds the
// layout, the scale unpack, the scalar reference and the host/device chunk
// decoder (decode_ops.h's protocol: kValues, decode_chunk). The scalar
// dequantization (quant_blocks.h), the CUDA chunk decoder's dispatch
// (kernels/cuda/quant_chunk.h) and the CPU sets' F32 rows
// (generic/dequant_rows.h) are loops over this list.
//
// A new format: its header here (with its Int8Unpack, int8_unpack.h's
// protocol for the CPU sets' integer products), its line below, its
// WeightType row (weight_type.h) and its quantizer (quantize_blocks in
// quantize.cpp); the int8 rows (generic/int8_gemm.h) and the quantizer's
// dispatch loop over this list too, so a missing one fails to compile. An
// int8 prefill panel (int8_panel_layout.h) is a set's choice.
#pragma once

#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/iq4_nl.h"
#include "kernels/quant/formats/q2_k.h"
#include "kernels/quant/formats/q3_k.h"
#include "kernels/quant/formats/q4_0.h"
#include "kernels/quant/formats/q4_k.h"
#include "kernels/quant/formats/q5_0.h"
#include "kernels/quant/formats/q6_k.h"
#include "kernels/quant/formats/q8_0.h"

// X(T, Block): WeightType::T's blocks are Block (in the format headers' namespace).
#define PREFIXD_BLOCK_FORMATS(X) \
  X(Q4_0, BlockQ4_0)             \
  X(Q4_1, BlockQ4_1)             \
  X(Q5_0, BlockQ5_0)             \
  X(Q5_1, BlockQ5_1)             \
  X(Q8_0, BlockQ8_0)             \
  X(Q2_K, BlockQ2_K)             \
  X(Q3_K, BlockQ3_K)             \
  X(Q4_K, BlockQ4_K)             \
  X(Q5_K, BlockQ5_K)             \
  X(Q6_K, BlockQ6_K)             \
  X(IQ4_NL, BlockIQ4_NL)         \
  X(IQ4_XS, BlockIQ4_XS)
