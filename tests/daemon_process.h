// Test helper: runs the real `prefixd` binary on a free loopback port
// (--port 0; the port is read from its "listening on" line) and talks HTTP
// to it, or runs it to its end (run_prefixd). Used by the daemon integration
// tests.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/shared_dir.h"

namespace prefixd::testing {

inline std::string stories_model_path() {
  return prefixd::testing::shared_dir() + "/models/stories260K.gguf";
}
inline std::string prefixd_binary() { return std::string(PREFIXD_BUILD_DIR) + "/prefixd"; }
// Generated models (demo) are kept here between test runs.
inline std::string test_cache_dir() { return std::string(PREFIXD_BUILD_DIR) + "/test-cache"; }

// This process's environment with `changes` applied: "NAME=VALUE" sets NAME,
// a bare "NAME" removes it. Built before fork, passed to execve.
inline std::vector<std::string> child_environment(const std::vector<std::string>& changes) {
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool changed = false;
    for (const std::string& c : changes) changed = changed || name_of(c) == name_of(entry);
    if (!changed) env.push_back(entry);
  }
  for (const std::string& c : changes) {
    if (c.find('=') != std::string::npos) env.push_back(c);
  }
  return env;
}

// The argv/envp form of `strings`: pointers into it, then a null.
inline std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class DaemonProcess {
 public:
  // Starts prefixd with `args` (plus --port 0 --cache-dir ...) and the
  // environment changes `env` (see child_environment); its stderr (the log)
  // goes to `stderr_path` when given (truncated), else to this process's.
  // Returns null (with *error set) when it does not come up within the timeout.
  static std::unique_ptr<DaemonProcess> start(const std::vector<std::string>& args,
                                              std::string* error,
                                              const std::vector<std::string>& env = {},
                                              const std::string& stderr_path = "") {
    int fds[2];
    if (pipe(fds) != 0) {
      *error = "pipe failed";
      return nullptr;
    }
    std::vector<std::string> argv_s = {prefixd_binary(), "--port", "0", "--cache-dir",
                                       test_cache_dir()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s = child_environment(env);
    std::vector<char*> argv = c_strings(argv_s), envp = c_strings(env_s);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      if (!stderr_path.empty()) {
        const int log_fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (log_fd >= 0) dup2(log_fd, 2);
      }
      execve(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "exec %s failed: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    auto d = std::unique_ptr<DaemonProcess>(new DaemonProcess(pid, fds[0]));
    // Read stdout until the "listening on http://HOST:PORT" (or https://) line.
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 200) > 0) {
        char buf[512];
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
        size_t at = out.find("listening on http");
        size_t eol = at == std::string::npos ? std::string::npos : out.find('\n', at);
        if (eol != std::string::npos) {
          std::string line = out.substr(at, eol - at);
          d->port_ = std::stoi(line.substr(line.rfind(':') + 1));
          d->tls_ = line.rfind("listening on https://", 0) == 0;
          return d;
        }
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        d->pid_ = -1;
        *error = "prefixd exited during start-up with status " + std::to_string(status) +
                 "; stdout: " + out;
        return nullptr;
      }
    }
    *error = "prefixd did not print its port; stdout: " + out;
    return nullptr;
  }

  ~DaemonProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_fd_);
  }

  int port() const { return port_; }
  bool tls() const { return tls_; }  // it printed "listening on https://" (--tls-cert)
  pid_t pid() const { return pid_; }

  // SIGTERM, then waits up to `timeout`; returns the exit code, or -1 if it
  // had to be killed or died from a signal.
  int stop(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }

  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    c->set_write_timeout(30, 0);
    c->set_connection_timeout(10, 0);
    c->set_tcp_nodelay(true);
    return c;
  }

 private:
  DaemonProcess(pid_t pid, int fd) : pid_(pid), stdout_fd_(fd) {}
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  bool tls_ = false;
};

// How a run of prefixd that ends by itself ended.
struct ProcessExit {
  int code = -1;       // exit status; -1 when it died from a signal or was killed at the timeout
  std::string output;  // stdout and stderr together
};

