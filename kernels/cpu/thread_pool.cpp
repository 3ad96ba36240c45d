// Persistent worker threads: spin briefly on a generation counter (decode
// steps issue many small jobs back to back), then sleep on it. The spin is
// bounded in time, not in iterations: a pause instruction takes 5 ns on some
// CPUs and 40 on others, and a worker that spins for a millisecond between
// decode steps takes that millisecond from whatever else runs on the host.
#include "kernels/cpu/thread_pool.h"

#include <chrono>

#include "common/result.h"

namespace prefixd::cpu {

namespace {
// How long a waiting thread spins before it sleeps (a worker, on the next
// job) or yields its core (the caller, on workers finishing their last task).
// Longer than the gap between two parallel regions of a decode step (a few
// microseconds of serial work), far shorter than a scheduler time slice.
constexpr auto kSpinTime = std::chrono::microseconds(50);
constexpr int kSpinsPerClockRead = 64;  // pause instructions between two clock reads

using Clock = std::chrono::steady_clock;

// A claim word's task index while a job is being written: past any job's end.
constexpr uint64_t kClosed = 0xffffffffu;

// The spin-wait hint of the architecture (pause is baseline x86-64).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Spins until done() or kSpinTime has passed; returns done().
template <typename Done>
bool spin_until(Done done) {
  if (done()) return true;
  const Clock::time_point end = Clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < kSpinsPerClockRead; ++i) {
      cpu_relax();
      if (done()) return true;
    }
    if (Clock::now() >= end) return done();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::run_tasks(uint32_t gen, int thread_index) {
  const Job* fn = job_.load(std::memory_order_acquire);
  const int64_t n = n_tasks_.load(std::memory_order_acquire);
  int64_t ran = 0;
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(c >> 32) != gen) break;  // a later job: not ours
    const int64_t task = static_cast<int64_t>(c & 0xffffffffu);
    if (task >= n) break;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // c now holds the current value
    // A successful claim of `gen` means its job has not finished, so `fn`
    // (read after seeing `gen`) is still that job's.
    (*fn)(task, thread_index);
    ++ran;
    c = claim_.load(std::memory_order_acquire);
  }
  if (ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
  return ran;
}

void ThreadPool::worker_loop(int thread_index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = seen;
    spin_until([&] { return (g = generation_.load(std::memory_order_acquire)) != seen; });
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    const int64_t ran = run_tasks(g, thread_index);
    if (ran > 0) worker_tasks_.fetch_add(ran, std::memory_order_relaxed);
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  PREFIXD_CHECK(n_tasks <= kMaxTasks, "parallel_for: more tasks than ThreadPool::kMaxTasks");
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  // Closed first: a worker still in the last job's run_tasks() may read this
  // job's n_tasks_ with the last generation's claim word, and would claim
  // past the last job's end; once it can see the new count it sees this too
  // (the release stores below), and no claim of either generation succeeds
  // until the job is written.
  claim_.store((static_cast<uint64_t>(gen) << 32) | kClosed, std::memory_order_relaxed);
  job_.store(&fn, std::memory_order_release);
  n_tasks_.store(n_tasks, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  run_tasks(gen, 0);
  // Tasks other threads claimed and still run: spin, then yield the core (on
  // an oversubscribed machine the thread running one may need it).
  auto finished = [&] { return done_.load(std::memory_order_acquire) == n_tasks; };
  while (!spin_until(finished)) {
    while (!finished()) std::this_thread::yield();
  }
  job_.store(nullptr, std::memory_order_relaxed);
}

}  // namespace prefixd::cpu
