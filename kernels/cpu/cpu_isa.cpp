// CPU feature detection (cpuid via GCC's __builtin_cpu_supports, which also
// checks that the OS saves the AVX/AVX-512 registers) and the ISA choice.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"

#include <array>
#include <atomic>
#include <cstdlib>

namespace prefixd::cpu {

namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false;
  bool avx512vnni = false;
};

Features detect() {
  Features f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // GCC 12 has no "f16c" name for __builtin_cpu_supports: cpuid leaf 1, ECX bit 29.
  unsigned eax, ebx, ecx, edx;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
  f.f16c = (ecx >> 29) & 1u;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

// The features by the names cpu_feature_string() prints.
struct NamedFeature {
  const char* name;
  bool Features::*flag;
};
constexpr std::array<NamedFeature, 9> kNamedFeatures = {{
    {"avx2", &Features::avx2},
    {"fma", &Features::fma},
    {"f16c", &Features::f16c},
    {"avx512f", &Features::avx512f},
    {"avx512bw", &Features::avx512bw},
    {"avx512vl", &Features::avx512vl},
    {"avx512dq", &Features::avx512dq},
    {"avx512_bf16", &Features::avx512bf16},
    {"avx512_vnni", &Features::avx512vnni},
}};

// What PREFIXD_CPU_HIDE_FEATURES did: the names it hid, and those it named
// that are not features of this list.
struct Hidden {
  std::string hidden, unknown;
};

Features detect_less_hidden(Hidden* h) {
  Features f = detect();
  const char* env = std::getenv(kHideFeaturesEnvVar);
  std::string_view list = env != nullptr ? env : "";
  while (!list.empty()) {
    const size_t comma = list.find_first_of(", ");
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (name.empty()) continue;
    bool known = false;
    for (const NamedFeature& nf : kNamedFeatures) {
      if (name != nf.name) continue;
      known = true;
      f.*nf.flag = false;
    }
    std::string& out = known ? h->hidden : h->unknown;
    out += (out.empty() ? "" : " ") + std::string(name);
  }
  return f;
}

Hidden& hidden() {
  static Hidden h;
  return h;
}

const Features& features() {
  static const Features f = detect_less_hidden(&hidden());
  return f;
}

// Sets named to choose_cpu_isa (bit per CpuIsa).
std::atomic<unsigned> g_forced{0};

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

const std::vector<CpuIsa>& all_cpu_isas() {
  static const std::vector<CpuIsa> all = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                          CpuIsa::kAvx512Bf16};
  return all;
}

std::string cpu_isa_choices() {
  std::string s = "auto";
  for (CpuIsa isa : all_cpu_isas()) s += std::string(", ") + cpu_isa_name(isa);
  return s;
}

bool cpu_supports(CpuIsa isa) {
  [[maybe_unused]] const Features& f = features();
  [[maybe_unused]] const bool avx2 = f.avx2 && f.fma && f.f16c;
  [[maybe_unused]] const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case CpuIsa::kPortable: return true;
#if defined(__x86_64__)
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx512Bf16: return avx512 && f.avx512bf16 && f.avx512vnni;
#else
    default: return false;  // x86 sets are not built for this architecture
#endif
  }
  return false;
}

CpuIsa best_cpu_isa() {
  CpuIsa best = CpuIsa::kPortable;
  for (CpuIsa isa : all_cpu_isas())
    if (cpu_supports(isa)) best = isa;
  return best;
}

std::vector<CpuIsa> supported_cpu_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : all_cpu_isas())
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

std::string cpu_feature_string() {
#if defined(__x86_64__)
  const Features& f = features();
  std::string s;
  auto add = [&](bool have, const char* name) {
    if (!have) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  for (const NamedFeature& nf : kNamedFeatures) add(f.*nf.flag, nf.name);
  if (s.empty()) s = "none of avx2, fma, f16c, avx512*";
  if (!hidden().hidden.empty()) s += std::string(" (hidden by ") + kHideFeaturesEnvVar + ": " + hidden().hidden + ")";
  return s;
#elif defined(__aarch64__)
  return "aarch64 (only the portable set is built for this architecture)";
#else
  return "unknown architecture (only the portable set is built)";
#endif
}

Result<CpuIsa> choose_cpu_isa(std::string_view requested) {
  features();
  if (!hidden().unknown.empty()) {
    std::string known;
    for (const NamedFeature& nf : kNamedFeatures) known += (known.empty() ? "" : ", ") + std::string(nf.name);
    return Status::error(std::string(kHideFeaturesEnvVar) + " names unknown features '" + hidden().unknown +
                         "' (known: " + known + ")");
  }
  if (requested.empty() || requested == "auto") return best_cpu_isa();
  if (is_cpu_isa_plan_spec(requested)) {
    Result<CpuIsaPlan> plan = parse_cpu_isa_plan(requested);
    if (!plan.ok()) return plan.status();
    remember_forced_plan(plan.value());
    return plan.value().base;
  }
  for (CpuIsa isa : all_cpu_isas()) {
    if (requested != cpu_isa_name(isa)) continue;
    if (cpu_supports(isa)) {
      g_forced.fetch_or(1u << static_cast<int>(isa));
      return isa;
    }
    std::string usable;
    for (CpuIsa s : supported_cpu_isas()) usable += (usable.empty() ? "" : ", ") + std::string(cpu_isa_name(s));
    return Status::error("CPU instruction set '" + std::string(requested) +
                         "' is not supported by this CPU (accepted: " + cpu_isa_choices() +
                         "; usable here: auto, " + usable + "; this CPU reports: " + cpu_feature_string() + ")");
  }
  return Status::error("unknown CPU instruction set '" + std::string(requested) + "' (accepted: " +
                       cpu_isa_choices() + "; this CPU reports: " + cpu_feature_string() + ")");
}

bool cpu_isa_forced(CpuIsa isa) { return (g_forced.load() >> static_cast<int>(isa)) & 1u; }

}  // namespace prefixd::cpu
