// Matrix products y (n, rows) = x (n, cols) · Wᵀ on AVX-512 with W packed at
// upload into panels of 32 output rows: F32 panels (cols, 32) use FMA; BF16
// panels (ceil(cols/2), 32, 2) use vdpbf16ps on x rounded to BF16 (as
// llama.cpp does). One micro-kernel serves prefill (up to 12 x rows share each
// weight load) and decode (weights stream once, panels split across threads).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace prefixd::cpu {

namespace {

constexpr int64_t kPanel = 32;  // output rows per panel (two zmm)
constexpr int kMaxM = 12;       // x rows per micro-tile (24 accumulators)
constexpr int64_t kXChunk = 48; // x rows per task (a multiple of kMaxM)

inline __mmask16 lane_mask(int64_t valid) {
  return valid <= 0 ? 0 : simd::tail_mask(valid);
}

// y (M, up to 32 valid columns) = x (M, K) · panelᵀ. panel: (K, 32) f32.
template <int M>
void kernel_f32(const float* panel, const float* x, int64_t ldx, int64_t K, float* y,
                int64_t ldy, int64_t valid) {
  __m512 acc[M][2];
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m512 w0 = _mm512_load_ps(panel + k * kPanel);
    const __m512 w1 = _mm512_load_ps(panel + k * kPanel + 16);
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_set1_ps(x[i * ldx + k]);
      acc[i][0] = _mm512_fmadd_ps(w0, xv, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(w1, xv, acc[i][1]);
    }
  }
  const __mmask16 m0 = lane_mask(valid), m1 = lane_mask(valid - 16);
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, acc[i][1]);
  }
}

// Same with a BF16 panel (K2 = ceil(K/2), 32, 2) and BF16 x (M, 2*K2) rows.
template <int M>
void kernel_bf16(const uint16_t* panel, const uint16_t* x, int64_t ldx, int64_t K2, float* y,
                 int64_t ldy, int64_t valid) {
  __m512 acc[M][2];
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K2; ++k) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(panel + k * 2 * kPanel);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(panel + k * 2 * kPanel + 32);
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      int32_t pair;
      std::memcpy(&pair, x + i * ldx + 2 * k, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, xv);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, xv);
    }
  }
  const __mmask16 m0 = lane_mask(valid), m1 = lane_mask(valid - 16);
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, acc[i][1]);
  }
}

using KernelF32 = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, int64_t);
using KernelBf16 = void (*)(const uint16_t*, const uint16_t*, int64_t, int64_t, float*, int64_t,
                            int64_t);

constexpr KernelF32 kKernelsF32[kMaxM + 1] = {
    nullptr,        kernel_f32<1>, kernel_f32<2>, kernel_f32<3>,  kernel_f32<4>,
    kernel_f32<5>,  kernel_f32<6>, kernel_f32<7>, kernel_f32<8>,  kernel_f32<9>,
    kernel_f32<10>, kernel_f32<11>, kernel_f32<12>};
constexpr KernelBf16 kKernelsBf16[kMaxM + 1] = {
    nullptr,         kernel_bf16<1>, kernel_bf16<2>,  kernel_bf16<3>, kernel_bf16<4>,
    kernel_bf16<5>,  kernel_bf16<6>, kernel_bf16<7>,  kernel_bf16<8>, kernel_bf16<9>,
    kernel_bf16<10>, kernel_bf16<11>, kernel_bf16<12>};

// x (n, cols) f32 -> xb (n, stride) bf16, zero padded; stride = cols rounded up to 32.
void convert_x_bf16(ThreadPool& pool, const float* x, int64_t n, int64_t cols, int64_t stride,
                    uint16_t* xb) {
  auto convert_rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      uint16_t* dst = xb + i * stride;
      for (int64_t c = 0; c < stride; c += 16) {
        const __mmask16 m = lane_mask(cols - c);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c),
                            simd::f32_to_bf16x16(_mm512_maskz_loadu_ps(m, x + i * cols + c)));
      }
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

