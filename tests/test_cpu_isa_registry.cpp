// Tests of the instruction-set registry (kernels/cpu/isa_sets.def): the sets,
// their order, names, features and kernel tables as C++ derives them match the
// file's lines, the cpuid table detects what GCC's __builtin_cpu_supports
// does, and every set this CPU supports has its own kernel table.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace prefixd;
using namespace prefixd::cpu;

namespace {

struct DefLine {
  std::string name, arch, features;
};

// The PREFIXD_CPU_ISA_SET lines of isa_sets.def, read as CMake reads them.
std::vector<DefLine> def_lines() {
  std::ifstream in(std::string(PREFIXD_SOURCE_DIR) + "/kernels/cpu/isa_sets.def");
  REQUIRE(in.good());
  const std::regex re(R"re(^PREFIXD_CPU_ISA_SET\(([a-z0-9_]+), *([A-Za-z0-9_]+), *([a-z0-9_]+), *"([^"]*)", *"([^"]*)"\))re");
  std::vector<DefLine> out;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("PREFIXD_CPU_ISA_SET(", 0) != 0) continue;
    REQUIRE_MESSAGE(std::regex_search(line, m, re), line);
    out.push_back({m[1], m[3], m[4]});
  }
  return out;
}

std::string joined(const std::vector<std::string_view>& words) {
  std::string s;
  for (std::string_view w : words) s += (s.empty() ? "" : " ") + std::string(w);
  return s;
}

}  // namespace

TEST_CASE("the sets are isa_sets.def's lines, in order, with their names, arch and features") {
  const std::vector<DefLine> lines = def_lines();
  REQUIRE(lines.size() == static_cast<size_t>(kCpuIsaCount));
  REQUIRE(all_cpu_isas().size() == lines.size());
  std::string choices = "auto";
  for (size_t i = 0; i < lines.size(); ++i) {
    const CpuIsa isa = all_cpu_isas()[i];
    CAPTURE(lines[i].name);
    CHECK(static_cast<size_t>(isa) == i);
    CHECK(cpu_isa_name(isa) == lines[i].name);
    CHECK(joined(cpu_isa_features(isa)) == lines[i].features);
    const bool built = lines[i].arch == "any" || (lines[i].arch == "x86_64" && kIsaArch_x86_64);
    CHECK(cpu_isa_built(isa) == built);
    choices += ", " + lines[i].name;
  }
  CHECK(cpu_isa_choices() == choices);  // what --cpu-isa accepts
  CHECK(all_cpu_isas().front() == CpuIsa::kPortable);
  CHECK(cpu_isa_features(CpuIsa::kPortable).empty());
}

TEST_CASE("each set needs every feature of the sets ranked below it") {
  std::vector<std::string_view> below;
  for (CpuIsa isa : all_cpu_isas()) {
    CAPTURE(cpu_isa_name(isa));
    const std::vector<std::string_view> features = cpu_isa_features(isa);
    for (std::string_view f : below) CHECK(std::find(features.begin(), features.end(), f) != features.end());
    below = features;
  }
}

TEST_CASE("a set is supported when its features are; the best is the last supported") {
  CpuIsa best = CpuIsa::kPortable;
  for (CpuIsa isa : all_cpu_isas()) {
    if (cpu_supports(isa)) best = isa;
    if (!cpu_isa_built(isa)) CHECK_FALSE(cpu_supports(isa));
  }
  CHECK(best_cpu_isa() == best);
  CHECK(cpu_supports(CpuIsa::kPortable));
}

TEST_CASE("every supported set has its own kernel table") {
  for (CpuIsa isa : supported_cpu_isas()) {
    CAPTURE(cpu_isa_name(isa));
    const CpuKernels& k = cpu_kernels(isa);
    CHECK(k.isa == isa);
    CHECK(static_cast<bool>(k.gemm_int8_rows));
    CHECK((k.int8_panel_type == nullptr) == (k.gemm_int8_panels == nullptr));
  }
}

#if defined(__x86_64__)
TEST_CASE("the cpuid table detects what __builtin_cpu_supports does") {
  if (std::getenv(kHideFeaturesEnvVar) != nullptr) return;  // hidden features differ by design
  __builtin_cpu_init();
  const std::string reported = " " + cpu_feature_string() + " ";
  auto has = [&](const char* name) { return reported.find(std::string(" ") + name + " ") != std::string::npos; };
  CHECK(has("avx2") == static_cast<bool>(__builtin_cpu_supports("avx2")));
  CHECK(has("fma") == static_cast<bool>(__builtin_cpu_supports("fma")));
  CHECK(has("avx512f") == static_cast<bool>(__builtin_cpu_supports("avx512f")));
  CHECK(has("avx512bw") == static_cast<bool>(__builtin_cpu_supports("avx512bw")));
  CHECK(has("avx512vl") == static_cast<bool>(__builtin_cpu_supports("avx512vl")));
  CHECK(has("avx512dq") == static_cast<bool>(__builtin_cpu_supports("avx512dq")));
  CHECK(has("avx512_bf16") == static_cast<bool>(__builtin_cpu_supports("avx512bf16")));
  CHECK(has("avx512_vnni") == static_cast<bool>(__builtin_cpu_supports("avx512vnni")));
}
#endif
