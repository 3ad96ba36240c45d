// A check run in a child process, so that a fault of the code it checks ends
// only the child. A device fault inside a library kernel (an illegal memory
// access loses the CUDA context; the backend then aborts) cannot be survived
// by the process it happens in, so a fast path that has never run on this
// GPU proves itself in a child first: the CUDA backend runs
// `prefixd-cudnn-probe` (kernels/cuda/cudnn/probe_main.cpp) for each cuDNN
// plan bucket before its own plan of that bucket may serve.
//
// Protocol: the child's exit status is the verdict (0 passed, 1 failed, 2 did
// not run: a shape the library refuses, no memory, no device); its last line
// of output is the detail. A signal (SIGSEGV, SIGABRT), a timeout or any other
// status is a failed check. Plain C++ and POSIX (no CUDA types), so
// tests/test_child_check.cpp checks it on the CPU with shell children.
//
// Thread: one thread at a time per object (the backend's).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace prefixd::cuda {

inline constexpr int kChildCheckPassed = 0;
inline constexpr int kChildCheckFailed = 1;
inline constexpr int kChildCheckNotRun = 2;

struct ChildVerdict {
  enum class Kind { kPassed, kFailed, kNotRun };
  Kind kind = Kind::kFailed;
  std::string detail;  // the child's last line of output, or how it ended (signal, timeout, status)
  bool passed() const { return kind == Kind::kPassed; }
  bool failed() const { return kind == Kind::kFailed; }
};

// One running child: started by start(), reaped by poll()/wait() or killed
// by the destructor.
class ChildCheck {
 public:
  // Starts argv[0] (a path) with argv, its stdout and stderr into a pipe
  // this object reads, stdin inherited, every other descriptor closed.
  // Fails when the program cannot be started.
  static Result<std::unique_ptr<ChildCheck>> start(const std::vector<std::string>& argv,
                                                   std::chrono::milliseconds timeout);
  ~ChildCheck();
  ChildCheck(const ChildCheck&) = delete;
  ChildCheck& operator=(const ChildCheck&) = delete;

  // The verdict once the child has ended (a child past its timeout is
  // killed: failed); nullopt while it runs. Never blocks.
  std::optional<ChildVerdict> poll();
  // Blocks until the verdict (at most the timeout and the kill).
  ChildVerdict wait();
  // Everything the child wrote so far (capped at the last 64 KiB).
  const std::string& output() const { return output_; }

 private:
  ChildCheck() = default;
  void drain();                       // reads what the pipe holds now
  ChildVerdict verdict_of(int status);
  pid_t pid_ = -1;
  int out_fd_ = -1;                   // read end, non-blocking
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_{0};
  std::string output_;
  std::optional<ChildVerdict> verdict_;
};

// Keyed checks, one child at a time: verdict(key) starts the key's check
// when no child runs, and answers once it has ended; verdicts are kept for
// the object's life.
class ChildCheckQueue {
 public:
  explicit ChildCheckQueue(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // The verdict of `key`: known, or nullopt while its check is pending or
  // waits for another key's child. `argv` builds its command when it starts;
  // with `wait` the call blocks until this key's verdict (a running check of
  // another key is finished first). A program that cannot start is a failed
  // verdict naming it.
  std::optional<ChildVerdict> verdict(const std::string& key, const std::function<std::vector<std::string>()>& argv,
                                      bool wait);
  // Reaps a finished child, if any; never blocks. True when a verdict was added.
  bool poll();
  bool running() const { return child_ != nullptr; }

 private:
  void start(const std::string& key, const std::vector<std::string>& argv);
  std::chrono::milliseconds timeout_;
  std::map<std::string, ChildVerdict> verdicts_;
  std::unique_ptr<ChildCheck> child_;
  std::string child_key_;
};

}  // namespace prefixd::cuda
