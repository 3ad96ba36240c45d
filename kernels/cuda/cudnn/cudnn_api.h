// cuDNN loaded at run time: the functions of cuDNN's C backend API that
// prefixd calls, looked up with dlsym in libcudnn.so.9 (found through
// cudnn_search.h). prefixd never links libcudnn: a build made where cuDNN's
// headers are (PREFIXD_HAVE_CUDNN) runs on hosts without it, and the simple
// CUDA kernels serve there.
//
// Thread-safety: a loaded CudnnApi is immutable; its functions are cuDNN's
// (descriptors and handles are used by one thread at a time).
#pragma once

#include <cudnn_backend.h>
#include <cudnn_graph.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace prefixd::cuda {

// The oldest cuDNN whose composite attention graph prefixd builds: the paged
// cache load operation (CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR)
// appeared in 9.5.0. 9.10.0 and 9.10.1 have known SDPA forward bugs and are
// refused by name.
inline constexpr size_t kCudnnMinVersion = 90500;

struct CudnnApi {
  std::string library;  // the path (or name) that dlopen loaded
  size_t version = 0;   // cudnnGetVersion(): 91900 is 9.19.0

  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnGetLastErrorString) GetLastErrorString = nullptr;  // 9.0+
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnDestroy) Destroy = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) BackendCreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) BackendDestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) BackendSetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) BackendGetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) BackendFinalize = nullptr;
  decltype(&cudnnBackendExecute) BackendExecute = nullptr;

  // "9.19.0"
  std::string version_string() const;
  // "<what>: CUDNN_STATUS_...: <cuDNN's last error message>"; also clears
  // cuDNN's last error.
  std::string describe(cudnnStatus_t status, const std::string& what) const;
};

// "9.19.0" from cudnnGetVersion()'s number.
std::string cudnn_version_string(size_t version);

// Whether prefixd uses this cuDNN version; the error names the version and
// what it lacks.
Status check_cudnn_version(size_t version);

// Loads the first candidate that opens, has every function above and passes
// check_cudnn_version. The sub-libraries cuDNN opens itself (libcudnn_graph,
// the engine and heuristic libraries) are opened first from the folder of a
// candidate named by path, so that a missing one is named in the error. The
// library stays loaded for the process. The error lists every candidate tried
// and why it failed.
Result<std::shared_ptr<const CudnnApi>> load_cudnn(const std::vector<std::string>& candidates);

}  // namespace prefixd::cuda
