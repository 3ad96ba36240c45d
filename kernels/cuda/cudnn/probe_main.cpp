// prefixd-cudnn-probe: checks one cuDNN attention plan bucket in a process of
// its own, for the CUDA backend (kernels/cuda/child_check.h). It loads the
// libcudnn.so.9 the backend named, builds the bucket's plan on the device and
// runs the backend's self-check (PrefillAttention::check_bucket): a device
// fault in cuDNN's kernel ends this process, never the daemon. Its log lines
// go to stdout; the last line is the verdict; the exit status is the
// protocol's (0 passed, 1 failed, 2 not run).
//
//   prefixd-cudnn-probe --device 0 --cudnn-lib /path/libcudnn.so.9 --dtype bf16 --heads 32 --kv-heads 8
//     --head-dim 64 --block-size 16 --pool-blocks 4096 --max-q 128 --max-kv 1024 --scale 0x1p-3 --window 0
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/child_check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cudnn/probe_request.h"
#include "kernels/cuda/cudnn/cudnn_search.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/self_check.h"

using namespace prefixd;
using namespace prefixd::cuda;

namespace {

int finish(const ChildVerdict& v) {
  const char* word = v.passed() ? "passed" : v.failed() ? "FAILED" : "not run";
  std::printf("%s: %s\n", word, v.detail.c_str());
  std::fflush(stdout);
  return v.passed() ? kChildCheckPassed : v.failed() ? kChildCheckFailed : kChildCheckNotRun;
}

ChildVerdict not_run(const std::string& why) { return ChildVerdict{ChildVerdict::Kind::kNotRun, why}; }

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Result<ProbeRequest> parsed = parse_probe_argv(std::vector<std::string>(argv, argv + argc));
  if (!parsed.ok()) return finish(not_run(parsed.message()));
  const ProbeRequest& r = parsed.value();
  if (cudaError_t e = cudaSetDevice(r.device); e != cudaSuccess)
    return finish(not_run("CUDA device " + std::to_string(r.device) + ": " + cudaGetErrorString(e)));
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return finish(not_run(std::string("cudaStreamCreate: ") + cudaGetErrorString(e)));
  CudaBackendOptions options;
  options.cudnn_lib = r.cudnn_library;
  options.cudnn_probe = kCudnnOff;  // this process is the check
  options.log = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  FastPathRegistry registry;
  ChildVerdict v;
  {
    PrefillAttention attention(options, stream, &registry);
    AttentionArgs layer;
    layer.kv_dtype = r.shape.dtype;
    layer.block_size = r.shape.block_size;
    layer.n_heads = r.shape.n_heads;
    layer.n_kv_heads = r.shape.n_kv_heads;
    layer.head_dim = r.shape.head_dim;
    layer.scale = r.scale;
    layer.window_tokens = r.window_tokens;
    v = attention.check_bucket(layer, r.shape.n_pool_blocks, r.shape.max_q, r.shape.max_kv);
  }
  cudaStreamDestroy(stream);
  return finish(v);
}
