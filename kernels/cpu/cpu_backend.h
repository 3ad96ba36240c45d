// The CPU backend: host memory, packed-panel matrix products, paged attention
// and elementwise ops, parallelised on a small persistent pool. The vector
// kernels are those of one instruction set per kernel family (cpu_kernels.h,
// isa_plan.h), chosen at creation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa_plan.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_memory.h"

namespace prefixd::cpu {

// A weight matrix as the CPU backend holds it, in one of two layouts:
// - panels (F32, F16 and BF16 sources): packed into panels of 32 rows for the
//   matmul kernel (see gemm.cpp): F32 and F16 panel p = (cols, 32) holding rows
//   [32p, 32p+32); BF16 panel p = (ceil(cols/2), 32, 2), column pairs
//   interleaved. Rows past `rows` and the odd column pad are zero.
// - rows (every block type): the rows exactly as the file holds them,
//   row_bytes each (a run of blocks), dequantized tile by tile as the matmul
//   reads them: the weights stay in their own bits.
// Owns `packed` / `rows_data`, in weight memory (weight_memory.h; or
// alloc_aligned's, for a matrix filled by hand).
class CpuMatrix : public Matrix {
 public:
  ~CpuMatrix() override;
  DType dtype = DType::F32;    // panels: F32, F16 or BF16
  void* packed = nullptr;      // panels: ceil(rows/32) panels in dtype, 64-byte aligned
  uint8_t* rows_data = nullptr;  // rows: (rows, row_bytes), 64-byte aligned
  size_t row_bytes = 0;
  bool has_panels() const { return packed != nullptr; }
};

// The kernel family of a matrix's products: F32 and F16 panels kF32Tiles
// (F32 FMA tiles), BF16 panels kBf16Tiles, rows kBlockFormats. All of a
// matrix's products run on its family's set, whatever the number of x rows.
KernelFamily matrix_family(const CpuMatrix& w);

// gemm.cpp: fills m.packed (m.rows, m.cols must be set) from a row-major
// (rows, cols) matrix in dtype (F32, F16 or BF16).
void pack_matrix(CpuMatrix& m, DType dtype, const void* row_major);
// out (cols) f32 = row r of m, exactly.
void matrix_row(const CpuMatrix& m, int64_t r, float* out);

// Per-batch state copied in prepare_batch().
struct CpuBatch {
  std::vector<int32_t> tokens;        // [n_tokens]
  std::vector<int32_t> positions;     // [n_tokens]
  std::vector<int32_t> slots;         // [n_tokens]
  std::vector<BatchSeq> seqs;         // sequences
  std::vector<int32_t> block_tables;  // concatenated tables
  std::vector<int32_t> output_rows;   // [n_out]
  int32_t block_size = 0;
  // RoPE cos/sin per token, computed by the first rope() of a batch and reused
  // by later calls with the same (rope_dim, base, factors): [n_tokens][rope_dim/2] each.
  std::vector<float> rope_cos, rope_sin;
  int32_t rope_dim = -1;
  float rope_base = 0.0f;
  std::vector<float> rope_factors;  // (rope_dim/2) f32 the tables used; empty: none
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

// 64-byte aligned, zeroed host allocation; aborts on OOM. Free with free_aligned.
void* alloc_aligned(size_t n_bytes);
void free_aligned(void* ptr);

// --- op families (one file each), on the kernels of one instruction set -------
// gemm.cpp: y (n, w.rows) f32 = x (n, w.cols) f32 · Wᵀ.
void matmul(const CpuKernels& k, ThreadPool& pool, const CpuMatrix& w, const float* x, float* y,
            int64_t n);
// ys[i] (n, ws[i]->rows) = x (n, cols) · Wᵢᵀ (see Backend::matmul_same_x), for
// at most kMaxSameX matrices.
constexpr size_t kMaxSameX = 4;
void matmul_same_x(const CpuKernels& k, ThreadPool& pool, std::span<const CpuMatrix* const> ws,
                   const float* x, std::span<float* const> ys, int64_t n);
// attention_cpu.cpp: paged causal attention over the batch, sliding-window when
// window_tokens > 0 (see Backend::attention).
void attention(const CpuKernels& k, ThreadPool& pool, const CpuBatch& batch, const KvPool& kv,
               int32_t layer, const float* q, float* out, int32_t n_heads, float scale,
               int32_t window_tokens);
// elementwise.cpp
void rmsnorm(const CpuKernels& k, ThreadPool& pool, const float* x, const float* weight, float* out,
             int64_t n, int64_t dim, float eps);
void add(const CpuKernels& k, ThreadPool& pool, float* y, const float* x, int64_t n);
void add_bias(const CpuKernels& k, ThreadPool& pool, float* y, const float* bias, int64_t n,
              int64_t dim);
void swiglu(const CpuKernels& k, ThreadPool& pool, const float* gate, const float* up, float* out,
            int64_t n);
void geglu(const CpuKernels& k, ThreadPool& pool, const float* gate, const float* up, float* out,
           int64_t n);
void scale(const CpuKernels& k, ThreadPool& pool, float* y, float factor, int64_t n);
void rope(const CpuKernels& k, ThreadPool& pool, CpuBatch& batch, float* x, int32_t n_heads,
          int32_t head_dim, int32_t rope_dim, float base, const float* freq_factors, RopeStyle style);
void embed(ThreadPool& pool, const CpuBatch& batch, const CpuMatrix& table, float* out);
// kv_cache.cpp: f32 rows -> pool dtype at the batch's slots.
void kv_store(const CpuKernels& k, const CpuBatch& batch, KvPool& kv, int32_t layer, const float* key,
              const float* value);
// short_conv.cpp: LFM2's gated short convolution over the batch, its ring
// of B·x rows in the pool (Backend::short_conv, kernels/conv_tail.h).
void short_conv(ThreadPool& pool, const CpuBatch& batch, KvPool& kv, int32_t layer, const float* bcx,
                const float* kernel, float* out, int32_t channels, int32_t l_cache);

class CpuBackend : public Backend {
 public:
  // Every set in the plan must be supported by this CPU (see choose_cpu_isa).
  CpuBackend(int n_threads, const CpuIsaPlan& plan);
  ~CpuBackend() override = default;