void pack_matrix(CpuMatrix& m, DType dtype, const void* row_major) {
  const int64_t rows = m.rows, cols = m.cols;
  const int64_t n_panels = (rows + kPanel - 1) / kPanel;
  m.dtype = dtype;
  if (dtype == DType::F32) {
    const auto* src = static_cast<const float*>(row_major);
    auto* dst = static_cast<float*>(alloc_aligned(n_panels * cols * kPanel * sizeof(float)));
    for (int64_t r = 0; r < rows; ++r) {
      float* p = dst + (r / kPanel) * cols * kPanel + r % kPanel;
      for (int64_t c = 0; c < cols; ++c) p[c * kPanel] = src[r * cols + c];
    }
    m.packed = dst;
  } else {
    PREFIXD_CHECK(dtype == DType::BF16, "packed matrices are F32 or BF16");
    const int64_t k2 = (cols + 1) / 2;
    const auto* src = static_cast<const uint16_t*>(row_major);
    auto* dst = static_cast<uint16_t*>(alloc_aligned(n_panels * k2 * kPanel * 2 * sizeof(uint16_t)));
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* p = dst + (r / kPanel) * k2 * kPanel * 2 + (r % kPanel) * 2;
      for (int64_t c = 0; c < cols; ++c) p[(c / 2) * kPanel * 2 + c % 2] = src[r * cols + c];
    }
    m.packed = dst;
  }
}

void matrix_row(const CpuMatrix& m, int64_t r, float* out) {
  const int64_t cols = m.cols;
  if (m.dtype == DType::F32) {
    const float* p = static_cast<const float*>(m.packed) + (r / kPanel) * cols * kPanel + r % kPanel;
    for (int64_t c = 0; c < cols; ++c) out[c] = p[c * kPanel];
  } else {
    const int64_t k2 = (cols + 1) / 2;
    const uint16_t* p = static_cast<const uint16_t*>(m.packed) + (r / kPanel) * k2 * kPanel * 2 +
                        (r % kPanel) * 2;
    for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[(c / 2) * kPanel * 2 + c % 2]);
  }
}

void matmul(ThreadPool& pool, const CpuMatrix& w, const float* x, float* y, int64_t n) {
  const int64_t rows = w.rows, cols = w.cols;
  if (n <= 0) return;
  const int64_t n_panels = (rows + kPanel - 1) / kPanel;
  const int64_t x_tasks = (n + kXChunk - 1) / kXChunk;
  // Panels per task: about 8 tasks per thread in all.
  const int64_t want_tasks = 8 * pool.n_threads();
  int64_t per = (n_panels * x_tasks + want_tasks - 1) / want_tasks;
  per = std::clamp<int64_t>(per, 1, n_panels);
  const int64_t p_tasks = (n_panels + per - 1) / per;

  // BF16: the caller thread's conversion buffer, shared with the workers by pointer.
  static thread_local std::vector<uint16_t> xb_buffer;  // (n, stride) bf16
  const int64_t stride = (cols + 31) / 32 * 32;
  const uint16_t* xb = nullptr;
  if (w.dtype == DType::BF16) {
    if (xb_buffer.size() < static_cast<size_t>(n * stride)) xb_buffer.resize(n * stride);
    convert_x_bf16(pool, x, n, cols, stride, xb_buffer.data());
    xb = xb_buffer.data();
  }
  pool.parallel_for(p_tasks * x_tasks, [&](int64_t t, int) {
    const int64_t pt = t % p_tasks, xt = t / p_tasks;
    const int64_t p0 = pt * per, p1 = std::min(n_panels, p0 + per);
    const int64_t i0 = xt * kXChunk, i1 = std::min(n, i0 + kXChunk);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t valid = std::min(kPanel, rows - p * kPanel);
      for (int64_t i = i0; i < i1; i += kMaxM) {
        const int mm = static_cast<int>(std::min<int64_t>(kMaxM, i1 - i));
        float* yp = y + i * rows + p * kPanel;
        if (w.dtype == DType::F32) {
          const float* panel = static_cast<const float*>(w.packed) + p * cols * kPanel;
          kKernelsF32[mm](panel, x + i * cols, cols, cols, yp, rows, valid);
        } else {
          const int64_t k2 = (cols + 1) / 2;
          const uint16_t* panel = static_cast<const uint16_t*>(w.packed) + p * k2 * kPanel * 2;
          kKernelsBf16[mm](panel, xb + i * stride, stride, k2, yp, rows, valid);
        }
      }
    }
  });
}

}  // namespace prefixd::cpu
