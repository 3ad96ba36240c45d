// measure_isa_timings: the calibration behind `auto`. Each kernel family runs
// one small workload of a prefill chunk's shape (and, for block formats, a
// decode call) through the backend's own op functions on each candidate set,
// one thread, best of kRounds rounds with the sets alternating: about 15 ms
// on a Zen 5 core for three sets.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa_plan.h"
#include "kernels/quant/quantize.h"

namespace prefixd::cpu {

namespace {

constexpr int kRounds = 9;
constexpr int64_t kRows = 128, kCols = 512, kXRows = 64;  // the products' shape
constexpr int32_t kHeadDim = 64, kHeads = 4, kQRows = 64, kKeys = 256;  // attention's

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Deterministic values in [-1, 1).
std::vector<float> filler(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

// The three weight matrices of the product families.
struct Weights {
  CpuMatrix f32, bf16, q4k;
  Weights() {
    const std::vector<float> w = filler(kRows * kCols, 1);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
    for (CpuMatrix* m : {&f32, &bf16, &q4k}) {
      m->rows = kRows;
      m->cols = kCols;
    }
    f32.source_type = WeightType::F32;
    pack_matrix(f32, DType::F32, w.data());
    bf16.source_type = WeightType::BF16;
    pack_matrix(bf16, DType::BF16, wb.data());
    q4k.source_type = WeightType::Q4_K;
    q4k.row_bytes = weight_row_bytes(WeightType::Q4_K, kCols);
    q4k.rows_data = static_cast<uint8_t*>(alloc_aligned(q4k.row_bytes * kRows));
    for (int64_t r = 0; r < kRows; ++r)
      quant::quantize_row(WeightType::Q4_K, w.data() + r * kCols, q4k.rows_data + r * q4k.row_bytes, kCols);
  }
};

// One sequence of kQRows query rows after kKeys - kQRows cached keys, F16 pool.
struct AttentionCase {
  KvPool kv;
  CpuBatch batch;
  std::vector<uint16_t> k_rows, v_rows;
  std::vector<float> q = filler(static_cast<size_t>(kQRows) * kHeads * kHeadDim, 3);
  AttentionCase() {
    kv.geom.n_layers = 1;
    kv.geom.n_blocks = kKeys / 16;
    kv.geom.block_size = 16;
    kv.geom.n_kv_heads = 1;
    kv.geom.head_dim = kHeadDim;
    kv.geom.dtype = DType::F16;
    for (auto [rows, seed] : {std::pair{&k_rows, 4u}, std::pair{&v_rows, 5u}}) {
      const std::vector<float> f = filler(static_cast<size_t>(kKeys) * kHeadDim, seed);
      rows->resize(f.size());
      for (size_t i = 0; i < f.size(); ++i) (*rows)[i] = f32_to_f16(f[i]);
    }
    kv.k.push_back(k_rows.data());
    kv.v.push_back(v_rows.data());
    batch.block_size = 16;
    batch.seqs.push_back(BatchSeq{0, kQRows, kKeys - kQRows, 0, kKeys / 16});
    for (int32_t b = 0; b < kKeys / 16; ++b) batch.block_tables.push_back(b);
  }
};

}  // namespace

IsaTimings measure_isa_timings(const std::vector<CpuIsa>& candidates) {
  IsaTimings t;
  if (candidates.empty()) return t;
  ThreadPool pool(1);
  Weights w;
  AttentionCase ac;
  const std::vector<float> x = filler(kXRows * kCols, 2);
  std::vector<float> y(kXRows * kRows), out(ac.q.size());
  auto run = [&](KernelFamily f, const CpuKernels& k) {
    switch (f) {
      case KernelFamily::kF32Tiles: matmul(k, pool, w.f32, x.data(), y.data(), kXRows); return;
      case KernelFamily::kBf16Tiles: matmul(k, pool, w.bf16, x.data(), y.data(), kXRows); return;
      case KernelFamily::kBlockFormats:
        // A prefill chunk, then decode: one row at a time, as many rows in all.
        matmul(k, pool, w.q4k, x.data(), y.data(), kXRows);
        for (int64_t i = 0; i < kXRows; i += 8) matmul(k, pool, w.q4k, x.data() + i * kCols, y.data(), 1);
        return;
      case KernelFamily::kAttention:
        attention(k, pool, ac.batch, ac.kv, 0, ac.q.data(), out.data(), kHeads, 0.125f, 0);
        return;
    }
  };
  for (int round = 0; round <= kRounds; ++round) {  // round 0 warms the caches and is not counted
    for (int fi = 0; fi < kKernelFamilies; ++fi) {
      const auto f = static_cast<KernelFamily>(fi);
      for (CpuIsa isa : candidates) {
        const CpuKernels& k = cpu_kernels(isa);
        const double s = seconds_of([&] { run(f, k); });
        double& best = t.at(f, isa);
        if (round > 0) best = best == 0 ? s : std::min(best, s);
      }
    }
  }
  return t;
}

}  // namespace prefixd::cpu
