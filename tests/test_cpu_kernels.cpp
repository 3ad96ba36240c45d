// CPU backend ops against naive double-precision references on random data,
// and the vector dtype conversions against the scalar ones in kernels/dtype.h,
// on one instruction set per run (tests/cpu_isa_under_test.h).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "kernels/quant/dequantize.h"
#include "tests/block_list_check.h"
#include "tests/random_blocks.h"
#include "tests/cpu_isa_under_test.h"

namespace prefixd {
namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Random weights of `type` for a (rows, cols) matrix: the raw bytes and the
// exact f32 values they encode.
struct HostWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // (rows, cols)
};

// F32, F16, BF16 and every block type.
std::vector<WeightType> every_weight_type() {
  std::vector<WeightType> out = {WeightType::F32, WeightType::F16, WeightType::BF16};
  for (WeightType t : testing::block_weight_types()) out.push_back(t);
  return out;
}

HostWeights make_weights(std::mt19937& rng, WeightType type, int64_t rows, int64_t cols) {
  HostWeights w;
  const int64_t n = rows * cols;
  std::vector<float> f = random_floats(rng, n);
  w.values.resize(n);
  switch (type) {
    case WeightType::F32:
      w.bytes.resize(n * 4);
      std::memcpy(w.bytes.data(), f.data(), n * 4);
      w.values = f;
      break;
    case WeightType::F16:
    case WeightType::BF16: {
      w.bytes.resize(n * 2);
      auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
      for (int64_t i = 0; i < n; ++i) {
        h[i] = type == WeightType::F16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
        w.values[i] = type == WeightType::F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
      }
      break;
    }
    default: {  // any block type: random blocks, values from the reference dequantizer
      w.bytes = testing::random_weight_blocks(type, rows, cols, static_cast<uint32_t>(rng()));
      const size_t row_bytes = weight_row_bytes(type, cols);
      for (int64_t r = 0; r < rows; ++r)
        quant::dequantize_row(type, w.bytes.data() + r * row_bytes, w.values.data() + r * cols, cols);
      break;
    }
    case WeightType::Q8_0: {
      REQUIRE(cols % 32 == 0);
      w.bytes.resize(n / 32 * 34);
      std::uniform_int_distribution<int> qd(-127, 127);
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint16_t d = f32_to_f16(0.001f + 0.01f * static_cast<float>(b % 7));
        std::memcpy(w.bytes.data() + b * 34, &d, 2);
        for (int j = 0; j < 32; ++j) {
          const int8_t q = static_cast<int8_t>(qd(rng));
          w.bytes[b * 34 + 2 + j] = static_cast<uint8_t>(q);
          w.values[b * 32 + j] = f16_to_f32(d) * static_cast<float>(q);
        }
      }
      break;
    }
  }
  return w;
}

const char* type_name(WeightType t) { return weight_type_name(t); }

float* alloc_floats(Backend& be, const std::vector<float>& v) {
  auto* p = static_cast<float*>(be.alloc(v.size() * sizeof(float)));
  be.upload(p, v.data(), v.size() * sizeof(float));
  return p;
}

TEST_CASE("f16 to f32 vector conversion matches dtype.h for all 65536 halves") {
  std::vector<uint16_t> h(65536 + 5);  // odd length exercises the masked tail
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> f(h.size());
  cpu::cpu_kernels(testing::isa_under_test()).f16_to_f32_n(h.data(), f.data(), static_cast<int64_t>(h.size()));
  int64_t mismatches = 0;
  for (size_t i = 0; i < h.size(); ++i) mismatches += f32_bits(f[i]) != f32_bits(f16_to_f32(h[i]));
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 to f32 vector conversion matches dtype.h for all 65536 values") {
  std::vector<uint16_t> h(65536);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> f(h.size());
  cpu::cpu_kernels(testing::isa_under_test()).bf16_to_f32_n(h.data(), f.data(), static_cast<int64_t>(h.size()));
  int64_t mismatches = 0;
  for (size_t i = 0; i < h.size(); ++i) mismatches += f32_bits(f[i]) != f32_bits(bf16_to_f32(h[i]));
  CHECK(mismatches == 0);
}

TEST_CASE("f32 to f16 and bf16 vector conversions match dtype.h on random and edge floats") {
  std::mt19937 rng(1);
  std::vector<float> f;
  // Random bit patterns cover every exponent, subnormals, inf and NaN.
  for (int i = 0; i < 2000000; ++i) f.push_back(f32_from_bits(static_cast<uint32_t>(rng())));
  // Values in the half range, including its rounding boundaries.
  std::uniform_real_distribution<float> d(-70000.0f, 70000.0f);
  for (int i = 0; i < 1000000; ++i) f.push_back(d(rng));
  for (float e : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 5.9604645e-08f,
                  2.9802322e-08f, 2.9802326e-08f, 1e-45f, -1e-40f, INFINITY, -INFINITY, NAN})
    f.push_back(e);
  for (uint32_t u = 0x38800000u - 4096; u < 0x38800000u + 4096; ++u) f.push_back(f32_from_bits(u));
  const int64_t n = static_cast<int64_t>(f.size());
  std::vector<uint16_t> h16(n), hb(n);
  cpu::cpu_kernels(testing::isa_under_test()).f32_to_f16_n(f.data(), h16.data(), n);
  cpu::cpu_kernels(testing::isa_under_test()).f32_to_bf16_n(f.data(), hb.data(), n);
  int64_t bad16 = 0, badb = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad16 += h16[i] != f32_to_f16(f[i]);
    badb += hb[i] != f32_to_bf16(f[i]);
  }
  CHECK(bad16 == 0);
  CHECK(badb == 0);
}

