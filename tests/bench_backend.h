// The benchmark programs' --backend flag: `cpu` (the default) or `cuda` (device
// 0; only in a build with the CUDA backend, a clear error otherwise), so that
// the same program measures both backends; and --cuda-graphs on|off.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "common/result.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#if defined(PREFIXD_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cudnn/cudnn_search.h"
#endif

namespace prefixd::testing {

// Whether this build has the CUDA backend (PREFIXD_HAVE_CUDA).
inline constexpr bool kBuiltWithCuda =
#if defined(PREFIXD_HAVE_CUDA)
    true;
#else
    false;
#endif

// Fails before any work for a name other than cpu or cuda, and for cuda in a
// build without it; use it to check the flag as soon as it is parsed.
inline Status check_bench_backend(const std::string& name) {
  if (name != "cpu" && name != "cuda") {
    return Status::error("--backend '" + name + "' is not one of cpu, cuda");
  }
  if (name == "cuda" && !kBuiltWithCuda) {
    return Status::error(
        "--backend cuda: this build has no CUDA backend (configure with -DPREFIXD_CUDA=ON on a "
        "machine where nvcc is found)");
  }
  return Status();
}

#if defined(PREFIXD_HAVE_CUDA)
// The CUDA backend's options as the daemon fills them from its environment
// (PREFIXD_CUDNN_LIB, PREFIXD_CUDNN_PROBE; $VIRTUAL_ENV, $CONDA_PREFIX, the
// first python3 on $PATH, ~/.local for cuDNN). Unlike the daemon, the first
// use of a cuDNN bucket waits for its child check, so that a measured or
// tested call after it runs the path that will serve.
inline CudaBackendOptions bench_cuda_options() {
  CudaBackendOptions o;
  o.wait_for_cudnn_probe = true;
  if (const char* v = std::getenv("PREFIXD_CUDNN_LIB"); v != nullptr) o.cudnn_lib = v;
  if (const char* v = std::getenv("PREFIXD_CUDNN_PROBE"); v != nullptr) o.cudnn_probe = v;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(var); v != nullptr && v[0] != '\0') o.python_prefixes.push_back(v);
  if (const char* path = std::getenv("PATH"); path != nullptr)
    if (std::string p = cuda::python_prefix_on_path(path); !p.empty()) o.python_prefixes.push_back(p);
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    o.python_prefixes.push_back(std::string(home) + "/.local");
  return o;
}
#endif

// The backend named by --backend: the CPU backend with `n_threads` threads and
// instruction set `isa`, or the CUDA backend on device 0 (fails without a
// usable device, with the CUDA runtime's reason), replaying decode steps as
// CUDA graphs unless `cuda_graphs` is false (--cuda-graphs off).
inline Result<std::unique_ptr<Backend>> make_bench_backend(const std::string& name, int n_threads,
                                                           cpu::CpuIsa isa,
                                                           bool cuda_graphs = true) {
  if (Status s = check_bench_backend(name); !s.ok()) return s;
  if (name == "cpu") return make_cpu_backend(n_threads, isa);
#if defined(PREFIXD_HAVE_CUDA)
  CudaBackendOptions options = bench_cuda_options();
  options.decode_graphs = cuda_graphs ? cuda::DecodeGraphMode::kOn : cuda::DecodeGraphMode::kOff;
  auto cuda = make_cuda_backend(0, options);
  if (!cuda.ok()) return Status::error("--backend cuda: " + cuda.message());
  return std::move(cuda.value());
#else
  return Status::error("--backend cuda: unreachable without CUDA");
#endif
}

}  // namespace prefixd::testing
