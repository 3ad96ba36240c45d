// Which instruction set runs each kernel family of the CPU backend: one set
// for all (a set the user forced), or per family the fastest on this CPU
// (`auto`), chosen from a short calibration timed once per process.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kernels/cpu/cpu_isa.h"

namespace prefixd::cpu {

// The kernel families that may run on different sets.
enum class KernelFamily : int {
  kF32Tiles = 0,      // matmul over F32 and F16 weight panels (F32 FMA tiles)
  kBf16Tiles = 1,     // matmul over BF16 weight panels
  kBlockFormats = 2,  // matmul over block-format rows (dequantized panels, int8 products)
  kAttention = 3,     // paged attention
};
constexpr int kKernelFamilies = 4;
// "f32_tiles", "bf16_tiles", "block_formats", "attention".
const char* kernel_family_name(KernelFamily f);

// Seconds one calibration workload took per family and set; 0 = not measured
// (a set this CPU lacks, or one left out).
struct IsaTimings {
  std::array<std::array<double, kCpuIsaCount>, kKernelFamilies> seconds{};
  double& at(KernelFamily f, CpuIsa isa) { return seconds[static_cast<int>(f)][static_cast<int>(isa)]; }
  double at(KernelFamily f, CpuIsa isa) const { return seconds[static_cast<int>(f)][static_cast<int>(isa)]; }
};

struct CpuIsaPlan {
  // The set reported (/health, logs) and used by the rows and elementwise ops:
  // the forced set, or with `auto` the best-ranked one this CPU has.
  CpuIsa base = CpuIsa::kPortable;
  std::array<CpuIsa, kKernelFamilies> family{};  // the set of each KernelFamily
  bool automatic = false;  // chosen by calibration (`auto`), not forced
  IsaTimings timings;      // the calibration figures when automatic

  CpuIsa of(KernelFamily f) const { return family[static_cast<int>(f)]; }
  // e.g. "f32_tiles=avx512 (avx2 1.92 ms, avx512 0.81 ms, avx512bf16 0.83 ms); bf16_tiles=...".
  std::string describe() const;
};

// The plan in the words parse_cpu_isa_plan takes: the base set, then
// FAMILY=SET for each family on another set, e.g. "avx512bf16,bf16_tiles=avx512".
std::string plan_spec(const CpuIsaPlan& plan);

// Every family on `isa` (which this CPU must support).
CpuIsaPlan forced_plan(CpuIsa isa);

// A per-family plan in words, as --cpu-isa and PREFIXD_CPU_ISA take it:
// comma-separated items, each a set name (the base: the rows and elementwise
// ops and every family not named; default the best set this CPU has) or
// FAMILY=SET, e.g. "avx512bf16,bf16_tiles=avx512" (what `auto` chooses on a
// Sapphire Rapids Xeon). Every set named must be one this CPU supports; an
// unknown family or set, a family named twice, two bases or an empty item is
// an error that names the item. The plan is not automatic.
Result<CpuIsaPlan> parse_cpu_isa_plan(std::string_view spec);
// Whether `requested` is a plan spec (has ',' or '='), not a set name.
bool is_cpu_isa_plan_spec(std::string_view requested);

// choose_cpu_isa (cpu_isa.h) keeps the plan of a spec it was given, for the
// backends made for its base: remember_forced_plan stores it (the last one
// wins), and plan_for_isa answers what make_cpu_backend(n, isa) runs: that
// plan when its base is `isa`; every family on `isa` when the set was named;
// otherwise `auto` for the best set (auto_plan()) and `isa` throughout for
// any other.
void remember_forced_plan(const CpuIsaPlan& plan);
CpuIsaPlan plan_for_isa(CpuIsa isa);

// A set other than the base runs a family only when it took at most
// (1 - kSwitchMargin) of the base's time: sets whose kernels are the same
// code (avx512 and avx512bf16 on F32 panels) then stay on the base whatever
// the noise, and the choice does not flip between starts on a small margin.
constexpr double kSwitchMargin = 0.05;

// Per family, the fastest of `candidates` with a measured time (> 0), the base
// set's time counted (1 - kSwitchMargin) lower; a family with none measured
// takes `base`. Deterministic: ties go to the higher-ranked set.
CpuIsaPlan plan_from_timings(const IsaTimings& timings, const std::vector<CpuIsa>& candidates, CpuIsa base);

// Times each family's calibration workload (isa_calibration.cpp) on every set
// in `candidates`, one thread, best of 9 alternating rounds: about 15 ms.
IsaTimings measure_isa_timings(const std::vector<CpuIsa>& candidates);

// The plan of `auto` on this CPU: the sets this CPU supports (without
// `portable` where an x86 set exists), calibrated on the first call and kept
// for the life of the process. The daemon keeps it across starts in its cache
// directory (daemon/cpu_plan_memory.h), since a plan decides results' last bits.
const CpuIsaPlan& auto_plan();

}  // namespace prefixd::cpu