// x with every block of `block` values (32, or 256 for the K formats) replaced
// by its 8-bit quantization q * d, as the int8 matmul sees it (cpu::XQ8Block,
// cpu::XQ8KBlock: q = nearest-even(x / d), d = max|x| / 127; a 32-value block
// keeps d as F16, as llama.cpp's Q8_0 and Q8_1 blocks do).
std::vector<float> quantize_x_q8_reference(const std::vector<float>& x, size_t block) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b + block <= x.size(); b += block) {
    float amax = 0.0f;
    for (size_t j = 0; j < block; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float scale = block == 32 ? f16_to_f32(f32_to_f16(d)) : d;
    for (size_t j = 0; j < block; ++j) out[b + j] = std::nearbyint(x[b + j] * id) * scale;
  }
  return out;
}

// Q4_1's and Q5_1's decode products (fewer than kInt8MaxRows x rows): a
// block's min m multiplies llama.cpp's Q8_1 sum, F16(d x sum of q) with d
// before its F16 rounding (cpu::XQ8Block::s), where the quantized x of
// quantize_x_q8_reference gives m x F16(d) x sum of q. What that adds to the
// product of one weight row (`row`: its blocks) and one x row (cols values).
double q8_1_min_sum_delta(WeightType type, const uint8_t* row, const float* x, int64_t cols) {
  if (type != WeightType::Q4_1 && type != WeightType::Q5_1) return 0;
  const size_t block_bytes = type == WeightType::Q4_1 ? 20 : 24;  // d, m (F16), then the values
  double delta = 0;
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint16_t m16;
    std::memcpy(&m16, row + b * block_bytes + 2, 2);
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    float sum = 0;
    for (int j = 0; j < 32; ++j) sum += std::nearbyint(x[b * 32 + j] * id);
    const float s = f16_to_f32(f32_to_f16(d * sum));
    delta += static_cast<double>(f16_to_f32(m16)) * (static_cast<double>(s) - f16_to_f32(f32_to_f16(d)) * sum);
  }
  return delta;
}

// Dot-product tolerance for an f32 accumulation of `cols` terms.
double dot_tol(const float* a, const float* b, int64_t cols) {
  double mag = 0;
  for (int64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(a[c]) * b[c]);
  return 2e-6 * mag + 1e-6 + mag * 1.2e-7 * std::sqrt(static_cast<double>(cols));
}

TEST_CASE("matmul matches a double reference for every weight type and batch size") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(2);
  struct Shape {
    int64_t rows, cols;
  };
  for (WeightType type : every_weight_type()) {
    for (Shape s : {Shape{37, 96}, Shape{130, 200}, Shape{5, 33}, Shape{64, 576}, Shape{40, 512}, Shape{1024, 256}, Shape{256, 768}}) {
      if (s.cols % weight_type_traits(type).block_elements != 0) continue;
      HostWeights hw = make_weights(rng, type, s.rows, s.cols);
      for (bool outlives : {false, true}) {
        auto w = be->upload_matrix(type, s.rows, s.cols, hw.bytes.data(), outlives);
        CHECK(w->rows == s.rows);
        CHECK(w->cols == s.cols);
        CHECK(w->source_type == type);
        for (int64_t n : {1, 2, 7, 12, 15, 16, 17, 64, 300}) {
          CAPTURE(type_name(type));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(n);
          std::vector<float> x = random_floats(rng, n * s.cols);
          float* dx = alloc_floats(*be, x);
          auto* dy = static_cast<float*>(be->alloc(n * s.rows * sizeof(float)));
          be->matmul(*w, dx, dy, n);
          std::vector<float> y(n * s.rows);
          be->download(y.data(), dy, y.size() * sizeof(float));
          // The set that runs this matrix's products: its family's in the plan.
          const cpu::CpuKernels& set = static_cast<const cpu::CpuBackend&>(*be).kernels(
              cpu::matrix_family(static_cast<const cpu::CpuMatrix&>(*w)));
          // BF16 weights multiply BF16-rounded activations (llama.cpp's rule)
          // in sets with a BF16 dot product; the others widen the weights to F32.
          std::vector<float> xr = x;
          if (type == WeightType::BF16 && set.gemm_bf16_x)
            for (auto& v : xr) v = bf16_to_f32(f32_to_bf16(v));
          // Block types with integer products multiply x quantized to 8 bits:
          // per 256 (K formats) or 32 in decode calls, per 32 on int8 panels.
          const bool int8_panels = set.int8_panel_type != nullptr && set.int8_panel_type(type);
          if (cpu::int8_weight_type(type) && n < cpu::kInt8MaxRows)
            xr = quantize_x_q8_reference(x, cpu::k_weight_type(type) ? 256 : 32);
          if (int8_panels && n >= cpu::kInt8MaxRows) xr = quantize_x_q8_reference(x, 32);
          // In sets with a BF16 dot product, longer calls on the other block
          // types round the dequantized weights and x to BF16 (BF16 panels).
          std::vector<float> wv = hw.values;
          const bool block = type != WeightType::F32 && type != WeightType::F16 && type != WeightType::BF16;
          if (block && !int8_panels && n >= cpu::kInt8MaxRows && set.gemm_bf16_x) {
            for (auto& v : xr) v = bf16_to_f32(f32_to_bf16(v));
            for (auto& v : wv) v = bf16_to_f32(f32_to_bf16(v));
          }
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t r = 0; r < s.rows; ++r) {
              const float* xi = xr.data() + i * s.cols;
              const float* wr = wv.data() + r * s.cols;
              double ref = 0;
              for (int64_t c = 0; c < s.cols; ++c) ref += static_cast<double>(xi[c]) * wr[c];
              if (cpu::int8_weight_type(type) && n < cpu::kInt8MaxRows)
                ref += q8_1_min_sum_delta(type, hw.bytes.data() + r * (hw.bytes.size() / s.rows),
                                          x.data() + i * s.cols, s.cols);
              if (std::fabs(ref - y[i * s.rows + r]) > dot_tol(xi, wr, s.cols)) ++bad;
            }
          CHECK(bad == 0);
          be->free(dx);
          be->free(dy);
        }
      }
    }
  }
}

