// Graceful shutdown on SIGINT/SIGTERM: the signals are blocked in every
// thread and received by one watcher thread (sigtimedwait), which runs the
// shutdown callback outside signal context. SIGPIPE is ignored.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace prefixd {

class SignalWatcher {
 public:
  // Blocks SIGINT and SIGTERM in the calling thread and in every thread it
  // creates afterwards: construct it in main() before any other thread.
  SignalWatcher();
  // Stops the watcher thread (if started) without running the callback.
  ~SignalWatcher();

  // Starts the watcher; `on_signal(signo)` runs once, on the watcher thread,
  // for the first SIGINT or SIGTERM.
  void start(std::function<void(int)> on_signal);

  int received() const { return received_.load(); }  // 0 until a signal arrived

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> received_{0};
};

}  // namespace prefixd
