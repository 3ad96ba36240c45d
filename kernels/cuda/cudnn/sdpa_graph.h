// One cuDNN execution plan of paged causal attention (prefill) for one
// SdpaShape, built with cuDNN's C backend API: the composite graph that cuDNN
// fuses into one flash-attention kernel, and its execution.
//
// The graph, per sequence (b = 1), with s_q = max_q, s_kv = max_kv and the
// actual lengths SEQ_Q, SEQ_KV (device int32):
//   Kᵀ = paged load of the K pool through PAGE_TABLE   (1, kv_heads, d, s_kv)
//   S  = Q·Kᵀ (M = SEQ_Q, N = SEQ_KV) · SCALE         (1, heads, s_q, s_kv) f32; GQA by broadcast
//   padding: rows >= SEQ_Q and columns >= SEQ_KV set to -inf
//   bottom-right causal: key c kept iff c <= r + SEQ_KV - SEQ_Q (query row r
//     is position pos0 + r; pos0 = SEQ_KV - SEQ_Q: a suffix over cached keys)
//   window (windowed shapes): kept iff c + WINDOW - SEQ_KV + SEQ_Q > r, i.e.
//     key position > query position - WINDOW
//   P  = softmax(S) rounded to the pool dtype; O = P·V (K = SEQ_KV)
// The masks follow cudnn-frontend's composite SDPA node (the pattern cuDNN's
// fusion engine recognises). PAGE_TABLE holds pool block ids; the K and V
// pools are containers (n_pool_blocks, kv_heads, block_size, d) with strides
// of the pool's (n_blocks, block_size, kv_heads, d) layout.
//
// A plan is built for a device (a cudnnHandle_t) or, deviceless, for a saved
// device description (a CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, cuDNN >= 9.8):
// the same graph either way. Deviceless, the kernel is generated and compiled
// and planning stops at module load, which needs a driver: such a plan is
// "compiled" but not executable.
//
// Thread-safety: a plan is used by one thread at a time (its handle's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/cuda/cudnn/cudnn_api.h"
#include "kernels/cuda/cudnn/sdpa_batch.h"

namespace prefixd::cuda {

// A cuDNN backend descriptor, destroyed with its owner.
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(const CudnnApi* api, cudnnBackendDescriptor_t d) : api_(api), d_(d) {}
  CudnnDescriptor(CudnnDescriptor&& o) noexcept : api_(o.api_), d_(o.d_) { o.d_ = nullptr; }
  CudnnDescriptor& operator=(CudnnDescriptor&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      d_ = o.d_;
      o.d_ = nullptr;
    }
    return *this;
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  ~CudnnDescriptor() { reset(); }
  cudnnBackendDescriptor_t get() const { return d_; }
  void reset() {
    if (d_ != nullptr) api_->BackendDestroyDescriptor(d_);
    d_ = nullptr;
  }

 private:
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

// What a plan is built for: a device (handle) or a device description (device_prop).
struct PlanTarget {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device_prop = nullptr;
};

struct SdpaPlan {
  SdpaShape shape;
  std::vector<CudnnDescriptor> descriptors;  // everything the plan was built from, kept with it
  cudnnBackendDescriptor_t plan = nullptr;   // (owned through `descriptors`)
  int64_t engine = -1;                       // cuDNN's global engine index
  int64_t workspace_bytes = 0;
  bool executable = false;                   // false: compiled for a device description only
  double build_ms = 0;
};

// Builds the graph of `shape`, asks cuDNN's heuristics (mode A) for engine
// configurations and finalizes the first that cuDNN accepts. Fails with cuDNN's
// reason when the graph, every engine or the plan is refused (an unsupported
// head dimension, a version without a needed operation).
Result<std::unique_ptr<SdpaPlan>> build_sdpa_plan(const CudnnApi& api, const PlanTarget& target,
                                                  const SdpaShape& shape);

// Device pointers and values of one execution for one sequence.
struct SdpaArgs {
  const void* q = nullptr;       // (rows from the sequence's first, n_heads * head_dim) in shape.dtype
  const void* k_pool = nullptr;  // (n_pool_blocks, block_size, n_kv_heads, head_dim) shape.dtype
  const void* v_pool = nullptr;
  void* out = nullptr;           // (rows from the sequence's first, n_heads * head_dim) in shape.out_dtype
  const int32_t* meta = nullptr; // sdpa_meta_words(table_len) words (sdpa_batch.h)
  void* workspace = nullptr;     // plan.workspace_bytes bytes (may be null when 0)
  float scale = 1.0f;
  int32_t window = 0;            // windowed shapes: keys (p - window, p] of a query at p
};

// The variant pack of one execution: every non-virtual tensor's pointer by
// its unique id (the by-value scalars from `a` and `masked`, the score
// masked keys get, read when the pack is executed), the workspace.
Result<CudnnDescriptor> make_sdpa_variant_pack(const CudnnApi& api, const SdpaShape& shape, const SdpaArgs& a,
                                               const float* masked);

// Enqueues one execution on the handle's stream.
Status execute_sdpa_plan(const CudnnApi& api, cudnnHandle_t handle, const SdpaPlan& plan, const SdpaArgs& args);

// A device description from its JSON (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION).
Result<CudnnDescriptor> device_prop_from_json(const CudnnApi& api, const std::string& json);
// The JSON description of `device` (needs the device and a handle on it).
Result<std::string> device_prop_json(const CudnnApi& api, cudnnHandle_t handle, int32_t device);

}  // namespace prefixd::cuda
