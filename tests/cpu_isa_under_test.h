// Runs a doctest executable on one CPU instruction set or per-family plan: the
// one named by PREFIXD_CPU_ISA (ctest registers a run per set and per mixed
// plan, see tests/CMakeLists.txt), or `auto`. A set the CPU lacks makes the
// run exit 77 (skipped). Backends made with make_cpu_backend(n,
// isa_under_test()) run the plan (cpu::plan_for_isa).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"

namespace prefixd::testing {

inline cpu::CpuIsa& isa_under_test_slot() {
  static cpu::CpuIsa isa = cpu::best_cpu_isa();
  return isa;
}

// The set the tests of this process run on.
inline cpu::CpuIsa isa_under_test() { return isa_under_test_slot(); }

// main() of a per-ISA test executable.
inline int run_for_cpu_isa(int argc, char** argv) {
  const char* env = std::getenv("PREFIXD_CPU_ISA");
  const std::string requested = env != nullptr ? env : "";
  // A set name, or a plan's items ("avx512bf16,bf16_tiles=avx512"): any set this CPU lacks skips.
  std::string names = requested;
  for (char& c : names)
    if (c == ',' || c == '=') c = ' ';
  std::istringstream words(names);
  for (std::string word; words >> word;) {
    for (cpu::CpuIsa isa : cpu::all_cpu_isas()) {
      if (word == cpu::cpu_isa_name(isa) && !cpu::cpu_supports(isa)) {
        std::printf("skipped: this CPU has no %s (it reports: %s)\n", word.c_str(),
                    cpu::cpu_feature_string().c_str());
        return 77;
      }
    }
  }
  auto isa = cpu::choose_cpu_isa(requested);
  if (!isa.ok()) {
    std::fprintf(stderr, "%s\n", isa.message().c_str());
    return 1;
  }
  isa_under_test_slot() = isa.value();
  std::printf("CPU instruction set under test: %s (CPU reports: %s)\n", cpu::cpu_isa_name(isa.value()),
              cpu::cpu_feature_string().c_str());
  std::printf("CPU kernel families under test: %s\n", cpu::plan_for_isa(isa.value()).describe().c_str());
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace prefixd::testing
