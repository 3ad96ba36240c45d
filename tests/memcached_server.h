// A memcached server for tests: a real /usr/bin/memcached on a free loopback
// port, started by the constructor and SIGKILLed by the destructor; and the
// loopback helpers it needs. Include after doctest (REQUIRE).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "storage/remote_servers.h"

namespace prefixd::testing {

inline constexpr char kMemcachedBinary[] = "/usr/bin/memcached";

inline bool memcached_installed() { return access(kMemcachedBinary, X_OK) == 0; }

// A loopback port nobody listens on right now.
inline uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

inline int connect_loopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A memcached server on a free loopback port, SIGKILLed when destroyed.
class MemcachedServer {
 public:
  // On a free port, or on `port` (one try) when it is not 0.
  explicit MemcachedServer(const std::string& item_size_max = "2m", uint16_t port = 0) {
    for (int attempt = 0; attempt < (port != 0 ? 1 : 5) && pid_ <= 0; ++attempt) {
      port_ = port != 0 ? port : free_port();
      const std::string port_text = std::to_string(port_);
      std::vector<std::string> args = {
          kMemcachedBinary, "-l", "127.0.0.1", "-p", port_text, "-U", "0", "-m", "64", "-I",
          item_size_max};
      if (geteuid() == 0) {
        args.push_back("-u");
        args.push_back("root");
      }
      const pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        const int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
          dup2(devnull, 1);
          dup2(devnull, 2);
        }
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
      }
      pid_ = pid;
      // Wait (at most 5 s) until it accepts connections, or gave up (port taken).
      bool up = false;
      for (int i = 0; i < 500 && !up; ++i) {
        const int fd = connect_loopback(port_);
        if (fd >= 0) {
          close(fd);
          up = true;
          break;
        }
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!up) stop();
    }
    REQUIRE_MESSAGE(pid_ > 0, "memcached did not start");
  }
  ~MemcachedServer() { stop(); }
  MemcachedServer(const MemcachedServer&) = delete;
  MemcachedServer& operator=(const MemcachedServer&) = delete;

  uint16_t port() const { return port_; }
  RemoteServer server() const { return RemoteServer{"127.0.0.1", port_}; }
  // SIGSTOP / SIGCONT: a server that accepts connections and never answers.
  void pause() { kill(pid_, SIGSTOP); }
  void resume() { kill(pid_, SIGCONT); }
  // SIGKILL and reap.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

}  // namespace prefixd::testing
