// CpuIsaPlan: one set for every kernel family (forced), or per family the
// fastest set by the calibration's timings (auto), and its log line.
#include "kernels/cpu/isa_plan.h"

#include <cstdio>

namespace prefixd::cpu {

const char* kernel_family_name(KernelFamily f) {
  switch (f) {
    case KernelFamily::kF32Tiles: return "f32_tiles";
    case KernelFamily::kBf16Tiles: return "bf16_tiles";
    case KernelFamily::kBlockFormats: return "block_formats";
    case KernelFamily::kAttention: return "attention";
  }
  return "?";
}

std::string CpuIsaPlan::describe() const {
  std::string s;
  for (int fi = 0; fi < kKernelFamilies; ++fi) {
    const auto f = static_cast<KernelFamily>(fi);
    s += std::string(fi == 0 ? "" : "; ") + kernel_family_name(f) + "=" + cpu_isa_name(of(f));
    if (!automatic) continue;
    std::string figures;
    for (CpuIsa isa : all_cpu_isas()) {
      if (timings.at(f, isa) <= 0) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %.3f ms", cpu_isa_name(isa), timings.at(f, isa) * 1e3);
      figures += (figures.empty() ? "" : ", ") + std::string(buf);
    }
    if (!figures.empty()) s += " (" + figures + ")";
  }
  return s;
}

CpuIsaPlan forced_plan(CpuIsa isa) {
  CpuIsaPlan p;
  p.base = isa;
  p.family.fill(isa);
  return p;
}

CpuIsaPlan plan_from_timings(const IsaTimings& timings, const std::vector<CpuIsa>& candidates, CpuIsa base) {
  CpuIsaPlan p = forced_plan(base);
  p.automatic = true;
  p.timings = timings;
  for (int fi = 0; fi < kKernelFamilies; ++fi) {
    const auto f = static_cast<KernelFamily>(fi);
    const double base_s = timings.at(f, base);
    CpuIsa best = base;
    double best_s = base_s > 0 ? base_s * (1.0 - kSwitchMargin) : 0;
    for (CpuIsa isa : candidates) {
      const double t = timings.at(f, isa);
      if (isa == base || t <= 0) continue;
      // Candidates in any order: a tie goes to the higher-ranked set.
      if (best_s == 0 || t < best_s || (t == best_s && isa > best)) {
        best_s = t;
        best = isa;
      }
    }
    p.family[fi] = best;
  }
  return p;
}

const CpuIsaPlan& auto_plan() {
  static const CpuIsaPlan plan = [] {
    std::vector<CpuIsa> candidates = supported_cpu_isas();
    // portable is the compiler's baseline vectors: never faster where an x86 set exists.
    if (candidates.size() > 1) candidates.erase(candidates.begin());
    return plan_from_timings(measure_isa_timings(candidates), candidates, best_cpu_isa());
  }();
  return plan;
}

}  // namespace prefixd::cpu
