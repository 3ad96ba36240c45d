// The --cpu-isa flag, PREFIXD_CPU_ISA, and their resolution.
#include "daemon/cpu_isa_option.h"

#include <CLI/CLI.hpp>

namespace prefixd {

void CpuIsaOption::take_env(const char* value) {
  if (source == "--cpu-isa" || value == nullptr || *value == '\0') return;
  requested = value;
  source = kCpuIsaEnvVar;
}

Result<cpu::CpuIsa> CpuIsaOption::choose() const {
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(requested);
  if (!isa.ok()) return Status::error(source + ": " + isa.message());
  return isa;
}

std::string CpuIsaOption::describe(cpu::CpuIsa isa) const {
  std::string how = "auto";
  if (source == "--cpu-isa")
    how = "--cpu-isa " + requested;
  else if (source == kCpuIsaEnvVar)
    how = source + "=" + requested;
  return std::string("CPU instruction set ") + cpu::cpu_isa_name(isa) + " (" + how +
         "; CPU features: " + cpu::cpu_feature_string() + ")";
}

void add_cpu_isa_flag(CLI::App& app, CpuIsaOption& opt) {
  app.add_option_function<std::string>(
         "--cpu-isa",
         [&opt](const std::string& value) {
           opt.requested = value;
           opt.source = "--cpu-isa";
         },
         "CPU backend instruction set: " + cpu::cpu_isa_choices() + " (default: $" + kCpuIsaEnvVar +
             ", else auto = the best this CPU has, each kernel family on its fastest set); or a plan: "
             "a base set and FAMILY=SET items (families f32_tiles, bf16_tiles, block_formats, attention), "
             "e.g. avx512bf16,bf16_tiles=avx512")
      ->type_name("NAME|PLAN");
}

}  // namespace prefixd
