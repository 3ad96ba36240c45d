// CpuBackend: host memory, weight upload (F32/BF16 packed, the rest kept as rows), batch
// bookkeeping, KV pool allocation and block transfers. Ops live in their own files.
#include "kernels/cpu/cpu_backend.h"

#include <array>
#include <cstdlib>
#include <cstring>

namespace prefixd::cpu {

namespace {

// 64-byte aligned, uninitialised; aborts on OOM. Sets *rounded to the size taken.
void* alloc_aligned_raw(size_t n_bytes, size_t* rounded) {
  *rounded = n_bytes == 0 ? 64 : (n_bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, *rounded);
  PREFIXD_CHECK(p != nullptr, "host allocation failed");
  return p;
}

}  // namespace

void* alloc_aligned(size_t n_bytes) {
  size_t rounded = 0;
  void* p = alloc_aligned_raw(n_bytes, &rounded);
  std::memset(p, 0, rounded);
  return p;
}

void free_aligned(void* ptr) { std::free(ptr); }

CpuMatrix::~CpuMatrix() {
  free_weights(packed);
  free_weights(rows_data);
}

CpuBackend::CpuBackend(int n_threads, const CpuIsaPlan& plan)
    : plan_(plan), k_(cpu_kernels(plan.base)), pool_(n_threads) {
  for (int f = 0; f < kKernelFamilies; ++f) family_[f] = &cpu_kernels(plan.family[f]);
}

KernelFamily matrix_family(const CpuMatrix& w) {
  if (!w.has_panels()) return KernelFamily::kBlockFormats;
  return w.dtype == DType::BF16 ? KernelFamily::kBf16Tiles : KernelFamily::kF32Tiles;
}

const CpuKernels& CpuBackend::matrix_kernels(const CpuMatrix& w) const {
  return kernels(matrix_family(w));
}

void CpuBackend::upload(void* dst, const void* src_host, size_t n_bytes) {
  std::memcpy(dst, src_host, n_bytes);
}

void CpuBackend::download(void* dst_host, const void* src, size_t n_bytes) {
  std::memcpy(dst_host, src, n_bytes);
}

std::unique_ptr<Matrix> CpuBackend::upload_matrix(WeightType type, int64_t rows, int64_t cols,
                                                  const void* host_data,
                                                  bool /*host_data_outlives: always copied*/) {
  auto m = std::make_unique<CpuMatrix>();
  m->rows = rows;
  m->cols = cols;
  m->source_type = type;
  if (type == WeightType::F32) {
    pack_matrix(*m, DType::F32, host_data);
  } else if (type == WeightType::BF16) {
    pack_matrix(*m, DType::BF16, host_data);
  } else if (type == WeightType::F16) {
    pack_matrix(*m, DType::F16, host_data);
  } else {
    PREFIXD_CHECK(cols % weight_type_traits(type).block_elements == 0, "rows must be whole blocks");
    m->row_bytes = weight_row_bytes(type, cols);
    const size_t n_bytes = m->row_bytes * static_cast<size_t>(rows);
    // Written once by the copy (no zeroing first: an 8 GB model would be written twice).
    size_t rounded = 0;
    m->rows_data = static_cast<uint8_t*>(alloc_weights_raw(n_bytes, &rounded));
    std::memcpy(m->rows_data, host_data, n_bytes);
    std::memset(m->rows_data + n_bytes, 0, rounded - n_bytes);
  }
  return m;
}

Result<KvPool> CpuBackend::allocate_kv_pool(const KvGeometry& geom) {
  if (geom.n_layers <= 0 || geom.n_blocks <= 0 || geom.block_size <= 0 || geom.n_kv_heads <= 0 ||
      geom.head_dim <= 0) {
    return Status::error("invalid KV geometry");
  }
  if (geom.has_window_group() &&
      (static_cast<int32_t>(geom.window_layers.size()) != geom.n_layers || geom.n_window_blocks <= 0)) {
    return Status::error("invalid KV geometry: window_layers needs one flag per layer and n_window_blocks > 0");
  }
  KvPool pool;
  pool.geom = geom;
  for (int32_t l = 0; l < geom.n_layers; ++l) {
    const size_t layer_bytes = geom.layer_block_bytes() * static_cast<size_t>(geom.layer_blocks(l));
    for (std::vector<void*>* side : {&pool.k, &pool.v}) {
      void* p = std::aligned_alloc(64, (layer_bytes + 63) / 64 * 64);
      if (p == nullptr) {
        free_kv_pool(pool);
        return Status::error("KV pool allocation of " + std::to_string(geom.pool_bytes()) +
                             " bytes failed");
      }
      std::memset(p, 0, layer_bytes);
      side->push_back(p);
    }
  }
  if (geom.n_state_slots > 0) {
    if (geom.state_floats <= 0) {
      free_kv_pool(pool);
      return Status::error("invalid KV geometry: state slots need state_floats > 0");
    }
    pool.state = static_cast<float*>(
        alloc_aligned(static_cast<size_t>(geom.n_state_slots) * geom.state_floats * sizeof(float)));
  }
  return pool;
}

void CpuBackend::free_kv_pool(KvPool& pool) {
  for (void* p : pool.k) free_aligned(p);
  for (void* p : pool.v) free_aligned(p);
  free_aligned(pool.state);
  pool.k.clear();
  pool.v.clear();
  pool.state = nullptr;
}

void CpuBackend::prepare_batch(const Batch& batch, int32_t block_size) {
  PREFIXD_CHECK(block_size > 0, "block size must be positive");
  PREFIXD_CHECK(batch.positions.size() == batch.tokens.size(), "positions per token");
  PREFIXD_CHECK(batch.slots.size() == batch.tokens.size(), "slots per token");
  batch_.tokens = batch.tokens;
  batch_.positions = batch.positions;
  batch_.slots = batch.slots;
  batch_.seqs = batch.seqs;
  batch_.block_tables = batch.block_tables;
  batch_.output_rows = batch.output_rows;
  batch_.block_size = block_size;
  batch_.rope_dim = -1;  // invalidates the RoPE tables
  // The window layers' view: the same rows and sequences in the window space.
  has_window_view_ = !batch.window_slots.empty();
  if (has_window_view_) {
    PREFIXD_CHECK(batch.window_slots.size() == batch.tokens.size() &&
                      batch.window_block_tables.size() == batch.block_tables.size(),
                  "window slots per token and window tables parallel to the block tables");
    window_batch_.tokens = batch.tokens;
    window_batch_.positions = batch.positions;
    window_batch_.seqs = batch.seqs;
    window_batch_.slots = batch.window_slots;
    window_batch_.block_tables = batch.window_block_tables;
    window_batch_.block_size = block_size;
  }
}

const CpuBatch& CpuBackend::batch_of(const KvPool& pool, int32_t layer) const {
  if (!pool.geom.in_window_group(layer)) return batch_;
  PREFIXD_CHECK(has_window_view_, "a window group layer needs the batch's window slots and tables");
  return window_batch_;
}

void CpuBackend::embed(const Matrix& table, float* out) {
  cpu::embed(pool_, batch_, static_cast<const CpuMatrix&>(table), out);
}

void CpuBackend::rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
                         float eps) {
  cpu::rmsnorm(k_, pool_, x, weight, out, n, dim, eps);
}

