// GPU tests (ctest label gpu): every CUDA backend op against the CPU backend,
// or, where the backends round differently by design (matmul activations, RoPE
// angles, attention operands), each backend against an F64 reference under a
// tolerance derived from the dtypes it rounds to; the quantized-weight kernels of every block format against
// quant::dequantize_row (random blocks and the quant/rand-q files), block
// transfers byte for byte, and the whole forward pass on the golden models
// (against llama.cpp, against the CPU backend, and cached prefix + suffix equal
// to the uncached pass). Exits 77 (skipped) when the
// build has no CUDA backend or make_cuda_backend fails (no driver or device).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/quant/dequantize.h"
#include "tests/bench_backend.h"
#include "tests/block_list_check.h"
#include "tests/decode_streams.h"
#include "tests/golden.h"
#include "tests/random_blocks.h"

#if defined(PREFIXD_HAVE_CUDA)
#include <cuda_runtime.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch_config.h"
#endif

using namespace prefixd;
using namespace prefixd::testing;

#if defined(PREFIXD_HAVE_CUDA)
namespace {

std::unique_ptr<Backend> cuda_backend() {
  auto r = make_cuda_backend(0, bench_cuda_options());
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r.value());
}

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);  // (n) f32
  for (float& x : v) x = u(rng);
  return v;
}

// A device (or host) copy of a host f32 array on one backend.
float* put(Backend& b, const std::vector<float>& host) {
  auto* p = static_cast<float*>(b.alloc(host.size() * sizeof(float)));
  b.upload(p, host.data(), host.size() * sizeof(float));
  return p;
}
std::vector<float> get(Backend& b, const float* p, size_t n) {
  std::vector<float> out(n);  // (n) f32
  b.download(out.data(), p, n * sizeof(float));
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Calls the cuDNN prefill path has served on `b` so far (0 without it).
int64_t cudnn_calls(const Backend& b) {
  for (const FastPathState& p : b.fast_path_report().paths)
    if (p.name == "cudnn_prefill") return p.calls;
  return 0;
}

// Both backends side by side.
struct Pair {
  std::unique_ptr<Backend> cpu = make_cpu_backend(2);
  std::unique_ptr<Backend> gpu = cuda_backend();
};

// Weight bytes of a (rows, cols) matrix in `type` made from f32 values.
std::vector<uint8_t> weight_bytes(WeightType type, const std::vector<float>& w) {
  std::vector<uint8_t> out;
  switch (type) {
    case WeightType::F32:
      out.resize(w.size() * 4);
      std::memcpy(out.data(), w.data(), out.size());
      break;
    case WeightType::F16:
    case WeightType::BF16:
      out.resize(w.size() * 2);
      for (size_t i = 0; i < w.size(); ++i) {
        const uint16_t h = type == WeightType::F16 ? f32_to_f16(w[i]) : f32_to_bf16(w[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case WeightType::Q8_0:
      for (size_t b0 = 0; b0 < w.size(); b0 += 32) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(w[b0 + j]));
        const float d = amax / 127.0f;
        const uint16_t dh = f32_to_f16(d);
        out.push_back(dh & 0xff);
        out.push_back(dh >> 8);
        for (size_t j = 0; j < 32; ++j) {
          const int q = d == 0 ? 0 : static_cast<int>(std::lround(w[b0 + j] / d));
          out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127, 127))));
        }
      }
      break;
    default:
      FAIL("weight_bytes: no encoder for this type");
  }
  return out;
}

// (rows, cols) f32 = quant::dequantize_row of each row of `bytes`.
std::vector<float> dequantized(WeightType type, const uint8_t* bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));  // (rows, cols) f32
  const size_t row_bytes = weight_row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r)
    quant::dequantize_row(type, bytes + r * row_bytes, out.data() + r * cols, cols);
  return out;
}

// Largest |y - x · Wᵀ| over the listed rows of W, relative to sum_k |x_k w_k|
// of its own dot product (the scale of any rounding in it). y (n, rows),
// x (n, cols), w_rows[j] (cols) f32 = row rows_checked[j] of W.
double matmul_rel_error(const std::vector<float>& y, const float* x,
                        const std::vector<std::vector<float>>& w_rows,
                        const std::vector<int64_t>& rows_checked, int64_t n, int64_t rows,
                        int64_t cols) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < rows_checked.size(); ++j) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        ref += double(x[i * cols + k]) * w_rows[j][k];
        mag += std::fabs(double(x[i * cols + k]) * w_rows[j][k]);
      }
      const double err = std::fabs(y[i * rows + rows_checked[j]] - ref) / std::max(mag, 1e-30);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// Decode (matvec over the blocks, F32 accumulation of exact weights) and
// prefill (weights and activations rounded to F16 for the GEMM) bounds,
// relative to sum |x w|.
constexpr double kMatvecRelTol = 5e-5;
constexpr double kDequantGemmRelTol = 2e-3;

// Unit roundoff of rounding to nearest with a p-bit significand: 2^-p.
constexpr double kF16Unit = 1.0 / 2048;  // F16: 11 bits
constexpr double kBf16Unit = 1.0 / 256;  // BF16: 8 bits

// An F32 accumulation of `cols` products whose magnitudes sum to `mag`
// (test_cpu_kernels' dot_tol: any summation order, FMA or not).
double f32_dot_tol(double mag, int64_t cols) {
  return 2e-6 * mag + 1e-6 + mag * 1.2e-7 * std::sqrt(static_cast<double>(cols));
}

// How far a backend may round the operands of a matmul with weights of `type`
// before its F32 accumulation, covering both backends and every CPU set:
// relative bounds for floating roundings, and for x quantized to 8 bits (the
// CPU's integer products on short batches) an absolute bound per 32-value
// block of x: amax/254 for the rounding of x/d plus amax * 2^-10 for d's F16
// rounding.
struct OperandRounding {
  double x_rel = 0, w_rel = 0;
  bool x_q8 = false;
};
OperandRounding matmul_operand_rounding(WeightType type) {
  switch (type) {
    case WeightType::F32: return {};                 // both: F32 x F32
    case WeightType::F16: return {kF16Unit, 0};      // GPU: x to F16; CPU: F32 x
    case WeightType::BF16: return {kBf16Unit, 0};    // GPU, CPU BF16 sets: x to BF16
    case WeightType::Q8_0:  // CPU: x to 8 bits (n < 16) or x, w to BF16 (BF16 sets, n >= 16);
      return {kBf16Unit, kBf16Unit, true};  // GPU: exact w (n <= 8) or x, w to F16 (prefill)
    default: FAIL("matmul_operand_rounding: no bound for this type"); return {};
  }
}

// Elements of y (n, rows) farther from the F64 product of x (n, cols) and the
// weights' exact values w (rows, cols) than the operand rounding `r` and an
// F32 accumulation allow; *worst_ratio = the largest error / its bound.
int64_t matmul_out_of_bound(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& w,
                            int64_t n, int64_t rows, int64_t cols, OperandRounding r, double* worst_ratio) {
  int64_t bad = 0;
  *worst_ratio = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.data() + i * cols;
    std::vector<double> x_abs_err(static_cast<size_t>(cols));  // per element of x
    for (int64_t k0 = 0; k0 < cols; k0 += 32) {
      double amax = 0;
      for (int64_t k = k0; k < std::min(cols, k0 + 32); ++k) amax = std::max(amax, std::fabs(double(xi[k])));
      for (int64_t k = k0; k < std::min(cols, k0 + 32); ++k)
        x_abs_err[k] = std::max(std::fabs(double(xi[k])) * r.x_rel, r.x_q8 ? amax * (1.0 / 254 + 1.0 / 1024) : 0.0);
    }
    for (int64_t j = 0; j < rows; ++j) {
      const float* wj = w.data() + j * cols;
      double ref = 0, mag = 0, rounding = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double xa = std::fabs(double(xi[k])), wa = std::fabs(double(wj[k]));
        ref += double(xi[k]) * wj[k];
        mag += xa * wa;
        rounding += (xa + x_abs_err[k]) * wa * (1 + r.w_rel) - xa * wa;
      }
      const double bound = rounding + f32_dot_tol(mag + rounding, cols);
      const double err = std::fabs(y[i * rows + j] - ref);
      *worst_ratio = std::max(*worst_ratio, err / bound);
      if (err > bound) ++bad;
    }
  }
  return bad;
}

