// Prefill attention of the CUDA backend: every sequence of the batch with
// more than one query row (cold prefill, a chunk of one, a suffix over a
// cached prefix). A sequence runs through cuDNN's fused attention
// (kernels/cuda/cudnn/) when cuDNN is loaded, the pool is BF16 or F16, and the
// plan of its bucket was built and passed its self-check; otherwise through
// the simple kernel (launch_attention_prefill). Built without cuDNN's headers,
// the simple kernel always serves.
//
// Per batch, prepare_batch() keeps the prefill sequences and uploads, for the
// cuDNN path, each one's lengths and padded page table (sdpa_batch.h). Per
// layer, run() converts q to the pool dtype, runs one cuDNN execution per
// sequence (b = 1, Q/O views at its first row; O written to a scratch with
// room for a whole bucket, its rows then copied to `out`), and launches the
// simple kernel over the prefill tiles of the other sequences.
//
// Self-check (kernels/cuda/self_check.h): the first time a bucket's plan is
// built, it runs on random paged data (two sequences in the bucket, one a
// suffix over cached keys and one cold, shuffled block ids, partial last
// blocks, the layer's GQA, scale and window) against the simple kernel; a
// failure switches the cuDNN path off for the process ("cudnn_prefill" in
// the registry), a plan cuDNN refuses leaves only its bucket to the simple
// kernel. One log line per shape class names the path that serves it.
//
// Before that, each bucket is checked in a child process
// (CudaBackendOptions::cudnn_probe, kernels/cuda/child_check.h): the same
// plan and self-check run by prefixd-cudnn-probe, which calls
// check_bucket(). Until the child passes, the simple kernel serves the
// bucket; a child that fails or crashes switches cuDNN off for the process.
//
// Thread: the backend's (engine) thread. Work goes on the backend's stream.
#pragma once

#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/child_check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/self_check.h"

namespace prefixd::cuda {

inline constexpr const char* kCudnnPrefillPath = "cudnn_prefill";
inline constexpr const char* kSimplePrefillPath = "simple_prefill";

class PrefillAttention {
 public:
  // Loads cuDNN as `options` say (or records why not) and creates its
  // handle on the current device; never fails. `registry` outlives this.
  PrefillAttention(const CudaBackendOptions& options, cudaStream_t stream, FastPathRegistry* registry);
  ~PrefillAttention();
  PrefillAttention(const PrefillAttention&) = delete;
  PrefillAttention& operator=(const PrefillAttention&) = delete;

  // A new batch (validated); does no device work when it has no prefill sequence.
  void prepare_batch(const Batch& batch, int32_t block_size);
  // Attention of every prefill sequence of the current batch (`b`, packed
  // from it) in layer pool `a.k_pool`/`a.v_pool` of n_pool_blocks blocks.
  void run(const AttentionArgs& a, int32_t n_pool_blocks, const DeviceBatch& b);
  // The whole check of one bucket in this process: `layer`'s shape, scale
  // and window (its pointers unused) over a pool of n_pool_blocks blocks,
  // queries and keys of the bucket (max_q, max_kv). Not run: cuDNN is not
  // loaded, or refuses the shape. What prefixd-cudnn-probe runs.
  ChildVerdict check_bucket(const AttentionArgs& layer, int32_t n_pool_blocks, int32_t max_q, int32_t max_kv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::cuda
