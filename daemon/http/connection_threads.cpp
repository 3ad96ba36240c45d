// A thread per HTTP connection up to a cap (see connection_threads.h). Threads
// blocked in poll() cost a kernel stack and the few touched pages of their
// user stack, so a thousand idle connections cost megabytes, not a stalled
// server.
#include "daemon/http/connection_threads.h"

#include <cstdio>
#include <system_error>

namespace prefixd {

ConnectionThreads::ConnectionThreads(size_t max_threads, std::chrono::milliseconds linger,
                                     std::function<void()> on_shutdown)
    : max_threads_(max_threads < 1 ? 1 : max_threads),
      linger_(linger),
      on_shutdown_(std::move(on_shutdown)) {}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::enqueue(std::function<void()> fn) {
  join_finished();
  std::unique_lock<std::mutex> lock(mu_);
  jobs_.push_back(std::move(fn));
  if (jobs_.size() <= idle_) {
    work_cv_.notify_one();
    return;
  }
  if (live_ >= max_threads_) return;  // waits for a thread to finish its connection
  try {
    std::thread t([this] { worker(); });
    ++live_;
    threads_.emplace(t.get_id(), std::move(t));
  } catch (const std::system_error& e) {
    // No thread (RLIMIT_NPROC, memory): the job waits for a live thread.
    // With none, it runs here, on the accept thread, rather than never.
    std::fprintf(stderr, "prefixd [warn] cannot start an HTTP connection thread (%s); %zu live\n",
                 e.what(), live_);
    if (live_ == 0) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
    }
  }
}

void ConnectionThreads::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (jobs_.empty()) {
      ++idle_;
      const bool woken =
          work_cv_.wait_for(lock, linger_, [this] { return !jobs_.empty() || shutdown_; });
      --idle_;
      if (!woken || jobs_.empty()) break;  // lingered long enough, or shutting down
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // releases what the job holds before the lock is taken
    lock.lock();
  }
  --live_;
  finished_.push_back(std::this_thread::get_id());
  gone_cv_.notify_all();
}

void ConnectionThreads::join_finished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::thread::id& id : finished_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : done) t.join();  // each has left worker(): returns at once
}

void ConnectionThreads::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  if (on_shutdown_) on_shutdown_();
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.notify_all();
  // Queued connections still run (each is closed at its first wait, which
  // sees the stop), so every socket httplib accepted is closed.
  gone_cv_.wait(lock, [this] { return live_ == 0; });
  lock.unlock();
  join_finished();
}

size_t ConnectionThreads::live_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

}  // namespace prefixd