float round_to(DType dt, float v) {
  switch (dt) {
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

Batch one_seq_batch(int32_t n, int32_t pos0, const std::vector<int32_t>& table, int32_t block_size,
                    uint32_t seed, int32_t n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % n_vocab);
  BatchBuilder bb(block_size);
  bb.add(tokens, pos0, table, LogitsWanted::kAll);
  return bb.batch();
}

}  // namespace

TEST_CASE("rmsnorm, add, add_bias, swiglu, geglu and scale match the CPU backend") {
  Pair p;
  const int64_t n = 5, dim = 576;
  std::vector<float> x = random_vec(n * dim, 1, -3, 3), w = random_vec(dim, 2), y = random_vec(n * dim, 3);
  for (Backend* b : {p.cpu.get(), p.gpu.get()}) b->prepare_batch(one_seq_batch(1, 0, {0}, 16, 1, 10), 16);
  std::vector<float> out[2];
  int i = 0;
  for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
    float* dx = put(*b, x);
    float* dw = put(*b, w);
    float* dy = put(*b, y);
    float* dout = put(*b, std::vector<float>(n * dim));
    b->rmsnorm(dx, dw, dout, n, dim, 1e-5f);
    b->add(dout, dy, n * dim);
    b->add_bias(dout, dw, n, dim);
    b->swiglu(dout, dy, dout, n * dim);
    b->geglu(dy, dout, dout, n * dim);
    b->scale(dout, 16.0f, n * dim);
    b->rmsnorm(dout, dw, dout, n, dim, 1e-6f);  // in place
    out[i++] = get(*b, dout, n * dim);
    for (float* q : {dx, dw, dy, dout}) b->free(q);
  }
  CHECK(max_abs_diff(out[0], out[1]) < 1e-4);
}

TEST_CASE("matmul on each backend matches an F64 reference for every weight type") {
  Pair p;
  for (WeightType type : {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8_0}) {
    const int64_t rows = 96, cols = 576;
    const std::vector<float> w_src = random_vec(rows * cols, 10);
    const std::vector<uint8_t> bytes = weight_bytes(type, w_src);
    // The weights' exact values as stored (F16/BF16 rounded, Q8_0 dequantized).
    const std::vector<float> w = type == WeightType::F32 ? w_src : dequantized(type, bytes.data(), rows, cols);
    for (int64_t n : {1, 7, 33}) {
      const std::vector<float> x = random_vec(n * cols, 11);
      for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
        CAPTURE(weight_type_name(type));
        CAPTURE(n);
        CAPTURE(b->name());
        auto m = b->upload_matrix(type, rows, cols, bytes.data(), false);
        float* dx = put(*b, x);
        float* dy = put(*b, std::vector<float>(n * rows));
        b->matmul(*m, dx, dy, n);
        const std::vector<float> y = get(*b, dy, n * rows);
        b->free(dx);
        b->free(dy);
        double worst_ratio = 0;
        const int64_t bad = matmul_out_of_bound(y, x, w, n, rows, cols, matmul_operand_rounding(type), &worst_ratio);
        MESSAGE(b->name() << " " << weight_type_name(type) << " n=" << n << ": worst error / bound " << worst_ratio);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("matmul over every block format matches a dequantize_row reference (decode, prefill)") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  const int64_t rows = 70, cols = 512;  // 70 rows: the last thread block has two idle warps
  std::vector<int64_t> all_rows(rows);
  for (int64_t r = 0; r < rows; ++r) all_rows[r] = r;
  for (WeightType type : block_weight_types()) {
    CAPTURE(weight_type_name(type));
    const std::vector<uint8_t> bytes = random_weight_blocks(type, rows, cols, 50);
    const std::vector<float> w = dequantized(type, bytes.data(), rows, cols);
    std::vector<std::vector<float>> w_rows(rows);
    for (int64_t r = 0; r < rows; ++r)
      w_rows[r].assign(w.begin() + r * cols, w.begin() + (r + 1) * cols);
    auto m = gpu->upload_matrix(type, rows, cols, bytes.data(), false);
    // n = 1, 3, 8: decode (matvec; 3 also with x not 16-byte aligned); 64: prefill.
    using Case = std::pair<int64_t, int64_t>;  // (n, x offset in floats)
    for (auto [n, x_offset] : {Case{1, 0}, Case{3, 0}, Case{3, 1}, Case{8, 0}, Case{64, 0}}) {
      CAPTURE(n);
      CAPTURE(x_offset);
      const std::vector<float> x = random_vec(x_offset + n * cols, 51);
      float* dx = put(*gpu, x);
      float* dy = put(*gpu, std::vector<float>(n * rows));
      gpu->matmul(*m, dx + x_offset, dy, n);
      const std::vector<float> y = get(*gpu, dy, n * rows);
      const double err = matmul_rel_error(y, x.data() + x_offset, w_rows, all_rows, n, rows, cols);
      CHECK(err <= (n <= cuda::kMatvecMaxRows ? kMatvecRelTol : kDequantGemmRelTol));
      gpu->free(dx);
      gpu->free(dy);
    }
  }
}

TEST_CASE("prefill over a block matrix larger than the dequantization scratch runs slab by slab") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  const int64_t cols = 2048;
  const int64_t slab = cuda::dequant_slab_rows(1 << 30, cols);
  const int64_t rows = 2 * slab + 232;  // three slabs, the last one short
  REQUIRE(cuda::dequant_slab_rows(rows, cols) == slab);
  const WeightType type = WeightType::Q4_0;
  const std::vector<uint8_t> bytes = random_weight_blocks(type, rows, cols, 60);
  auto m = gpu->upload_matrix(type, rows, cols, bytes.data(), false);
  const int64_t n = 9;
  const std::vector<float> x = random_vec(n * cols, 61);
  float* dx = put(*gpu, x);
  float* dy = put(*gpu, std::vector<float>(n * rows));
  gpu->matmul(*m, dx, dy, n);
  const std::vector<float> y = get(*gpu, dy, n * rows);
  std::vector<int64_t> checked = {0, 1, slab - 1, slab, slab + 1, 2 * slab - 1, 2 * slab, rows - 1};
  for (int64_t r = 3; r < rows; r += 997) checked.push_back(r);
  std::vector<std::vector<float>> w_rows;
  for (int64_t r : checked)
    w_rows.push_back(dequantized(type, bytes.data() + r * weight_row_bytes(type, cols), 1, cols));
  CHECK(matmul_rel_error(y, x.data(), w_rows, checked, n, rows, cols) <= kDequantGemmRelTol);
  gpu->free(dx);
  gpu->free(dy);
}

TEST_CASE("embedding rows of every block format equal dequantize_row bit for bit") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  const int64_t vocab = 40, dim = 256;
  for (WeightType type : block_weight_types()) {
    CAPTURE(weight_type_name(type));
    const std::vector<uint8_t> bytes = random_weight_blocks(type, vocab, dim, 70, 1e-7f, 3e4f);
    const std::vector<float> w = dequantized(type, bytes.data(), vocab, dim);
    const Batch batch = one_seq_batch(11, 0, {0}, 16, 71, static_cast<int32_t>(vocab));
    auto m = gpu->upload_matrix(type, vocab, dim, bytes.data(), false);
    gpu->prepare_batch(batch, 16);
    float* e = put(*gpu, std::vector<float>(11 * dim));
    gpu->embed(*m, e);
    const std::vector<float> got = get(*gpu, e, 11 * dim);
    std::vector<float> want;  // (11, dim) f32
    for (int32_t t : batch.tokens)
      want.insert(want.end(), w.begin() + t * dim, w.begin() + (t + 1) * dim);
    // Exact: the kernels round every product and sum separately, as the host does.
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    gpu->free(e);
  }
}