TEST_CASE("integer matmul rows do not depend on the batch: n rows at once equal each row alone, bit for bit") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(5);
  const int64_t rows = 70, cols = 512, n = cpu::kInt8MaxRows - 1;
  for (WeightType type : every_weight_type()) {
    if (!cpu::int8_weight_type(type)) continue;
    CAPTURE(type_name(type));
    HostWeights hw = make_weights(rng, type, rows, cols);
    auto w = be->upload_matrix(type, rows, cols, hw.bytes.data(), false);
    std::vector<float> x = random_floats(rng, n * cols);
    float* dx = alloc_floats(*be, x);
    auto* dy = static_cast<float*>(be->alloc(n * rows * sizeof(float)));
    be->matmul(*w, dx, dy, n);
    std::vector<float> all(n * rows), one(rows);
    be->download(all.data(), dy, all.size() * sizeof(float));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      be->matmul(*w, dx + i * cols, dy, 1);
      be->download(one.data(), dy, one.size() * sizeof(float));
      if (std::memcmp(one.data(), all.data() + i * rows, rows * sizeof(float)) != 0) ++differ;
    }
    CHECK(differ == 0);
    be->free(dx);
    be->free(dy);
  }
}

// The prefix cache's promise for 16- and 32-bit weights: a prompt's rows
// computed as a cached prefix's suffix (a few x rows) equal the same rows
// computed in the whole prompt (many), so every x row's outputs must not
// depend on how many rows the call has, in every set and every plan.
TEST_CASE("F32, F16 and BF16 matmul rows do not depend on the batch: any n equals the rows of a long call, bit for bit") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(9);
  const int64_t n_all = 300;
  for (WeightType type : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{70, 576}, {33, 200}, {40, 33}, {130, 64}}) {
      CAPTURE(type_name(type));
      CAPTURE(rows);
      CAPTURE(cols);
      HostWeights hw = make_weights(rng, type, rows, cols);
      auto w = be->upload_matrix(type, rows, cols, hw.bytes.data(), false);
      std::vector<float> x = random_floats(rng, n_all * cols);
      float* dx = alloc_floats(*be, x);
      auto* dy = static_cast<float*>(be->alloc(n_all * rows * sizeof(float)));
      be->matmul(*w, dx, dy, n_all);
      std::vector<float> all(n_all * rows), part(n_all * rows);
      be->download(all.data(), dy, all.size() * sizeof(float));
      for (int64_t n : {1, 2, 3, 5, 7, 8, 12, 13, 15, 16, 17, 48, 49, 128, 129}) {
        CAPTURE(n);
        const int64_t first = (n * 7) % (n_all - n);  // rows [first, first + n) of x
        be->matmul(*w, dx + first * cols, dy, n);
        be->download(part.data(), dy, n * rows * sizeof(float));
        CHECK(std::memcmp(part.data(), all.data() + first * rows, n * rows * sizeof(float)) == 0);
      }
      be->free(dx);
      be->free(dy);
    }
  }
}

TEST_CASE("matmul_same_x gives each output exactly as matmul does, for one type or mixed types, panels or rows") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(6);
  const int64_t cols = 256;
  // q/k/v-like shapes (rows not all whole panels), then a mix and more
  // matrices than one task list takes (both fall back to one product each).
  const std::vector<std::vector<WeightType>> sets = {
      {WeightType::BF16, WeightType::BF16, WeightType::BF16},
      {WeightType::F32, WeightType::F32},
      {WeightType::BF16, WeightType::F32, WeightType::Q8_0},
      std::vector<WeightType>(cpu::kMaxSameX + 1, WeightType::BF16),
      // Rows-layout matrices run as one task list too: integer products
      // (n < 16) and dequantized panels, K and 32-value formats mixed.
      {WeightType::Q8_0, WeightType::Q8_0, WeightType::Q8_0},
      {WeightType::Q4_K, WeightType::Q4_K, WeightType::Q6_K},
      {WeightType::Q5_0, WeightType::Q8_0, WeightType::Q4_K},
      {WeightType::F16, WeightType::Q4_K},
      {WeightType::Q2_K, WeightType::Q5_1, WeightType::IQ4_NL},
  };
  const std::vector<int64_t> rows = {96, 40, 33, 64, 32};
  for (const auto& types : sets) {
    std::vector<std::unique_ptr<Matrix>> ws;
    for (size_t i = 0; i < types.size(); ++i) {
      HostWeights hw = make_weights(rng, types[i], rows[i], cols);
      ws.push_back(be->upload_matrix(types[i], rows[i], cols, hw.bytes.data(), false));
    }
    for (int64_t n : {1, 7, 100, 129, 300}) {
      CAPTURE(type_name(types[0]));
      CAPTURE(types.size());
      CAPTURE(n);
      std::vector<float> x = random_floats(rng, n * cols);
      float* dx = alloc_floats(*be, x);
      std::vector<const Matrix*> w_ptrs;
      std::vector<float*> ys;
      for (size_t i = 0; i < ws.size(); ++i) {
        w_ptrs.push_back(ws[i].get());
        ys.push_back(static_cast<float*>(be->alloc(n * rows[i] * sizeof(float))));
      }
      be->matmul_same_x(w_ptrs.data(), dx, ys.data(), static_cast<int>(ws.size()), n);
      auto* one = static_cast<float*>(be->alloc(n * rows[0] * sizeof(float)));
      for (size_t i = 0; i < ws.size(); ++i) {
        std::vector<float> together(n * rows[i]), alone(n * rows[i]);
        be->download(together.data(), ys[i], together.size() * sizeof(float));
        be->matmul(*ws[i], dx, one, n);
        be->download(alone.data(), one, alone.size() * sizeof(float));
        CHECK(std::memcmp(together.data(), alone.data(), together.size() * sizeof(float)) == 0);
        be->free(ys[i]);
      }
      be->free(one);
      be->free(dx);
    }
  }
}

