// A small persistent thread pool for the CPU backend: the calling thread plus
// n_threads-1 workers split an index range of tasks (dynamic scheduling).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace prefixd::cpu {

// Thread-safety: parallel_for() is called by one thread at a time (the
// backend's owner); tasks run concurrently on all pool threads.
class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(task, thread_index) for every task in [0, n_tasks), each exactly
  // once, and returns when all have finished. thread_index is in
  // [0, n_threads()) and is unique among concurrently running calls, so it can
  // index per-thread scratch. Tasks are handed out in increasing order.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

 private:
  void worker_loop(int thread_index);
  void run_tasks(int thread_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int)>* job_ = nullptr;  // valid during a generation
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> n_active_{0};       // workers still inside the current generation
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace prefixd::cpu