TEST_CASE("every block tensor of the quant/rand-q files: GPU rows and products match the host") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  std::set<WeightType> covered;
  for (const auto& [name, tol] : quant_golden_models()) {
    auto file = GgufFile::open(shared_path("models/" + name + ".gguf"));
    REQUIRE_MESSAGE(file.ok(), name);
    for (const GgufTensorInfo& t : file.value()->tensors()) {
      if (!is_block_type(t.type) || t.dims.size() != 2) continue;
      CAPTURE(name);
      CAPTURE(t.name);
      const int64_t cols = t.dims[0], rows = t.dims[1];
      covered.insert(t.type);
      auto m = gpu->upload_matrix(t.type, rows, cols, t.data, true);
      // Rows 0, 1 and the last through the embedding kernel: bit for bit.
      BatchBuilder bb(16);
      const std::vector<int32_t> tokens = {0, 1, static_cast<int32_t>(rows - 1)}, table = {0};
      bb.add(tokens, 0, table, LogitsWanted::kAll);
      gpu->prepare_batch(bb.batch(), 16);
      float* e = put(*gpu, std::vector<float>(3 * cols));
      gpu->embed(*m, e);
      const std::vector<float> got = get(*gpu, e, 3 * cols);
      gpu->free(e);
      std::vector<float> want;  // (3, cols) f32
      std::vector<std::vector<float>> w_rows;
      std::vector<int64_t> checked = {0, 1, rows - 1};
      for (int64_t r : checked) {
        w_rows.push_back(dequantized(t.type, t.data + r * weight_row_bytes(t.type, cols), 1, cols));
        want.insert(want.end(), w_rows.back().begin(), w_rows.back().end());
      }
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      // Products on those rows, decode and prefill.
      for (int64_t n : {2, 16}) {
        CAPTURE(n);
        const std::vector<float> x = random_vec(n * cols, 80);
        float* dx = put(*gpu, x);
        float* dy = put(*gpu, std::vector<float>(n * rows));
        gpu->matmul(*m, dx, dy, n);
        const std::vector<float> y = get(*gpu, dy, n * rows);
        CHECK(matmul_rel_error(y, x.data(), w_rows, checked, n, rows, cols) <=
              (n <= cuda::kMatvecMaxRows ? kMatvecRelTol : kDequantGemmRelTol));
        gpu->free(dx);
        gpu->free(dy);
      }
    }
  }
  CHECK(covered.size() == 12);  // every block format appears in some file
}

TEST_CASE("embedding lookup and output-row gather match the CPU backend") {
  Pair p;
  for (WeightType type : {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8_0}) {
    const int64_t vocab = 50, dim = 64;
    std::vector<float> w = random_vec(vocab * dim, 20);
    std::vector<uint8_t> bytes = weight_bytes(type, w);
    Batch batch = one_seq_batch(9, 3, {4}, 16, 21, static_cast<int32_t>(vocab));
    batch.output_rows = {2, 5, 8};
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
      auto m = b->upload_matrix(type, vocab, dim, bytes.data(), false);
      b->prepare_batch(batch, 16);
      float* e = put(*b, std::vector<float>(9 * dim));
      float* g = put(*b, std::vector<float>(3 * dim));
      b->embed(*m, e);
      b->gather_output_rows(e, g, dim);
      out[i++] = get(*b, g, 3 * dim);
      b->free(e);
      b->free(g);
    }
    CHECK(max_abs_diff(out[0], out[1]) == 0.0);  // exact: same conversions
  }
}

// RoPE at positions 4000..4019 (base 500000), each backend against the exact
// rotation in F64. The CPU computes the angle as llama.cpp does, a float
// product of i + 1 roundings (pos * scale^i, then / factor_i), so its error
// grows with theta * (i + 3) * 2^-24 (test_cpu_kernels' bound); the GPU takes
// pos * inv_freq in double and reduces it to [-pi, pi] before rounding to float
// (op::rope_cos_sin), so only cosf/sinf and the rotation's own roundings remain.
// At large positions the CPU is the side that is off the exact angle (by up
// to ~3e-4 of |x| here), by llama.cpp's rule; the GPU is within 1e-6.
TEST_CASE("rope (both styles, partial rotation, frequency factors, large positions) matches F64 on each backend") {
  Pair p;
  const float base = 500000.0f;
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (int32_t rope_dim : {64, 32}) {
      for (bool with_factors : {false, true}) {
        std::vector<float> factors(rope_dim / 2);  // (rope_dim / 2) f32, Llama 3.1 style
        for (int32_t i = 0; i < rope_dim / 2; ++i) factors[i] = 1.0f + 0.25f * i;
        const int32_t n_heads = 3, hd = 64, n = 20;
        std::vector<int32_t> table(300);
        for (int32_t t = 0; t < 300; ++t) table[t] = t;
        Batch batch = one_seq_batch(n, 4000, table, 16, 30, 100);
        std::vector<float> x = random_vec(size_t(n) * n_heads * hd, 31);
        for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
          CAPTURE(b->name());
          CAPTURE(style == RopeStyle::kNeox);
          CAPTURE(rope_dim);
          CAPTURE(with_factors);
          const bool float_angle = b->name() == "cpu";
          b->prepare_batch(batch, 16);
          float* dx = put(*b, x);
          b->rope(dx, n_heads, hd, rope_dim, base, with_factors ? factors.data() : nullptr, style);
          const std::vector<float> y = get(*b, dx, x.size());
          b->free(dx);
          int64_t bad = 0;
          double worst = 0;
          for (int32_t t = 0; t < n; ++t) {
            for (int32_t h = 0; h < n_heads; ++h) {
              const size_t off = (size_t(t) * n_heads + h) * hd;
              for (int32_t i = 0; i < rope_dim / 2; ++i) {
                const int32_t a = style == RopeStyle::kNeox ? i : 2 * i;
                const int32_t c = style == RopeStyle::kNeox ? i + rope_dim / 2 : 2 * i + 1;
                const double f = with_factors ? factors[i] : 1.0;
                const double theta = batch.positions[t] * std::pow(double(base), -2.0 * i / rope_dim) / f;
                const double x0 = x[off + a], x1 = x[off + c];
                const double r0 = x0 * std::cos(theta) - x1 * std::sin(theta);
                const double r1 = x0 * std::sin(theta) + x1 * std::cos(theta);
                const double tol = (std::fabs(x0) + std::fabs(x1)) *
                                   (float_angle ? theta * (i + 3) * 6e-8 + 1e-6 : 1e-6);
                const double err = std::max(std::fabs(y[off + a] - r0), std::fabs(y[off + c] - r1));
                worst = std::max(worst, err);
                if (err > tol) ++bad;
              }
              for (int32_t d = rope_dim; d < hd; ++d) {  // not rotated: untouched
                if (y[off + d] != x[off + d]) ++bad;
              }
            }
          }
          MESSAGE(b->name() << " rope_dim " << rope_dim << (with_factors ? " factors" : "") << ": worst |error| "
                            << worst);
          CHECK(bad == 0);
        }
      }
    }
  }
}

