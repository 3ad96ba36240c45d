// Checking of every CUDA runtime and cuBLAS call: a failure is a broken
// invariant inside a running backend (the device was validated at creation),
// so the macros abort with file:line, the call and the error string.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace prefixd::cuda {

[[noreturn]] inline void cuda_fail(const char* file, int line, const char* call, const char* what) {
  std::fprintf(stderr, "%s:%d: CUDA call failed: %s: %s\n", file, line, call, what);
  std::abort();
}

}  // namespace prefixd::cuda

#define PREFIXD_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess)                                                            \
      ::prefixd::cuda::cuda_fail(__FILE__, __LINE__, #call, cudaGetErrorString(err_));  \
  } while (0)

#define PREFIXD_CUBLAS_CHECK(call)                                                         \
  do {                                                                                     \
    cublasStatus_t st_ = (call);                                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::prefixd::cuda::cuda_fail(__FILE__, __LINE__, #call, cublasGetStatusString(st_));   \
  } while (0)

// After a kernel launch: catches bad configurations at once (asynchronous
// faults surface at the next synchronising call, also checked).
#define PREFIXD_CUDA_CHECK_LAUNCH() PREFIXD_CUDA_CHECK(cudaGetLastError())