TEST_CASE("embed returns the exact rows of the table for every weight type") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(3);
  const int64_t vocab = 50, dim = 256;  // one super-block of the K formats
  for (WeightType type : every_weight_type()) {
    CAPTURE(type_name(type));
    if (dim % weight_type_traits(type).block_elements != 0) continue;
    HostWeights hw = make_weights(rng, type, vocab, dim);
    auto table = be->upload_matrix(type, vocab, dim, hw.bytes.data(), false);
    Batch b;
    b.tokens = {3, 0, 49, 3, 17};
    b.positions = {0, 1, 2, 3, 4};
    b.slots = {0, 1, 2, 3, 4};
    be->prepare_batch(b, 16);
    auto* out = static_cast<float*>(be->alloc(b.tokens.size() * dim * sizeof(float)));
    be->embed(*table, out);
    for (size_t t = 0; t < b.tokens.size(); ++t)
      for (int64_t c = 0; c < dim; ++c)
        REQUIRE(f32_bits(out[t * dim + c]) == f32_bits(hw.values[b.tokens[t] * dim + c]));
    be->free(out);
  }
}

TEST_CASE("rmsnorm matches a double reference, also in place") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(4);
  for (int64_t dim : {8, 64, 77, 576}) {
    for (int64_t n : {1, 3, 300}) {
      std::vector<float> x = random_floats(rng, n * dim, -3, 3), w = random_floats(rng, dim);
      float* dx = alloc_floats(*be, x);
      float* dw = alloc_floats(*be, w);
      auto* dy = static_cast<float*>(be->alloc(n * dim * 4));
      const float eps = 1e-5f;
      be->rmsnorm(dx, dw, dy, n, dim, eps);
      be->rmsnorm(dx, dw, dx, n, dim, eps);  // in place
      for (int64_t i = 0; i < n; ++i) {
        double ss = 0;
        for (int64_t c = 0; c < dim; ++c) ss += static_cast<double>(x[i * dim + c]) * x[i * dim + c];
        const double inv = 1.0 / std::sqrt(ss / dim + eps);
        for (int64_t c = 0; c < dim; ++c) {
          const double ref = x[i * dim + c] * inv * w[c];
          REQUIRE(std::fabs(dy[i * dim + c] - ref) <= 2e-6 * std::fabs(ref) + 1e-7);
          REQUIRE(f32_bits(dx[i * dim + c]) == f32_bits(dy[i * dim + c]));
        }
      }
      be->free(dx);
      be->free(dw);
      be->free(dy);
    }
  }
}

TEST_CASE("add, add_bias and swiglu match double references") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(5);
  for (int64_t n : {1, 17, 100003}) {
    std::vector<float> a = random_floats(rng, n, -8, 8), b = random_floats(rng, n, -8, 8);
    float* da = alloc_floats(*be, a);
    float* db = alloc_floats(*be, b);
    auto* dout = static_cast<float*>(be->alloc(n * 4));
    be->swiglu(da, db, dout, n);
    be->add(da, db, n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = a[i], u = b[i];
      const double ref = g / (1.0 + std::exp(-g)) * u;
      REQUIRE(std::fabs(dout[i] - ref) <= 1e-6 * std::fabs(ref) + 1e-7);
      REQUIRE(da[i] == a[i] + b[i]);
    }
    be->free(da);
    be->free(db);
    be->free(dout);
  }
  const int64_t rows = 300, dim = 37;
  std::vector<float> y = random_floats(rng, rows * dim), bias = random_floats(rng, dim);
  float* dy = alloc_floats(*be, y);
  float* dbias = alloc_floats(*be, bias);
  be->add_bias(dy, dbias, rows, dim);
  for (int64_t i = 0; i < rows * dim; ++i) REQUIRE(dy[i] == y[i] + bias[i % dim]);
  be->free(dy);
  be->free(dbias);
}

TEST_CASE("geglu (tanh GELU) and scale match double references") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(15);
  for (int64_t n : {1, 17, 100003}) {
    std::vector<float> a = random_floats(rng, n, -8, 8), b = random_floats(rng, n, -8, 8);
    float* da = alloc_floats(*be, a);
    float* db = alloc_floats(*be, b);
    auto* dout = static_cast<float*>(be->alloc(n * 4));
    be->geglu(da, db, dout, n);
    be->scale(db, 16.0f, n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = a[i], u = b[i];
      const double inner = std::sqrt(2.0 / 3.14159265358979323846) * (g + 0.044715 * g * g * g);
      // 0.5 g (1 + tanh(x)) = g / (1 + exp(-2x)): the second form has no
      // cancellation for negative g; the first checks the identity.
      const double ref = g / (1.0 + std::exp(-2.0 * inner)) * u;
      REQUIRE(std::fabs(0.5 * g * (1.0 + std::tanh(inner)) * u - ref) <= 1e-12 * (1 + std::fabs(ref)));
      REQUIRE(std::fabs(dout[i] - ref) <= 1e-5 * std::fabs(ref) + 1e-7);
      REQUIRE(db[i] == b[i] * 16.0f);
    }
    be->free(da);
    be->free(db);
    be->free(dout);
  }
}