// Attention: each backend against causal softmax attention in F64 over K and V
// as the pool stores them (rounded to its dtype). Tolerances as in
// test_cpu_kernels: F32 arithmetic 2e-5 (|v| <= 1); CPU sets with a BF16 dot
// product on a BF16 pool round Q (the reference takes the rounded Q) and the
// probabilities to BF16 (2^-9 of the largest |v|, plus exp2's error). The GPU's
// simple kernels keep Q and the probabilities in F32 for every pool dtype; a
// call that cuDNN served (prefill rows on an F16/BF16 pool, its call count in
// fast_path_report()) rounds Q and the probabilities to the pool dtype (the
// reference takes the rounded Q; 2u of the largest |v| for the probabilities
// and an output in the pool dtype, plus 2e-4).
TEST_CASE("kv_store and paged attention (prefill, cached prefix, split decode) match F64 on each backend") {
  Pair p;
  struct Heads {
    int32_t n_heads, n_kv_heads, head_dim;
  };
  for (Heads h : {Heads{8, 4, 8}, Heads{4, 1, 64}, Heads{2, 2, 128}, Heads{9, 3, 64}, Heads{4, 2, 256}}) {
    for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
      CAPTURE(h.head_dim);
      CAPTURE(h.n_heads);
      CAPTURE(std::string(dtype_name(kv)));
      const int32_t bs = 16, kv_dim = h.n_kv_heads * h.head_dim, q_dim = h.n_heads * h.head_dim;
      KvGeometry g;
      g.n_layers = 2;
      g.n_blocks = 64;
      g.block_size = bs;
      g.n_kv_heads = h.n_kv_heads;
      g.head_dim = h.head_dim;
      g.dtype = kv;
      // Tables in scattered block order: A (prefix of 20 cached + 37 new),
      // B (decode at position 700, long enough for several splits), C (5 new).
      std::vector<int32_t> ta = {12, 3, 17, 9}, tb, tc = {63};  // disjoint from tb
      for (int32_t i = 0; i < 44; ++i) tb.push_back(18 + i);
      auto batch_of = [&](bool fill) {
        BatchBuilder bb(bs);
        std::mt19937 rng(7);
        auto toks = [&](int32_t n) {
          std::vector<int32_t> t(n);
          for (int32_t& v : t) v = static_cast<int32_t>(rng() % 100);
          return t;
        };
        if (fill) {  // the cached prefixes: positions [0, 20) of A and [0, 700) of B
          bb.add(toks(20), 0, ta, LogitsWanted::kNone);
          bb.add(toks(700), 0, tb, LogitsWanted::kNone);
        } else {
          bb.add(toks(37), 20, ta, LogitsWanted::kAll);
          bb.add(toks(1), 700, tb, LogitsWanted::kAll);
          bb.add(toks(5), 0, tc, LogitsWanted::kAll);
        }
        return bb.batch();
      };
      const Batch fill = batch_of(true), step = batch_of(false);
      std::vector<float> k0 = random_vec(size_t(fill.n_tokens()) * kv_dim, 40);
      std::vector<float> v0 = random_vec(size_t(fill.n_tokens()) * kv_dim, 41);
      std::vector<float> k1 = random_vec(size_t(step.n_tokens()) * kv_dim, 42);
      std::vector<float> v1 = random_vec(size_t(step.n_tokens()) * kv_dim, 43);
      std::vector<float> q = random_vec(size_t(step.n_tokens()) * q_dim, 44, -2, 2);
      // Keys and values of each sequence by position, as the pool stores them:
      // fill rows A [0, 20), B [0, 700); step rows A [20, 57), B 700, C [0, 5).
      struct SeqKv {
        std::vector<float> k, v;  // (positions, kv_dim) f32, rounded to the pool dtype
      };
      std::vector<SeqKv> kvs(3);
      auto append = [&](SeqKv& dst, const std::vector<float>& ks, const std::vector<float>& vs, int32_t row0,
                        int32_t n_rows) {
        for (int64_t e = int64_t(row0) * kv_dim; e < int64_t(row0 + n_rows) * kv_dim; ++e) {
          dst.k.push_back(round_to(kv, ks[e]));
          dst.v.push_back(round_to(kv, vs[e]));
        }
      };
      append(kvs[0], k0, v0, 0, 20);
      append(kvs[1], k0, v0, 20, 700);
      append(kvs[0], k1, v1, 0, 37);
      append(kvs[1], k1, v1, 37, 1);
      append(kvs[2], k1, v1, 38, 5);
      // The step's query rows: (sequence, position).
      std::vector<std::pair<int32_t, int32_t>> rows;
      for (int32_t r = 0; r < 37; ++r) rows.push_back({0, 20 + r});
      rows.push_back({1, 700});
      for (int32_t r = 0; r < 5; ++r) rows.push_back({2, r});
      REQUIRE(rows.size() == size_t(step.n_tokens()));
      const float scale = 1.0f / std::sqrt(float(h.head_dim));
      // (n_tokens, q_dim) F64 attention with Q rounded to `q_type` (F32:
      // not rounded); with window > 0 a query at p reads keys (p - window, p] only.
      auto reference = [&](DType q_type, int32_t window) {
        std::vector<double> ref(q.size());
        const int32_t group = h.n_heads / h.n_kv_heads;
        for (size_t r = 0; r < rows.size(); ++r) {
          const SeqKv& sk = kvs[rows[r].first];
          const int32_t qpos = rows[r].second;
          for (int32_t hh = 0; hh < h.n_heads; ++hh) {
            const float* qv = q.data() + r * q_dim + hh * h.head_dim;
            const int64_t kv_off = int64_t(hh / group) * h.head_dim;
            const int32_t t0 = window > 0 ? std::max(0, qpos - window + 1) : 0;
            std::vector<double> score(qpos + 1, 0.0);
            double mx = -1e300, sum = 0;
            for (int32_t t = t0; t <= qpos; ++t) {
              double dot = 0;
              for (int32_t d = 0; d < h.head_dim; ++d)
                dot += double(round_to(q_type, qv[d])) * sk.k[t * kv_dim + kv_off + d];
              score[t] = dot * scale;
              mx = std::max(mx, score[t]);
            }
            for (int32_t t = t0; t <= qpos; ++t) sum += (score[t] = std::exp(score[t] - mx));
            for (int32_t d = 0; d < h.head_dim; ++d) {
              double acc = 0;
              for (int32_t t = t0; t <= qpos; ++t) acc += score[t] * sk.v[t * kv_dim + kv_off + d];
              ref[r * q_dim + hh * h.head_dim + d] = acc / sum;
            }
          }
        }
        return ref;
      };
      // No window, windows shorter than every prompt (3, 40: B's decode skips
      // whole splits' keys) and longer than all (1000).
      const std::vector<int32_t> windows = {0, 3, 40, 1000};
      std::vector<std::vector<double>> ref_f32_q;
      for (int32_t window : windows) ref_f32_q.push_back(reference(DType::F32, window));
      std::vector<uint8_t> block[2];
      int i = 0;
      for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
        KvPool pool = b->allocate_kv_pool(g).value();
        float* dk0 = put(*b, k0);
        float* dv0 = put(*b, v0);
        float* dk1 = put(*b, k1);
        float* dv1 = put(*b, v1);
        float* dq = put(*b, q);
        float* dout = put(*b, std::vector<float>(q.size()));
        b->prepare_batch(fill, bs);
        b->kv_store(pool, 1, dk0, dv0);
        b->prepare_batch(step, bs);
        b->kv_store(pool, 1, dk1, dv1);
        std::vector<std::vector<float>> outs;
        std::vector<uint8_t> by_cudnn;
        for (int32_t window : windows) {
          const int64_t before = cudnn_calls(*b);
          b->attention(pool, 1, dq, dout, h.n_heads, scale, window);
          outs.push_back(get(*b, dout, q.size()));
          by_cudnn.push_back(cudnn_calls(*b) > before);
        }
        block[i].resize(g.block_bytes());
        b->read_block(pool, 17, block[i].data());
        ++i;
        for (float* x : {dk0, dv0, dk1, dv1, dq, dout}) b->free(x);
        b->free_kv_pool(pool);
        const bool bf16_operands =
            b->name() == "cpu" &&
            static_cast<const cpu::CpuBackend&>(*b).kernels(cpu::KernelFamily::kAttention).attn_bf16_operands(kv, h.head_dim);
        for (size_t w = 0; w < windows.size(); ++w) {
          const double tolerance = bf16_operands ? 2.0 / 512 + 2e-4
                                   : by_cudnn[w] ? 2 * std::ldexp(1.0, kv == DType::BF16 ? -8 : -11) + 2e-4
                                                 : 2e-5;
          const std::vector<double> ref = bf16_operands ? reference(DType::BF16, windows[w])
                                          : by_cudnn[w] ? reference(kv, windows[w])
                                                        : ref_f32_q[w];
          const std::vector<float>& out = outs[w];
          double worst = 0;
          int64_t bad = 0;
          for (size_t e = 0; e < out.size(); ++e) {
            const double err = std::fabs(out[e] - ref[e]);
            worst = std::max(worst, err);
            if (err > tolerance) ++bad;
          }
          CAPTURE(b->name());
          CAPTURE(windows[w]);
          CAPTURE(worst);
          MESSAGE(b->name() << (by_cudnn[w] ? " (cuDNN)" : "") << " head_dim " << h.head_dim << " "
                            << dtype_name(kv) << " window " << windows[w] << ": worst |error| " << worst
                            << " (tolerance " << tolerance << ")");
          CHECK(bad == 0);
        }
      }
      CHECK(block[0] == block[1]);  // kv_store conversions are bit-identical
    }
  }
}

