// The CPU backend's thread pool: every task runs exactly once, with a thread
// index unique among concurrent calls; workers take part; and a thread held
// in one task does not hold up the rest of the job.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

using prefixd::cpu::ThreadPool;

TEST_CASE("every task runs exactly once, job after job") {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 5, 0, 4096}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
    std::atomic<int> busy_index[3] = {0, 0, 0};
    std::atomic<bool> index_shared{false};
    pool.parallel_for(n, [&](int64_t t, int thread) {
      REQUIRE(thread >= 0);
      REQUIRE(thread < 3);
      if (busy_index[thread].fetch_add(1) != 0) index_shared = true;
      runs[static_cast<size_t>(t)].fetch_add(1);
      busy_index[thread].fetch_sub(1);
    });
    CHECK_FALSE(index_shared.load());
    for (int64_t t = 0; t < n; ++t) CHECK(runs[static_cast<size_t>(t)].load() == 1);
  }
}

TEST_CASE("workers run tasks") {
  ThreadPool pool(2);
  // Tasks long enough that the caller cannot take them all before a worker
  // wakes; the bound only ends the wait on a machine too loaded to run it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pool.worker_tasks() == 0 && std::chrono::steady_clock::now() < deadline) {
    pool.parallel_for(64, [](int64_t, int) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  }
  CHECK(pool.worker_tasks() > 0);
}

TEST_CASE("a thread held in one task leaves the others to the other thread") {
  ThreadPool pool(2);
  // The first task blocks its thread until the rest of the job is done: if
  // the caller claims it, the worker must finish the others, and the other
  // way round. Either way the job ends, and each task ran once.
  std::atomic<int> finished{0};
  std::atomic<int> ran{0};
  pool.parallel_for(100, [&](int64_t t, int) {
    ran.fetch_add(1);
    if (t == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (finished.load() < 99 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    } else {
      finished.fetch_add(1);
    }
  });
  CHECK(ran.load() == 100);
  CHECK(finished.load() == 99);
}

TEST_CASE("jobs of changing sizes back to back: no task runs twice or in the wrong job") {
  // A worker that wakes late for one job must not take a task of the next
  // (a count that grows from job to job is where a stale worker could claim
  // past a job's end). Thousands of small jobs, sizes 2..9 cycling.
  ThreadPool pool(2);
  std::vector<int> runs(16);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 8;
    std::fill(runs.begin(), runs.end(), 0);
    std::atomic<int> total{0};
    pool.parallel_for(n, [&](int64_t t, int) {
      runs[static_cast<size_t>(t)] += 1;  // distinct t: no two threads share an element
      total.fetch_add(1);
    });
    REQUIRE(total.load() == n);
    for (int64_t t = 0; t < n; ++t) REQUIRE(runs[static_cast<size_t>(t)] == 1);
  }
}