void CpuBackend::matmul(const Matrix& w, const float* x, float* y, int64_t n) {
  const auto& m = static_cast<const CpuMatrix&>(w);
  cpu::matmul(matrix_kernels(m), pool_, m, x, y, n);
}

void CpuBackend::matmul_same_x(const Matrix* const* ws, const float* x, float* const* ys, int count,
                               int64_t n) {
  if (count < 1 || count > static_cast<int>(cpu::kMaxSameX)) {  // one product each
    Backend::matmul_same_x(ws, x, ys, count, n);
    return;
  }
  std::array<const CpuMatrix*, cpu::kMaxSameX> cpu_ws;
  for (int i = 0; i < count; ++i) cpu_ws[i] = static_cast<const CpuMatrix*>(ws[i]);
  for (int i = 1; i < count; ++i) {
    if (&matrix_kernels(*cpu_ws[i]) == &matrix_kernels(*cpu_ws[0])) continue;
    for (int j = 0; j < count; ++j) matmul(*ws[j], x, ys[j], n);  // families on different sets
    return;
  }
  const auto n_ws = static_cast<size_t>(count);
  cpu::matmul_same_x(matrix_kernels(*cpu_ws[0]), pool_, std::span<const CpuMatrix* const>(cpu_ws.data(), n_ws), x,
                     std::span<float* const>(ys, n_ws), n);
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t n, int64_t dim) {
  cpu::add_bias(k_, pool_, y, bias, n, dim);
}

void CpuBackend::add(float* y, const float* x, int64_t n) { cpu::add(k_, pool_, y, x, n); }

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::swiglu(k_, pool_, gate, up, out, n);
}

void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::geglu(k_, pool_, gate, up, out, n);
}

void CpuBackend::scale(float* y, float factor, int64_t n) { cpu::scale(k_, pool_, y, factor, n); }

void CpuBackend::rope(float* x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, float base,
                      const float* freq_factors, RopeStyle style) {
  cpu::rope(k_, pool_, batch_, x, n_heads, head_dim, rope_dim, base, freq_factors, style);
}

void CpuBackend::kv_store(KvPool& pool, int32_t layer, const float* k, const float* v) {
  cpu::kv_store(k_, batch_of(pool, layer), pool, layer, k, v);
}

void CpuBackend::attention(const KvPool& pool, int32_t layer, const float* q, float* out,
                           int32_t n_heads, float scale, int32_t window_tokens) {
  cpu::attention(kernels(KernelFamily::kAttention), pool_, batch_of(pool, layer), pool, layer, q, out, n_heads, scale, window_tokens);
}

void CpuBackend::short_conv(KvPool& pool, int32_t layer, const float* bcx, const float* kernel, float* out,
                            int32_t channels, int32_t l_cache) {
  cpu::short_conv(pool_, batch_of(pool, layer), pool, layer, bcx, kernel, out, channels, l_cache);
}