  std::string name() const override { return "cpu"; }
  int n_threads() const override { return pool_.n_threads(); }
  // The plan's base set: the rows and elementwise ops', the one reported.
  CpuIsa isa() const { return k_.isa; }
  const CpuIsaPlan& plan() const { return plan_; }
  const CpuKernels& kernels() const { return k_; }
  const CpuKernels& kernels(KernelFamily f) const { return *family_[static_cast<int>(f)]; }

  void* alloc(size_t n_bytes) override { return alloc_aligned(n_bytes); }
  void free(void* ptr) override { free_aligned(ptr); }
  void upload(void* dst, const void* src_host, size_t n_bytes) override;
  void download(void* dst_host, const void* src, size_t n_bytes) override;
  void synchronize() override {}

  std::unique_ptr<Matrix> upload_matrix(WeightType type, int64_t rows, int64_t cols,
                                        const void* host_data, bool host_data_outlives) override;
  Result<KvPool> allocate_kv_pool(const KvGeometry& geom) override;
  bool supports_window_group() const override { return true; }
  void free_kv_pool(KvPool& pool) override;

  void prepare_batch(const Batch& batch, int32_t block_size) override;
  void embed(const Matrix& table, float* out) override;
  void rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
               float eps) override;
  void matmul(const Matrix& w, const float* x, float* y, int64_t n) override;
  void matmul_same_x(const Matrix* const* ws, const float* x, float* const* ys, int count,
                     int64_t n) override;
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override;
  void add(float* y, const float* x, int64_t n) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void scale(float* y, float factor, int64_t n) override;
  void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, float base,
            const float* freq_factors, RopeStyle style) override;
  void kv_store(KvPool& pool, int32_t layer, const float* k, const float* v) override;
  void attention(const KvPool& pool, int32_t layer, const float* q, float* out, int32_t n_heads,
                 float scale, int32_t window_tokens) override;
  void gather_output_rows(const float* x, float* out, int64_t dim) override;
  // delta_net_ops.cpp
  bool supports_recurrent_layers() const override { return true; }
  void delta_conv(KvPool& pool, const DeltaNetShape& s, const float* conv_w, float* x) override;
  void delta_rule(KvPool& pool, const DeltaNetShape& s, float* qkv, const float* g, const float* beta,
                  float* out, float eps) override;
  void delta_gates(float* alpha, float* beta, const float* dt_bias, const float* a, int64_t n,
                   int32_t n_heads) override;
  void sigmoid_mul(float* y, const float* gate, int64_t n) override;
  void split_pairs(const float* x, float* first, float* second, int64_t n_rows, int64_t width) override;
  bool supports_short_conv() const override { return true; }
  void short_conv(KvPool& pool, int32_t layer, const float* bcx, const float* kernel, float* out,
                  int32_t channels, int32_t l_cache) override;

  void copy_state_slot(KvPool& pool, int32_t src, int32_t dst) override;
  void read_state_slot(const KvPool& pool, int32_t slot, float* host_dst) override;
  void write_state_slot(KvPool& pool, int32_t slot, const float* host_src) override;
  void copy_block(KvPool& pool, int32_t src, int32_t dst) override;
  void read_block(const KvPool& pool, int32_t block_id, void* host_dst) override;
  bool reads_blocks_concurrently() const override { return true; }
  void write_block(KvPool& pool, int32_t block_id, const void* host_src) override;
  void copy_kv_block(KvPool& pool, KvBlockIds src, KvBlockIds dst) override;
  void read_kv_block(const KvPool& pool, KvBlockIds ids, void* host_dst) override;
  void write_kv_block(KvPool& pool, KvBlockIds ids, const void* host_src) override;

 private:
  // The batch as layer `layer` of `pool` addresses it: the window view for a
  // window group layer.
  const CpuBatch& batch_of(const KvPool& pool, int32_t layer) const;

  // The kernels of a matrix's family (F32 panels, BF16 panels, rows).
  const CpuKernels& matrix_kernels(const CpuMatrix& w) const;

  CpuIsaPlan plan_;
  const CpuKernels& k_;
  std::array<const CpuKernels*, kKernelFamilies> family_;
  ThreadPool pool_;
  CpuBatch batch_;
  CpuBatch window_batch_;          // batch_'s rows in the window space (window group pools)
  bool has_window_view_ = false;
};

}  // namespace prefixd::cpu
