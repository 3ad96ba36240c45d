// Instruction sets of the CPU backend (listed in kernels/cpu/isa_sets.def):
// which ones this CPU has, their names, and the choice between them (best
// available, or one the caller forces). Detection runs cpuid for the features
// isa_sets.def lists (x86-64); other architectures have `portable` only.
// PREFIXD_CPU_HIDE_FEATURES (tests only), e.g. "avx512f,avx512_bf16": those
// features count as absent, so that a refusal of a set can be tested on a CPU
// that has it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace prefixd::cpu {

// The sets of kernels/cpu/isa_sets.def, in its order: most portable first,
// the fastest last (the enumerator's value is the rank).
enum class CpuIsa : int {
#define PREFIXD_CPU_ISA_SET(name, enumerator, arch, features, flags) enumerator,
#include "kernels/cpu/isa_sets.def"
};
constexpr int kCpuIsaCount = 0
#define PREFIXD_CPU_ISA_SET(name, enumerator, arch, features, flags) +1
#include "kernels/cpu/isa_sets.def"
    ;
// Whether the sets of an isa_sets.def `arch` are built for this target
// (cpu_isa_sets.cmake decides the same from CMAKE_SYSTEM_PROCESSOR).
inline constexpr bool kIsaArch_any = true;
#if defined(__x86_64__)
inline constexpr bool kIsaArch_x86_64 = true;
#else
inline constexpr bool kIsaArch_x86_64 = false;
#endif
inline constexpr const char* kHideFeaturesEnvVar = "PREFIXD_CPU_HIDE_FEATURES";

// Its isa_sets.def name: "portable", "avx2", "avx512", "avx512bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);
// The cpuid features it requires, as isa_sets.def lists them (none for portable).
std::vector<std::string_view> cpu_isa_features(CpuIsa isa);
// Whether it is built for this architecture (its isa_sets.def arch).
bool cpu_isa_built(CpuIsa isa);
// Every set, most portable first; and the names accepted by parse (with "auto").
const std::vector<CpuIsa>& all_cpu_isas();
std::string cpu_isa_choices();

// Whether this CPU (and its OS, for the AVX register state) can run `isa`.
bool cpu_supports(CpuIsa isa);
// The fastest set this CPU supports.
CpuIsa best_cpu_isa();
// Sets this CPU supports, most portable first.
std::vector<CpuIsa> supported_cpu_isas();
// The CPU's relevant features as cpuid reports them, e.g. "avx2 fma f16c",
// less those PREFIXD_CPU_HIDE_FEATURES hides (then followed by
// " (hidden by PREFIXD_CPU_HIDE_FEATURES: avx512f)").
std::string cpu_feature_string();

// Resolves a requested name: "" or "auto" gives best_cpu_isa(); a known name
// the CPU supports gives that set. An unknown name, or a set this CPU lacks,
// is an error naming the value, the accepted values and the CPU's features;
// so is a PREFIXD_CPU_HIDE_FEATURES naming a feature this file does not know.
// A named set is remembered as forced (cpu_isa_forced). A per-family plan
// spec (isa_plan.h, parse_cpu_isa_plan: "avx512bf16,bf16_tiles=avx512") gives
// its base set, and its plan is remembered for the backends made for that set.
Result<CpuIsa> choose_cpu_isa(std::string_view requested);

// Whether choose_cpu_isa was given `isa` by name in this process: backends
// made for it then run it for every kernel family (make_cpu_backend), where
// the best set reached through `auto` runs each family on its fastest set.
bool cpu_isa_forced(CpuIsa isa);

}  // namespace prefixd::cpu