void CpuBackend::gather_output_rows(const float* x, float* out, int64_t dim) {
  for (size_t i = 0; i < batch_.output_rows.size(); ++i) {
    const int32_t row = batch_.output_rows[i];
    PREFIXD_CHECK(row >= 0 && row < batch_.n_tokens(), "output row out of range");
    std::memcpy(out + static_cast<int64_t>(i) * dim, x + static_cast<int64_t>(row) * dim,
                dim * sizeof(float));
  }
}

namespace {
float* state_slot_ptr(const KvPool& pool, int32_t slot) {
  PREFIXD_CHECK(pool.state != nullptr && slot >= 0 && slot < pool.geom.n_state_slots, "state slot out of range");
  return pool.state + static_cast<int64_t>(slot) * pool.geom.state_floats;
}
}  // namespace

void CpuBackend::copy_state_slot(KvPool& pool, int32_t src, int32_t dst) {
  if (src == dst) return;
  std::memcpy(state_slot_ptr(pool, dst), state_slot_ptr(pool, src),
              static_cast<size_t>(pool.geom.state_floats) * sizeof(float));
}

void CpuBackend::read_state_slot(const KvPool& pool, int32_t slot, float* host_dst) {
  std::memcpy(host_dst, state_slot_ptr(pool, slot), static_cast<size_t>(pool.geom.state_floats) * sizeof(float));
}

void CpuBackend::write_state_slot(KvPool& pool, int32_t slot, const float* host_src) {
  std::memcpy(state_slot_ptr(pool, slot), host_src, static_cast<size_t>(pool.geom.state_floats) * sizeof(float));
}

void CpuBackend::copy_block(KvPool& pool, int32_t src, int32_t dst) {
  copy_kv_block(pool, KvBlockIds{src, -1}, KvBlockIds{dst, -1});
}

void CpuBackend::read_block(const KvPool& pool, int32_t block_id, void* host_dst) {
  read_kv_block(pool, KvBlockIds{block_id, -1}, host_dst);
}

void CpuBackend::write_block(KvPool& pool, int32_t block_id, const void* host_src) {
  write_kv_block(pool, KvBlockIds{block_id, -1}, host_src);
}

namespace {

// The block of `ids` that layer `layer` lives in; -1 when it is a window
// layer and ids has no window part (allowed only where `may_lack` is set).
int32_t layer_block_id(const KvGeometry& g, int32_t layer, KvBlockIds ids, bool may_lack) {
  const bool window = g.in_window_group(layer);
  const int32_t id = window ? ids.window_block : ids.block;
  if (window && id < 0 && may_lack) return -1;
  PREFIXD_CHECK(id >= 0 && id < g.layer_blocks(layer),
                window ? "window block id out of range" : "block id out of range");
  return id;
}

}  // namespace

void CpuBackend::copy_kv_block(KvPool& pool, KvBlockIds src, KvBlockIds dst) {
  const size_t bytes = pool.geom.layer_block_bytes();
  for (int32_t l = 0; l < pool.geom.n_layers; ++l) {
    const int32_t s = layer_block_id(pool.geom, l, src, false);
    const int32_t d = layer_block_id(pool.geom, l, dst, false);
    if (s == d) continue;
    for (void* base : {pool.k[l], pool.v[l]}) {
      auto* b = static_cast<uint8_t*>(base);
      std::memcpy(b + d * bytes, b + s * bytes, bytes);
    }
  }
}

void CpuBackend::read_kv_block(const KvPool& pool, KvBlockIds ids, void* host_dst) {
  const size_t bytes = pool.geom.layer_block_bytes();
  auto* dst = static_cast<uint8_t*>(host_dst);
  for (int32_t l = 0; l < pool.geom.n_layers; ++l) {
    const size_t off = static_cast<size_t>(layer_block_id(pool.geom, l, ids, false)) * bytes;
    std::memcpy(dst, static_cast<const uint8_t*>(pool.k[l]) + off, bytes);
    dst += bytes;
    std::memcpy(dst, static_cast<const uint8_t*>(pool.v[l]) + off, bytes);
    dst += bytes;
  }
}

void CpuBackend::write_kv_block(KvPool& pool, KvBlockIds ids, const void* host_src) {
  const size_t bytes = pool.geom.layer_block_bytes();
  const auto* src = static_cast<const uint8_t*>(host_src);
  for (int32_t l = 0; l < pool.geom.n_layers; ++l, src += 2 * bytes) {
    const int32_t id = layer_block_id(pool.geom, l, ids, true);
    if (id < 0) continue;  // a window layer of a block without a window part
    const size_t off = static_cast<size_t>(id) * bytes;
    std::memcpy(static_cast<uint8_t*>(pool.k[l]) + off, src, bytes);
    std::memcpy(static_cast<uint8_t*>(pool.v[l]) + off, src + bytes, bytes);
  }
}

}  // namespace prefixd::cpu

namespace prefixd {

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return make_cpu_backend(n_threads, cpu::best_cpu_isa());
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, cpu::CpuIsa isa) {
  return std::make_unique<cpu::CpuBackend>(n_threads <= 0 ? 2 : n_threads, cpu::plan_for_isa(isa));
}

}  // namespace prefixd