TEST_CASE("rope rotates the first rope_dim dims of every head in both styles") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(6);
  struct Case {
    int32_t n_heads, head_dim, rope_dim;
    float base;
    RopeStyle style;
  };
  for (Case c : {Case{3, 64, 64, 10000.0f, RopeStyle::kNormal}, Case{2, 64, 32, 500000.0f, RopeStyle::kNormal},
                 Case{4, 128, 128, 1e6f, RopeStyle::kNeox}, Case{2, 80, 48, 10000.0f, RopeStyle::kNeox},
                 Case{1, 8, 8, 10000.0f, RopeStyle::kNormal}}) {
    Batch b;
    b.positions = {0, 1, 5, 77, 200, 511, 3};
    const int32_t n = static_cast<int32_t>(b.positions.size());
    b.tokens.assign(n, 0);
    b.slots.assign(n, 0);
    be->prepare_batch(b, 16);
    const int64_t row = static_cast<int64_t>(c.n_heads) * c.head_dim;
    std::vector<float> x = random_floats(rng, n * row);
    float* dx = alloc_floats(*be, x);
    be->rope(dx, c.n_heads, c.head_dim, c.rope_dim, c.base, nullptr, c.style);
    for (int32_t t = 0; t < n; ++t)
      for (int32_t h = 0; h < c.n_heads; ++h) {
        const float* xi = x.data() + t * row + h * c.head_dim;
        const float* yo = dx + t * row + h * c.head_dim;
        for (int32_t i = 0; i < c.rope_dim / 2; ++i) {
          const int32_t a = c.style == RopeStyle::kNeox ? i : 2 * i;
          const int32_t bb = c.style == RopeStyle::kNeox ? i + c.rope_dim / 2 : 2 * i + 1;
          const double theta = b.positions[t] * std::pow(static_cast<double>(c.base), -2.0 * i / c.rope_dim);
          const double r0 = xi[a] * std::cos(theta) - xi[bb] * std::sin(theta);
          const double r1 = xi[a] * std::sin(theta) + xi[bb] * std::cos(theta);
          // The angle is a float product of i+1 roundings (llama.cpp's rule).
          const double tol = (std::fabs(xi[a]) + std::fabs(xi[bb])) * (theta * (i + 2) * 6e-8 + 1e-6);
          REQUIRE(std::fabs(yo[a] - r0) <= tol);
          REQUIRE(std::fabs(yo[bb] - r1) <= tol);
        }
        for (int32_t d = c.rope_dim; d < c.head_dim; ++d) REQUIRE(f32_bits(yo[d]) == f32_bits(xi[d]));
      }
    be->free(dx);
  }
}

// Llama 3.1 scaling: pair i turns at pos * base^(-2i/rope_dim) / factor_i. The
// batch's cached tables must follow the factors: without, with, then without.
TEST_CASE("rope divides each pair's frequency by its factor, and the tables follow the factors") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(7);
  const int32_t n_heads = 2, head_dim = 64, rope_dim = 64, half = rope_dim / 2;
  const float base = 500000.0f;
  std::vector<float> factors(half);
  for (int32_t i = 0; i < half; ++i)
    factors[i] = i < 12 ? 1.0f : i < 20 ? 1.0f + 0.5f * (i - 11) : 8.0f;
  Batch b;
  b.positions = {0, 1, 9, 130, 2047, 4000};
  const int32_t n = static_cast<int32_t>(b.positions.size());
  b.tokens.assign(n, 0);
  b.slots.assign(n, 0);
  be->prepare_batch(b, 16);
  const int64_t row = static_cast<int64_t>(n_heads) * head_dim;
  for (const float* ff : std::vector<const float*>{nullptr, factors.data(), nullptr}) {
    std::vector<float> x = random_floats(rng, n * row);
    float* dx = alloc_floats(*be, x);
    be->rope(dx, n_heads, head_dim, rope_dim, base, ff, RopeStyle::kNormal);
    for (int32_t t = 0; t < n; ++t)
      for (int32_t h = 0; h < n_heads; ++h) {
        const float* xi = x.data() + t * row + h * head_dim;
        const float* yo = dx + t * row + h * head_dim;
        for (int32_t i = 0; i < half; ++i) {
          const double f = ff != nullptr ? ff[i] : 1.0;
          const double theta =
              b.positions[t] * std::pow(static_cast<double>(base), -2.0 * i / rope_dim) / f;
          const double r0 = xi[2 * i] * std::cos(theta) - xi[2 * i + 1] * std::sin(theta);
          const double r1 = xi[2 * i] * std::sin(theta) + xi[2 * i + 1] * std::cos(theta);
          const double tol =
              (std::fabs(xi[2 * i]) + std::fabs(xi[2 * i + 1])) * (theta * (i + 3) * 6e-8 + 1e-6);
          REQUIRE(std::fabs(yo[2 * i] - r0) <= tol);
          REQUIRE(std::fabs(yo[2 * i + 1] - r1) <= tol);
        }
      }
    be->free(dx);
  }
}

float round_to(DType t, float v) {
  switch (t) {
    case DType::F32: return v;
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
  }
  return v;
}

float read_pool(const KvPool& pool, const void* base, int64_t index) {
  switch (pool.geom.dtype) {
    case DType::F32: return static_cast<const float*>(base)[index];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[index]);
  }
  return 0;
}

