// The leaf kernels of the CPU backend, one table per instruction set. Each set
// (kernels/cpu/<isa>/kernels.cpp) fills this table with the generic kernels of
// kernels/cpu/generic/ instantiated on its own vector layer and compiled with
// its own flags; the files around them (gemm.cpp, attention_cpu.cpp, ...) do
// the threading and call only through the table, so no code outside a set's
// own translation unit runs an instruction the CPU may lack.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"

namespace prefixd::cpu {

struct CpuBatch;

// Weights packed into panels of kGemmPanel output rows (see CpuMatrix).
constexpr int64_t kGemmPanel = 32;

// 32 activations quantized to 8 bits for the integer matmul of block weights
// (generic/int8_gemm.h) as llama.cpp's Q8_0 and Q8_1 blocks quantize them:
// q = nearest-even(x / d) with d = max|x| / 127, then d kept as F16 (its
// blocks store it so; their products scale by it). The sums take two forms:
// ds = d * (sum of q) exactly, which the offsets of signed formats (Q4_0's 8,
// Q8_0's 128, ...) and the K formats' mins multiply, so that those terms
// cancel exactly; s = F16(d before its rounding * sum of q), Q8_1's sum,
// which Q4_1's and Q5_1's mins multiply in the decode products as in
// llama.cpp's (the int8 panels of prefill take ds for every format).
struct XQ8Block {
  int8_t q[32];
  float d;
  float ds;
  float s;
};

// 256 activations quantized to 8 bits for the K formats (one scale per 256, as
// their super-blocks): q = nearest-even(x / d), d = max|x| / 127; the sums of q
// per 16 and per 32 carry the formats' mins and offsets.
struct XQ8KBlock {
  int8_t q[256];
  float d;
  int16_t bsums[16];  // sum of q over each 16
  int16_t sums32[8];  // sum of q over each 32
};

// The 256-value weight formats (K and XS): x quantized to XQ8KBlock (the
// other int8 types: XQ8Block).
inline bool k_weight_type(WeightType t) {
  const WeightTypeTraits& tr = weight_type_traits(t);
  return tr.weight && tr.block_elements == 256;
}

// Block types whose matmul multiplies 8-bit integers (x quantized to XQ8Block
// or XQ8KBlock): every weight block format (kernels/quant/formats/registry.h;
// each header's Int8Unpack, formats/int8_unpack.h). F16 weights are panels
// (gemm_tiles.h), widened to F32.
inline bool int8_weight_type(WeightType t) {
  const WeightTypeTraits& tr = weight_type_traits(t);
  return tr.weight && tr.block_elements > 1;
}

// Calls with fewer x rows than this (decode, short suffixes) use the integer
// products on int8_weight_type rows; longer ones unpack 32 weight rows at a
// time to int8 panels (sets with gemm_int8_panels, the types it takes) or
// dequantize them to F32 or BF16 panels for the float tiles. Measured on Zen 3 (AVX2, 2 threads,
// smol-135m Q4_K_M): prefill 543 t/s dequantizing against 358 in integers,
// decode 117 t/s in integers against 47 dequantizing.
constexpr int64_t kInt8MaxRows = 16;

// One matrix product as the gemm kernels see it: y (n, rows) = x (n, cols) · Wᵀ.
struct GemmArgs {
  const void* packed = nullptr;  // ceil(rows/32) panels: F32 (cols, 32) or BF16 (ceil(cols/2), 32, 2)
  DType dtype = DType::F32;      // F32 or BF16
  int64_t rows = 0;
  int64_t cols = 0;
  const float* x = nullptr;      // (n, cols) f32
  const uint16_t* xb = nullptr;  // (n, xb_stride) bf16, zero padded; only for gemm_bf16_x sets
  int64_t xb_stride = 0;
  float* y = nullptr;            // (n, rows) f32
  // Matrices kept as rows (CpuMatrix's rows layout) instead of panels:
  const uint8_t* rows_data = nullptr;  // (rows, row_bytes) in row_type
  size_t row_bytes = 0;
  WeightType row_type = WeightType::F32;
  const XQ8Block* xq = nullptr;    // (n, cols / 32) x quantized, for int8_weight_type rows
  const XQ8KBlock* xqk = nullptr;  // (n, cols / 256) x quantized, for k_weight_type rows
  const XQ8Block* xqu = nullptr;   // xq with each byte + 128 (q ^ 0x80): Q6_K's int8 panels
};

// One unit of attention work: up to attn_task_lanes consecutive flattened
// (query row i, head g) indices f = i*G + g of one sequence and one KV head.
struct AttnTask {
  int32_t seq;
  int32_t kv_head;
  int32_t f_begin;
  int32_t f_end;
  int32_t kv_len;     // keys this task needs: pos0 + last row + 1
  int32_t key_first;  // ... from this key on, a multiple of attn_chunk_keys: 0, or with a
                      // window the chunk of the first row's oldest key in its window
};

struct AttnArgs {
  const CpuBatch* batch;
  const KvPool* kv;
  int32_t layer;
  const float* q;  // (n_tokens, n_heads * head_dim)
  float* out;      // (n_tokens, n_heads * head_dim)
  int32_t n_heads;
  float scale;
  int32_t window_tokens;  // > 0: a row at position p reads keys (p - window_tokens, p] only
  // K and V already in the set's operand layout (attention() converts them
  // once when a sequence's KV head has several tasks; attn_key_bytes per key):
  // (seq, kv head)'s rows start rows_offset[seq * n_kv_heads + kv_head] bytes
  // into rows_k (the same in rows_v), zero rows after the last key up to a
  // whole attn_chunk_keys. Offset -1, or no rows_offset at all: the task
  // converts the pool's rows itself.
  const void* rows_k = nullptr;
  const void* rows_v = nullptr;
  const int64_t* rows_offset = nullptr;
};

struct CpuKernels {
  CpuIsa isa;

