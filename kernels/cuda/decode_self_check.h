// Start-up self-check of flash decode (attention_decode.cu,
// launch_attention_decode). The first time a decode shape class (pool dtype,
// query and KV heads, head dim, block size, window) would be served by flash
// decode, it runs once on the check batch (decode_check_batch.h: shuffled
// block ids, a partial last block, a single key, keys split over several
// thread blocks, the layer's GQA, scale and window) with random pool values,
// against the simple decode kernel (launch_attention_decode_simple), within
// an F32 tolerance (both kernels compute in F32; self_check.h). A class that
// fails switches "flash_decode" off for the process in the fast path registry
// (/health, /metrics) and the simple kernel serves every decode from then on.
// One log line per class gives the verdict.
//
// A class first met while a decode graph is being captured (the graph runner
// runs every step eagerly before capturing it, so this does not happen) is
// served by the simple kernel without a check, since a check cannot run
// inside a capture.
//
// Thread: the backend's (engine) thread. Work goes on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/self_check.h"

namespace prefixd::cuda {

inline constexpr const char* kFlashDecodePath = "flash_decode";
inline constexpr const char* kSimpleDecodePath = "simple_decode";

class DecodeSelfCheck {
 public:
  // Declares both decode paths in `registry` (which outlives this). With
  // `corrupt_for_test`, flash decode's check output is off by 1 in its first
  // value, so every check fails (tests of the fallback).
  DecodeSelfCheck(cudaStream_t stream, int32_t n_sms, FastPathRegistry* registry,
                  std::function<void(const std::string&)> log, bool corrupt_for_test);

  // Whether flash decode serves `layer` (a shape flash_decode_shape supports):
  // its class's check ran and passed, and the path is still on.
  bool flash_serves(const AttentionArgs& layer, bool capturing);

 private:
  bool check(const AttentionArgs& layer, const std::string& shape_class);

  cudaStream_t stream_;
  int32_t n_sms_;
  FastPathRegistry* registry_;
  std::function<void(const std::string&)> log_;
  bool corrupt_for_test_;
  std::map<std::string, bool> verdicts_;  // shape class -> its check passed
};

// The split count a decode kernel runs with for a batch: flash decode's grid
// has n_kv_heads * head_groups blocks per sequence and split, the simple
// kernel's n_heads (decode_split_count).
int32_t decode_splits(const AttentionArgs& a, bool flash, int32_t n_seqs, int32_t max_kv_len, int32_t n_sms);

}  // namespace prefixd::cuda
