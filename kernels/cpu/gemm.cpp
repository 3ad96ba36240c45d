// Matrix products y (n, rows) = x (n, cols) · Wᵀ. F32, F16 and BF16 weights
// are packed at upload into panels of 32 output rows: F32 and F16 panels
// (cols, 32), BF16 panels (ceil(cols/2), 32, 2) with column pairs
// interleaved; block types stay rows in their own bits. This file packs and splits the work into
// tasks; the kernels are the instruction set's (generic/gemm_tiles.h,
// generic/quant_gemm.h, generic/int8_gemm.h). Matrices that multiply the same
// x (q/k/v, gate/up) run as one set of tasks over all their panels or row
// groups, x converted (or quantized) once: one pass, one wait.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/quant/dequantize.h"

namespace prefixd::cpu {

namespace {

constexpr int64_t kPanel = kGemmPanel;  // output rows per panel
constexpr int64_t kXChunk = 48;         // x rows per task, at most, past kWholeXRows
constexpr int64_t kWholeXRows = 128;    // up to this many x rows, every task takes them all

// x rows per task. Up to kWholeXRows (a prompt's uncached suffix, decode
// batches) all of them: the tasks split the panels only, each panel is read
// once, and every task has the same work, so the two halves of a 2-thread
// machine end together. Past it, the n rows split evenly over
// ceil(n / kXChunk) tasks, rounded up to 6 (whole AVX2 register tiles, half
// AVX-512 ones).
int64_t x_chunk_rows(int64_t n) {
  if (n <= kWholeXRows) return n;
  const int64_t tasks = (n + kXChunk - 1) / kXChunk;
  return std::min(kXChunk, ((n + tasks - 1) / tasks + 5) / 6 * 6);
}

// x (n, cols) f32 -> xb (n, stride) bf16, zero padded; stride = cols rounded up to 32.
// fn(i0, i1) over x rows [0, n): on the caller for short calls, else split in
// two ranges per thread (the x conversions and quantizations before a product).
template <class Fn>
void for_x_rows(ThreadPool& pool, int64_t n, Fn&& fn) {
  if (n < 64) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t per = (n + 2 * pool.n_threads() - 1) / (2 * pool.n_threads());
  pool.parallel_for((n + per - 1) / per, [&](int64_t t, int) { fn(t * per, std::min(n, (t + 1) * per)); });
}

void convert_x_bf16(const CpuKernels& k, ThreadPool& pool, const float* x, int64_t n, int64_t cols,
                    int64_t stride, uint16_t* xb) {
  for_x_rows(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      uint16_t* dst = xb + i * stride;
      k.f32_to_bf16_n(x + i * cols, dst, cols);
      std::memset(dst + cols, 0, (stride - cols) * sizeof(uint16_t));
    }
  });
}

// Row stride of x in BF16: cols rounded up to 32.
int64_t bf16_stride(int64_t cols) { return (cols + 31) / 32 * 32; }

// x (n, cols) in BF16 for sets with a BF16 dot product, (n, bf16_stride) zero
// padded: the caller thread's buffer, shared with the workers by pointer.
const uint16_t* x_bf16(const CpuKernels& k, ThreadPool& pool, const float* x, int64_t n,
                       int64_t cols) {
  static thread_local std::vector<uint16_t> buffer;
  const int64_t stride = bf16_stride(cols);
  if (buffer.size() < static_cast<size_t>(n * stride)) buffer.resize(n * stride);
  convert_x_bf16(k, pool, x, n, cols, stride, buffer.data());
  return buffer.data();
}

// Tasks per pool thread for a product with n x rows. Decode (fewer than
// kInt8MaxRows rows) streams each weight once: fewer, longer tasks keep each
// thread's reads sequential and pay the task start (a shared counter, the
// first reads before the prefetch runs ahead) less often. Zen 5, 2 threads,
// decode t/s, best of 4-5 alternating runs with 8 / 4 / 2 tasks per thread:
// smol-135m BF16 195 / 203 / 213; llama-245m Q8_0 178 / 195 / 197, Q4_K_M
// 315 / 337 / 341 (32 per thread: Q8_0 160). Longer products keep 8 for balance.
int64_t tasks_per_thread(int64_t n) { return n < kInt8MaxRows ? 2 : 8; }

