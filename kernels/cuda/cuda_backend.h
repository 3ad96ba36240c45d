// The CUDA backend: prefixd::Backend on one GPU (cuBLAS GEMMs, the kernels of
// kernels/cuda/*.cu, a paged KV pool in device memory). Built only when nvcc
// is found (PREFIXD_HAVE_CUDA). Creation never crashes without a driver or
// device: it returns a failed Result with the reason.
//
// Thread: like every Backend, used by one thread at a time (the engine thread).
// All compute is ordered on one stream owned by the backend; tier block copies
// (read_block/write_block) run on a second stream, ordered with events.
#pragma once

#include <memory>

#include "common/result.h"
#include "kernels/backend.h"

namespace prefixd {

// A backend on `device` (0-based); fails with a message when there is no
// driver, no such device, or the binary holds no kernels for its architecture.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);
Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaBackendOptions& options);

}  // namespace prefixd
