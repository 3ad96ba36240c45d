// FastPathReport: what a backend says about its fast paths (library kernels
// such as cuDNN attention, and the simple kernels they fall back to) for
// GET /health and GET /metrics. Plain data, no device types: the daemon's
// monitoring code reads it without knowing any backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prefixd {

// One start-up self-check of a fast path against the simple kernel
// (kernels/cuda/self_check.h): a failed check switches the path off.
struct SelfCheckVerdict {
  std::string path;        // e.g. "cudnn_prefill"
  std::string shape;       // what was checked, e.g. "bf16 32/8 heads d64 block 16 q<=128 kv<=8192"
  bool passed = false;
  double max_error = 0;    // largest |fast - simple| over the output (inf when not finite)
  double tolerance = 0;    // the bound it had to stay within
  std::string error;       // why it failed (a run error, or which element was off); empty when passed
};

// A path and how often it ran (a call: one kernel launch or one library
// execution serving one or more sequences of one layer).
struct FastPathState {
  std::string name;       // "cudnn_prefill", "simple_prefill", ...
  bool enabled = false;   // may serve now
  std::string detail;     // why not, or which library version serves it
  int64_t calls = 0;
};

struct FastPathReport {
  // One line per operation family with a fast path, e.g.
  // {"prefill_attention", "cudnn 9.19.0"} or {"prefill_attention", "none: libcudnn.so.9 not found"}.
  std::vector<std::pair<std::string, std::string>> summary;
  std::vector<FastPathState> paths;
  std::vector<SelfCheckVerdict> self_checks;  // in the order they ran
  bool empty() const { return summary.empty() && paths.empty() && self_checks.empty(); }
};

}  // namespace prefixd