// The crash containment of cuDNN (kernels/cuda/child_check.h): a bucket's
// child check that dies of a signal switches cuDNN off for the process, the
// backend's process goes on, and the simple kernel serves bit for bit what a
// backend without cuDNN gives. Where no cuDNN is found, both run the simple kernel.
TEST_CASE("a cuDNN bucket whose child check crashes leaves the simple kernel serving") {
  const std::string crash = "/tmp/prefixd-test-probe-crash-" + std::to_string(::getpid()) + ".sh";
  {
    FILE* f = std::fopen(crash.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("#!/bin/sh\necho 'building the plan'\nkill -SEGV $$\n", f);
    std::fclose(f);
    REQUIRE(::chmod(crash.c_str(), 0755) == 0);
  }
  CudaBackendOptions crashing = bench_cuda_options();
  crashing.cudnn_probe = crash;
  crashing.wait_for_cudnn_probe = true;
  CudaBackendOptions off = bench_cuda_options();
  off.cudnn_lib = "off";
  const int32_t bs = 16, n_heads = 8, n_kv = 4, d = 64, kv_dim = n_kv * d, q_dim = n_heads * d;
  KvGeometry g;
  g.n_layers = 1;
  g.n_blocks = 16;
  g.block_size = bs;
  g.n_kv_heads = n_kv;
  g.head_dim = d;
  g.dtype = DType::BF16;
  BatchBuilder bb(bs);
  const std::vector<int32_t> tokens(40, 1), table = {5, 2, 9};
  bb.add(tokens, 0, table, LogitsWanted::kAll);
  const Batch batch = bb.batch();
  const std::vector<float> k = random_vec(40 * kv_dim, 50), v = random_vec(40 * kv_dim, 51);
  const std::vector<float> q = random_vec(40 * q_dim, 52, -2, 2);
  std::vector<float> outs[2];
  for (int i = 0; i < 2; ++i) {
    auto made = make_cuda_backend(0, i == 0 ? crashing : off);
    REQUIRE_MESSAGE(made.ok(), made.message());
    std::unique_ptr<Backend> b = std::move(made.value());
    const auto enabled = [&] {
      for (const FastPathState& p : b->fast_path_report().paths)
        if (p.name == "cudnn_prefill") return p.enabled;
      return false;
    };
    const bool loaded = enabled();
    KvPool pool = b->allocate_kv_pool(g).value();
    float* dk = put(*b, k);
    float* dv = put(*b, v);
    float* dq = put(*b, q);
    float* dout = put(*b, std::vector<float>(q.size()));
    b->prepare_batch(batch, bs);
    b->kv_store(pool, 0, dk, dv);
    b->attention(pool, 0, dq, dout, n_heads, 0.125f, 0);
    outs[i] = get(*b, dout, q.size());
    CHECK(cudnn_calls(*b) == 0);
    CHECK_FALSE(enabled());
    if (i == 0 && loaded) {
      const FastPathReport r = b->fast_path_report();
      REQUIRE_FALSE(r.self_checks.empty());
      CHECK_FALSE(r.self_checks.back().passed);
      CHECK(r.self_checks.back().error.find("crashed: signal 11") == 0);
    }
    MESSAGE("cuDNN " << (loaded ? "loaded" : "not found") << " in the " << (i == 0 ? "crashing-probe" : "off")
                     << " backend");
    for (float* x : {dk, dv, dq, dout}) b->free(x);
    b->free_kv_pool(pool);
  }
  std::remove(crash.c_str());
  CHECK(outs[0] == outs[1]);
}

namespace {

// Runs one decode launcher directly on the packed `step` batch (bypassing the
// backend's choice of kernel and split count) on the legacy stream; returns
// out (n_tokens, n_heads * head_dim) f32. `a` names device buffers of a backend
// that has finished its work (synchronize() first).
std::vector<float> run_decode_direct(bool flash, cuda::AttentionArgs a, const Batch& step,
                                     int32_t block_size, int32_t n_splits) {
  const cuda::PackedBatch packed = cuda::pack_batch(step, block_size);
  cuda::DeviceBatch db;
  int32_t* words = nullptr;  // device, PackedBatch layout
  REQUIRE(cudaMalloc(&words, packed.words.size() * sizeof(int32_t)) == cudaSuccess);
  REQUIRE(cudaMemcpy(words, packed.words.data(), packed.words.size() * sizeof(int32_t),
                     cudaMemcpyHostToDevice) == cudaSuccess);
  db.words = words;
  db.layout = packed;
  db.layout.words.clear();
  const size_t ws_bytes =
      cuda::decode_workspace_bytes(packed.n_decode_seqs, a.n_heads, a.head_dim, n_splits);
  float* ws = nullptr;  // (n_decode_seqs, n_heads, n_splits, head_dim + 2) f32
  if (ws_bytes) REQUIRE(cudaMalloc(&ws, ws_bytes) == cudaSuccess);
  const size_t n_out = size_t(step.n_tokens()) * a.n_heads * a.head_dim;
  REQUIRE(cudaMemset(a.out, 0xff, n_out * sizeof(float)) ==
          cudaSuccess);  // NaN where nothing is written
  if (flash)
    cuda::launch_attention_decode(a, db, n_splits, ws, nullptr);
  else
    cuda::launch_attention_decode_simple(a, db, n_splits, ws, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> out(n_out);  // (n_tokens, n_heads * head_dim) f32
  REQUIRE(cudaMemcpy(out.data(), a.out, n_out * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  if (ws) cudaFree(ws);
  cudaFree(words);
  return out;
}

}  // namespace

// Decode stress: one batch of four one-row sequences of lengths 1000, 1,
// 8100 and 17 (partial last blocks, block ids shuffled over the pool), GQA
// 32/8 at head_dim 64 and 128 and a 12-over-1 group (two blocks of heads),
// every pool dtype, with and without a sliding window. The backend's choice
// (flash decode, its split count), and both kernels launched directly with
// split counts 1, 3 and 64 (any count must give the same answer for any
// lengths: CUDA graphs capture a fixed one), each against F64 attention over
// K and V as the pool stores them, tolerance 2e-5 as above.
TEST_CASE(
    "decode: flash and simple kernels at mixed lengths, GQA, shuffled blocks and windows match "
    "F64") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  struct Heads {
    int32_t n_heads, n_kv_heads, head_dim;
  };
  const std::vector<int32_t> lengths = {1000, 1, 8100,
                                        17};  // keys of each sequence, new one included
  const int32_t bs = 16;
  for (Heads h : {Heads{32, 8, 64}, Heads{32, 8, 128}, Heads{12, 1, 64}}) {
    for (DType kv : {DType::BF16, DType::F16, DType::F32}) {
      CAPTURE(h.n_heads);
      CAPTURE(h.head_dim);
      CAPTURE(std::string(dtype_name(kv)));
      REQUIRE(cuda::flash_decode_shape(kv, h.n_heads, h.n_kv_heads, h.head_dim).supported);
      const int32_t kv_dim = h.n_kv_heads * h.head_dim, q_dim = h.n_heads * h.head_dim;
      KvGeometry g;
      g.n_layers = 1;
      g.n_blocks = 600;  // 573 used
      g.block_size = bs;
      g.n_kv_heads = h.n_kv_heads;
      g.head_dim = h.head_dim;
      g.dtype = kv;
      std::vector<int32_t> ids(g.n_blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), std::mt19937(17));
      std::vector<std::vector<int32_t>> tables;
      size_t next_id = 0;
      for (int32_t len : lengths) {
        tables.emplace_back(ids.begin() + next_id, ids.begin() + next_id + (len + bs - 1) / bs);
        next_id += tables.back().size();
      }
      // K and V of every position of each sequence, (len, kv_dim) f32, and
      // the same rounded to the pool dtype (the reference reads those).
      std::vector<std::vector<float>> ks, vs, ks_pool, vs_pool;
      for (size_t i = 0; i < lengths.size(); ++i) {
        ks.push_back(random_vec(size_t(lengths[i]) * kv_dim, 100 + uint32_t(i)));
        vs.push_back(random_vec(size_t(lengths[i]) * kv_dim, 200 + uint32_t(i)));
        ks_pool.push_back(ks.back());
        vs_pool.push_back(vs.back());
        for (float& x : ks_pool.back()) x = round_to(kv, x);
        for (float& x : vs_pool.back()) x = round_to(kv, x);
      }
      // Fill batch: positions [0, len - 1) of each sequence longer than 1;
      // step batch: one row at position len - 1 of each.
      BatchBuilder fill_b(bs), step_b(bs);
      std::vector<float> kf, vf, k1, v1;  // rows of the two batches, (rows, kv_dim) f32
      for (size_t i = 0; i < lengths.size(); ++i) {
        const int32_t len = lengths[i];
        if (len > 1) {
          fill_b.add(std::vector<int32_t>(len - 1, 1), 0, tables[i], LogitsWanted::kNone);
          kf.insert(kf.end(), ks[i].begin(), ks[i].begin() + size_t(len - 1) * kv_dim);
          vf.insert(vf.end(), vs[i].begin(), vs[i].begin() + size_t(len - 1) * kv_dim);
        }
        step_b.add(std::vector<int32_t>{1}, len - 1, tables[i], LogitsWanted::kAll);
        k1.insert(k1.end(), ks[i].begin() + size_t(len - 1) * kv_dim, ks[i].end());
        v1.insert(v1.end(), vs[i].begin() + size_t(len - 1) * kv_dim, vs[i].end());
      }
      const Batch fill = fill_b.batch(), step = step_b.batch();
      const std::vector<float> q = random_vec(size_t(step.n_tokens()) * q_dim, 300, -2, 2);
      const float scale = 1.0f / std::sqrt(float(h.head_dim));

      // (n_tokens, q_dim) F64 attention of the step's rows; window > 0: keys (p - window, p].
      auto reference = [&](int32_t window) {
        std::vector<double> ref(q.size());
        const int32_t group = h.n_heads / h.n_kv_heads;
        for (size_t i = 0; i < lengths.size(); ++i) {
          const int32_t qpos = lengths[i] - 1;
          const int32_t t0 = window > 0 ? std::max(0, qpos - window + 1) : 0;
          for (int32_t hh = 0; hh < h.n_heads; ++hh) {
            const float* qv = q.data() + i * q_dim + hh * h.head_dim;
            const int64_t kv_off = int64_t(hh / group) * h.head_dim;
            std::vector<double> score(qpos + 1, 0.0);
            double mx = -1e300, sum = 0;
            for (int32_t t = t0; t <= qpos; ++t) {
              double dot = 0;
              for (int32_t d = 0; d < h.head_dim; ++d)
                dot += double(qv[d]) * ks_pool[i][t * kv_dim + kv_off + d];
              score[t] = dot * scale;
              mx = std::max(mx, score[t]);
            }
            for (int32_t t = t0; t <= qpos; ++t) sum += (score[t] = std::exp(score[t] - mx));
            for (int32_t d = 0; d < h.head_dim; ++d) {
              double acc = 0;
              for (int32_t t = t0; t <= qpos; ++t)
                acc += score[t] * vs_pool[i][t * kv_dim + kv_off + d];
              ref[i * q_dim + hh * h.head_dim + d] = acc / sum;
            }
          }
        }
        return ref;
      };
      auto check_close = [&](const std::vector<float>& out, const std::vector<double>& ref,
                             const char* what, int32_t window) {
        double worst = 0;
        int64_t bad = 0;
        for (size_t e = 0; e < out.size(); ++e) {
          const double err = std::fabs(out[e] - ref[e]);  // NaN (never written) counts as bad
          worst = std::max(worst, err);
          if (!(err <= 2e-5)) ++bad;
        }
        MESSAGE(what << " heads " << h.n_heads << "/" << h.n_kv_heads << " head_dim " << h.head_dim
                     << " " << dtype_name(kv) << " window " << window << ": worst |error| "
                     << worst);
        CAPTURE(what);
        CAPTURE(window);
        CHECK(bad == 0);
      };

      KvPool pool = gpu->allocate_kv_pool(g).value();
      float* dkf = put(*gpu, kf);
      float* dvf = put(*gpu, vf);
      float* dk1 = put(*gpu, k1);
      float* dv1 = put(*gpu, v1);
      float* dq = put(*gpu, q);
      float* dout = put(*gpu, std::vector<float>(q.size()));
      gpu->prepare_batch(fill, bs);
      gpu->kv_store(pool, 0, dkf, dvf);
      gpu->prepare_batch(step, bs);
      gpu->kv_store(pool, 0, dk1, dv1);
      for (int32_t window : {0, 40, 1000}) {
        const std::vector<double> ref = reference(window);
        gpu->attention(pool, 0, dq, dout, h.n_heads, scale, window);
        check_close(get(*gpu, dout, q.size()), ref, "backend", window);
        gpu->synchronize();
        cuda::AttentionArgs a;
        a.k_pool = pool.k[0];
        a.v_pool = pool.v[0];
        a.kv_dtype = kv;
        a.block_size = bs;
        a.n_heads = h.n_heads;
        a.n_kv_heads = h.n_kv_heads;
        a.head_dim = h.head_dim;
        a.scale = scale;
        a.window_tokens = window;
        a.q = dq;
        a.out = dout;
        for (int32_t n_splits : {1, 3, 64}) {
          CAPTURE(n_splits);
          check_close(run_decode_direct(true, a, step, bs, n_splits), ref, "flash", window);
          check_close(run_decode_direct(false, a, step, bs, n_splits), ref, "simple", window);
        }
      }
      for (float* x : {dkf, dvf, dk1, dv1, dq, dout}) gpu->free(x);
      gpu->free_kv_pool(pool);
    }
  }
}

TEST_CASE("block copy, read and write round-trip byte for byte") {
  Pair p;
  KvGeometry g;
  g.n_layers = 3;
  g.n_blocks = 8;
  g.block_size = 16;
  g.n_kv_heads = 2;
  g.head_dim = 32;
  g.dtype = DType::BF16;
  std::vector<uint8_t> payload(g.block_bytes());
  std::mt19937 rng(5);
  for (uint8_t& x : payload) x = static_cast<uint8_t>(rng());
  for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
    KvPool pool = b->allocate_kv_pool(g).value();
    b->write_block(pool, 2, payload.data());
    b->copy_block(pool, 2, 6);
    std::vector<uint8_t> back(g.block_bytes()), copied(g.block_bytes()), zero(g.block_bytes());
    b->read_block(pool, 2, back.data());
    b->read_block(pool, 6, copied.data());
    b->read_block(pool, 5, zero.data());
    CHECK(back == payload);
    CHECK(copied == payload);
    CHECK(std::all_of(zero.begin(), zero.end(), [](uint8_t v) { return v == 0; }));
    b->free_kv_pool(pool);
  }
}

TEST_CASE("write_blocks and read_blocks: runs, scattered ids and lists larger than the staging") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  KvGeometry g;
  g.n_layers = 3;
  g.n_blocks = 16;
  g.block_size = 4;
  g.n_kv_heads = 2;
  g.head_dim = 8;
  g.dtype = DType::F16;
  check_block_list_transfers(*gpu, g, {5, 6, 7, 2, 12, 13, 14, 15, 0}, 21);
  // The 1B shape (16 layers, 8 KV heads x 64, BF16: 512 KiB a block): 300
  // blocks are three staging groups of kBlockStagingMaxBytes / 512 KiB = 128.
  g.n_layers = 16;
  g.n_blocks = 320;
  g.block_size = 16;
  g.n_kv_heads = 8;
  g.head_dim = 64;
  g.dtype = DType::BF16;
  REQUIRE(cuda::kBlockStagingMaxBytes / g.block_bytes() == 128);
  std::vector<int32_t> ids;
  for (int32_t b = 10; b < 250; ++b) ids.push_back(b);  // one long run across two groups
  for (int32_t b = 319; b >= 260; --b) ids.push_back(b);  // descending: staged by id, one run
  check_block_list_transfers(*gpu, g, ids, 22);
}

