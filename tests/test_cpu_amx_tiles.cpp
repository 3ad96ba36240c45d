// The amx set's tile kernels on a CPU with AMX: the tile configuration's round
// trip through LDTILECFG and STTILECFG (GCC 12 once dropped the stores that
// fill it), the BF16 panel products against an exact reference within the f32
// summation bound, and the int8 panel products against the avx512bf16 set's
// VNNI panels, bit for bit (the integer sums are exact; the scales are applied
// in the same order). Exits 77 (skipped) on a CPU without the amx set.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/amx/tile_config.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "tests/random_blocks.h"

namespace prefixd {
namespace {

using cpu::CpuIsa;
using cpu::amx::tiles::TileConfig;

// A configuration with a different shape in every tile.
TileConfig distinct_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.set(t, 16 - t, 64 - 4 * t);
  return c;
}

TEST_CASE("the tile configuration round-trips through LDTILECFG and STTILECFG") {
  const TileConfig cfg = distinct_config();
  cpu::amx::tiles::load_config(cfg);
  const TileConfig back = cpu::amx::tiles::stored_config();
  CHECK(back == cfg);
  for (int t = 0; t < 8; ++t) {
    CAPTURE(t);
    CHECK(back.rows[t] == 16 - t);
    CHECK(back.colsb[t] == 64 - 4 * t);
  }
  cpu::amx::tiles::release();
}

TEST_CASE("use_config loads a configuration on each thread, once per shape") {
  const TileConfig cfg = distinct_config();
  auto on_a_thread = [&] {
    // A new thread has no configuration until it loads one.
    const bool fresh = cpu::amx::tiles::stored_config().palette == 0;
    cpu::amx::tiles::use_config(cfg);
    const bool loaded = cpu::amx::tiles::stored_config() == cfg && cpu::amx::tiles::thread_config() == cfg;
    cpu::amx::tiles::use_config(cfg);  // the same shape: nothing to load
    const bool kept = cpu::amx::tiles::stored_config() == cfg;
    cpu::amx::tiles::release();
    const bool released = cpu::amx::tiles::stored_config().palette == 0;
    return fresh && loaded && kept && released;
  };
  bool ok[2] = {};
  std::thread a([&] { ok[0] = on_a_thread(); }), b([&] { ok[1] = on_a_thread(); });
  a.join();
  b.join();
  CHECK(ok[0]);
  CHECK(ok[1]);
}

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST_CASE("BF16 panel products on the tiles are within the f32 summation bound of the exact sum") {
  const cpu::CpuKernels& k = cpu::cpu_kernels(CpuIsa::kAmx);
  REQUIRE(k.gemm_bf16_x);
  cpu::ThreadPool pool(2);
  std::mt19937 rng(3);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{70, 576}, {37, 96}, {33, 200}, {40, 33}, {32, 1536}}) {
    std::vector<float> wf = random_floats(rng, rows * cols);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
    cpu::CpuMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.source_type = WeightType::BF16;
    cpu::pack_matrix(w, DType::BF16, wb.data());
    for (int64_t n : {1, 5, 16, 17, 31, 32, 33, 100}) {
      CAPTURE(rows);
      CAPTURE(cols);
      CAPTURE(n);
      const std::vector<float> x = random_floats(rng, n * cols);
      std::vector<float> y(n * rows);
      cpu::matmul(k, pool, w, x.data(), y.data(), n);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          // Products of BF16 values are exact in f32; each of the cols
          // additions rounds by at most 2^-24 of the running magnitude.
          double ref = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double p = static_cast<double>(bf16_to_f32(f32_to_bf16(x[i * cols + c]))) * bf16_to_f32(wb[r * cols + c]);
            ref += p;
            mag += std::fabs(p);
          }
          if (std::fabs(ref - y[i * rows + r]) > static_cast<double>(cols) * std::ldexp(mag, -23)) ++bad;
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("int8 panel products on the tiles equal the avx512bf16 set's VNNI panels bit for bit") {
  const cpu::CpuKernels& amx = cpu::cpu_kernels(CpuIsa::kAmx);
  const cpu::CpuKernels& vnni = cpu::cpu_kernels(CpuIsa::kAvx512Bf16);
  cpu::ThreadPool pool(2);
  std::mt19937 rng(4);
  int types = 0;
  for (WeightType type : testing::block_weight_types()) {
    if (amx.int8_panel_type == nullptr || !amx.int8_panel_type(type)) continue;
    ++types;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{70, 512}, {33, 256}, {32, 768}}) {
      cpu::CpuMatrix w;
      w.rows = rows;
      w.cols = cols;
      w.source_type = type;
      w.row_bytes = weight_row_bytes(type, cols);
      const std::vector<uint8_t> bytes = testing::random_weight_blocks(type, rows, cols, static_cast<uint32_t>(rng()));
      w.rows_data = static_cast<uint8_t*>(cpu::alloc_aligned(bytes.size()));
      std::memcpy(w.rows_data, bytes.data(), bytes.size());
      for (int64_t n : {cpu::kInt8MaxRows, int64_t{17}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{100}}) {
        CAPTURE(weight_type_name(type));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(n);
        const std::vector<float> x = random_floats(rng, n * cols);
        std::vector<float> y_amx(n * rows), y_vnni(n * rows);
        cpu::matmul(amx, pool, w, x.data(), y_amx.data(), n);
        cpu::matmul(vnni, pool, w, x.data(), y_vnni.data(), n);
        CHECK(std::memcmp(y_amx.data(), y_vnni.data(), y_amx.size() * sizeof(float)) == 0);
      }
    }
  }
  CHECK(types >= 8);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K
}

}  // namespace
}  // namespace prefixd

int main(int argc, char** argv) {
  if (!prefixd::cpu::cpu_supports(prefixd::cpu::CpuIsa::kAmx)) {
    std::printf("skipped: this CPU has no amx set (it reports: %s)\n", prefixd::cpu::cpu_feature_string().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
