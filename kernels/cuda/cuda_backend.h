// The CUDA backend: prefixd::Backend on one GPU (cuBLAS GEMMs, the kernels of
// kernels/cuda/*.cu, a paged KV pool in device memory). Built only when nvcc
// is found (PREFIXD_HAVE_CUDA). Creation never crashes without a driver or
// device: it returns a failed Result with the reason.
//
// Thread: like every Backend, used by one thread at a time (the engine thread).
// All compute is ordered on one stream owned by the backend; tier block copies
// (read_block/write_block) run on a second stream, ordered with events. A
// pure decode step may run as a replayed CUDA graph (CudaBackendOptions).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/backend.h"
#include "kernels/cuda/decode_graph_plan.h"

namespace prefixd {

struct CudaBackendOptions {
  // Pure decode steps recorded once per batch-size bucket as a CUDA graph and
  // replayed (kernels/cuda/decode_graph.h); kOff: every step launched op by
  // op (the daemon's --cuda-graphs off); kPaddedEager: the graph path's
  // padded steps launched op by op (what kOn equals bit for bit; tests).
  cuda::DecodeGraphMode decode_graphs = cuda::DecodeGraphMode::kOn;
  // The ops that produce a 16-bit GEMM's input write its 16-bit copy too,
  // instead of a conversion kernel before the GEMM (activation_twins.h).
  bool activation_twins = true;
  // Test hook: every graph replay that is checked against its eager run
  // (decode_graph.h) has its first logit overwritten first, so the check
  // fails: graphs switch off and the step is served by its eager run.
  bool corrupt_checked_replays_for_test = false;
  // Test hook: flash decode's self-check output (decode_self_check.h) is off
  // by 1 in its first value, so the check fails: flash decode switches off
  // and the simple decode kernel serves.
  bool corrupt_flash_decode_for_test = false;
  // cuDNN for prefill attention, loaded at run time: an operator-named
  // libcudnn.so.9 or the folder holding it, tried alone; "auto" (the
  // default): the dynamic loader's search path, then Python environments;
  // "off" loads none.
  std::string cudnn_lib = "auto";
  // Each cuDNN plan bucket is first checked in a child process
  // (kernels/cuda/child_check.h) by this program, so that a device fault in
  // a cuDNN kernel ends the child, not the backend's process: "" finds
  // prefixd-cudnn-probe beside the running program or one folder up; a path
  // names it; "off" checks in this process only. Without the program cuDNN
  // is not used.
  std::string cudnn_probe;
  // true: the first use of a bucket waits for its child check (about 1-2 s);
  // false: the simple kernel serves the bucket until the check has passed.
  bool wait_for_cudnn_probe = false;
  // Python environments searched for nvidia/cudnn/lib before /usr/local and
  // /usr, in order (the daemon passes $VIRTUAL_ENV, $CONDA_PREFIX, the
  // environment of the first python3 on $PATH, ~/.local).
  std::vector<std::string> python_prefixes;
  // Info lines (which attention path serves each shape, self-check
  // verdicts); null: stderr.
  std::function<void(const std::string&)> log;
};

// A backend on `device` (0-based); fails with a message when there is no
// driver, no such device, or the binary holds no kernels for its architecture.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);  // default options
Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaBackendOptions& options);

// The decode-graph counters of a CUDA backend (all zero for another backend).
cuda::DecodeGraphStats decode_graph_stats(const Backend& backend);

}  // namespace prefixd
