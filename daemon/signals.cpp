// SignalWatcher: sigtimedwait on a dedicated thread, so the shutdown work
// (locks, joins, logging) never runs in a signal handler.
#include "daemon/signals.h"

#include <pthread.h>

#include <csignal>
#include <ctime>

namespace prefixd {
namespace {

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

SignalWatcher::~SignalWatcher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void SignalWatcher::start(std::function<void(int)> on_signal) {
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    sigset_t set = shutdown_signals();
    const timespec poll{0, 100 * 1000 * 1000};  // 100 ms: how soon stop_ is noticed
    while (!stop_.load()) {
      int signo = sigtimedwait(&set, nullptr, &poll);
      if (signo == SIGINT || signo == SIGTERM) {
        received_.store(signo);
        on_signal(signo);
        return;
      }
    }
  });
}

}  // namespace prefixd
