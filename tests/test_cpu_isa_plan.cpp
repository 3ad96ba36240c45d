// Tests of the per-family instruction set plan (kernels/cpu/isa_plan.h): the
// choice from injected timings, the calibration's shape on this CPU, and that
// a forced set runs every family.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa_plan.h"

using namespace prefixd;
using namespace prefixd::cpu;

namespace {

constexpr CpuIsa kAvx2 = CpuIsa::kAvx2, kAvx512 = CpuIsa::kAvx512, kBf16 = CpuIsa::kAvx512Bf16;
const std::vector<CpuIsa> kX86 = {kAvx2, kAvx512, kBf16};

IsaTimings timings(std::initializer_list<std::tuple<KernelFamily, CpuIsa, double>> figures) {
  IsaTimings t;
  for (auto [f, isa, s] : figures) t.at(f, isa) = s;
  return t;
}

bool supported(CpuIsa isa) {
  const std::vector<CpuIsa> s = supported_cpu_isas();
  return std::find(s.begin(), s.end(), isa) != s.end();
}

}  // namespace

TEST_CASE("plan_from_timings: each family takes its fastest set") {
  const IsaTimings t = timings({
      {KernelFamily::kF32Tiles, kAvx2, 3.0},   {KernelFamily::kF32Tiles, kAvx512, 1.0},
      {KernelFamily::kF32Tiles, kBf16, 2.0},   {KernelFamily::kBf16Tiles, kAvx2, 3.0},
      {KernelFamily::kBf16Tiles, kAvx512, 2.0}, {KernelFamily::kBf16Tiles, kBf16, 1.0},
      {KernelFamily::kBlockFormats, kAvx2, 0.5}, {KernelFamily::kBlockFormats, kAvx512, 2.0},
      {KernelFamily::kBlockFormats, kBf16, 1.0}, {KernelFamily::kAttention, kAvx2, 2.0},
      {KernelFamily::kAttention, kAvx512, 1.5}, {KernelFamily::kAttention, kBf16, 1.0},
  });
  const CpuIsaPlan p = plan_from_timings(t, kX86, kBf16);
  CHECK(p.automatic);
  CHECK(p.base == kBf16);
  CHECK(p.of(KernelFamily::kF32Tiles) == kAvx512);
  CHECK(p.of(KernelFamily::kBf16Tiles) == kBf16);
  CHECK(p.of(KernelFamily::kBlockFormats) == kAvx2);
  CHECK(p.of(KernelFamily::kAttention) == kBf16);
  CHECK(p.describe() ==
        "f32_tiles=avx512 (avx2 3000.000 ms, avx512 1000.000 ms, avx512bf16 2000.000 ms); "
        "bf16_tiles=avx512bf16 (avx2 3000.000 ms, avx512 2000.000 ms, avx512bf16 1000.000 ms); "
        "block_formats=avx2 (avx2 500.000 ms, avx512 2000.000 ms, avx512bf16 1000.000 ms); "
        "attention=avx512bf16 (avx2 2000.000 ms, avx512 1500.000 ms, avx512bf16 1000.000 ms)");
}

TEST_CASE("plan_from_timings: another set must beat the base by kSwitchMargin") {
  // 4 % faster than the base: not enough; 6 %: taken.
  const IsaTimings t = timings({
      {KernelFamily::kF32Tiles, kAvx512, 0.96}, {KernelFamily::kF32Tiles, kBf16, 1.0},
      {KernelFamily::kBf16Tiles, kAvx512, 0.94}, {KernelFamily::kBf16Tiles, kBf16, 1.0},
  });
  const CpuIsaPlan p = plan_from_timings(t, kX86, kBf16);
  CHECK(p.of(KernelFamily::kF32Tiles) == kBf16);
  CHECK(p.of(KernelFamily::kBf16Tiles) == kAvx512);
  // Families with no figures stay on the base.
  CHECK(p.of(KernelFamily::kBlockFormats) == kBf16);
  CHECK(p.of(KernelFamily::kAttention) == kBf16);
}

TEST_CASE("plan_from_timings: ties between other sets go to the higher-ranked one, in any order") {
  const IsaTimings t = timings({
      {KernelFamily::kAttention, kAvx2, 1.0}, {KernelFamily::kAttention, kAvx512, 1.0},
      {KernelFamily::kAttention, kBf16, 2.0},
  });
  for (const std::vector<CpuIsa>& order : {kX86, std::vector<CpuIsa>{kBf16, kAvx512, kAvx2}}) {
    CHECK(plan_from_timings(t, order, kBf16).of(KernelFamily::kAttention) == kAvx512);
  }
}

TEST_CASE("forced_plan runs every family on the set and is not automatic") {
  const CpuIsaPlan p = forced_plan(kAvx2);
  CHECK_FALSE(p.automatic);
  CHECK(p.base == kAvx2);
  for (int f = 0; f < kKernelFamilies; ++f) CHECK(p.family[f] == kAvx2);
  CHECK(p.describe() == "f32_tiles=avx2; bf16_tiles=avx2; block_formats=avx2; attention=avx2");
}

