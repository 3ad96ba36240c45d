// ConnectionThreads: the HTTP listener's task queue (httplib::TaskQueue), a
// thread per open connection, started on demand up to a cap, instead of
// httplib's fixed pool, where idle and slow connections park every worker.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace prefixd {

// Runs each enqueued connection on a thread of its own: an idle thread when
// one waits, else a new one while fewer than `max_threads` live. Beyond the
// cap a connection waits in a FIFO until a thread finishes its connection
// (connections end within the idle, head and body limits of
// connection_server.h, so that wait is bounded unless every thread serves a
// live request). A thread left without work for `linger` exits.
//
// enqueue() is called by httplib's accept thread only; shutdown() once, by
// that thread when the listener stops: it calls `on_shutdown` (which wakes
// every connection's waits, see ConnectionStop), waits for every connection
// to end and joins every thread. live_threads() may be called from any thread.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(size_t max_threads, std::chrono::milliseconds linger,
                    std::function<void()> on_shutdown);
  ~ConnectionThreads() override;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  size_t live_threads() const;

 private:
  void worker();
  void join_finished();  // joins the threads that have left worker()

  const size_t max_threads_;
  const std::chrono::milliseconds linger_;
  const std::function<void()> on_shutdown_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job or shutdown for an idle thread
  std::condition_variable gone_cv_;  // a thread left worker()
  std::deque<std::function<void()>> jobs_;
  size_t live_ = 0;  // threads inside worker()
  size_t idle_ = 0;  // of those, waiting for a job
  bool shutdown_ = false;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> finished_;  // left worker(), not joined yet
};

}  // namespace prefixd
