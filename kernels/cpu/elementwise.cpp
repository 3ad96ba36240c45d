// Row-wise and elementwise ops: embedding lookup, RMSNorm, residual add, bias,
// SwiGLU and RoPE. This file splits rows across the pool; the vector work is
// the instruction set's (generic/row_ops.h).
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/op_math.h"

namespace prefixd::cpu {

namespace {

// Elementwise work below this many floats runs on the calling thread.
constexpr int64_t kParallelMinElems = 1 << 15;

// Splits [0, n) into chunks of whole multiples of 16 and runs fn(begin, end).
template <typename Fn>
void parallel_range(ThreadPool& pool, int64_t n, Fn fn) {
  if (n < kParallelMinElems || pool.n_threads() == 1) {
    fn(0, n);
    return;
  }
  const int64_t n_chunks = 4 * pool.n_threads();
  const int64_t chunk = ((n + n_chunks - 1) / n_chunks + 15) / 16 * 16;
  pool.parallel_for((n + chunk - 1) / chunk, [&](int64_t c, int) {
    const int64_t b = c * chunk;
    fn(b, b + chunk < n ? b + chunk : n);
  });
}

// Splits rows [0, n_rows) of `row_elems` floats each into tasks.
template <typename Fn>
void parallel_rows(ThreadPool& pool, int64_t n_rows, int64_t row_elems, Fn fn) {
  if (n_rows * row_elems < kParallelMinElems || pool.n_threads() == 1 || n_rows == 1) {
    fn(0, n_rows);
    return;
  }
  int64_t n_tasks = 4 * pool.n_threads();
  if (n_tasks > n_rows) n_tasks = n_rows;
  const int64_t per = (n_rows + n_tasks - 1) / n_tasks;
  pool.parallel_for((n_rows + per - 1) / per, [&](int64_t t, int) {
    const int64_t b = t * per;
    fn(b, b + per < n_rows ? b + per : n_rows);
  });
}

}  // namespace

void embed(ThreadPool& pool, const CpuBatch& batch, const CpuMatrix& table, float* out) {
  const int64_t dim = table.cols;
  for (int32_t t : batch.tokens) PREFIXD_CHECK(t >= 0 && t < table.rows, "token id out of range");
  parallel_rows(pool, batch.n_tokens(), dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t tok = batch.tokens[r];
      matrix_row(table, tok, out + r * dim);
    }
  });
}

void rmsnorm(const CpuKernels& k, ThreadPool& pool, const float* x, const float* weight, float* out,
             int64_t n, int64_t dim, float eps) {
  parallel_rows(pool, n, dim,
                [&](int64_t r0, int64_t r1) { k.rmsnorm_rows(x, weight, out, r0, r1, dim, eps); });
}

void add(const CpuKernels& k, ThreadPool& pool, float* y, const float* x, int64_t n) {
  parallel_range(pool, n, [&](int64_t b, int64_t e) { k.add_n(y + b, x + b, e - b); });
}

void add_bias(const CpuKernels& k, ThreadPool& pool, float* y, const float* bias, int64_t n,
              int64_t dim) {
  parallel_rows(pool, n, dim, [&](int64_t r0, int64_t r1) { k.add_bias_rows(y, bias, r0, r1, dim); });
}

void swiglu(const CpuKernels& k, ThreadPool& pool, const float* gate, const float* up, float* out,
            int64_t n) {
  parallel_range(pool, n, [&](int64_t b, int64_t e) { k.swiglu_n(gate + b, up + b, out + b, e - b); });
}

void geglu(const CpuKernels& k, ThreadPool& pool, const float* gate, const float* up, float* out,
           int64_t n) {
  parallel_range(pool, n,
                 [&](int64_t b, int64_t e) { k.geglu_n(gate + b, up + b, out + b, e - b); });
}

void scale(const CpuKernels& k, ThreadPool& pool, float* y, float factor, int64_t n) {
  parallel_range(pool, n, [&](int64_t b, int64_t e) { k.scale_n(y + b, factor, e - b); });
}

void rope(const CpuKernels& k, ThreadPool& pool, CpuBatch& batch, float* x, int32_t n_heads, int32_t head_dim,
          int32_t rope_dim, float base, const float* freq_factors, RopeStyle style) {
  PREFIXD_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim, "bad rope_dim");
  const int32_t n_tok = batch.n_tokens();
  const int32_t half = rope_dim / 2;
  const bool same_factors =
      freq_factors == nullptr
          ? batch.rope_factors.empty()
          : batch.rope_factors.size() == static_cast<size_t>(half) &&
                std::memcmp(batch.rope_factors.data(), freq_factors, half * sizeof(float)) == 0;
  if (batch.rope_dim != rope_dim || batch.rope_base != base || !same_factors) {
    // Angles as llama.cpp computes them: theta_i = pos * scale^i / factor_i,
    // the power taken by repeated float multiplication with
    // scale = base^(-2/rope_dim), then divided by the pair's frequency factor.
    batch.rope_cos.resize(static_cast<size_t>(n_tok) * half);
    batch.rope_sin.resize(static_cast<size_t>(n_tok) * half);
    if (freq_factors != nullptr) {
      batch.rope_factors.assign(freq_factors, freq_factors + half);
    } else {
      batch.rope_factors.clear();
    }
    const float* ff = freq_factors;
    const float theta_scale = powf(base, -2.0f / static_cast<float>(rope_dim));
    parallel_rows(pool, n_tok, 64 * half, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float theta = static_cast<float>(batch.positions[t]);
        for (int32_t i = 0; i < half; ++i) {
          const float angle = ff != nullptr ? theta / ff[i] : theta;
          batch.rope_cos[t * half + i] = cosf(angle);
          batch.rope_sin[t * half + i] = sinf(angle);
          theta *= theta_scale;
        }
      }
    });
    batch.rope_dim = rope_dim;
    batch.rope_base = base;
  }
  const int64_t row = static_cast<int64_t>(n_heads) * head_dim;
  if (style == RopeStyle::kNeox) {
    parallel_rows(pool, n_tok, row, [&](int64_t t0, int64_t t1) {
      k.rope_neox_rows(x, batch.rope_cos.data(), batch.rope_sin.data(), t0, t1, n_heads, head_dim, half);
    });
    return;
  }
  // Adjacent pairs (2i, 2i+1): scalar.
  parallel_rows(pool, n_tok, row, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = batch.rope_cos.data() + t * half;
      const float* sn = batch.rope_sin.data() + t * half;
      for (int32_t h = 0; h < n_heads; ++h) {
        float* xh = x + t * row + static_cast<int64_t>(h) * head_dim;
        for (int32_t i = 0; i < half; ++i) {
          int32_t a, b;
          op::rope_pair(false, i, rope_dim, &a, &b);
          op::rope_rotate(xh[a], xh[b], cs[i], sn[i], &xh[a], &xh[b]);
        }
      }
    }
  });
}

}  // namespace prefixd::cpu
