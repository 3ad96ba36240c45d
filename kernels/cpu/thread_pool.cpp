// Persistent worker threads: spin briefly on a generation counter (decode
// steps issue many small jobs back to back), then sleep on it.
#include "kernels/cpu/thread_pool.h"

namespace prefixd::cpu {

namespace {
constexpr int kSpinIterations = 20000;  // ~ tens of microseconds before sleeping

// The spin-wait hint of the architecture (pause is baseline x86-64).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread_index) {
  const auto& fn = *job_;
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    fn(task, thread_index);
  }
}

void ThreadPool::worker_loop(int thread_index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    run_tasks(thread_index);
    n_active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  job_ = &fn;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  n_active_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_tasks(0);
  // Workers still running their last task: spin, then yield the core (on an
  // oversubscribed machine a descheduled worker needs it).
  for (int spin = 0; n_active_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

}  // namespace prefixd::cpu