  // --- gemm -----------------------------------------------------------------
  // BF16 panels read x as BF16 (the set has a BF16 dot product): the caller
  // converts x into GemmArgs::xb first.
  bool gemm_bf16_x;
  // Floats of per-thread scratch gemm_panels and gemm_rows need for `cols` columns.
  size_t (*gemm_scratch_floats)(int64_t cols);
  // y rows [i0, i1) x output columns of panels [p0, p1).
  void (*gemm_panels)(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1,
                      float* scratch);
  // The same over a matrix kept as rows (F16 or a block type): each group of
  // 32 rows is dequantized to F32 as the tiles read it.
  void (*gemm_rows)(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1,
                    float* scratch);
  // The same for int8_weight_type rows, from a.xq: 8-bit integer products.
  void (*gemm_int8_rows)(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1);
  // The block types this set multiplies in 8-bit integers in calls of
  // kInt8MaxRows x rows or more too (gemm_int8_panels); nullptr: none.
  bool (*int8_panel_type)(WeightType t);
  // The same for those calls, from a.xq (XQ8Block): each group of 32 rows
  // unpacked once to an int8 panel (generic/int8_panel_layout.h) for the set's
  // integer tiles (<isa>/int8_panels.h). nullptr in sets without one.
  void (*gemm_int8_panels)(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1,
                           float* scratch);
  // x rows [r0, r1) of (., cols) -> (., cols / 32) XQ8Blocks; cols a multiple of 32.
  void (*quantize_x_q8)(const float* x, int64_t r0, int64_t r1, int64_t cols, XQ8Block* out);
  // The same into XQ8KBlocks; cols a multiple of 256.
  void (*quantize_x_q8k)(const float* x, int64_t r0, int64_t r1, int64_t cols, XQ8KBlock* out);

  // --- attention ------------------------------------------------------------
  int32_t attn_task_lanes;  // (row, head) indices per task, at most
  int32_t attn_tile_lanes;  // ... and at least, when there are few tasks (one register tile's)
  int32_t attn_group_lanes;  // (row, head) indices of one vector: the smallest task
  int32_t attn_chunk_keys;  // keys per online-softmax step
  size_t (*attn_scratch_floats)(int32_t head_dim);
  void (*attention_task)(const AttnArgs& a, const AttnTask& task, float* scratch);
  // Whether a pool of `dtype` is multiplied with BF16 dot products (Q and the
  // probabilities rounded to BF16) rather than converted to F32.
  bool (*attn_bf16_operands)(DType dtype, int32_t head_dim);
  // Bytes per key of one KV head's operand rows (K or V).
  size_t (*attn_key_bytes)(DType dtype, int32_t head_dim);
  // Keys [j0, j0 + n) of one KV head (pool rows `stride` bytes apart) into
  // operand rows at key j0 of k_region and v_region.
  void (*attn_put_keys)(DType dtype, const void* k_src, const void* v_src, size_t stride, int32_t head_dim,
                        int32_t j0, int32_t n, void* k_region, void* v_region);
  // Zero operand rows of keys [j0, j1).
  void (*attn_zero_keys)(DType dtype, int32_t head_dim, int32_t j0, int32_t j1, void* k_region, void* v_region);

  // --- rows and elementwise ---------------------------------------------------
  // out rows [r0, r1) of (., dim) = x / rms(x) * weight.
  void (*rmsnorm_rows)(const float* x, const float* weight, float* out, int64_t r0, int64_t r1,
                       int64_t dim, float eps);
  void (*add_n)(float* y, const float* x, int64_t n);                      // y += x
  void (*add_bias_rows)(float* y, const float* bias, int64_t r0, int64_t r1, int64_t dim);
  void (*swiglu_n)(const float* gate, const float* up, float* out, int64_t n);
  void (*geglu_n)(const float* gate, const float* up, float* out, int64_t n);  // op::geglu
  void (*scale_n)(float* y, float factor, int64_t n);                           // y *= factor
  // NeoX RoPE on rows [t0, t1) of x (., n_heads, head_dim); cos/sin (., half).
  void (*rope_neox_rows)(float* x, const float* cos, const float* sin, int64_t t0, int64_t t1,
                         int32_t n_heads, int32_t head_dim, int32_t half);

  // --- conversions, bit-identical to kernels/dtype.h ---------------------------
  void (*f16_to_f32_n)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16_n)(const float* src, uint16_t* dst, int64_t n);
  void (*bf16_to_f32_n)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_bf16_n)(const float* src, uint16_t* dst, int64_t n);
  // Gated DeltaNet (generic/delta_net_lanes.h; kernels/cpu/delta_net.h says
  // what each computes): the causal convolution with SiLU over channels
  // [c0, c1), and the rule over n tokens of one value head. Every set gives
  // the portable set's bits.
  void (*delta_conv_silu)(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
                          int64_t c0, int64_t c1);
  void (*delta_rule_steps)(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                           int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                           float* out, int64_t out_stride, int64_t n, int32_t d_k, int32_t d_v);
};

// The table of `isa`, which must be supported by this CPU (cpu_supports) and
// built for this architecture.
const CpuKernels& cpu_kernels(CpuIsa isa);

}  // namespace prefixd::cpu
