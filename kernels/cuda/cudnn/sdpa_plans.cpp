// The per-shape plan cache (sdpa_plans.h).
#include "kernels/cuda/cudnn/sdpa_plans.h"

namespace prefixd::cuda {

const SdpaPlanCache::Entry& SdpaPlanCache::get(const SdpaShape& shape, bool* built) {
  SdpaShape key = shape;
  key.out_dtype = key.dtype;
  if (built != nullptr) *built = false;
  for (const auto& [k, e] : entries_)
    if (k == key) return e;
  Entry e;
  Result<std::unique_ptr<SdpaPlan>> plan = build_sdpa_plan(*api_, target_, key);
  if (!plan.ok()) e.refusal = plan.message();
  if (plan.ok()) e.plan = std::move(plan.value());
  if (built != nullptr) *built = true;
  entries_.emplace_back(key, std::move(e));
  return entries_.back().second;
}

}  // namespace prefixd::cuda