TEST_CASE("whole forward pass on the golden models: llama.cpp, CPU backend, cached == uncached") {
  std::unique_ptr<Backend> gpu = cuda_backend();
  std::unique_ptr<Backend> cpu = make_cpu_backend(2);
  for (const auto& [name, tol] : all_golden_models()) {  // F16/BF16/F32 and every quantization
    if (cpu_only_golden_model(name)) continue;
    GoldenModel g = load_golden(name, tol);
    auto file = GgufFile::open(g.model_file);
    REQUIRE(file.ok());
    auto gm = Model::load(file.value(), *gpu);
    REQUIRE_MESSAGE(gm.ok(), gm.message());
    auto cm = Model::load(file.value(), *cpu);
    REQUIRE(cm.ok());
    for (DType kv : {DType::F32, DType::F16}) {
      const float kv_tol = kv == DType::F32 ? tol : tol + 5e-2f;
      for (const GoldenCase& c : g.cases) {
        CAPTURE(name);
        CAPTURE(c.name);
        CAPTURE(std::string(dtype_name(kv)));
        const int32_t n = static_cast<int32_t>(c.ids.size());
        SequenceRunner rg(*gm.value(), kv, n + 1);
        SequenceRunner rc(*cm.value(), kv, n + 1);
        std::vector<float> lg = rg.run(c.ids, 0, true);
        std::vector<float> lc = rc.run(c.ids, 0, true);
        double worst = 0;
        for (int32_t p = 0; p < n; ++p)
          worst = std::max(worst, logit_error(c.positions[p], &lg[size_t(p) * g.n_vocab], g.n_vocab));
        MESSAGE(name << "/" << c.name << " " << dtype_name(kv) << ": GPU max logit error " << worst);
        CHECK(worst <= kv_tol);
        CHECK(max_abs_diff(lg, lc) <= 2 * kv_tol);
        // Cached prefix: a fresh sequence computes [0, s) then [s, n) against the stored KV.
        for (int32_t s : {1, 16, 17, n - 1}) {
          if (s <= 0 || s >= n) continue;
          SequenceRunner r2(*gm.value(), kv, n + 1);
          std::vector<float> head = r2.run(std::vector<int32_t>(c.ids.begin(), c.ids.begin() + s), 0, true);
          std::vector<float> tail = r2.run(std::vector<int32_t>(c.ids.begin() + s, c.ids.end()), s, true);
          head.insert(head.end(), tail.begin(), tail.end());
          CHECK(max_abs_diff(head, lg) <= kv_tol);
        }
      }
    }
  }
}

