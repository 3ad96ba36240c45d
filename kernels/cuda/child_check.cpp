// Checks in a child process (child_check.h): posix_spawn, a non-blocking
// pipe for the child's output, waitpid for the verdict.
#include "kernels/cuda/child_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace prefixd::cuda {
namespace {

constexpr size_t kMaxOutputBytes = 64 * 1024;

// The last non-empty line of `text`.
std::string last_line(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  const size_t start = text.rfind('\n', end == 0 ? 0 : end - 1);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1));
}

}  // namespace

Result<std::unique_ptr<ChildCheck>> ChildCheck::start(const std::vector<std::string>& argv,
                                                      std::chrono::milliseconds timeout) {
  if (argv.empty()) return Status::error("child check: no program");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("child check: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  // Nothing else of the parent's: a daemon's listening socket held by a child
  // would keep its port bound past the daemon's own exit.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return Status::error("child check: cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<ChildCheck> c(new ChildCheck());
  c->pid_ = pid;
  c->out_fd_ = fds[0];
  c->timeout_ = timeout;
  c->deadline_ = std::chrono::steady_clock::now() + timeout;
  return c;
}

ChildCheck::~ChildCheck() {
  if (!verdict_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (out_fd_ >= 0) close(out_fd_);
}

void ChildCheck::drain() {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n > 0) {
      output_.append(buf, size_t(n));
      if (output_.size() > kMaxOutputBytes) output_.erase(0, output_.size() - kMaxOutputBytes);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // 0: the child's end is closed; EAGAIN: nothing now
  }
}

ChildVerdict ChildCheck::verdict_of(int status) {
  ChildVerdict v;
  const std::string line = last_line(output_);
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    v.kind = code == kChildCheckPassed  ? ChildVerdict::Kind::kPassed
             : code == kChildCheckNotRun ? ChildVerdict::Kind::kNotRun
                                         : ChildVerdict::Kind::kFailed;
    v.detail = line.empty() ? "exit status " + std::to_string(code) : line;
    if (code != kChildCheckPassed && code != kChildCheckFailed && code != kChildCheckNotRun)
      v.detail = "exit status " + std::to_string(code) + (line.empty() ? "" : ": " + line);
    return v;
  }
  v.kind = ChildVerdict::Kind::kFailed;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    v.detail = "crashed: signal " + std::to_string(sig) + " (" + strsignal(sig) + ")" +
               (line.empty() ? "" : "; last line: " + line);
  } else {
    v.detail = "ended with wait status " + std::to_string(status);
  }
  return v;
}

std::optional<ChildVerdict> ChildCheck::poll() {
  if (verdict_) return verdict_;
  drain();
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  while (r < 0 && errno == EINTR) r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    drain();
    verdict_ = verdict_of(status);
    return verdict_;
  }
  if (std::chrono::steady_clock::now() < deadline_) return std::nullopt;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  drain();
  verdict_ = ChildVerdict{ChildVerdict::Kind::kFailed,
                          "timed out after " + std::to_string(timeout_.count()) + " ms and was killed" +
                              (last_line(output_).empty() ? "" : "; last line: " + last_line(output_))};
  return verdict_;
}

ChildVerdict ChildCheck::wait() {
  for (;;) {
    if (std::optional<ChildVerdict> v = poll()) return *v;
    pollfd p{out_fd_, POLLIN, 0};
    ::poll(&p, 1, 20);  // output or 20 ms, whichever first
  }
}

std::optional<ChildVerdict> ChildCheckQueue::verdict(const std::string& key,
                                                     const std::function<std::vector<std::string>()>& argv,
                                                     bool wait) {
  poll();
  if (auto it = verdicts_.find(key); it != verdicts_.end()) return it->second;
  if (child_ != nullptr && child_key_ != key) {
    if (!wait) return std::nullopt;
    verdicts_[child_key_] = child_->wait();
    child_.reset();
  }
  if (child_ == nullptr) start(key, argv());
  if (auto it = verdicts_.find(key); it != verdicts_.end()) return it->second;  // could not start
  if (!wait) return std::nullopt;
  verdicts_[key] = child_->wait();
  child_.reset();
  return verdicts_[key];
}

bool ChildCheckQueue::poll() {
  if (child_ == nullptr) return false;
  std::optional<ChildVerdict> v = child_->poll();
  if (!v) return false;
  verdicts_[child_key_] = *v;
  child_.reset();
  return true;
}

void ChildCheckQueue::start(const std::string& key, const std::vector<std::string>& argv) {
  Result<std::unique_ptr<ChildCheck>> c = ChildCheck::start(argv, timeout_);
  if (!c.ok()) {
    verdicts_[key] = ChildVerdict{ChildVerdict::Kind::kFailed, c.message()};
    return;
  }
  child_ = std::move(c.value());
  child_key_ = key;
}

}  // namespace prefixd::cuda