// Builds a varlen batch: sequence s has `pos0[s]` cached positions and `n_q[s]`
// new rows, with a random (non-contiguous) block table drawn from `free_blocks`.
struct SeqSpec {
  int32_t pos0, n_q;
};

Batch make_batch(const std::vector<SeqSpec>& specs, int32_t block_size, std::vector<int32_t>& free_blocks,
                 std::vector<std::vector<int32_t>>* tables, bool only_cached) {
  Batch b;
  for (size_t s = 0; s < specs.size(); ++s) {
    const int32_t total = specs[s].pos0 + specs[s].n_q;
    std::vector<int32_t>& table = (*tables)[s];
    while (static_cast<int32_t>(table.size()) * block_size < total) {
      table.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    const int32_t p_begin = only_cached ? 0 : specs[s].pos0;
    const int32_t p_end = only_cached ? specs[s].pos0 : total;
    BatchSeq bs;
    bs.q_start = b.n_tokens();
    bs.n_q = p_end - p_begin;
    bs.pos0 = p_begin;
    bs.table_start = static_cast<int32_t>(b.block_tables.size());
    bs.n_table = static_cast<int32_t>(table.size());
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
    for (int32_t p = p_begin; p < p_end; ++p) {
      b.tokens.push_back(0);
      b.positions.push_back(p);
      b.slots.push_back(table[p / block_size] * block_size + p % block_size);
    }
    if (bs.n_q > 0) b.seqs.push_back(bs);
  }
  return b;
}

TEST_CASE("kv_store and paged attention match a double reference (varlen, GQA, every KV dtype, windows)") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(7);
  struct Case {
    int32_t n_heads, n_kv_heads, head_dim, block_size;
    std::vector<SeqSpec> seqs;
  };
  const std::vector<Case> cases = {
      {9, 3, 64, 16, {{0, 40}, {37, 5}, {100, 1}, {16, 16}}},  // GQA, prefill + decode + chunked
      {4, 1, 64, 16, {{0, 1}, {300, 1}}},                     // MQA decode
      {2, 2, 128, 16, {{5, 70}}},                             // no GQA, head_dim 128
      {8, 4, 8, 8, {{0, 33}, {9, 20}}},                       // tiny head_dim, block size 8
      {10, 2, 64, 32, {{3, 50}, {0, 2}}},                     // 5 heads per group
      {20, 1, 16, 16, {{0, 9}, {40, 3}}},                     // 20 heads on one KV head (> 16 lanes)
      {6, 2, 32, 7, {{0, 45}, {20, 13}, {11, 1}}},            // odd block size: key pairs split over blocks
  };
  for (const Case& c : cases) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      CAPTURE(c.n_heads);
      CAPTURE(c.n_kv_heads);
      CAPTURE(c.head_dim);
      CAPTURE(std::string(dtype_name(dt)));
      KvGeometry geom;
      geom.n_layers = 2;
      geom.n_blocks = 64;
      geom.block_size = c.block_size;
      geom.n_kv_heads = c.n_kv_heads;
      geom.head_dim = c.head_dim;
      geom.dtype = dt;
      auto pool_r = be->allocate_kv_pool(geom);
      REQUIRE(pool_r.ok());
      KvPool& pool = *pool_r;
      std::vector<int32_t> free_blocks(geom.n_blocks);
      std::iota(free_blocks.begin(), free_blocks.end(), 0);
      std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
      std::vector<std::vector<int32_t>> tables(c.seqs.size());
      const int32_t layer = 1;
      const int64_t kv_row = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
      const int64_t q_row = static_cast<int64_t>(c.n_heads) * c.head_dim;
      // Every value stored per (seq, position): k, v rounded to the pool dtype.
      std::vector<std::vector<float>> k_all(c.seqs.size()), v_all(c.seqs.size());
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        k_all[s].resize((c.seqs[s].pos0 + c.seqs[s].n_q) * kv_row);
        v_all[s].resize(k_all[s].size());
      }
      std::vector<float> q;
      Batch step;
      for (bool cached : {true, false}) {
        Batch b = make_batch(c.seqs, c.block_size, free_blocks, &tables, cached);
        if (b.n_tokens() == 0) continue;
        std::vector<float> k = random_floats(rng, b.n_tokens() * kv_row, -2, 2);
        std::vector<float> v = random_floats(rng, b.n_tokens() * kv_row, -2, 2);
        be->prepare_batch(b, c.block_size);
        float* dk = alloc_floats(*be, k);
        float* dv = alloc_floats(*be, v);
        be->kv_store(pool, layer, dk, dv);
        be->free(dk);
        be->free(dv);
        int32_t row = 0;
        for (size_t s = 0; s < c.seqs.size(); ++s) {
          const int32_t p0 = cached ? 0 : c.seqs[s].pos0;
          const int32_t p1 = cached ? c.seqs[s].pos0 : c.seqs[s].pos0 + c.seqs[s].n_q;
          for (int32_t p = p0; p < p1; ++p, ++row)
            for (int64_t e = 0; e < kv_row; ++e) {
              k_all[s][p * kv_row + e] = round_to(dt, k[row * kv_row + e]);
              v_all[s][p * kv_row + e] = round_to(dt, v[row * kv_row + e]);
              // The pool holds exactly the rounded value at the slot.
              const int64_t idx = static_cast<int64_t>(b.slots[row]) * kv_row + e;
              REQUIRE(f32_bits(read_pool(pool, pool.k[layer], idx)) == f32_bits(k_all[s][p * kv_row + e]));
              REQUIRE(f32_bits(read_pool(pool, pool.v[layer], idx)) == f32_bits(v_all[s][p * kv_row + e]));
            }
        }
        if (!cached) step = b;
      }
      q = random_floats(rng, step.n_tokens() * q_row, -2, 2);
      float* dq = alloc_floats(*be, q);
      auto* dout = static_cast<float*>(be->alloc(q.size() * sizeof(float)));
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      // Sliding windows shorter than every prompt (1, 3), crossing some
      // (17, 40: whole chunks of keys fall before the window), and longer than
      // any (1000: the same as none, 0).
      for (int32_t window : {0, 1, 3, 17, 40, 1000}) {
      CAPTURE(window);
      be->attention(pool, layer, dq, dout, c.n_heads, scale, window);
      const int32_t group = c.n_heads / c.n_kv_heads;
      // Sets with a BF16 dot product multiply a BF16 pool as it is, with Q and
      // the probabilities rounded to BF16: the reference takes the rounded Q,
      // and a probability's rounding (relative 2^-9) moves an output by at
      // most 2^-9 of the largest |v| (2); their exp2 (relative 3e-6) far less.
      const bool bf16_operands =
          static_cast<const cpu::CpuBackend&>(*be).kernels(cpu::KernelFamily::kAttention).attn_bf16_operands(dt, c.head_dim);
      const double tolerance = bf16_operands ? 2.0 / 512 + 2e-4 : 2e-5;
      double worst = 0;
      int64_t bad = 0;
      int32_t row = 0;
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        for (int32_t i = 0; i < c.seqs[s].n_q; ++i, ++row) {
          const int32_t qpos = c.seqs[s].pos0 + i;
          for (int32_t h = 0; h < c.n_heads; ++h) {
            const int32_t kvh = h / group;
            const float* qv = q.data() + row * q_row + h * c.head_dim;
            const int32_t first = window > 0 ? std::max(0, qpos - window + 1) : 0;
            std::vector<double> score(qpos + 1, 0.0);
            double mx = -1e300;
            for (int32_t p = first; p <= qpos; ++p) {
              double dot = 0;
              for (int32_t d = 0; d < c.head_dim; ++d)
                dot += static_cast<double>(bf16_operands ? round_to(DType::BF16, qv[d]) : qv[d]) *
                       k_all[s][p * kv_row + kvh * c.head_dim + d];
              score[p] = dot * scale;
              mx = std::max(mx, score[p]);
            }
            double sum = 0;
            for (int32_t p = first; p <= qpos; ++p) sum += (score[p] = std::exp(score[p] - mx));
            for (int32_t d = 0; d < c.head_dim; ++d) {
              double ref = 0;
              for (int32_t p = first; p <= qpos; ++p) ref += score[p] * v_all[s][p * kv_row + kvh * c.head_dim + d];
              ref /= sum;
              const double err = std::fabs(ref - dout[row * q_row + h * c.head_dim + d]);
              worst = std::max(worst, err);
              if (err > tolerance) ++bad;
            }
          }
        }
      }
      CAPTURE(worst);
      CHECK(bad == 0);
      }
      be->free(dq);
      be->free(dout);
      be->free_kv_pool(pool);
    }
  }
}

