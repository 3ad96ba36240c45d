// CpuIsaOption: the CPU backend's instruction set as the user asked for it
// (`--cpu-isa`, else the PREFIXD_CPU_ISA environment variable, else auto),
// shared by serve mode and `prefixd generate`, resolved once with
// cpu::choose_cpu_isa.
#pragma once

#include <string>

#include "common/result.h"
#include "kernels/cpu/cpu_isa.h"

namespace CLI {
class App;
}

namespace prefixd {

inline constexpr const char* kCpuIsaEnvVar = "PREFIXD_CPU_ISA";

struct CpuIsaOption {
  std::string requested;        // auto | a set of kernels/cpu/isa_sets.def (avx512bf16,
                                // avx512, avx2, portable) | a plan
                                // ("avx512bf16,bf16_tiles=avx512"); "" = auto
  std::string source = "auto";  // who gave `requested`: "--cpu-isa", "PREFIXD_CPU_ISA", or
                                // "auto" when neither did

  // Called after parsing with PREFIXD_CPU_ISA's value (null when unset): it
  // is taken unless --cpu-isa was given. An empty value counts as unset.
  void take_env(const char* value);

  // cpu::choose_cpu_isa(requested); an unknown or unsupported name is an
  // error whose message starts with `source`.
  Result<cpu::CpuIsa> choose() const;

  // The start-up log line, e.g. "CPU instruction set avx2 (auto; CPU
  // features: avx2 fma f16c)".
  std::string describe(cpu::CpuIsa isa) const;
};

// Adds `--cpu-isa NAME` to `app` (the root command or a subcommand), writing
// into `opt`, which must outlive parsing.
void add_cpu_isa_flag(CLI::App& app, CpuIsaOption& opt);

}  // namespace prefixd
