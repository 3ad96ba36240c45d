// Benchmark of the CPU backend's hot kernels on smol-135m shapes: matmul
// GFLOP/s (and weight GB/s for n=1) in F32 and BF16, and paged attention time
// for causal prefill and decode with an F16 KV cache.
// Usage: bench_cpu_kernels [n_threads (default 2)] [--cpu-isa auto|avx512bf16|avx512|avx2|portable]
//        [--types F32,BF16,Q8_0,Q4_K,... (default F32,BF16; K formats on llama-245m shapes)] [--no-attention] [--no-matmul]
//        [--stream: n=1 only, from memory (copies of each matrix that no cache holds, read in turn): one
//         matrix of 131072 x 1024, then Qwen3.5-0.8B's shapes (decode's weight read); each row
//         also prints a plain read of as many bytes right after it (tests/memory_read.h) and the
//         product's read as a fraction of it]
//        (default $PREFIXD_CPU_ISA, else auto)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/dtype.h"
#include "kernels/quant/weight_type.h"
#include "tests/memory_read.h"
#include "tests/random_blocks.h"

namespace prefixd {
namespace {

using Clock = std::chrono::steady_clock;

// With one thread the time is the thread's CPU time, which stays meaningful
// when other processes share the cores; otherwise wall-clock time.
bool g_cpu_time = false;
double now_s() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Runs fn repeatedly for at least min_s seconds; returns the best time per run in seconds.
template <typename Fn>
double best_time(Fn fn, double min_s = 0.3) {
  fn();  // warm up
  double best = 1e30, total = 0;
  int runs = 0;
  while (total < min_s || runs < 3) {
    const double t0 = now_s();
    fn();
    const double dt = now_s() - t0;
    best = std::min(best, dt);
    total += dt;
    ++runs;
  }
  return best;
}

void bench_matmul(Backend& be, const std::vector<WeightType>& types, bool stream) {
  struct Shape {
    int64_t rows, cols;
    const char* what;
  };
  // smol-135m's shapes; the K formats (256-value blocks) take llama-245m's.
  const Shape smol[] = {{576, 576, "q/o proj"}, {192, 576, "k/v proj"}, {1536, 576, "gate/up"},
                        {576, 1536, "down"},    {49152, 576, "lm head"}};
  const Shape l245[] = {{1024, 1024, "q/o proj"}, {256, 1024, "k/v proj"}, {2816, 1024, "gate/up"},
                        {1024, 2816, "down"},     {32000, 1024, "lm head"}};
  // From memory: one large matrix, then Qwen3.5-0.8B's decode shapes, each
  // as copies that no cache holds, read one after another as decode does.
  const Shape from_memory[] = {{131072, 1024, "stream"}, {6144, 1024, "dn qkv"}, {2048, 1024, "dn z"},
                               {16, 1024, "dn a/b"},     {1024, 2048, "out"},     {4096, 1024, "q+gate"},
                               {512, 1024, "k/v"},       {3584, 1024, "gate/up"}, {1024, 3584, "down"},
                               {248320, 1024, "lm head"}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  std::printf("matmul y(n, rows) = x(n, cols) W^T, %d threads\n", be.n_threads());
  std::printf("%-6s %-9s %6s %6s %5s %10s %10s %9s%s\n", "type", "what", "rows", "cols", "n", "time_us",
              "GFLOP/s", "W GB/s", stream ? "  read GB/s  fraction" : "");
  for (WeightType type : types) {
    const bool k_format = weight_type_traits(type).block_elements == 256;
    for (const Shape& s : stream ? std::span<const Shape>(from_memory) : k_format ? std::span<const Shape>(l245) : std::span<const Shape>(smol)) {
      const int64_t nw = s.rows * s.cols;
      std::vector<uint8_t> bytes(nw * (type == WeightType::F32 ? 4 : 2));
      const bool float_type = type == WeightType::F32 || type == WeightType::BF16 || type == WeightType::F16;
      if (!float_type) bytes = testing::random_weight_blocks(type, s.rows, s.cols, static_cast<uint32_t>(rng()));
      // Float weights are values (random F16 bits would hold NaNs and infinities).
      for (int64_t i = 0; float_type && i < nw; ++i) {
        const float v = d(rng) * 0.05f;
        if (type == WeightType::F32) std::memcpy(bytes.data() + 4 * i, &v, 4);
        else {
          const uint16_t h = type == WeightType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
      }
      // Copies enough for 512 MB in stream mode (one otherwise), timed in turn.
      const size_t n_copies = stream ? std::max<size_t>(1, (size_t{512} << 20) / bytes.size()) : 1;
      std::vector<decltype(be.upload_matrix(type, s.rows, s.cols, bytes.data(), false))> ws;
      for (size_t c = 0; c < n_copies; ++c) ws.push_back(be.upload_matrix(type, s.rows, s.cols, bytes.data(), false));
      for (int64_t n : {512, 100, 1}) {
        if (stream && n != 1) continue;
        std::vector<float> x(n * s.cols);
        for (auto& v : x) v = d(rng);
        auto* dx = static_cast<float*>(be.alloc(x.size() * 4));
        be.upload(dx, x.data(), x.size() * 4);
        auto* dy = static_cast<float*>(be.alloc(n * s.rows * 4));
        const double t = best_time([&] {
                           for (auto& w : ws) be.matmul(*w, dx, dy, n);
                           be.synchronize();
                         }) /
                         static_cast<double>(ws.size());
        const double gflops = 2.0 * n * s.rows * s.cols / t * 1e-9;
        const double gbs = static_cast<double>(bytes.size()) / t * 1e-9;
        std::printf("%-6s %-9s %6lld %6lld %5lld %10.1f %10.1f %9.1f", weight_type_name(type), s.what, static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols), static_cast<long long>(n), t * 1e6, gflops, gbs);
        if (stream) {  // a plain read of the bytes the copies hold, by as many threads
          const double read = testing::plain_read_rate(bytes.size() * n_copies, be.n_threads(), 3).best * 1e-9;
          std::printf(" %11.1f %9.2f", read, gbs / read);
        }
        std::printf("\n");
        be.free(dx);
        be.free(dy);
      }
    }
  }
}

// One sequence: n_q new tokens at positions [pos0, pos0 + n_q), blocks in a
// shuffled order. Returns the best attention time in seconds.
double bench_attention(Backend& be, int32_t pos0, int32_t n_q, DType dtype, double* gflops) {
  const int32_t n_heads = 9, n_kv = 3, hd = 64, bs = 16;
  const int32_t total = pos0 + n_q;
  const int32_t n_blocks = (total + bs - 1) / bs;
  KvGeometry geom;
  geom.n_layers = 1;
  geom.n_blocks = n_blocks + 8;
  geom.block_size = bs;
  geom.n_kv_heads = n_kv;
  geom.head_dim = hd;
  geom.dtype = dtype;
  auto pool_r = be.allocate_kv_pool(geom);
  if (!pool_r.ok()) std::abort();
  KvPool pool = std::move(*pool_r);
  std::vector<int32_t> table(n_blocks);
  std::mt19937 rng(2);
  for (int32_t i = 0; i < n_blocks; ++i) table[i] = i + 8;
  std::shuffle(table.begin(), table.end(), rng);
  // Fill all positions' K/V with one batch covering [0, total).
  std::uniform_real_distribution<float> d(-1, 1);
  Batch fill;
  for (int32_t p = 0; p < total; ++p) {
    fill.tokens.push_back(0);
    fill.positions.push_back(p);
    fill.slots.push_back(table[p / bs] * bs + p % bs);
  }
  fill.seqs.push_back(BatchSeq{0, total, 0, 0, n_blocks});
  fill.block_tables = table;
  be.prepare_batch(fill, bs);
  std::vector<float> kv(static_cast<size_t>(total) * n_kv * hd);
  for (auto& v : kv) v = d(rng);
  auto* dk = static_cast<float*>(be.alloc(kv.size() * 4));
  be.upload(dk, kv.data(), kv.size() * 4);
  be.kv_store(pool, 0, dk, dk);
  // The measured step.
  Batch step;
  for (int32_t p = pos0; p < total; ++p) {
    step.tokens.push_back(0);
    step.positions.push_back(p);
    step.slots.push_back(table[p / bs] * bs + p % bs);
  }
  step.seqs.push_back(BatchSeq{0, n_q, pos0, 0, n_blocks});
  step.block_tables = table;
  be.prepare_batch(step, bs);
  std::vector<float> q(static_cast<size_t>(n_q) * n_heads * hd);
  for (auto& v : q) v = d(rng);
  auto* dq = static_cast<float*>(be.alloc(q.size() * 4));
  be.upload(dq, q.data(), q.size() * 4);
  auto* dout = static_cast<float*>(be.alloc(q.size() * 4));
  const double t = best_time([&] {
    be.attention(pool, 0, dq, dout, n_heads, 0.125f, /*window_tokens=*/0);
    be.synchronize();
  });
  // Score and P·V flops over the causal triangle.
  double pairs = 0;
  for (int32_t i = 0; i < n_q; ++i) pairs += pos0 + i + 1;
  *gflops = 4.0 * pairs * n_heads * hd / t * 1e-9;
  be.free(dk);
  be.free(dq);
  be.free(dout);
  be.free_kv_pool(pool);
  return t;
}

}  // namespace
}  // namespace prefixd

int main(int argc, char** argv) {
  using namespace prefixd;
  int n_threads = 2;
  const char* isa_env = std::getenv("PREFIXD_CPU_ISA");
  std::string isa_name = isa_env != nullptr ? isa_env : "auto";
  std::vector<WeightType> types = {WeightType::F32, WeightType::BF16};
  bool attention = true;
  bool stream = false;
  std::string attention_case;  // empty: every case
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpu-isa") == 0 && i + 1 < argc) isa_name = argv[++i];
    else if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
      types.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p <= list.size();) {
        const size_t e = std::min(list.find(',', p), list.size());
        const std::string name = list.substr(p, e - p);
        bool found = false;
        for (const auto& t : kWeightTypes)
          if (name == t.name && t.weight) {
            types.push_back(t.type);
            found = true;
          }
        if (!found) {
          std::fprintf(stderr, "--types: unknown weight type '%s'\n", name.c_str());
          return 2;
        }
        p = e + 1;
      }
    } else if (std::strcmp(argv[i], "--attention-case") == 0 && i + 1 < argc) {
      attention_case = argv[++i];  // profiling aid: only this attention case, no matmul
      types.clear();
    } else if (std::strcmp(argv[i], "--no-attention") == 0) attention = false;
    else if (std::strcmp(argv[i], "--no-matmul") == 0) types.clear();
    else if (std::strcmp(argv[i], "--stream") == 0) stream = true;
    else n_threads = std::atoi(argv[i]);
  }
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(isa_name);
  if (!isa.ok()) {
    std::fprintf(stderr, "cpu isa: %s\n", isa.message().c_str());
    return 2;
  }
  auto be = make_cpu_backend(n_threads, isa.value());
  g_cpu_time = n_threads == 1;
  std::printf("timing: best of repeated runs, %s; cpu_isa %s\n\n",
              g_cpu_time ? "thread CPU time (1 thread)" : "wall clock", cpu::cpu_isa_name(isa.value()));
  bench_matmul(*be, types, stream);
  if (!attention) return 0;
  std::printf("\nattention, 9 heads / 3 KV heads, head_dim 64, block 16, %d threads\n", n_threads);
  std::printf("%-8s %-5s %6s %6s %10s %9s\n", "case", "kv", "pos0", "n_q", "time_ms", "GFLOP/s");
  struct Case {
    const char* name;
    int32_t pos0, n_q;
  };
  for (Case c : {Case{"prefill", 0, 512}, Case{"prefill", 0, 2048}, Case{"suffix", 2000, 100},
                 Case{"decode", 512, 1},
                 Case{"decode", 2047, 1}}) {
    if (!attention_case.empty() && attention_case != c.name) continue;
    for (DType dt : {DType::F16, DType::F32, DType::BF16}) {
      double gf = 0;
      const double t = bench_attention(*be, c.pos0, c.n_q, dt, &gf);
      std::printf("%-8s %-5s %6d %6d %10.3f %9.1f\n", c.name, dtype_name(dt), c.pos0, c.n_q, t * 1e3, gf);
    }
  }
  return 0;
}
