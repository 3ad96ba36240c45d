// CPU feature detection (cpuid and XGETBV for the features of isa_sets.def,
// checking as GCC's __builtin_cpu_supports does that the OS saves the AVX /
// AVX-512 registers) and the ISA choice. Everything about a set comes from
// isa_sets.def's entries.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace prefixd::cpu {

namespace {

enum class CpuidReg : int { eax = 0, ebx = 1, ecx = 2, edx = 3 };

// One PREFIXD_CPU_FEATURE of isa_sets.def.
struct FeatureBit {
  const char* name;
  unsigned leaf, subleaf;
  CpuidReg reg;
  int bit;
  uint64_t xcr0;  // OS register state the feature needs (XGETBV(0) bits); 0: none
};
constexpr FeatureBit kFeatures[] = {
#define PREFIXD_CPU_FEATURE(name, leaf, subleaf, reg, bit, xcr0) {#name, leaf, subleaf, CpuidReg::reg, bit, xcr0},
#include "kernels/cpu/isa_sets.def"
};
constexpr int kFeatureCount = static_cast<int>(std::size(kFeatures));

// One PREFIXD_CPU_ISA_SET of isa_sets.def.
struct IsaSet {
  const char* name;
  bool built;            // its arch is this target's
  std::string_view features;  // space-separated kFeatures names
};
constexpr IsaSet kSets[kCpuIsaCount] = {
#define PREFIXD_CPU_ISA_SET(name, enumerator, arch, features, flags) {#name, kIsaArch_##arch, features},
#include "kernels/cpu/isa_sets.def"
};

constexpr int feature_index(std::string_view name) {
  for (int i = 0; i < kFeatureCount; ++i)
    if (name == kFeatures[i].name) return i;
  return -1;
}

// Calls f(name) for each word of a space-separated list.
template <typename F>
constexpr void for_each_word(std::string_view list, F f) {
  while (!list.empty()) {
    const size_t space = list.find(' ');
    const std::string_view word = list.substr(0, space);
    list = space == std::string_view::npos ? std::string_view() : list.substr(space + 1);
    if (!word.empty()) f(word);
  }
}

constexpr bool every_set_feature_known() {
  bool ok = true;
  for (const IsaSet& set : kSets)
    for_each_word(set.features, [&](std::string_view w) { ok = ok && feature_index(w) >= 0; });
  return ok;
}
static_assert(every_set_feature_known(), "a set in isa_sets.def names a feature no PREFIXD_CPU_FEATURE defines");

using Features = std::array<bool, kFeatureCount>;  // by kFeatures index

// XCR0's XTILEDATA bit (the AMX tile registers' 8 KiB state).
constexpr uint64_t kXcr0TileData = uint64_t{1} << 18;

// Whether this process may use the AMX tiles: Linux enables XTILEDATA per
// process, on request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA);
// until then the first tile instruction is a SIGILL. Requested once, by detection.
bool request_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

Features detect() {
  Features f{};
#if defined(__x86_64__) || defined(__i386__)
  unsigned max_leaf = 0, r[4] = {};
  __cpuid(0, max_leaf, r[1], r[2], r[3]);
  unsigned max_subleaf7 = 0;
  if (max_leaf >= 7) __cpuid_count(7, 0, max_subleaf7, r[1], r[2], r[3]);
  uint64_t xcr0 = 0;
  __cpuid(1, r[0], r[1], r[2], r[3]);
  if ((r[2] >> 27) & 1u) {  // OSXSAVE: XGETBV reads the register state the OS saves
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  int tile_permission = -1;  // -1: not asked yet
  for (int i = 0; i < kFeatureCount; ++i) {
    const FeatureBit& fb = kFeatures[i];
    if (fb.leaf > max_leaf || (fb.leaf == 7 && fb.subleaf > max_subleaf7)) continue;
    if ((xcr0 & fb.xcr0) != fb.xcr0) continue;
    __cpuid_count(fb.leaf, fb.subleaf, r[0], r[1], r[2], r[3]);
    f[i] = (r[static_cast<int>(fb.reg)] >> fb.bit) & 1u;
    if (f[i] && (fb.xcr0 & kXcr0TileData) != 0) {
      if (tile_permission < 0) tile_permission = request_tile_permission() ? 1 : 0;
      f[i] = tile_permission == 1;
    }
  }
#endif
  return f;
}

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
    const int i = feature_index(name);
    const bool known = i >= 0;
    if (known) f[i] = false;
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
static_assert(kCpuIsaCount <= 32, "g_forced has a bit per set");

}  // namespace

const char* cpu_isa_name(CpuIsa isa) { return kSets[static_cast<int>(isa)].name; }

std::vector<std::string_view> cpu_isa_features(CpuIsa isa) {
  std::vector<std::string_view> out;
  for_each_word(kSets[static_cast<int>(isa)].features, [&](std::string_view w) { out.push_back(w); });
  return out;
}

bool cpu_isa_built(CpuIsa isa) { return kSets[static_cast<int>(isa)].built; }

const std::vector<CpuIsa>& all_cpu_isas() {
  static const std::vector<CpuIsa> all = [] {
    std::vector<CpuIsa> v;
    for (int i = 0; i < kCpuIsaCount; ++i) v.push_back(static_cast<CpuIsa>(i));
    return v;
  }();
  return all;
}

std::string cpu_isa_choices() {
  std::string s = "auto";
  for (CpuIsa isa : all_cpu_isas()) s += std::string(", ") + cpu_isa_name(isa);
  return s;
}

bool cpu_supports(CpuIsa isa) {
  const IsaSet& set = kSets[static_cast<int>(isa)];
  if (!set.built) return false;  // x86 sets are not built for other architectures
  const Features& f = features();
  bool all = true;
  for_each_word(set.features, [&](std::string_view w) { all = all && f[feature_index(w)]; });
  return all;
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
  std::string s, all;
  for (int i = 0; i < kFeatureCount; ++i) {
    if (f[i]) s += (s.empty() ? "" : " ") + std::string(kFeatures[i].name);
    all += (all.empty() ? "" : ", ") + std::string(kFeatures[i].name);
  }
  if (s.empty()) s = "none of " + all;
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
    for (const FeatureBit& fb : kFeatures) known += (known.empty() ? "" : ", ") + std::string(fb.name);
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