// Rows [pos0, pos0 + n_q) of one sequence over the pool blocks `table`.
Batch one_sequence(const std::vector<int32_t>& table, int32_t block_size, int32_t pos0, int32_t n_q) {
  Batch b;
  BatchSeq seq;
  seq.n_q = n_q;
  seq.pos0 = pos0;
  seq.n_table = static_cast<int32_t>(table.size());
  b.block_tables = table;
  for (int32_t p = pos0; p < pos0 + n_q; ++p) {
    b.tokens.push_back(0);
    b.positions.push_back(p);
    b.slots.push_back(table[p / block_size] * block_size + p % block_size);
  }
  b.seqs.push_back(seq);
  return b;
}

TEST_CASE("paged attention rows do not depend on the batch: prefill, suffix and decode agree bit for bit") {
  // What the prefix cache relies on: a row's output is the same whether its
  // prompt ran whole, as an uncached suffix after onboarded blocks, or one
  // token at a time (every KV dtype, so also with BF16 operands; with and
  // without a sliding window, where a task starts at its first row's window).
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(11);
  struct Shape {
    int32_t n_heads, n_kv_heads, head_dim, block_size, n, suffix0;
  };
  for (const Shape sh : {Shape{9, 3, 64, 7, 150, 101}, Shape{4, 2, 64, 16, 701, 688}})
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int32_t n_heads = sh.n_heads, n_kv_heads = sh.n_kv_heads, head_dim = sh.head_dim;
    const int32_t block_size = sh.block_size, n = sh.n;
    const int64_t q_row = static_cast<int64_t>(n_heads) * head_dim, kv_row = static_cast<int64_t>(n_kv_heads) * head_dim;
    CAPTURE(n);
    CAPTURE(std::string(dtype_name(dt)));
    KvGeometry geom;
    geom.n_layers = 1;
    geom.n_blocks = n / block_size + 8;
    geom.block_size = block_size;
    geom.n_kv_heads = n_kv_heads;
    geom.head_dim = head_dim;
    geom.dtype = dt;
    auto pool_r = be->allocate_kv_pool(geom);
    REQUIRE(pool_r.ok());
    KvPool& pool = *pool_r;
    std::vector<int32_t> table(geom.n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    table.resize((n + block_size - 1) / block_size);
    const std::vector<float> q = random_floats(rng, n * q_row, -2, 2);
    const std::vector<float> k = random_floats(rng, n * kv_row, -2, 2);
    const std::vector<float> v = random_floats(rng, n * kv_row, -2, 2);
    int32_t window = 0;
    // Runs rows [pos0, pos0 + n_q) and returns their outputs.
    auto run = [&](int32_t pos0, int32_t n_q) {
      be->prepare_batch(one_sequence(table, block_size, pos0, n_q), block_size);
      std::vector<float> rows(q.begin() + pos0 * q_row, q.begin() + (pos0 + n_q) * q_row);
      float* dq = alloc_floats(*be, rows);
      auto* dout = static_cast<float*>(be->alloc(rows.size() * sizeof(float)));
      be->attention(pool, 0, dq, dout, n_heads, 0.125f, window);
      std::vector<float> out(dout, dout + rows.size());
      be->free(dq);
      be->free(dout);
      return out;
    };
    be->prepare_batch(one_sequence(table, block_size, 0, n), block_size);
    float* dk = alloc_floats(*be, k);
    float* dv = alloc_floats(*be, v);
    be->kv_store(pool, 0, dk, dv);
    be->free(dk);
    be->free(dv);
    for (int32_t w : {0, 5, 64, 100}) {
      window = w;
      CAPTURE(window);
      const std::vector<float> whole = run(0, n);
      auto same_rows = [&](const std::vector<float>& part, int32_t pos0) {
        return std::memcmp(part.data(), whole.data() + pos0 * q_row, part.size() * sizeof(float)) == 0;
      };
      CHECK(same_rows(run(sh.suffix0, n - sh.suffix0), sh.suffix0));  // an uncached suffix
      CHECK(same_rows(run(64, 40), 64));
      for (int32_t p : {0, 1, 48, 97, n - 2, n - 1}) {
        CAPTURE(p);
        CHECK(same_rows(run(p, 1), p));  // decode
      }
    }
    be->free_kv_pool(pool);
  }
}

