// The cuDNN attention plans of one process: one per SdpaShape (a shape class
// and a bucket), built on first use and kept. The CUDA backend builds them
// for its device; tests/test_cudnn_deviceless.cpp builds the same ones for a
// saved device description.
//
// Each shape's plan writes O in the pool dtype (then widened to F32 by the
// backend), as cudnn-frontend's SDPA graphs do. An F32 O is not asked for:
// cuDNN 9.19 builds and heuristically picks the fused flash kernel
// (sdpa_sm90_flash_fprop) for it, and on an H200 that kernel wrote outside
// every allocation (compute-sanitizer memcheck). A shape cuDNN refuses is
// remembered with cuDNN's reason, and the simple kernel serves it.
//
// Thread-safety: one thread at a time (the backend's).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cudnn/sdpa_graph.h"

namespace prefixd::cuda {

class SdpaPlanCache {
 public:
  SdpaPlanCache(std::shared_ptr<const CudnnApi> api, PlanTarget target)
      : api_(std::move(api)), target_(target) {}

  struct Entry {
    std::unique_ptr<SdpaPlan> plan;  // null when cuDNN refuses the shape
    std::string refusal;             // cuDNN's reason, when it does
  };

  // The entry of `shape` (its out_dtype is ignored: the pool dtype), found
  // or built now (then `*built`, when given, is set to true). Entries stay
  // where they are for the cache's life.
  const Entry& get(const SdpaShape& shape, bool* built = nullptr);
  size_t size() const { return entries_.size(); }
  const CudnnApi& api() const { return *api_; }

 private:
  std::shared_ptr<const CudnnApi> api_;
  PlanTarget target_;
  std::deque<std::pair<SdpaShape, Entry>> entries_;  // keys with out_dtype = dtype; few, searched in order
};

}  // namespace prefixd::cuda
