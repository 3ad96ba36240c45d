// Matrix products y (n, rows) = x (n, cols) · Wᵀ. F32: OpenBLAS sgemm for
// larger n, a streaming AVX-512 kernel for small n (decode). BF16: x rounded
// to BF16 (as llama.cpp does) and an AVX512-BF16 (vdpbf16ps) kernel.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace prefixd::cpu {

namespace {

constexpr int64_t kRowBlock = 4;  // W rows per micro-tile
constexpr int64_t kXBlock = 4;    // x rows per micro-tile
constexpr int64_t kSgemmMinN = 8; // below this, F32 uses the streaming kernel

// Picks the number of W rows per task: a multiple of kRowBlock, about 4 tasks
// per thread.
int64_t rows_per_task(int64_t rows, int n_threads) {
  int64_t per = (rows + 4 * n_threads - 1) / (4 * n_threads);
  per = (per + kRowBlock - 1) / kRowBlock * kRowBlock;
  return std::max<int64_t>(per, 16);
}

// y[i][r] for r in [r0, r1), all i < n: F32 weights, FMA over 16 columns.
void gemv_f32_rows(const float* w, const float* x, float* y, int64_t n, int64_t rows,
                   int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kRowBlock) {
    const int64_t nr = std::min(kRowBlock, r1 - r);
    const float* wr[kRowBlock];
    for (int64_t k = 0; k < kRowBlock; ++k) wr[k] = w + (r + std::min(k, nr - 1)) * cols;
    for (int64_t i = 0; i < n; i += kXBlock) {
      const int64_t nx = std::min(kXBlock, n - i);
      const float* xr[kXBlock];
      for (int64_t k = 0; k < kXBlock; ++k) xr[k] = x + (i + std::min(k, nx - 1)) * cols;
      __m512 acc[kRowBlock][kXBlock];
      for (auto& a : acc)
        for (auto& b : a) b = _mm512_setzero_ps();
      for (int64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = simd::tail_mask(cols - c);
        __m512 wv[kRowBlock], xv[kXBlock];
        for (int64_t k = 0; k < kRowBlock; ++k) wv[k] = _mm512_maskz_loadu_ps(m, wr[k] + c);
        for (int64_t k = 0; k < kXBlock; ++k) xv[k] = _mm512_maskz_loadu_ps(m, xr[k] + c);
        for (int64_t a = 0; a < kRowBlock; ++a)
          for (int64_t b = 0; b < kXBlock; ++b) acc[a][b] = _mm512_fmadd_ps(wv[a], xv[b], acc[a][b]);
      }
      for (int64_t a = 0; a < nr; ++a)
        for (int64_t b = 0; b < nx; ++b) y[(i + b) * rows + r + a] = _mm512_reduce_add_ps(acc[a][b]);
    }
  }
}

// Same for BF16 weights and BF16 x (cols padded to x_stride, a multiple of 32,
// with zeros), vdpbf16ps over 32 columns.
void gemv_bf16_rows(const uint16_t* w, const uint16_t* x, int64_t x_stride, float* y, int64_t n,
                    int64_t rows, int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r += kRowBlock) {
    const int64_t nr = std::min(kRowBlock, r1 - r);
    const uint16_t* wr[kRowBlock];
    for (int64_t k = 0; k < kRowBlock; ++k) wr[k] = w + (r + std::min(k, nr - 1)) * cols;
    for (int64_t i = 0; i < n; i += kXBlock) {
      const int64_t nx = std::min(kXBlock, n - i);
      const uint16_t* xr[kXBlock];
      for (int64_t k = 0; k < kXBlock; ++k) xr[k] = x + (i + std::min(k, nx - 1)) * x_stride;
      __m512 acc[kRowBlock][kXBlock];
      for (auto& a : acc)
        for (auto& b : a) b = _mm512_setzero_ps();
      for (int64_t c = 0; c < cols; c += 32) {
        const int64_t left = cols - c;
        const __mmask32 m = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
        __m512bh wv[kRowBlock], xv[kXBlock];
        for (int64_t k = 0; k < kRowBlock; ++k)
          wv[k] = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[k] + c);
        for (int64_t k = 0; k < kXBlock; ++k) xv[k] = (__m512bh)_mm512_loadu_si512(xr[k] + c);
        for (int64_t a = 0; a < kRowBlock; ++a)
          for (int64_t b = 0; b < kXBlock; ++b) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv[b]);
      }
      for (int64_t a = 0; a < nr; ++a)
        for (int64_t b = 0; b < nx; ++b) y[(i + b) * rows + r + a] = _mm512_reduce_add_ps(acc[a][b]);
    }
  }
}

// x (n, cols) f32 -> xb (n, stride) bf16, zero padded; stride = cols rounded up to 32.
void convert_x_bf16(ThreadPool& pool, const float* x, int64_t n, int64_t cols, int64_t stride,
                    std::vector<uint16_t>& xb) {
  xb.assign(static_cast<size_t>(n) * stride, 0);
  auto convert_rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = simd::tail_mask(cols - c);
        simd::mask_store_bf16(xb.data() + i * stride + c, m, _mm512_maskz_loadu_ps(m, x + i * cols + c));
      }
  };
  if (n < 64) {
    convert_rows(0, n);
  } else {
    const int64_t per = (n + 2 * pool.n_threads() - 1) / (2 * pool.n_threads());
    pool.parallel_for((n + per - 1) / per,
                      [&](int64_t t, int) { convert_rows(t * per, std::min(n, (t + 1) * per)); });
  }
}

}  // namespace

void matmul(ThreadPool& pool, const CpuMatrix& w, const float* x, float* y, int64_t n) {
  const int64_t rows = w.rows, cols = w.cols;
  if (n <= 0) return;
  const int64_t per = rows_per_task(rows, pool.n_threads());
  const int64_t n_tasks = (rows + per - 1) / per;
  if (w.dtype == DType::F32) {
    const auto* wf = static_cast<const float*>(w.data);
    if (n >= kSgemmMinN) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                  static_cast<int>(rows), static_cast<int>(cols), 1.0f, x, static_cast<int>(cols),
                  wf, static_cast<int>(cols), 0.0f, y, static_cast<int>(rows));
      return;
    }
    pool.parallel_for(n_tasks, [&](int64_t t, int) {
      gemv_f32_rows(wf, x, y, n, rows, cols, t * per, std::min(rows, (t + 1) * per));
    });
    return;
  }
  PREFIXD_CHECK(w.dtype == DType::BF16, "unsupported matrix dtype");
  // The caller thread's conversion buffer, shared with the workers by pointer.
  static thread_local std::vector<uint16_t> xb_buffer;  // (n, stride) bf16
  const int64_t stride = (cols + 31) / 32 * 32;
  convert_x_bf16(pool, x, n, cols, stride, xb_buffer);
  const uint16_t* xb = xb_buffer.data();
  const auto* wb = static_cast<const uint16_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t t, int) {
    gemv_bf16_rows(wb, xb, stride, y, n, rows, cols, t * per, std::min(rows, (t + 1) * per));
  });
}

}  // namespace prefixd::cpu