// ys[i] (n, ws[i]->rows) = x (n, cols) · Wᵢᵀ for panel matrices of one dtype
// and cols: x converted to BF16 once (sets with a BF16 dot product), then one
// task list of (panels of one matrix) x (x rows), tasks_per_thread in
// all, x-chunk major so that tasks running together share x.
void panel_matmul(const CpuKernels& k, ThreadPool& pool, std::span<const CpuMatrix* const> ws,
                  const float* x, std::span<float* const> ys, int64_t n) {
  const int64_t cols = ws[0]->cols;
  std::array<GemmArgs, kMaxSameX> args;
  // Per x chunk, matrix i's tasks start at first_task[i].
  std::array<int64_t, kMaxSameX + 1> first_task{};
  int64_t all_panels = 0;
  for (const CpuMatrix* w : ws) all_panels += (w->rows + kPanel - 1) / kPanel;
  const int64_t x_chunk = x_chunk_rows(n);
  const int64_t x_tasks = (n + x_chunk - 1) / x_chunk;
  const int64_t want_tasks = tasks_per_thread(n) * pool.n_threads();
  // Panels per task, rounded down: more tasks rather than fewer, larger ones.
  const int64_t per = std::max<int64_t>(1, all_panels * x_tasks / want_tasks);

  const int64_t stride = bf16_stride(cols);
  const uint16_t* xb =
      ws[0]->dtype == DType::BF16 && k.gemm_bf16_x ? x_bf16(k, pool, x, n, cols) : nullptr;
  for (size_t i = 0; i < ws.size(); ++i) {
    GemmArgs& a = args[i];
    a.packed = ws[i]->packed;
    a.dtype = ws[i]->dtype;
    a.rows = ws[i]->rows;
    a.cols = cols;
    a.x = x;
    a.y = ys[i];
    a.xb = xb;
    a.xb_stride = stride;
    const int64_t n_panels = (a.rows + kPanel - 1) / kPanel;
    first_task[i + 1] = first_task[i] + (n_panels + per - 1) / per;
  }
  const int64_t chunk_tasks = first_task[ws.size()];
  const size_t scratch_floats = k.gemm_scratch_floats(cols);
  pool.parallel_for(chunk_tasks * x_tasks, [&](int64_t t, int) {
    static thread_local std::vector<float> scratch;  // the set's per-thread panel scratch
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    const int64_t xt = t / chunk_tasks, ct = t % chunk_tasks;
    size_t i = 0;
    while (ct >= first_task[i + 1]) ++i;
    const GemmArgs& a = args[i];
    const int64_t n_panels = (a.rows + kPanel - 1) / kPanel;
    const int64_t p0 = (ct - first_task[i]) * per, p1 = std::min(n_panels, p0 + per);
    const int64_t i0 = xt * x_chunk, i1 = std::min(n, i0 + x_chunk);
    k.gemm_panels(a, p0, p1, i0, i1, scratch.data());
  });
}

// The x operands of rows-layout matrices, each made once per call on the
// caller thread's buffers (shared with the workers by pointer): quantized
// per 32 and per 256 for the integer products, or BF16 for the panels.
struct RowsX {
  const XQ8Block* xq = nullptr;
  const XQ8KBlock* xqk = nullptr;
  const XQ8Block* xqu = nullptr;  // xq's bytes + 128, for Q6_K on int8 panels
  const uint16_t* xb = nullptr;
};

// Whether rows-layout matrix w multiplies n x rows in 8-bit integers: the
// decode shape on every int8_weight_type, the prefill shape on int8 panels
// where the set has them.
bool int8_products(const CpuKernels& k, const CpuMatrix& w, int64_t n) {
  if (n < kInt8MaxRows) return int8_weight_type(w.source_type);
  return k.int8_panel_type != nullptr && k.int8_panel_type(w.source_type);
}

