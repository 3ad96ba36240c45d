// The `auto` CPU plan kept across starts (daemon/cpu_plan_memory.h): the
// first call calibrates and writes the plan, later ones read the same plan
// back; a damaged file or one naming another base set is replaced with a
// warning; no cache directory means calibration alone. Also plan_spec()
// (kernels/cpu/isa_plan.h) read back by parse_cpu_isa_plan.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "daemon/cpu_plan_memory.h"
#include "kernels/cpu/cpu_isa.h"
#include "tests/temp_dir.h"

using namespace prefixd;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
}

bool same_sets(const cpu::CpuIsaPlan& a, const cpu::CpuIsaPlan& b) { return a.base == b.base && a.family == b.family; }

}  // namespace

TEST_CASE("plan_spec reads back as the same plan") {
  for (const char* spec : {"avx512bf16,bf16_tiles=avx512", "avx2,attention=portable", "portable"}) {
    Result<cpu::CpuIsaPlan> p = cpu::parse_cpu_isa_plan(spec);
    if (!p.ok()) continue;  // a set this CPU lacks
    CHECK(cpu::plan_spec(p.value()) == spec);
  }
  const cpu::CpuIsaPlan a = cpu::auto_plan();
  Result<cpu::CpuIsaPlan> back = cpu::parse_cpu_isa_plan(cpu::plan_spec(a));
  REQUIRE(back.ok());
  CHECK(same_sets(back.value(), a));
}

TEST_CASE("the first start calibrates and writes the plan; later starts read the same plan back") {
  testing::TempDir dir;
  const std::string cache = dir.path + "/cache";
  const RememberedCpuPlan first = remember_auto_cpu_plan(cache);
  REQUIRE_FALSE(first.path.empty());
  CHECK_FALSE(first.read_back);
  CHECK(first.warning.empty());
  CHECK(first.plan.automatic);
  CHECK(same_sets(first.plan, cpu::auto_plan()));
  CHECK(read_text(first.path) == cpu::plan_spec(first.plan) + "\n");
  CHECK(first.path.rfind(cache + "/cpu-plans/", 0) == 0);

  // Whatever this process would calibrate to now, the kept plan is what runs.
  const cpu::CpuIsaPlan scalar = cpu::forced_plan(cpu::best_cpu_isa());
  write_text(first.path, cpu::plan_spec(scalar) + "\n");
  const RememberedCpuPlan second = remember_auto_cpu_plan(cache);
  CHECK(second.read_back);
  CHECK(second.path == first.path);
  CHECK(same_sets(second.plan, scalar));
  CHECK(second.plan.automatic);
}

TEST_CASE("a damaged plan file, or one with another base set, is replaced with a warning") {
  testing::TempDir dir;
  const std::string cache = dir.path + "/cache";
  const RememberedCpuPlan first = remember_auto_cpu_plan(cache);
  REQUIRE_FALSE(first.path.empty());
  write_text(first.path, "bf16_tiles=nonsense\n");
  const RememberedCpuPlan again = remember_auto_cpu_plan(cache);
  CHECK_FALSE(again.read_back);
  CHECK(again.warning.find(first.path) != std::string::npos);
  CHECK(read_text(first.path) == cpu::plan_spec(again.plan) + "\n");
  if (cpu::best_cpu_isa() != cpu::CpuIsa::kPortable) {
    write_text(first.path, "portable\n");
    const RememberedCpuPlan other = remember_auto_cpu_plan(cache);
    CHECK_FALSE(other.read_back);
    CHECK(other.warning.find("base set portable") != std::string::npos);
    CHECK(other.plan.base == cpu::best_cpu_isa());
  }
}

TEST_CASE("without a cache directory the calibration alone runs") {
  const RememberedCpuPlan r = remember_auto_cpu_plan("");
  CHECK(r.path.empty());
  CHECK_FALSE(r.read_back);
  CHECK(same_sets(r.plan, cpu::auto_plan()));
}