// Runs prefixd with exactly `args` and the environment changes `env` until it
// exits; kills it after `timeout`.
inline ProcessExit run_prefixd(const std::vector<std::string>& args,
                               const std::vector<std::string>& env = {},
                               std::chrono::seconds timeout = std::chrono::seconds(120)) {
  ProcessExit result;
  int fds[2];
  if (pipe(fds) != 0) {
    result.output = "pipe failed";
    return result;
  }
  std::vector<std::string> argv_s = {prefixd_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = child_environment(env);
  std::vector<char*> argv = c_strings(argv_s), envp = c_strings(env_s);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "exec %s failed: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = true;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) {  // end of output: the process is exiting
      timed_out = false;
      break;
    }
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  result.code = !timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The value of one sample of the /metrics exposition ("name" or
// "name{labels}"); -1 when absent.
inline double metric(const std::string& text, const std::string& sample) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(sample + " ", 0) == 0) return std::stod(line.substr(sample.size() + 1));
  }
  return -1;
}

struct HttpAnswer {
  int status = 0;       // 0 = transport error
  nlohmann::json body;  // parsed JSON (discarded when not JSON)
  std::string raw;
  httplib::Headers headers;
};

inline HttpAnswer to_answer(const httplib::Result& r) {
  HttpAnswer a;
  if (!r) return a;
  a.status = r->status;
  a.raw = r->body;
  a.headers = r->headers;
  a.body = nlohmann::json::parse(r->body, nullptr, false);
  return a;
}

inline HttpAnswer post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                            const httplib::Headers& headers = {}) {
  return to_answer(c.Post(path.c_str(), headers, body.dump(), "application/json"));
}

inline HttpAnswer post_raw(httplib::Client& c, const std::string& path, const std::string& body,
                           const httplib::Headers& headers = {}) {
  return to_answer(c.Post(path.c_str(), headers, body, "application/json"));
}

inline HttpAnswer get(httplib::Client& c, const std::string& path,
                      const httplib::Headers& headers = {}) {
  return to_answer(c.Get(path.c_str(), headers));
}

// One server-sent-events answer, split into its `data:` payloads.
struct SseAnswer {
  int status = 0;
  std::string content_type;
  std::vector<std::string> data;                   // payloads in order ("[DONE]" included)
  std::vector<nlohmann::json> json;                // parsed payloads (all but [DONE])
  bool aborted = false;                            // the callback stopped the transfer
  httplib::Error error = httplib::Error::Success;  // transport outcome
};

// POSTs `body` and collects its events. `on_event(n_events_so_far)` may
// return false to disconnect mid-stream.
inline SseAnswer post_sse(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                          std::function<bool(size_t)> on_event = nullptr) {
  SseAnswer a;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& res) {
    a.status = res.status;
    a.content_type = res.get_header_value("Content-Type");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
      std::string payload = event.substr(6);
      a.data.push_back(payload);
      if (payload != "[DONE]") a.json.push_back(nlohmann::json::parse(payload, nullptr, false));
      if (on_event && !on_event(a.data.size())) {
        a.aborted = true;
        return false;
      }
    }
    return true;
  };
  auto r = c.send(req);
  a.error = r.error();
  if (!r && !a.aborted) a.status = 0;
  if (r && a.status == 0) a.status = r->status;
  return a;
}

// The arguments of a daemon whose answers are bit-stable and whose onboards
// are forced: `model` with F32 KV on one thread, --restore-policy always (on
// so small a model recompute would often win) and, with `disk_dir`, a disk
// tier there.
inline std::vector<std::string> forced_onboard_args(const std::string& model,
                                                    const std::string& disk_dir) {
  std::vector<std::string> a = {"--model",    model, "--threads",        "1",
                                "--kv-dtype", "f32", "--restore-policy", "always"};
  if (!disk_dir.empty()) a.insert(a.end(), {"--disk-cache-dir", disk_dir});
  return a;
}

// Distinct prompts of `n_tokens` ids (< 512: valid for stories260K and every
// shared model), the i-th of a family.
inline std::vector<int32_t> prompt_for(int i, int n_tokens = 180) {
  std::vector<int32_t> p = {1};
  for (int t = 1; t < n_tokens; ++t) p.push_back(3 + (i * 131 + t * 17 + (t * t) % 7) % 500);
  return p;
}

}  // namespace prefixd::testing