RowsX prepare_rows_x(const CpuKernels& k, ThreadPool& pool, std::span<const CpuMatrix* const> ws,
                     const float* x, int64_t n) {
  const int64_t cols = ws[0]->cols;
  bool want_q8 = false, want_q8k = false, want_q8u = false, want_bf16 = false;
  for (const CpuMatrix* w : ws) {
    if (int8_products(k, *w, n)) {
      // The K formats' decode tiles take x per 256; the int8 panels take every format per 32.
      (k_weight_type(w->source_type) && n < kInt8MaxRows ? want_q8k : want_q8) = true;
      // Q6_K's panels multiply its signed values by x's bytes as unsigned ones.
      want_q8u = want_q8u || (w->source_type == WeightType::Q6_K && n >= kInt8MaxRows);
    } else if (k.gemm_bf16_x && n >= kInt8MaxRows) {
      want_bf16 = true;  // block formats dequantize to BF16 panels in these sets (quant_gemm.h)
    }
  }
  RowsX r;
  if (want_q8k) {
    static thread_local std::vector<XQ8KBlock> xqk_buffer;
    const int64_t blocks = n * (cols / 256);
    if (xqk_buffer.size() < static_cast<size_t>(blocks)) xqk_buffer.resize(blocks);
    k.quantize_x_q8k(x, 0, n, cols, xqk_buffer.data());
    r.xqk = xqk_buffer.data();
  }
  if (want_q8) {
    static thread_local std::vector<XQ8Block> xq_buffer, xqu_buffer;
    const int64_t per_row = cols / 32, blocks = n * per_row;
    if (xq_buffer.size() < static_cast<size_t>(blocks)) xq_buffer.resize(blocks);
    if (want_q8u && xqu_buffer.size() < static_cast<size_t>(blocks)) xqu_buffer.resize(blocks);
    // The caller's buffers: a thread_local named in a task is the worker's.
    XQ8Block* xq = xq_buffer.data();
    XQ8Block* xqu = want_q8u ? xqu_buffer.data() : nullptr;
    for_x_rows(pool, n, [&](int64_t i0, int64_t i1) {
      k.quantize_x_q8(x, i0, i1, cols, xq);
      if (xqu == nullptr) return;
      for (int64_t b = i0 * per_row; b < i1 * per_row; ++b) {
        xqu[b] = xq[b];
        for (int8_t& q : xqu[b].q) q = static_cast<int8_t>(static_cast<uint8_t>(q) ^ 0x80u);
      }
    });
    r.xq = xq;
    r.xqu = xqu;
  }
  if (want_bf16) r.xb = x_bf16(k, pool, x, n, cols);
  return r;
}

// ys[i] (n, ws[i]->rows) = x (n, cols) · Wᵢᵀ for rows-layout matrices of one
// cols (block types; q/k/v and gate/up come as one call): x prepared
// once (prepare_rows_x), then one task list over every matrix's 32-row groups,
// tasks_per_thread in all. Every task takes all x rows, so each group
// is unpacked or dequantized once per call; int8_products matrices run the
// integer products, the others gemm_rows. Each output is computed as a call on
// its matrix alone computes it.
void rows_matmul(const CpuKernels& k, ThreadPool& pool, std::span<const CpuMatrix* const> ws,
                 const float* x, std::span<float* const> ys, int64_t n) {
  const int64_t cols = ws[0]->cols;
  const RowsX rx = prepare_rows_x(k, pool, ws, x, n);
  std::array<GemmArgs, kMaxSameX> args;
  std::array<int64_t, kMaxSameX + 1> first_task{};  // matrix i's tasks start at first_task[i]
  int64_t all_panels = 0;
  for (const CpuMatrix* w : ws) all_panels += (w->rows + kPanel - 1) / kPanel;
  const int64_t all_tasks = tasks_per_thread(n) * pool.n_threads();
  const int64_t per = std::max<int64_t>(1, (all_panels + all_tasks - 1) / all_tasks);
  for (size_t i = 0; i < ws.size(); ++i) {
    GemmArgs& a = args[i];
    a.rows = ws[i]->rows;
    a.cols = cols;
    a.x = x;
    a.y = ys[i];
    a.rows_data = ws[i]->rows_data;
    a.row_bytes = ws[i]->row_bytes;
    a.row_type = ws[i]->source_type;
    if (int8_products(k, *ws[i], n)) {
      a.xq = rx.xq;
      a.xqk = rx.xqk;
      a.xqu = rx.xqu;
    } else {
      a.xb = rx.xb;
      a.xb_stride = bf16_stride(cols);
    }
    const int64_t n_panels = (a.rows + kPanel - 1) / kPanel;
    first_task[i + 1] = first_task[i] + (n_panels + per - 1) / per;
  }
  const size_t scratch_floats = k.gemm_scratch_floats(cols);
  pool.parallel_for(first_task[ws.size()], [&](int64_t t, int) {
    size_t i = 0;
    while (t >= first_task[i + 1]) ++i;
    const GemmArgs& a = args[i];
    const int64_t n_panels = (a.rows + kPanel - 1) / kPanel;
    const int64_t p0 = (t - first_task[i]) * per, p1 = std::min(n_panels, p0 + per);
    if ((a.xq != nullptr || a.xqk != nullptr) && n < kInt8MaxRows) {
      k.gemm_int8_rows(a, p0, p1, 0, n);
      return;
    }
    static thread_local std::vector<float> scratch;  // the set's per-thread scratch
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    if (a.xq != nullptr) {
      k.gemm_int8_panels(a, p0, p1, 0, n, scratch.data());
      return;
    }
    k.gemm_rows(a, p0, p1, 0, n, scratch.data());
  });
}