// --- decode graphs and activation twins -------------------------------------

std::unique_ptr<Backend> cuda_backend_with(const CudaBackendOptions& o) {
  auto r = make_cuda_backend(0, o);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r.value());
}

CudaBackendOptions graphs_mode(cuda::DecodeGraphMode mode) {
  CudaBackendOptions o;
  o.decode_graphs = mode;
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every pass of two runs equal bit for bit, and the same greedy tokens.
void check_same_run(const DecodeStreamsRun& a, const DecodeStreamsRun& b) {
  CHECK(a.tokens == b.tokens);
  REQUIRE(a.logits.size() == b.logits.size());
  int32_t differing = 0;
  for (size_t t = 0; t < a.logits.size(); ++t) differing += !same_bits(a.logits[t], b.logits[t]);
  CHECK_MESSAGE(differing == 0, differing << " of " << a.logits.size() << " passes differ");
}

void check_graphs_served(const Backend& be) {
  const cuda::DecodeGraphStats s = decode_graph_stats(be);
  MESSAGE("decode graphs: " << s.captures << " recorded, " << s.replays << " replays ("
                            << s.checked_replays << " checked), " << s.padded_eager_steps
                            << " padded eager runs, " << s.eager_steps << " eager steps");
  CHECK_MESSAGE(!s.disabled, s.disabled_reason);
  CHECK(s.captures > 0);
  CHECK(s.replays > 0);
  CHECK(s.checked_replays > 0);
}

// F32 (stories260K), F16 with MQA, BF16 with q/k/v bias (qwen2) and q/k norms
// (qwen3), Gemma 3 (GeGLU, post norms, a sliding window, logit softcap), and
// Q4_K_M blocks (the matvec up to 8 rows, dequantized GEMMs at 16).
std::vector<std::string> graph_test_models() {
  return {"stories260K", "rand-mqa-f16", "rand-qwen2-bf16", "rand-qwen3-bf16", "rand-gemma3-bf16",
          "quant/rand-q-q4-k-m"};
}

TEST_CASE("decode graphs: greedy decode equals the padded steps run eagerly, bit for bit, 1-9 rows") {
  using cuda::DecodeGraphMode;
  std::unique_ptr<Backend> on = cuda_backend_with(graphs_mode(DecodeGraphMode::kOn));
  std::unique_ptr<Backend> eager = cuda_backend_with(graphs_mode(DecodeGraphMode::kPaddedEager));
  for (const std::string& name : graph_test_models()) {
    auto file = GgufFile::open(shared_path("models/" + name + ".gguf"));
    REQUIRE(file.ok());
    auto m_on = Model::load(file.value(), *on);
    auto m_eager = Model::load(file.value(), *eager);
    REQUIRE(m_on.ok());
    REQUIRE(m_eager.ok());
    for (DType kv : {DType::F16, DType::BF16}) {
      for (int32_t bs : {4, 16}) {
        CAPTURE(name);
        CAPTURE(std::string(dtype_name(kv)));
        CAPTURE(bs);
        // 40 passes over 1..9 sequences: buckets 1, 2, 4, 8, 16, each replayed.
        check_same_run(run_decode_streams(*m_on.value(), kv, bs, 9, 40, 16),
                       run_decode_streams(*m_eager.value(), kv, bs, 9, 40, 16));
      }
    }
  }
  check_graphs_served(*on);
  CHECK(decode_graph_stats(*eager).captures == 0);
}

TEST_CASE("decode graphs: at bucket sizes, graphs on equal graphs off bit for bit") {
  // No padding rows at 1, 2, 4 and 8 sequences, and contexts below 256 keys
  // (one decode split either way): the graph runs what the eager step runs.
  std::unique_ptr<Backend> on = cuda_backend_with(graphs_mode(cuda::DecodeGraphMode::kOn));
  std::unique_ptr<Backend> off = cuda_backend_with(graphs_mode(cuda::DecodeGraphMode::kOff));
  for (const std::string& name : graph_test_models()) {
    CAPTURE(name);
    auto file = GgufFile::open(shared_path("models/" + name + ".gguf"));
    REQUIRE(file.ok());
    auto m_on = Model::load(file.value(), *on);
    auto m_off = Model::load(file.value(), *off);
    REQUIRE(m_on.ok());
    REQUIRE(m_off.ok());
    check_same_run(run_decode_streams(*m_on.value(), DType::F16, 16, 8, 32, 8, {1, 2, 4, 8}),
                   run_decode_streams(*m_off.value(), DType::F16, 16, 8, 32, 8, {1, 2, 4, 8}));
  }
  check_graphs_served(*on);
  CHECK(decode_graph_stats(*off).eager_steps > 0);
  CHECK(decode_graph_stats(*off).captures == 0);
}

TEST_CASE("activation twins: GEMM inputs written by the producing ops equal the conversion kernel's") {
  CudaBackendOptions fused = graphs_mode(cuda::DecodeGraphMode::kOff);
  CudaBackendOptions separate = fused;
  separate.activation_twins = false;
  std::unique_ptr<Backend> a = cuda_backend_with(fused);
  std::unique_ptr<Backend> b = cuda_backend_with(separate);
  for (const char* model : {"rand-mqa-f16", "rand-qwen2-bf16", "rand-gemma3-bf16",
                            "quant/rand-q-q4-k-m"}) {
    const std::string name = model;
    CAPTURE(name);
    auto file = GgufFile::open(shared_path("models/" + name + ".gguf"));
    REQUIRE(file.ok());
    auto ma = Model::load(file.value(), *a);
    auto mb = Model::load(file.value(), *b);
    REQUIRE(ma.ok());
    REQUIRE(mb.ok());
    // A 366-row prefill (beyond a twin's 256 rows: converted as before), then decode.
    check_same_run(run_decode_streams(*ma.value(), DType::F16, 16, 12, 14, 16),
                   run_decode_streams(*mb.value(), DType::F16, 16, 12, 14, 16));
  }
}

TEST_CASE("decode graphs: a failed check switches them off and the eager results are served") {
  CudaBackendOptions broken = graphs_mode(cuda::DecodeGraphMode::kOn);
  broken.corrupt_checked_replays_for_test = true;
  std::unique_ptr<Backend> bad = cuda_backend_with(broken);
  std::unique_ptr<Backend> off = cuda_backend_with(graphs_mode(cuda::DecodeGraphMode::kOff));
  auto file = GgufFile::open(shared_path("models/rand-qwen2-bf16.gguf"));
  REQUIRE(file.ok());
  auto m_bad = Model::load(file.value(), *bad);
  auto m_off = Model::load(file.value(), *off);
  REQUIRE(m_bad.ok());
  REQUIRE(m_off.ok());
  // The first decode pass (one sequence: no padding) is the failed recording;
  // every later step runs eagerly as given, as with graphs off.
  check_same_run(run_decode_streams(*m_bad.value(), DType::F16, 16, 6, 12, 8),
                 run_decode_streams(*m_off.value(), DType::F16, 16, 6, 12, 8));
  const cuda::DecodeGraphStats s = decode_graph_stats(*bad);
  CHECK(s.disabled);
  CHECK(s.disabled_reason.find("differ") != std::string::npos);
  CHECK(s.captures == 0);
  CHECK(s.replays == 0);
  CHECK(s.live_graphs == 0);
}

TEST_CASE("decode graphs: scratch replaced by a long prefill between decode steps, re-recorded") {
  using cuda::DecodeGraphMode;
  std::unique_ptr<Backend> on = cuda_backend_with(graphs_mode(DecodeGraphMode::kOn));
  std::unique_ptr<Backend> eager = cuda_backend_with(graphs_mode(DecodeGraphMode::kPaddedEager));
  auto file = GgufFile::open(shared_path("models/rand-qwen2-bf16.gguf"));
  REQUIRE(file.ok());
  // Sequence A decodes; then B's 700-token prompt (a GEMM input beyond a
  // twin: the conversion scratch grows) arrives; then both decode.
  auto run = [&](Backend& be, int64_t* captures_before_b) {
    auto m = Model::load(file.value(), be);
    REQUIRE(m.ok());
    const ModelConfig& c = m.value()->config();
    KvGeometry g;
    g.n_layers = c.n_layers;
    g.n_blocks = 64;
    g.block_size = 16;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.dtype = DType::F16;
    KvPool pool = be.allocate_kv_pool(g).value();
    std::vector<int32_t> ta, tb;
    for (int32_t i = 0; i < 8; ++i) ta.push_back(7 - i);
    for (int32_t i = 8; i < 64; ++i) tb.push_back(i);
    std::vector<std::vector<float>> out;
    {
      ForwardPass fwd(*m.value(), 1024, 4);
      std::vector<int32_t> a_tokens(20), b_tokens(700);
      for (size_t i = 0; i < a_tokens.size(); ++i) a_tokens[i] = int32_t(1 + (i * 37) % (c.n_vocab - 1));
      for (size_t i = 0; i < b_tokens.size(); ++i) b_tokens[i] = int32_t(1 + (i * 53) % (c.n_vocab - 1));
      auto pass = [&](BatchBuilder& b) {
        std::vector<float> logits;
        fwd.run(b.batch(), pool, &logits);
        out.push_back(logits);
        return logits;
      };
      auto greedy = [&](const std::vector<float>& l, size_t row) {
        const float* p = l.data() + row * size_t(c.n_vocab);
        return int32_t(std::max_element(p, p + c.n_vocab) - p);
      };
      BatchBuilder b(16);
      b.add(a_tokens, 0, ta, LogitsWanted::kLast);
      int32_t next_a = greedy(pass(b), 0), pos_a = 20;
      for (int i = 0; i < 4; ++i, ++pos_a) {
        b.clear();
        b.add(std::vector<int32_t>{next_a}, pos_a, ta, LogitsWanted::kLast);
        next_a = greedy(pass(b), 0);
      }
      *captures_before_b = decode_graph_stats(be).captures;
      b.clear();
      b.add(b_tokens, 0, tb, LogitsWanted::kLast);
      int32_t next_b = greedy(pass(b), 0), pos_b = 700;
      for (int i = 0; i < 4; ++i, ++pos_a, ++pos_b) {
        b.clear();
        b.add(std::vector<int32_t>{next_a}, pos_a, ta, LogitsWanted::kLast);
        b.add(std::vector<int32_t>{next_b}, pos_b, tb, LogitsWanted::kLast);
        const std::vector<float> l = pass(b);
        next_a = greedy(l, 0);
        next_b = greedy(l, 1);
      }
      b.clear();
      b.add(std::vector<int32_t>{next_a}, pos_a, ta, LogitsWanted::kLast);  // bucket 1 again
      pass(b);
    }
    be.free_kv_pool(pool);
    return out;
  };
  int64_t on_before = 0, eager_before = 0;
  const std::vector<std::vector<float>> a = run(*on, &on_before);
  const std::vector<std::vector<float>> b = run(*eager, &eager_before);
  REQUIRE(a.size() == b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    CAPTURE(t);
    CHECK(same_bits(a[t], b[t]));
  }
  const cuda::DecodeGraphStats s = decode_graph_stats(*on);
  CHECK_MESSAGE(!s.disabled, s.disabled_reason);
  CHECK(on_before == 1);      // bucket 1, table capacity 2
  CHECK(s.captures >= 3);     // bucket 2 after B's prompt, bucket 1 recorded again
  CHECK(s.replays >= 3);
}

#endif  // PREFIXD_HAVE_CUDA

int main(int argc, char** argv) {
#if defined(PREFIXD_HAVE_CUDA)
  auto probe = make_cuda_backend(0, bench_cuda_options());
  if (!probe.ok()) {
    std::printf("skipped: no usable CUDA device: %s\n", probe.message().c_str());
    return 77;
  }
  probe.value().reset();
  doctest::Context ctx(argc, argv);
  return ctx.run();
#else
  (void)argc;
  (void)argv;
  std::printf("skipped: built without the CUDA backend (nvcc not found or PREFIXD_CUDA=OFF)\n");
  return 77;
#endif
}
