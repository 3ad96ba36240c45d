// A plain multi-threaded read of a buffer, for the benchmarks: the bytes per
// second this machine delivers, right now, to n threads that only load and
// add, from memory of the kind the weights take (huge pages). bench_forward
// reads a buffer as large as a model's weights with it, so decode's weight
// read prints as a fraction of what the memory (or the part of the
// last-level cache the weights fit in) gave a plain read in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/cpu/weight_memory.h"

namespace prefixd::testing {

// Sums `n` uint64 words in 64-byte vectors, four independent chains (so the
// loads, not the adds, set the pace), in the widest registers the CPU has
// (x86-64: a clone per register width, chosen at load time, since this file
// is built for the baseline). The result is kept so the loop stays.
using Words64 = uint64_t __attribute__((vector_size(64)));
#if defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
inline uint64_t sum_words(const uint64_t* p, size_t n) {
  Words64 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    Words64 w0, w1, w2, w3;
    std::memcpy(&w0, p + i, 64);
    std::memcpy(&w1, p + i + 8, 64);
    std::memcpy(&w2, p + i + 16, 64);
    std::memcpy(&w3, p + i + 24, 64);
    a0 += w0;
    a1 += w1;
    a2 += w2;
    a3 += w3;
  }
  const Words64 a = a0 + a1 + a2 + a3;
  uint64_t s = 0;
  for (int k = 0; k < 8; ++k) s += a[k];
  for (; i < n; ++i) s += p[i];
  return s;
}

// A plain read's bytes per second: its fastest pass, and all its passes
// together (bytes over time, as a decode rep's rate is). Compare a best of
// repeated runs with `best`, a rate over a stretch of time with `mean`: on a
// shared host the memory's speed moves between passes, and the best of a few
// short passes stands above what the same memory gives over a longer stretch.
struct ReadRate {
  double best = 0;
  double mean = 0;
};

// The rate of `threads` threads each reading its contiguous share of a
// `bytes`-byte buffer, over `passes` passes after one warm-up pass (decode
// reads the same weights every step, so what stays cached between passes
// stays cached between steps too). Threads are not pinned: the scheduler
// places them as it places a backend's pool. A pass reads the buffer often
// enough to move at least 64 MB, so starting the threads is noise even for a
// small buffer.
inline ReadRate plain_read_rate(size_t bytes, int threads, int passes) {
  const size_t words = std::max<size_t>(bytes / sizeof(uint64_t), static_cast<size_t>(threads));
  const size_t repeats = std::max<size_t>(1, (size_t{64} << 20) / (words * sizeof(uint64_t)));
  // In the memory the weights take (huge pages, cpu/weight_memory.h).
  size_t rounded = 0;
  std::unique_ptr<uint64_t, void (*)(void*)> buf(
      static_cast<uint64_t*>(cpu::alloc_weights_raw(words * sizeof(uint64_t), &rounded)), cpu::free_weights);
  for (size_t i = 0; i < words; ++i) buf.get()[i] = i;  // touches every page
  const int n_threads = std::max(1, threads);
  std::vector<uint64_t> sink(static_cast<size_t>(n_threads));
  auto pass = [&] {
    std::vector<std::thread> pool;
    const size_t share = words / static_cast<size_t>(n_threads);
    for (int t = 0; t < n_threads; ++t) {
      const size_t begin = share * static_cast<size_t>(t);
      const size_t end = t + 1 == n_threads ? words : begin + share;
      pool.emplace_back([&, t, begin, end] {
        for (size_t r = 0; r < repeats; ++r) sink[static_cast<size_t>(t)] += sum_words(buf.get() + begin, end - begin);
      });
    }
    for (std::thread& th : pool) th.join();
  };
  pass();
  double best = 1e30, total = 0;
  const int n_passes = std::max(1, passes);
  for (int p = 0; p < n_passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t);
    total += t;
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sink) keep = keep + s;
  const double pass_bytes = static_cast<double>(words * sizeof(uint64_t) * repeats);
  return {pass_bytes / best, pass_bytes * n_passes / total};
}

}  // namespace prefixd::testing
