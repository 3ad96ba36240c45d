// A small persistent thread pool for the CPU backend: the calling thread plus
// n_threads-1 workers split an index range of tasks (dynamic scheduling).
//
// Built for a shared host: the caller claims tasks like any worker and waits
// only for tasks another thread has claimed, never for a worker to wake up. A
// worker the scheduler has not run yet (its core busy with another process)
// costs a job nothing: the threads that run take its share.
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

  // The most tasks one parallel_for() takes (a task index fits 32 bits).
  static constexpr int64_t kMaxTasks = int64_t{1} << 31;

  // Runs fn(task, thread_index) for every task in [0, n_tasks), each exactly
  // once, and returns when all have finished. thread_index is in
  // [0, n_threads()) and is unique among concurrently running calls, so it can
  // index per-thread scratch. Tasks are handed out in increasing order.
  // n_tasks <= kMaxTasks.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

  // Tasks the workers (not the caller) ran since the pool started: a test's
  // way to see that workers take part.
  int64_t worker_tasks() const { return worker_tasks_.load(std::memory_order_relaxed); }

 private:
  using Job = std::function<void(int64_t, int)>;

  void worker_loop(int thread_index);
  // Claims and runs tasks of generation `gen` until none is left (or the
  // generation has moved on); returns how many it ran.
  int64_t run_tasks(uint32_t gen, int thread_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job, published before its generation.
  std::atomic<const Job*> job_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  // (generation << 32) | next task index: a claim is a compare-exchange that
  // fails once the generation has moved on, so a worker that wakes late can
  // never run a task of a job it did not read.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};       // tasks of the current generation finished
  std::atomic<uint32_t> generation_{0};  // workers wait on it for the next job
  std::atomic<int64_t> worker_tasks_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace prefixd::cpu
