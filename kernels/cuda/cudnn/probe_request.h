// What the CUDA backend asks `prefixd-cudnn-probe` (probe_main.cpp) to
// check in a child process (kernels/cuda/child_check.h): one cuDNN plan
// bucket (SdpaShape) with a layer's scale and window, on a device, with the
// exact libcudnn.so.9 the backend loaded. Written to and read from the
// child's command line; the scale travels as a hex float, so the child
// checks the plan with the very value the backend uses. Pure C++, checked on
// the CPU by tests/test_child_check.cpp.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/cuda/cudnn/sdpa_batch.h"

namespace prefixd::cuda {

inline constexpr const char* kCudnnProbeProgram = "prefixd-cudnn-probe";

struct ProbeRequest {
  int device = 0;
  std::string cudnn_library;  // the path the backend's dlopen succeeded with
  SdpaShape shape;            // out_dtype: the pool dtype (sdpa_plans.h)
  float scale = 1.0f;
  int32_t window_tokens = 0;

  // What identifies the check: the plan's shape and the run-time values it is checked with.
  std::string key() const {
    char scale_hex[40];
    std::snprintf(scale_hex, sizeof(scale_hex), "%a", double(scale));
    return shape.describe() + " pool " + std::to_string(shape.n_pool_blocks) + " scale " + scale_hex + " window " +
           std::to_string(window_tokens);
  }
};

// argv of the child: `program` then "--name value" pairs.
inline std::vector<std::string> probe_argv(const std::string& program, const ProbeRequest& r) {
  char scale_hex[40];
  std::snprintf(scale_hex, sizeof(scale_hex), "%a", double(r.scale));
  const SdpaShape& s = r.shape;
  return {program,
          "--device", std::to_string(r.device),
          "--cudnn-lib", r.cudnn_library,
          "--dtype", dtype_name(s.dtype),
          "--heads", std::to_string(s.n_heads),
          "--kv-heads", std::to_string(s.n_kv_heads),
          "--head-dim", std::to_string(s.head_dim),
          "--block-size", std::to_string(s.block_size),
          "--pool-blocks", std::to_string(s.n_pool_blocks),
          "--max-q", std::to_string(s.max_q),
          "--max-kv", std::to_string(s.max_kv),
          "--scale", scale_hex,
          "--window", std::to_string(r.window_tokens)};
}

// The request probe_argv wrote (argv[0] is the program). Every option is
// required, once; integers are decimal and positive where a shape needs it.
inline Result<ProbeRequest> parse_probe_argv(const std::vector<std::string>& argv) {
  std::map<std::string, std::string> v;
  for (size_t i = 1; i < argv.size(); i += 2) {
    if (argv[i].rfind("--", 0) != 0 || i + 1 >= argv.size())
      return Status::error("probe: expected --name value pairs, got '" + argv[i] + "'");
    if (!v.emplace(argv[i].substr(2), argv[i + 1]).second) return Status::error("probe: " + argv[i] + " given twice");
  }
  const char* names[] = {"device", "cudnn-lib", "dtype", "heads", "kv-heads", "head-dim", "block-size",
                         "pool-blocks", "max-q", "max-kv", "scale", "window"};
  if (v.size() != std::size(names)) return Status::error("probe: expected 12 options, got " + std::to_string(v.size()));
  for (const char* n : names)
    if (!v.count(n)) return Status::error(std::string("probe: --") + n + " missing");
  auto integer = [&](const char* n, int64_t min, int32_t* out) -> Status {
    char* end = nullptr;
    const long long x = std::strtoll(v[n].c_str(), &end, 10);
    if (v[n].empty() || *end != '\0' || x < min || x > (int64_t(1) << 30))
      return Status::error(std::string("probe: --") + n + " '" + v[n] + "' is not an integer in [" +
                           std::to_string(min) + ", 2^30]");
    *out = int32_t(x);
    return Status::ok_status();
  };
  ProbeRequest r;
  SdpaShape& s = r.shape;
  int32_t device = 0;
  for (Status st : {integer("device", 0, &device), integer("heads", 1, &s.n_heads),
                    integer("kv-heads", 1, &s.n_kv_heads), integer("head-dim", 1, &s.head_dim),
                    integer("block-size", 1, &s.block_size), integer("pool-blocks", 1, &s.n_pool_blocks),
                    integer("max-q", 1, &s.max_q), integer("max-kv", 1, &s.max_kv),
                    integer("window", 0, &r.window_tokens)})
    if (!st.ok()) return st;
  r.device = device;
  if (v["dtype"] == "bf16") s.dtype = DType::BF16;
  else if (v["dtype"] == "f16") s.dtype = DType::F16;
  else return Status::error("probe: --dtype '" + v["dtype"] + "' is not bf16 or f16");
  s.out_dtype = s.dtype;
  s.windowed = r.window_tokens > 0;
  char* end = nullptr;
  r.scale = std::strtof(v["scale"].c_str(), &end);
  if (v["scale"].empty() || *end != '\0' || !(r.scale > 0.0f))
    return Status::error("probe: --scale '" + v["scale"] + "' is not a positive number");
  r.cudnn_library = v["cudnn-lib"];
  if (r.cudnn_library.empty()) return Status::error("probe: --cudnn-lib is empty");
  return r;
}

}  // namespace prefixd::cuda
