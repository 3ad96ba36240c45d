// CpuIsaPlan: one set for every kernel family (forced), or per family the
// fastest set by the calibration's timings (auto), and its log line.
#include "kernels/cpu/isa_plan.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <optional>

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

std::string plan_spec(const CpuIsaPlan& plan) {
  std::string s = cpu_isa_name(plan.base);
  for (int fi = 0; fi < kKernelFamilies; ++fi) {
    const auto f = static_cast<KernelFamily>(fi);
    if (plan.of(f) != plan.base) s += std::string(",") + kernel_family_name(f) + "=" + cpu_isa_name(plan.of(f));
  }
  return s;
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

bool is_cpu_isa_plan_spec(std::string_view requested) {
  return requested.find_first_of(",=") != std::string_view::npos;
}

Result<CpuIsaPlan> parse_cpu_isa_plan(std::string_view spec) {
  // A set by name, one this CPU supports.
  auto set_named = [](std::string_view name, std::string_view item) -> Result<CpuIsa> {
    for (CpuIsa isa : all_cpu_isas()) {
      if (name != cpu_isa_name(isa)) continue;
      if (!cpu_supports(isa))
        return Status::error("CPU plan item '" + std::string(item) + "': this CPU has no " + std::string(name) +
                             " (it reports: " + cpu_feature_string() + ")");
      return isa;
    }
    return Status::error("CPU plan item '" + std::string(item) + "': unknown instruction set '" +
                         std::string(name) + "' (accepted: " + cpu_isa_choices() + ")");
  };
  std::optional<CpuIsa> base;
  std::array<std::optional<CpuIsa>, kKernelFamilies> named{};
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string_view item = spec.substr(at, end - at);
    at = end + 1;
    if (item.empty()) return Status::error("CPU plan '" + std::string(spec) + "' has an empty item");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      if (base) return Status::error("CPU plan '" + std::string(spec) + "' names two base sets");
      Result<CpuIsa> isa = set_named(item, item);
      if (!isa.ok()) return isa.status();
      base = isa.value();
      continue;
    }
    const std::string_view family = item.substr(0, eq);
    int fi = 0;
    while (fi < kKernelFamilies && family != kernel_family_name(static_cast<KernelFamily>(fi))) ++fi;
    if (fi == kKernelFamilies) {
      std::string families;
      for (int f = 0; f < kKernelFamilies; ++f)
        families += (f ? ", " : "") + std::string(kernel_family_name(static_cast<KernelFamily>(f)));
      return Status::error("CPU plan item '" + std::string(item) + "': unknown kernel family '" +
                           std::string(family) + "' (accepted: " + families + ")");
    }
    if (named[fi]) return Status::error("CPU plan '" + std::string(spec) + "' names " + std::string(family) + " twice");
    Result<CpuIsa> isa = set_named(item.substr(eq + 1), item);
    if (!isa.ok()) return isa.status();
    named[fi] = isa.value();
  }
  CpuIsaPlan p = forced_plan(base.value_or(best_cpu_isa()));
  for (int fi = 0; fi < kKernelFamilies; ++fi)
    if (named[fi]) p.family[fi] = *named[fi];
  return p;
}

namespace {

std::mutex g_forced_plan_mutex;
std::optional<CpuIsaPlan> g_forced_plan;  // guarded by g_forced_plan_mutex

}  // namespace

void remember_forced_plan(const CpuIsaPlan& plan) {
  std::lock_guard<std::mutex> lock(g_forced_plan_mutex);
  g_forced_plan = plan;
}

CpuIsaPlan plan_for_isa(CpuIsa isa) {
  {
    std::lock_guard<std::mutex> lock(g_forced_plan_mutex);
    if (g_forced_plan && g_forced_plan->base == isa) return *g_forced_plan;
  }
  if (isa == best_cpu_isa() && !cpu_isa_forced(isa)) return auto_plan();
  return forced_plan(isa);
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
