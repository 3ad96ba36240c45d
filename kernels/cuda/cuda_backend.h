// The CUDA backend: prefixd::Backend on one GPU (cuBLAS GEMMs, the kernels of
// kernels/cuda/*.cu, a paged KV pool in device memory). Built only when nvcc
// is found (PREFIXD_HAVE_CUDA). Creation never crashes without a driver or
// device: it returns a failed Result with the reason.
//
// Thread: like every Backend, used by one thread at a time (the engine thread).
// All compute is ordered on one stream owned by the backend; tier block copies
// (read_block/write_block) run on a second stream, ordered with events.
#pragma once

#include <cstddef>
#include <memory>

#include "common/result.h"
#include "kernels/backend.h"

namespace prefixd {

// True when the CUDA runtime finds at least one device. Never aborts: a missing
// driver or library error reads as false.
bool cuda_device_available();

// A backend on `device` (0-based); fails with a message when there is no
// driver, no such device, or the binary holds no kernels for its architecture.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

// Free and total bytes of device memory (for sizing the KV pool as a fraction
// of free memory with cuda::kv_pool_blocks_for_free_fraction). Makes `device`
// current on the calling thread.
struct CudaMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
Result<CudaMemoryInfo> cuda_memory_info(int device);

}  // namespace prefixd
