// Gated DeltaNet kernels (Qwen3.5's linear-attention layers), plain C++ on one
// row or one head at a time: the causal depthwise convolution with SiLU, the
// L2 norm, the gates (β and the per-head decay) and the gated delta rule. The
// CPU backend's recurrent ops (delta_net_ops.cpp) run them over a batch; the
// unit tests compare each with an F64 reference. The convolution and the
// rule's steps are built in every instruction set (generic/delta_net_lanes.h,
// CpuKernels::delta_conv_silu / delta_rule_steps; the functions here run the
// portable set's): they work on 16-float values of GCC's vector extension,
// whose lanes do the scalar operations in a fixed order with contraction
// off, so every set computes the same bits (one zmm a value with AVX-512,
// four xmm in the baseline: 190 -> 295 t/s at pp512 on Qwen3.5-0.8B). The rule
// costs about 4·d_k·d_v flops per value head and token, a few % of a token's
// matrix products at Qwen3.5-0.8B's shape, but with one accumulator per dot
// product it ran at one add per 4 cycles: 48 % of a 512-token prefill there
// (perf); 15 % of a 1024-token one with 16 lanes reduced by vector shuffles.
#pragma once

#include <cstdint>

namespace prefixd::cpu::delta_net {

// Causal depthwise convolution of width `width` over the rows of one sequence,
// then SiLU, in place:
//   x[t][c] := silu(sum_{j<width} w[c][j] * in[t - (width-1) + j][c])
// where `in` is the (width-1) rows of `tail` followed by the n rows of x as
// they were. tail (width-1, channels) f32, oldest row first, is read, then
// replaced by the last width-1 rows of `in` (the next call's tail).
// w (channels, width) f32. Channels [c0, c1) only, so threads can split them.
void conv_silu(float* x, int64_t n, int64_t channels, const float* w, int32_t width, float* tail,
               int64_t c0, int64_t c1);

// x (dim) := x / max(||x||₂, eps), ggml's l2_norm.
void l2_normalize(float* x, int64_t dim, float eps);

// One row of gates, in place: alpha (n_heads) := softplus(alpha + dt_bias) · a
// (the log of the decay; a < 0), beta (n_heads) := sigmoid(beta).
// softplus(z) = log(1 + e^z), z itself above 20 (ggml's threshold).
void gates(float* alpha, float* beta, const float* dt_bias, const float* a, int32_t n_heads);

// One token of the gated delta rule for one value head, in place on its state
// S (d_v, d_k) f32 (row j holds the key-space weights of value channel j):
//   S := e^g · S
//   for each j: d_j = β (v_j − S_j·k);  S_j += d_j k;  out_j = scale · S_j·q
// q, k (d_k) L2-normalised, v and out (d_v). Rows are independent.
void rule_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
               float scale, float* out, int32_t d_k, int32_t d_v);

// rule_step over n tokens of one value head, bit for bit n calls of it: rows
// are independent, so the state is walked in tiles of rows by tokens that
// stay in L1 rather than whole once a token (64 KiB a head at d_k = d_v =
// 128; at that shape it measured the same as rule_step per token within
// this host's noise: the rule is compute-bound). Row t of q, k: q + t *
// qk_stride (d_k); of v: v + t * v_stride (d_v); of out: out + t *
// out_stride; g, beta: g[t * gb_stride], beta[t * gb_stride].
void rule_steps(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                float* out, int64_t out_stride, int64_t n, int32_t d_k, int32_t d_v);

// The same rule over n tokens of one value head in chunked (WY) form, for
// prefill: within a chunk the corrections u_t = β_t (v_t − S_{t-1} e^{g_t} k_t)
// are solved by forward substitution against the chunk-start state, and the
// outputs and the chunk-end state are sums over the chunk's tokens, matrix
// products rather than a step per token. Chunk boundaries fall on absolute
// positions that are multiples of `chunk` (the first chunk ends at the first
// such position after pos0), so a run split at such a position visits
// exactly the whole run's chunks: prefix then suffix is bit-identical to one
// run when the suffix starts at a multiple of `chunk`. Elsewhere the result
// equals the recurrence within rounding (not bit for bit).
// Row t of q, k: q + t * qk_stride (d_k); of v: v + t * v_stride (d_v); of
// out: out + t * out_stride; g, beta: g[t * gb_stride], beta[t * gb_stride].
// scratch: chunk_scratch_floats(chunk, d_v) floats.
void rule_chunked(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                  int64_t v_stride, const float* g, const float* beta, int64_t gb_stride, float scale,
                  float* out, int64_t out_stride, int64_t n, int32_t pos0, int32_t chunk, int32_t d_k,
                  int32_t d_v, float* scratch);
int64_t chunk_scratch_floats(int32_t chunk, int32_t d_v);

}  // namespace prefixd::cpu::delta_net