TEST_CASE("measure_isa_timings times exactly the candidates, every family") {
  const std::vector<CpuIsa> candidates = {best_cpu_isa()};
  const IsaTimings t = measure_isa_timings(candidates);
  for (int fi = 0; fi < kKernelFamilies; ++fi) {
    for (CpuIsa isa : all_cpu_isas()) {
      CAPTURE(fi);
      CAPTURE(cpu_isa_name(isa));
      CHECK((t.at(static_cast<KernelFamily>(fi), isa) > 0) == (isa == best_cpu_isa()));
    }
  }
}

TEST_CASE("auto: every family on a set this CPU supports, reported as the best set; a forced set wins") {
  const CpuIsaPlan& p = auto_plan();
  CHECK(p.automatic);
  CHECK(p.base == best_cpu_isa());
  for (int f = 0; f < kKernelFamilies; ++f) {
    CAPTURE(kernel_family_name(static_cast<KernelFamily>(f)));
    CHECK(supported(p.family[f]));
    // Every family was timed on the set it runs on.
    CHECK(p.timings.at(static_cast<KernelFamily>(f), p.family[f]) > 0);
  }
  MESSAGE("auto on this CPU: " << p.describe());

  auto auto_backend = make_cpu_backend(1, best_cpu_isa());
  const auto& ab = dynamic_cast<const CpuBackend&>(*auto_backend);
  CHECK(ab.isa() == best_cpu_isa());
  CHECK(ab.plan().family == p.family);
  for (int f = 0; f < kKernelFamilies; ++f)
    CHECK(ab.kernels(static_cast<KernelFamily>(f)).isa == p.family[f]);

  // Naming each supported set (the best last) makes its backends run it throughout.
  std::vector<CpuIsa> order = supported_cpu_isas();
  for (CpuIsa isa : order) {
    CAPTURE(cpu_isa_name(isa));
    Result<CpuIsa> chosen = choose_cpu_isa(cpu_isa_name(isa));
    REQUIRE(chosen.ok());
    CHECK(cpu_isa_forced(isa));
    auto backend = make_cpu_backend(1, chosen.value());
    const auto& b = dynamic_cast<const CpuBackend&>(*backend);
    CHECK_FALSE(b.plan().automatic);
    for (int f = 0; f < kKernelFamilies; ++f) CHECK(b.kernels(static_cast<KernelFamily>(f)).isa == isa);
  }
}

TEST_CASE("a plan in words: a base set and FAMILY=SET items, every error naming its item") {
  // portable is every CPU's: a plan of it alone and with overrides of it.
  Result<CpuIsaPlan> p = parse_cpu_isa_plan("portable,attention=portable");
  REQUIRE(p.ok());
  CHECK(p.value().base == CpuIsa::kPortable);
  CHECK_FALSE(p.value().automatic);
  for (int f = 0; f < kKernelFamilies; ++f) CHECK(p.value().family[f] == CpuIsa::kPortable);
  // Without a base the best set is the base and every family not named.
  p = parse_cpu_isa_plan("bf16_tiles=portable");
  REQUIRE(p.ok());
  CHECK(p.value().base == best_cpu_isa());
  CHECK(p.value().of(KernelFamily::kBf16Tiles) == CpuIsa::kPortable);
  CHECK(p.value().of(KernelFamily::kF32Tiles) == best_cpu_isa());
  CHECK(is_cpu_isa_plan_spec("bf16_tiles=portable"));
  CHECK(is_cpu_isa_plan_spec("portable,"));
  CHECK_FALSE(is_cpu_isa_plan_spec("avx2"));

  auto error_of = [](const char* spec) {
    Result<CpuIsaPlan> r = parse_cpu_isa_plan(spec);
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  CHECK(error_of("portable,gemm=portable").find("unknown kernel family 'gemm'") != std::string::npos);
  CHECK(error_of("portable,attention=sse9").find("unknown instruction set 'sse9'") != std::string::npos);
  CHECK(error_of("portable,attention=portable,attention=portable").find("names attention twice") !=
        std::string::npos);
  CHECK(error_of("portable,portable").find("two base sets") != std::string::npos);
  CHECK(error_of("portable,").find("has an empty item") != std::string::npos);
  for (CpuIsa isa : all_cpu_isas()) {
    if (supported(isa)) continue;
    const std::string spec = std::string("portable,attention=") + cpu_isa_name(isa);
    CHECK(error_of(spec.c_str()).find(std::string("this CPU has no ") + cpu_isa_name(isa)) != std::string::npos);
  }
}

TEST_CASE("choose_cpu_isa takes a plan: its base, and backends made for the base run the plan") {
  const CpuIsa best = best_cpu_isa();
  const std::string spec = std::string(cpu_isa_name(best)) + ",attention=portable";
  Result<CpuIsa> chosen = choose_cpu_isa(spec);
  REQUIRE(chosen.ok());
  CHECK(chosen.value() == best);
  auto backend = make_cpu_backend(1, best);
  const auto& b = dynamic_cast<const CpuBackend&>(*backend);
  CHECK_FALSE(b.plan().automatic);
  CHECK(b.kernels(KernelFamily::kAttention).isa == CpuIsa::kPortable);
  CHECK(b.kernels(KernelFamily::kF32Tiles).isa == best);
  CHECK(b.isa() == best);
  CHECK_FALSE(choose_cpu_isa("portable,attention=sse9").ok());
}
