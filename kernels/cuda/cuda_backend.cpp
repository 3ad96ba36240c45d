// CudaBackend: the Backend interface over cuBLAS and the kernels in
// kernels/cuda/*.cu. Host-side arithmetic (launch shapes, batch packing,
// dispatch) lives in launch_config.h where CPU tests check it.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/activation_twins.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_graph.h"
#include "kernels/cuda/decode_self_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/self_check.h"
#include "kernels/op_math_ext.h"

namespace prefixd {
namespace {

using cuda::DeviceBatch;
using cuda::PackedBatch;

// A weight matrix in device memory, (rows, cols) row-major: elements of
// `stored` (F32/F16/BF16), or the raw ggml rows of source_type (`blocks`).
class CudaMatrix : public Matrix {
 public:
  ~CudaMatrix() override {
    if (data) PREFIXD_CUDA_CHECK(cudaFree(data));
  }
  // device: (rows, cols) in `stored`, or (rows) runs of weight_row_bytes(source_type, cols) bytes
  void* data = nullptr;
  DType stored = DType::F32;  // element type; blocks: F16, what prefill dequantizes to
  bool blocks = false;        // raw ggml blocks of source_type, as in the file
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

Status cuda_status(cudaError_t err, const std::string& what) {
  return Status::error(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// A device buffer that grows on demand. Growing waits for the stream, since
// work issued earlier may still read the old buffer. With a CaptureState
// (buffers a recorded decode graph may point at): growing bumps its epoch,
// and during a capture it neither waits nor frees (the old buffer is retired
// until the capture ends) and spoils the capture.
struct DeviceScratch {
  void* ptr = nullptr;
  size_t capacity_bytes = 0;
  cuda::CaptureState* graphs = nullptr;
  void* ensure(size_t n_bytes, cudaStream_t stream) {
    if (n_bytes <= capacity_bytes) return ptr;
    return grow_to(n_bytes + n_bytes / 2, stream);
  }
  // Grows to exactly n_bytes: a buffer sized once for its largest user.
  void* reserve_exact(size_t n_bytes, cudaStream_t stream) {
    if (n_bytes <= capacity_bytes) return ptr;
    return grow_to(n_bytes, stream);
  }
  void* grow_to(size_t n_bytes, cudaStream_t stream) {
    if (graphs != nullptr && graphs->capturing) {
      if (ptr) graphs->retired.push_back(ptr);
      graphs->spoiled = true;
    } else {
      PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (ptr) PREFIXD_CUDA_CHECK(cudaFree(ptr));
    }
    ptr = nullptr;
    capacity_bytes = n_bytes;
    PREFIXD_CUDA_CHECK(cudaMalloc(&ptr, capacity_bytes));
    if (graphs != nullptr) ++graphs->epoch;
    return ptr;
  }
  void release() {
    if (ptr) PREFIXD_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    capacity_bytes = 0;
  }
};

// Pinned host staging that grows on demand. It tracks no copies itself: each
// user waits until the asynchronous copies that read or write it are done
// (the batch_uploaded_ or copy_done_ event, or a stream synchronize) before it
// refills or grows it.
struct PinnedScratch {
  void* ptr = nullptr;
  size_t capacity_bytes = 0;
  void* ensure(size_t n_bytes) {
    if (n_bytes <= capacity_bytes) return ptr;
    if (ptr) PREFIXD_CUDA_CHECK(cudaFreeHost(ptr));
    capacity_bytes = n_bytes + n_bytes / 2;
    PREFIXD_CUDA_CHECK(cudaHostAlloc(&ptr, capacity_bytes, cudaHostAllocDefault));
    return ptr;
  }
  void release() {
    if (ptr) PREFIXD_CUDA_CHECK(cudaFreeHost(ptr));
    ptr = nullptr;
    capacity_bytes = 0;
  }
};

// cuBLAS workspace, set once so that eager and captured GEMMs choose alike
// and a capture allocates nothing (32 MiB: cuBLAS's recommendation for Hopper).
inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

class CudaBackend final : public Backend, private cuda::StepHost {
 public:
  CudaBackend(int device, int n_sms, const CudaBackendOptions& options)
      : device_(device), n_sms_(n_sms), options_(options) {
    for (DeviceScratch* s : {&act_scratch_, &dequant_scratch_, &decode_ws_}) s->graphs = &capture_;
  }

  // Creates streams, events and the cuBLAS handle; a failure is a Status.
  Status init() {
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) != cudaSuccess)
      return cuda_status(e, "cudaStreamCreate");
    if ((e = cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking)) != cudaSuccess)
      return cuda_status(e, "cudaStreamCreate (copy)");
    for (cudaEvent_t* ev : {&batch_uploaded_, &compute_done_, &copy_done_}) {
      if ((e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_status(e, "cudaEventCreate");
    }
    cublasStatus_t st = cublasCreate(&cublas_);
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status::error(std::string("cublasCreate: ") + cublasGetStatusString(st));
    st = cublasSetStream(cublas_, stream_);
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status::error(std::string("cublasSetStream: ") + cublasGetStatusString(st));
    // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
    if ((e = cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes)) != cudaSuccess)
      return cuda_status(e, "cuBLAS workspace");
    st = cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes);
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status::error(std::string("cublasSetWorkspace: ") + cublasGetStatusString(st));
    graphs_ = std::make_unique<cuda::DecodeGraphs>(static_cast<cuda::StepHost&>(*this),
                                                  options_.decode_graphs,
                                                  options_.corrupt_checked_replays_for_test);
    prefill_ = std::make_unique<cuda::PrefillAttention>(options_, stream_, &fast_paths_);
    decode_check_ = std::make_unique<cuda::DecodeSelfCheck>(stream_, n_sms_, &fast_paths_,
                                                           cuda::info_log_or_stderr(options_.log),
                                                           options_.corrupt_flash_decode_for_test);
    return Status::ok_status();
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    graphs_.reset();
    for (const cuda::ActivationTwins::Twin& t : twins_.remove_all()) cudaFree(t.data);
    prefill_.reset();
    for (RopeTable& t : rope_tables_) cudaFree(t.inv_freq);
    act_scratch_.release();
    dequant_scratch_.release();
    decode_ws_.release();
    batch_dev_.release();
    batch_host_.release();
    block_staging_.release();
    if (cublas_) cublasDestroy(cublas_);
    if (cublas_workspace_) cudaFree(cublas_workspace_);
    for (cudaEvent_t ev : {batch_uploaded_, compute_done_, copy_done_})
      if (ev) cudaEventDestroy(ev);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  FastPathReport fast_path_report() const override { return fast_paths_.report(); }

  // --- memory -------------------------------------------------------------
  void* alloc(size_t n_bytes) override {
    activate();
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n_bytes);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "cuda backend: out of device memory allocating %zu bytes: %s\n", n_bytes,
                   cudaGetErrorString(e));
      std::abort();
    }
    if (n_bytes) PREFIXD_CUDA_CHECK(cudaMemsetAsync(p, 0, n_bytes, stream_));
    return p;
  }
  void free(void* ptr) override {
    activate();
    // Recorded decode graphs may point at it, and a buffer allocated later
    // at the same address is not the one they recorded.
    if (graphs_) graphs_->drop_all();
    ++capture_.epoch;
    for (const cuda::ActivationTwins::Twin& t : twins_.remove(ptr))
      PREFIXD_CUDA_CHECK(cudaFree(t.data));
    if (ptr) PREFIXD_CUDA_CHECK(cudaFree(ptr));  // cudaFree waits for work using it
  }
  // Pinned, portable (usable from every thread and context). Called from
  // tier I/O threads: no stream work, no device state beyond the context.
  void* alloc_host(size_t n_bytes) override {
    select_device();
    void* p = nullptr;
    if (cudaHostAlloc(&p, n_bytes, cudaHostAllocPortable) != cudaSuccess) return nullptr;
    return p;
  }
  void free_host(void* ptr) override {
    if (ptr) PREFIXD_CUDA_CHECK(cudaFreeHost(ptr));
  }
  void upload(void* dst, const void* src_host, size_t n_bytes) override {
    activate();
    // From pageable memory the call returns once `src_host` has been staged,
    // so the caller may reuse it at once.
    if (n_bytes)
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, n_bytes, cudaMemcpyHostToDevice, stream_));
  }
  void download(void* dst_host, const void* src, size_t n_bytes) override {
    activate();
    if (n_bytes)
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, n_bytes, cudaMemcpyDeviceToHost, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void synchronize() override {
    activate();
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }

  std::unique_ptr<Matrix> upload_matrix(WeightType type, int64_t rows, int64_t cols,
                                        const void* host_data, bool host_data_outlives) override {
    activate();
    PREFIXD_CHECK(rows <= INT_MAX && cols <= INT_MAX, "matrix shape");
    const Status shape = cuda::check_weight_shape(type, rows, cols);
    PREFIXD_CHECK(shape.ok(), shape.message().c_str());
    const cuda::GemmDispatch g = cuda::gemm_dispatch(type);
    auto m = std::make_unique<CudaMatrix>();
    m->rows = rows;
    m->cols = cols;
    m->source_type = type;
    m->stored = g.stored;
    m->blocks = g.blocks;
    // Block types are copied as they lie in the file; prefill dequantizes
    // slabs of them into dequant_scratch_, reserved here so that its memory
    // is taken at load time, before the KV pool is sized from what is free.
    const size_t n_bytes = g.blocks ? static_cast<size_t>(rows) * weight_row_bytes(type, cols)
                                    : static_cast<size_t>(rows * cols) * dtype_bytes(m->stored);
    if (g.blocks) dequant_scratch_.reserve_exact(cuda::dequant_scratch_bytes(rows, cols), stream_);
    PREFIXD_CUDA_CHECK(cudaMalloc(&m->data, n_bytes));
    PREFIXD_CUDA_CHECK(
        cudaMemcpyAsync(m->data, host_data, n_bytes, cudaMemcpyHostToDevice, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return m;
  }

  Result<KvPool> allocate_kv_pool(const KvGeometry& geom) override {
    activate();
    if (geom.n_layers <= 0 || geom.n_blocks <= 0 || geom.block_size <= 0 || geom.n_kv_heads <= 0 ||
        geom.head_dim <= 0)
      return Status::error("KV geometry has a non-positive dimension");
    if (geom.has_window_group())  // supports_window_group() is false: one block space for all layers
      return Status::error("the CUDA backend has no KV window group (KvGeometry::window_layers must be empty)");
    if (int64_t(geom.n_blocks) * geom.block_size > INT_MAX)
      return Status::error("KV pool has more than 2^31 slots");  // kernels index slots in int32
    if (cuda::attention_dims_per_lane(geom.head_dim) == 0)
      return Status::error("head_dim " + std::to_string(geom.head_dim) +
                           " exceeds the CUDA attention kernels' limit of 256");
    if (graphs_) graphs_->drop_all();
    KvPool pool;
    pool.geom = geom;
    // n_blocks blocks for the engine, then decode_scratch_blocks() where the
    // inert rows of a padded decode step write (decode_graph_plan.h).
    const size_t scratch_blocks = size_t(cuda::decode_scratch_blocks(geom.block_size));
    const size_t layer_bytes =
        cuda::kv_layer_bytes(geom) + geom.layer_block_bytes() * scratch_blocks;
    for (int32_t l = 0; l < geom.n_layers; ++l) {
      for (std::vector<void*>* side : {&pool.k, &pool.v}) {
        void* p = nullptr;
        cudaError_t e = cudaMalloc(&p, layer_bytes);
        if (e != cudaSuccess) {
          cudaGetLastError();  // clear the sticky-free allocation error
          free_kv_pool(pool);
          return cuda_status(e, "KV pool: allocating " + std::to_string(layer_bytes) +
                                    " bytes for layer " + std::to_string(l) + " (pool " +
                                    std::to_string(geom.pool_bytes()) + " bytes)");
        }
        PREFIXD_CUDA_CHECK(cudaMemsetAsync(p, 0, layer_bytes, stream_));
        side->push_back(p);
      }
    }
    return pool;
  }
  void free_kv_pool(KvPool& pool) override {
    activate();
    if (graphs_) graphs_->drop_all();
    for (void* p : pool.k) PREFIXD_CUDA_CHECK(cudaFree(p));
    for (void* p : pool.v) PREFIXD_CUDA_CHECK(cudaFree(p));
    pool.k.clear();
    pool.v.clear();
  }

  // --- one forward pass -----------------------------------------------------
  void prepare_batch(const Batch& batch, int32_t block_size) override {
    activate();
    Status valid = cuda::validate_batch(batch, block_size);
    PREFIXD_CHECK(valid.ok(), valid.message().c_str());
    upload_packed(cuda::pack_batch(batch, block_size), block_size);
    // The prefill sequences' cuDNN inputs (a padded decode step has none:
    // PrefillAttention::run returns at once for a batch without prefill tiles).
    prefill_->prepare_batch(batch, block_size);
  }

  void run_step(const Batch& batch, const KvPool& pool, const StepInfo& info,
                const StepBody& body) override {
    activate();
    graphs_->run_step(batch, pool, info, body);
  }

  cuda::DecodeGraphStats decode_graph_stats() const { return graphs_->stats(); }

  // --- cuda::StepHost ---------------------------------------------------------
  cudaStream_t step_stream() const override { return stream_; }
  void prepare_step_batch(const Batch& batch, int32_t block_size) override {
    prepare_batch(batch, block_size);
  }
  void use_packed(const int32_t* words, const PackedBatch& layout, int32_t block_size) override {
    activate();
    batch_.words = words;
    batch_.layout = layout;
    block_size_ = block_size;
  }
  void forget_current_twin() override { twins_.forget_current(); }
  cuda::CaptureState& capture_state() override { return capture_; }

  // The rest of prepare_batch: a packed batch uploaded from pinned staging
  // to batch_dev_ and made current.
  void upload_packed(PackedBatch packed, int32_t block_size) override {
    activate();
    const size_t n_bytes = packed.words.size() * sizeof(int32_t);
    // The previous batch's upload must have read the pinned buffer before it is reused.
    PREFIXD_CUDA_CHECK(cudaEventSynchronize(batch_uploaded_));
    void* host = batch_host_.ensure(n_bytes);
    void* dev = batch_dev_.ensure(n_bytes, stream_);
    if (n_bytes) {
      std::memcpy(host, packed.words.data(), n_bytes);
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(dev, host, n_bytes, cudaMemcpyHostToDevice, stream_));
    }
    PREFIXD_CUDA_CHECK(cudaEventRecord(batch_uploaded_, stream_));
    packed.words.clear();
    batch_.words = static_cast<const int32_t*>(dev);
    batch_.layout = std::move(packed);
    block_size_ = block_size;
  }

  void embed(const Matrix& table, float* out) override {
    activate();
    const auto& t = static_cast<const CudaMatrix&>(table);
    PREFIXD_CHECK(batch_.layout.max_token < t.rows, "token id beyond the embedding table");
    if (t.blocks)
      cuda::launch_embed_blocks(t.data, t.source_type, t.cols, batch_, out, stream_);
    else
      cuda::launch_embed(t.data, t.stored, t.cols, batch_, out, stream_);
  }

  void rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
               float eps) override {
    activate();
    const cuda::TwinOut twin = twin_for(out, n * dim);
    cuda::launch_rmsnorm(x, weight, out, n, dim, eps, stream_, twin);
    wrote(out, n * dim, twin);
  }

  // A GEMM keeps the current activation twin (it reads it; select_device,
  // not activate) unless y overlaps the buffer it is the twin of.
  void matmul(const Matrix& w, const float* x, float* y, int64_t n) override {
    select_device();
    if (n == 0) return;
    PREFIXD_CHECK(n <= INT_MAX, "GEMM batch too large");
    const auto& m = static_cast<const CudaMatrix&>(w);
    if (twins_.overlaps_current(y, static_cast<size_t>(n * m.rows) * sizeof(float)))
      twins_.forget_current();
    if (m.blocks && cuda::quant_matmul_path(n) == cuda::QuantMatmulPath::kMatvec) {
      cuda::launch_quant_matvec(m.data, m.source_type, m.rows, m.cols, x, y, n, stream_);
      return;
    }
    const DType act_type = cuda::gemm_dispatch(m.source_type).activation;
    const void* act = x;  // (n, cols) in act_type
    if (act_type != DType::F32) act = gemm_input(x, n, m.cols, act_type);
    if (!m.blocks) {
      gemm(m.data, m.stored, m.rows, m.cols, act, act_type, n, y, m.rows);
      return;
    }
    // Prefill over blocks: slabs of rows dequantized to F16 in the one
    // scratch, a GEMM each into their columns of y (the stream orders a slab's
    // GEMM before the next slab overwrites the scratch).
    const int64_t slab = cuda::dequant_slab_rows(m.rows, m.cols);
    PREFIXD_CHECK(dequant_scratch_.capacity_bytes >= cuda::dequant_scratch_bytes(m.rows, m.cols),
                  "dequantization scratch smaller than reserved at upload");
    auto* w16 = static_cast<uint16_t*>(dequant_scratch_.ptr);  // (slab, cols) f16
    for (int64_t r0 = 0; r0 < m.rows; r0 += slab) {
      const int64_t n_rows = std::min(slab, m.rows - r0);
      cuda::launch_dequantize_f16(m.data, m.source_type, r0, n_rows, m.cols, w16, stream_);
      gemm(w16, DType::F16, n_rows, m.cols, act, act_type, n, y + r0, m.rows);
    }
  }

  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override {
    activate();
    cuda::launch_add_bias(y, bias, n, dim, stream_);
  }
  void add(float* y, const float* x, int64_t n) override {
    activate();
    cuda::launch_add(y, x, n, stream_);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    activate();
    const cuda::TwinOut twin = twin_for(out, n);
    cuda::launch_swiglu(gate, up, out, n, stream_, twin);
    wrote(out, n, twin);
  }
  void geglu(const float* gate, const float* up, float* out, int64_t n) override {
    activate();
    const cuda::TwinOut twin = twin_for(out, n);
    cuda::launch_geglu(gate, up, out, n, stream_, twin);
    wrote(out, n, twin);
  }
  void scale(float* y, float factor, int64_t n) override {
    activate();
    cuda::launch_scale(y, factor, n, stream_);
  }

  void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, float base,
            const float* freq_factors, RopeStyle style) override {
    activate();
    PREFIXD_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim, "rope_dim");
    cuda::launch_rope(x, batch_, n_heads, head_dim, rope_dim,
                      inv_freq_table(rope_dim, base, freq_factors), style, stream_);
  }

  void kv_store(KvPool& pool, int32_t layer, const float* k, const float* v) override {
    activate();
    check_pool_access(pool, layer);
    cuda::launch_kv_store(k, v, pool.k[layer], pool.v[layer], pool.geom.dtype,
                          pool.geom.n_kv_heads * pool.geom.head_dim, batch_, stream_);
  }

  void attention(const KvPool& pool, int32_t layer, const float* q, float* out, int32_t n_heads,
                 float scale, int32_t window_tokens) override {
    activate();
    check_pool_access(pool, layer);
    cuda::AttentionArgs a;
    a.k_pool = pool.k[layer];
    a.v_pool = pool.v[layer];
    a.kv_dtype = pool.geom.dtype;
    a.block_size = pool.geom.block_size;
    a.n_heads = n_heads;
    a.n_kv_heads = pool.geom.n_kv_heads;
    a.head_dim = pool.geom.head_dim;
    a.scale = scale;
    a.window_tokens = window_tokens;
    a.q = q;
    a.out = out;
    prefill_->run(a, pool.geom.n_blocks, batch_);
    if (batch_.layout.n_decode_seqs > 0) {
      // Flash decode where it takes the shape and its self-check passed,
      // else the simple kernel; the split count is a power of two from the
      // longest context.
      const int32_t n_seqs = batch_.layout.n_decode_seqs;
      const bool flash = cuda::flash_decode_shape(a.kv_dtype, n_heads, a.n_kv_heads, a.head_dim).supported &&
                         decode_check_->flash_serves(a, capture_.capturing);
      const int32_t n_splits =
          cuda::decode_splits(a, flash, n_seqs, batch_.layout.max_decode_kv_len, n_sms_);
      const size_t ws_bytes = cuda::decode_workspace_bytes(n_seqs, n_heads, a.head_dim, n_splits);
      float* ws = ws_bytes ? static_cast<float*>(decode_ws_.ensure(ws_bytes, stream_)) : nullptr;
      if (flash)
        cuda::launch_attention_decode(a, batch_, n_splits, ws, stream_);
      else
        cuda::launch_attention_decode_simple(a, batch_, n_splits, ws, stream_);
    }
  }

  void gather_output_rows(const float* x, float* out, int64_t dim) override {
    activate();
    cuda::launch_gather_rows(x, out, dim, batch_, stream_);
  }

  // --- block transfers ------------------------------------------------------
  void copy_block(KvPool& pool, int32_t src, int32_t dst) override {
    activate();
    check_block(pool, src);
    check_block(pool, dst);
    if (src == dst) return;
    const size_t lbb = pool.geom.layer_block_bytes();
    for (int32_t l = 0; l < pool.geom.n_layers; ++l) {
      for (const std::vector<void*>* side : {&pool.k, &pool.v}) {
        char* base = static_cast<char*>((*side)[l]);
        PREFIXD_CUDA_CHECK(cudaMemcpyAsync(base + dst * lbb, base + src * lbb, lbb,
                                           cudaMemcpyDeviceToDevice, stream_));
      }
    }
  }

  void read_block(const KvPool& pool, int32_t block_id, void* host_dst) override {
    activate();
    check_block(pool, block_id);
    const size_t lbb = pool.geom.layer_block_bytes();
    char* staging = static_cast<char*>(block_staging_.ensure(pool.geom.block_bytes()));
    // Offload: the copy stream starts after the compute issued so far (which
    // may still be writing this block), gathers every layer's K and V of the
    // block into pinned staging, and the compute stream keeps running meanwhile.
    PREFIXD_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
    for (int32_t l = 0; l < pool.geom.n_layers; ++l) {
      const char* k = static_cast<const char*>(pool.k[l]) + block_id * lbb;
      const char* v = static_cast<const char*>(pool.v[l]) + block_id * lbb;
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(staging + (2 * l) * lbb, k, lbb, cudaMemcpyDeviceToHost,
                                         copy_stream_));
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(staging + (2 * l + 1) * lbb, v, lbb,
                                         cudaMemcpyDeviceToHost, copy_stream_));
    }
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
    std::memcpy(host_dst, staging, pool.geom.block_bytes());
  }

  void write_block(KvPool& pool, int32_t block_id, const void* host_src) override {
    activate();
    check_block(pool, block_id);
    const size_t lbb = pool.geom.layer_block_bytes();
    char* staging = static_cast<char*>(block_staging_.ensure(pool.geom.block_bytes()));
    std::memcpy(staging, host_src, pool.geom.block_bytes());
    // Onboard: wait for compute issued so far (it may still read the block's
    // previous content), scatter on the copy stream, and make later compute
    // wait for the copy through copy_done_.
    PREFIXD_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
    for (int32_t l = 0; l < pool.geom.n_layers; ++l) {
      char* k = static_cast<char*>(pool.k[l]) + block_id * lbb;
      char* v = static_cast<char*>(pool.v[l]) + block_id * lbb;
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(k, staging + (2 * l) * lbb, lbb, cudaMemcpyHostToDevice,
                                         copy_stream_));
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(v, staging + (2 * l + 1) * lbb, lbb,
                                         cudaMemcpyHostToDevice, copy_stream_));
    }
    PREFIXD_CUDA_CHECK(cudaEventRecord(copy_done_, copy_stream_));
    PREFIXD_CUDA_CHECK(cudaStreamWaitEvent(stream_, copy_done_, 0));
    // The staging buffer is reused by the next transfer: wait until it is read.
    PREFIXD_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  }

  // write_blocks / read_blocks: checks the ids, plans the groups and runs of
  // the transfer (cuda::plan_block_transfer) and orders the copy stream after
  // the compute issued so far.
  template <typename BlockRef>
  std::vector<cuda::BlockGroup> start_block_transfer(const KvPool& pool, const BlockRef* blocks,
                                                     size_t n_blocks) {
    activate();
    std::vector<int32_t> ids;
    ids.reserve(n_blocks);
    for (size_t i = 0; i < n_blocks; ++i) {
      check_block(pool, blocks[i].block_id);
      ids.push_back(blocks[i].block_id);
    }
    std::vector<cuda::BlockGroup> groups =
        cuda::plan_block_transfer(ids, pool.geom.block_bytes(), cuda::kBlockStagingMaxBytes);
    PREFIXD_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
    return groups;
  }

  // A list of blocks, ordered by block id, in groups that fit
  // kBlockStagingMaxBytes of pinned staging (layer-major there), each group
  // moved with one host-to-device copy per layer, side and run of consecutive
  // block ids (cuda::plan_block_transfer): 2 * n_layers copies per group for
  // blocks that are consecutive in the pool, in whatever list order.
  // Ordered with compute as write_block is.
  void write_blocks(KvPool& pool, const BlockWrite* blocks, size_t n_blocks) override {
    if (n_blocks == 0) return;
    const std::vector<cuda::BlockGroup> groups = start_block_transfer(pool, blocks, n_blocks);
    const size_t lbb = pool.geom.layer_block_bytes();
    const int32_t n_layers = pool.geom.n_layers;
    char* staging = static_cast<char*>(block_staging_.ensure(groups.front().entries.size() * pool.geom.block_bytes()));
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const cuda::BlockGroup& g = groups[gi];
      // The previous group's copies must have read the staging before it is refilled.
      if (gi > 0) PREFIXD_CUDA_CHECK(cudaEventSynchronize(copy_done_));
      const size_t n = g.entries.size();
      for (size_t j = 0; j < n; ++j) {
        const char* src = static_cast<const char*>(blocks[g.entries[j]].host_src);
        for (int32_t l = 0; l < n_layers; ++l)
          for (int32_t side = 0; side < 2; ++side)
            std::memcpy(staging + cuda::block_staging_offset(l, side, int32_t(j), n, lbb),
                        src + (2 * l + side) * lbb, lbb);
      }
      for (const cuda::BlockRun& r : g.runs) {
        for (int32_t l = 0; l < n_layers; ++l) {
          for (int32_t side = 0; side < 2; ++side) {
            char* dst = static_cast<char*>(side == 0 ? pool.k[l] : pool.v[l]) + r.first_block * lbb;
            PREFIXD_CUDA_CHECK(cudaMemcpyAsync(dst, staging + cuda::block_staging_offset(l, side, r.first_slot, n, lbb),
                                               r.n_blocks * lbb, cudaMemcpyHostToDevice, copy_stream_));
          }
        }
      }
      PREFIXD_CUDA_CHECK(cudaEventRecord(copy_done_, copy_stream_));
    }
    PREFIXD_CUDA_CHECK(cudaStreamWaitEvent(stream_, copy_done_, 0));
    PREFIXD_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  }

  // The reverse of write_blocks: per group, one device-to-host copy per layer,
  // side and run into the staging, then the host scatters it into the buffers.
  void read_blocks(const KvPool& pool, const BlockRead* blocks, size_t n_blocks) override {
    if (n_blocks == 0) return;
    const std::vector<cuda::BlockGroup> groups = start_block_transfer(pool, blocks, n_blocks);
    const size_t lbb = pool.geom.layer_block_bytes();
    const int32_t n_layers = pool.geom.n_layers;
    char* staging = static_cast<char*>(block_staging_.ensure(groups.front().entries.size() * pool.geom.block_bytes()));
    for (const cuda::BlockGroup& g : groups) {
      const size_t n = g.entries.size();
      for (const cuda::BlockRun& r : g.runs) {
        for (int32_t l = 0; l < n_layers; ++l) {
          for (int32_t side = 0; side < 2; ++side) {
            const char* src = static_cast<const char*>(side == 0 ? pool.k[l] : pool.v[l]) + r.first_block * lbb;
            PREFIXD_CUDA_CHECK(cudaMemcpyAsync(staging + cuda::block_staging_offset(l, side, r.first_slot, n, lbb),
                                               src, r.n_blocks * lbb, cudaMemcpyDeviceToHost, copy_stream_));
          }
        }
      }
      PREFIXD_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
      for (size_t j = 0; j < n; ++j) {
        char* dst = static_cast<char*>(blocks[g.entries[j]].host_dst);
        for (int32_t l = 0; l < n_layers; ++l)
          for (int32_t side = 0; side < 2; ++side)
            std::memcpy(dst + (2 * l + side) * lbb, staging + cuda::block_staging_offset(l, side, int32_t(j), n, lbb),
                        lbb);
      }
    }
  }

 private:
  struct RopeTable {
    int32_t rope_dim;
    float base;
    std::vector<float> factors;  // (rope_dim / 2) f32 frequency factors; empty: none
    double* inv_freq;            // device, (rope_dim / 2) f64
  };

  // Every op on the engine thread starts here: the device made current and
  // the current activation twin forgotten (the op may write its buffer; the
  // producing ops set it again after their launch, activation_twins.h).
  void activate() {
    select_device();
    twins_.forget_current();
  }
  void select_device() const { PREFIXD_CUDA_CHECK(cudaSetDevice(device_)); }

  // The twin an op writing `count` f32 elements at `out` writes too (none
  // when `out` has no twin).
  cuda::TwinOut twin_for(const float* out, int64_t count) const {
    const cuda::ActivationTwins::Twin* t = twins_.target_for(out, count);
    return t == nullptr ? cuda::TwinOut{} : cuda::TwinOut{t->data, t->type};
  }
  void wrote(const float* out, int64_t count, const cuda::TwinOut& twin) {
    if (twin.data != nullptr)
      twins_.wrote(out, count, cuda::ActivationTwins::Twin{twin.data, twin.type, count});
  }

  // x (n, cols) f32 in `type` for a GEMM: the current twin when it holds x;
  // else converted, into x's twin (given to x here the first time, for at
  // most kTwinRows rows, outside captures) or into act_scratch_, and made
  // current for the GEMMs after this one on the same x.
  const void* gemm_input(const float* x, int64_t n, int64_t cols, DType type) {
    const int64_t count = n * cols;
    if (const void* t = twins_.current_for(x, count, type)) return t;
    if (options_.activation_twins && !capture_.capturing && !twins_.has(x) &&
        n <= cuda::ActivationTwins::kTwinRows) {
      cuda::ActivationTwins::Twin t;
      t.type = type;
      t.capacity = cuda::ActivationTwins::kTwinRows * cols;
      if (cudaMalloc(&t.data, static_cast<size_t>(t.capacity) * dtype_bytes(type)) == cudaSuccess) {
        twins_.add(x, t);
        ++capture_.epoch;
      } else {
        cudaGetLastError();  // no twin: converted into the scratch, as before
      }
    }
    const cuda::ActivationTwins::Twin* t = twins_.target_for(x, count);
    void* dst = t != nullptr && t->type == type
                    ? t->data
                    : act_scratch_.ensure(cuda::gemm_activation_bytes(n, cols, type), stream_);
    cuda::launch_convert_f32(x, dst, type, count, stream_);
    twins_.converted(x, count, dst, type);
    return dst;
  }

  // y (n, ldy) f32, columns [0, rows) = act (n, cols) · Wᵀ, W (rows, cols)
  // row-major in w_type. Column-major that is yᵀ (rows, n) = op_T(W as
  // (cols, rows)) · actᵀ (cols, n), leading dimension ldy.
  void gemm(const void* w, DType w_type, int64_t rows, int64_t cols, const void* act,
            DType act_type, int64_t n, float* y, int64_t ldy) {
    const float alpha = 1.0f, beta = 0.0f;
    PREFIXD_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                      static_cast<int>(n), static_cast<int>(cols), &alpha, w,
                                      cuda_type(w_type), static_cast<int>(cols), act,
                                      cuda_type(act_type), static_cast<int>(cols), &beta, y,
                                      CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  }

  // Inverse frequencies for (rope_dim, base, factors), each divided by its
  // frequency factor, computed in double on the host once and kept on the device.
  const double* inv_freq_table(int32_t rope_dim, float base, const float* freq_factors) {
    const int32_t half = rope_dim / 2;
    std::vector<float> factors;  // (half) f32; empty: none
    if (freq_factors != nullptr) factors.assign(freq_factors, freq_factors + half);
    for (const RopeTable& t : rope_tables_)
      if (t.rope_dim == rope_dim && t.base == base && t.factors == factors) return t.inv_freq;
    if (capture_.capturing) {  // a new table waits for the stream: not in a capture
      capture_.spoiled = true;
      return nullptr;
    }
    ++capture_.epoch;
    std::vector<double> host(half);  // (rope_dim / 2) f64
    for (int32_t i = 0; i < half; ++i) {
      host[i] = op::rope_inv_freq(i, rope_dim, base);
      if (!factors.empty()) host[i] /= static_cast<double>(factors[i]);
    }
    RopeTable t{rope_dim, base, std::move(factors), nullptr};
    PREFIXD_CUDA_CHECK(cudaMalloc(&t.inv_freq, host.size() * sizeof(double)));
    PREFIXD_CUDA_CHECK(cudaMemcpyAsync(t.inv_freq, host.data(), host.size() * sizeof(double),
                                       cudaMemcpyHostToDevice, stream_));
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double* inv_freq = t.inv_freq;
    rope_tables_.push_back(std::move(t));
    return inv_freq;
  }

  void check_pool_access(const KvPool& pool, int32_t layer) const {
    PREFIXD_CHECK(layer >= 0 && layer < pool.geom.n_layers, "layer out of range");
    PREFIXD_CHECK(pool.geom.block_size == block_size_, "pool block size differs from the batch's");
    PREFIXD_CHECK(batch_.layout.max_block_id < pool.geom.n_blocks, "block id beyond the pool");
  }
  static void check_block(const KvPool& pool, int32_t block_id) {
    PREFIXD_CHECK(block_id >= 0 && block_id < pool.geom.n_blocks, "block id out of range");
  }

  int device_;
  int n_sms_;
  CudaBackendOptions options_;
  cuda::FastPathRegistry fast_paths_;              // which attention paths serve (any thread reads)
  std::unique_ptr<cuda::PrefillAttention> prefill_;  // n_q > 1: cuDNN or the simple kernel
  std::unique_ptr<cuda::DecodeSelfCheck> decode_check_;  // n_q == 1: flash decode's per-class verdicts
  cudaStream_t stream_ = nullptr;       // all compute, uploads and downloads
  cudaStream_t copy_stream_ = nullptr;  // tier block transfers
  cudaEvent_t batch_uploaded_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  cudaEvent_t copy_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  DeviceBatch batch_;             // current batch (device words + host layout)
  int32_t block_size_ = 0;        // of the current batch
  PinnedScratch batch_host_;      // PackedBatch::words, pinned, int32
  DeviceScratch batch_dev_;       // PackedBatch::words, device, int32
  DeviceScratch act_scratch_;     // (n, cols) F16/BF16 GEMM input
  DeviceScratch dequant_scratch_; // (slab rows, cols) f16: a block matrix's rows for prefill,
                                  // sized at upload for the largest (dequant_scratch_bytes)
  DeviceScratch decode_ws_;       // (n_decode_seqs, n_heads, n_splits, head_dim + 2) f32
  PinnedScratch block_staging_;   // (geom.block_bytes()) one block, all layers, K then V
  std::vector<RopeTable> rope_tables_;
  void* cublas_workspace_ = nullptr;  // (kCublasWorkspaceBytes) device
  cuda::CaptureState capture_;        // what recorded decode graphs depend on
  cuda::ActivationTwins twins_;       // 16-bit twins of GEMM inputs (storage owned here)
  std::unique_ptr<cuda::DecodeGraphs> graphs_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  return make_cuda_backend(device, CudaBackendOptions{});
}

cuda::DecodeGraphStats decode_graph_stats(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->decode_graph_stats() : cuda::DecodeGraphStats{};
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaBackendOptions& options) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(e, "CUDA backend unavailable: cudaGetDeviceCount");
  }
  if (device < 0 || device >= n)
    return Status::error("CUDA device " + std::to_string(device) + " does not exist (" +
                         std::to_string(n) + " present)");
  if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_status(e, "cudaSetDevice");
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
    return cuda_status(e, "cudaGetDeviceProperties");
  if ((e = cuda::probe_kernel_image()) != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(e, std::string("no kernels for ") + prop.name + " (sm_" +
                              std::to_string(prop.major) + std::to_string(prop.minor) +
                              "); rebuild with CMAKE_CUDA_ARCHITECTURES including it");
  }
  auto backend = std::make_unique<CudaBackend>(device, prop.multiProcessorCount, options);
  if (Status s = backend->init(); !s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace prefixd