TEST_CASE("read_block, write_block and copy_block round trip every layer's K and V") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(8);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    KvGeometry geom;
    geom.n_layers = 3;
    geom.n_blocks = 5;
    geom.block_size = 4;
    geom.n_kv_heads = 2;
    geom.head_dim = 8;
    geom.dtype = dt;
    auto pool_r = be->allocate_kv_pool(geom);
    REQUIRE(pool_r.ok());
    KvPool& pool = *pool_r;
    // Freshly allocated pools are zeroed.
    std::vector<uint8_t> zero(geom.block_bytes(), 0), got(geom.block_bytes());
    be->read_block(pool, 4, got.data());
    CHECK(got == zero);
    std::vector<uint8_t> payload(geom.block_bytes());
    for (auto& b : payload) b = static_cast<uint8_t>(rng());
    be->write_block(pool, 2, payload.data());
    // Layout: per layer K then V, each one block of the layer's pool.
    const size_t lb = geom.layer_block_bytes();
    for (int32_t l = 0; l < geom.n_layers; ++l) {
      CHECK(std::memcmp(static_cast<uint8_t*>(pool.k[l]) + 2 * lb, payload.data() + 2 * l * lb, lb) == 0);
      CHECK(std::memcmp(static_cast<uint8_t*>(pool.v[l]) + 2 * lb, payload.data() + (2 * l + 1) * lb, lb) == 0);
    }
    be->read_block(pool, 2, got.data());
    CHECK(got == payload);
    be->copy_block(pool, 2, 0);
    be->read_block(pool, 0, got.data());
    CHECK(got == payload);
    be->read_block(pool, 1, got.data());
    CHECK(got == zero);
    be->free_kv_pool(pool);
    CHECK(pool.k.empty());
  }
}

TEST_CASE("write_blocks and read_blocks move a list of blocks exactly as write_block and read_block do") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    CAPTURE(std::string(dtype_name(dt)));
    KvGeometry geom;
    geom.n_layers = 3;
    geom.n_blocks = 16;
    geom.block_size = 4;
    geom.n_kv_heads = 2;
    geom.head_dim = 8;
    geom.dtype = dt;
    // A run (5, 6, 7), a block out of order, another run ending at the last block, block 0.
    testing::check_block_list_transfers(*be, geom, {5, 6, 7, 2, 12, 13, 14, 15, 0}, 21);
    testing::check_block_list_transfers(*be, geom, {9}, 22);
  }
}

TEST_CASE("gather_output_rows copies the batch's output rows in order") {
  auto be = make_cpu_backend(2, testing::isa_under_test());
  std::mt19937 rng(9);
  Batch b;
  b.tokens.assign(6, 0);
  b.positions = {0, 1, 2, 3, 4, 5};
  b.slots = {0, 1, 2, 3, 4, 5};
  b.output_rows = {1, 4, 5};
  be->prepare_batch(b, 16);
  const int64_t dim = 37;
  std::vector<float> x = random_floats(rng, 6 * dim);
  float* dx = alloc_floats(*be, x);
  auto* dout = static_cast<float*>(be->alloc(3 * dim * 4));
  be->gather_output_rows(dx, dout, dim);
  for (int i = 0; i < 3; ++i)
    for (int64_t c = 0; c < dim; ++c) REQUIRE(dout[i * dim + c] == x[b.output_rows[i] * dim + c]);
  be->free(dx);
  be->free(dout);
}

TEST_CASE("invalid KV geometry is refused") {
  auto be = make_cpu_backend(1, testing::isa_under_test());
  KvGeometry geom;
  geom.n_layers = 1;
  geom.n_blocks = 0;
  geom.n_kv_heads = 1;
  geom.head_dim = 8;
  CHECK_FALSE(be->allocate_kv_pool(geom).ok());
  CHECK(be->name() == "cpu");
  CHECK(be->n_threads() == 1);
}

}  // namespace
}  // namespace prefixd

int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