// Row-major (rows, cols) -> panels (cols, kPanel) of T, rows past `rows` zero:
// the F32 and F16 panel layout.
template <class T>
T* pack_columns(const T* src, int64_t rows, int64_t cols) {
  const int64_t n_panels = (rows + kPanel - 1) / kPanel;
  auto* dst = static_cast<T*>(alloc_weights(n_panels * cols * kPanel * sizeof(T)));
  for (int64_t r = 0; r < rows; ++r) {
    T* p = dst + (r / kPanel) * cols * kPanel + r % kPanel;
    for (int64_t c = 0; c < cols; ++c) p[c * kPanel] = src[r * cols + c];
  }
  return dst;
}

}  // namespace

void pack_matrix(CpuMatrix& m, DType dtype, const void* row_major) {
  const int64_t rows = m.rows, cols = m.cols;
  const int64_t n_panels = (rows + kPanel - 1) / kPanel;
  m.dtype = dtype;
  if (dtype == DType::F32) {
    m.packed = pack_columns(static_cast<const float*>(row_major), rows, cols);
  } else if (dtype == DType::F16) {
    m.packed = pack_columns(static_cast<const uint16_t*>(row_major), rows, cols);
  } else {
    PREFIXD_CHECK(dtype == DType::BF16, "packed matrices are F32, F16 or BF16");
    const int64_t k2 = (cols + 1) / 2;
    const auto* src = static_cast<const uint16_t*>(row_major);
    auto* dst = static_cast<uint16_t*>(alloc_weights(n_panels * k2 * kPanel * 2 * sizeof(uint16_t)));
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* p = dst + (r / kPanel) * k2 * kPanel * 2 + (r % kPanel) * 2;
      for (int64_t c = 0; c < cols; ++c) p[(c / 2) * kPanel * 2 + c % 2] = src[r * cols + c];
    }
    m.packed = dst;
  }
}

void matrix_row(const CpuMatrix& m, int64_t r, float* out) {
  const int64_t cols = m.cols;
  if (!m.has_panels()) {
    quant::dequantize_row(m.source_type, m.rows_data + r * m.row_bytes, out, cols);
    return;
  }
  if (m.dtype == DType::F32) {
    const float* p = static_cast<const float*>(m.packed) + (r / kPanel) * cols * kPanel + r % kPanel;
    for (int64_t c = 0; c < cols; ++c) out[c] = p[c * kPanel];
  } else if (m.dtype == DType::F16) {
    const uint16_t* p = static_cast<const uint16_t*>(m.packed) + (r / kPanel) * cols * kPanel + r % kPanel;
    for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(p[c * kPanel]);
  } else {
    const int64_t k2 = (cols + 1) / 2;
    const uint16_t* p = static_cast<const uint16_t*>(m.packed) + (r / kPanel) * k2 * kPanel * 2 +
                        (r % kPanel) * 2;
    for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[(c / 2) * kPanel * 2 + c % 2]);
  }
}

void matmul(const CpuKernels& k, ThreadPool& pool, const CpuMatrix& w, const float* x, float* y,
            int64_t n) {
  if (n <= 0) return;
  const CpuMatrix* one[] = {&w};
  float* one_y[] = {y};
  if (w.has_panels()) {
    panel_matmul(k, pool, one, x, one_y, n);
  } else {
    rows_matmul(k, pool, one, x, one_y, n);
  }
}

void matmul_same_x(const CpuKernels& k, ThreadPool& pool, std::span<const CpuMatrix* const> ws,
                   const float* x, std::span<float* const> ys, int64_t n) {
  PREFIXD_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= kMaxSameX,
                "matmul_same_x: 1 to kMaxSameX matrices, one output each");
  bool same_panels = true, all_rows = true;
  for (const CpuMatrix* w : ws) {
    same_panels =
        same_panels && w->has_panels() && w->dtype == ws[0]->dtype && w->cols == ws[0]->cols;
    all_rows = all_rows && !w->has_panels() && w->cols == ws[0]->cols;
  }
  if (n <= 0) return;
  if (same_panels) {
    panel_matmul(k, pool, ws, x, ys, n);
  } else if (all_rows) {
    rows_matmul(k, pool, ws, x, ys, n);
  } else {
    for (size_t i = 0; i < ws.size(); ++i) matmul(k, pool, *ws[i], x, ys[i], n);
  }
}

}  // namespace prefixd::cpu
