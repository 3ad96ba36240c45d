// Non-blocking socket I/O with deadlines for the HTTP connections (see
// connection_stream.h). Every wait is a poll() on the socket and the stop
// eventfd, so a stopping server wakes all its connections at once.
#include "daemon/http/connection_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace prefixd {

ConnectionStop::ConnectionStop() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) {
    std::fprintf(stderr, "prefixd: eventfd for the HTTP connections failed: %s\n",
                 std::strerror(errno));
    std::abort();
  }
}

ConnectionStop::~ConnectionStop() { ::close(fd_); }

void ConnectionStop::stop() {
  const uint64_t one = 1;
  // Never read: the eventfd stays readable, every later poll() sees it too.
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
}

bool ConnectionStop::stopped() const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

WaitResult wait_socket(int sock, short events, ConnectionClock::time_point deadline,
                       const ConnectionStop& stop) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - ConnectionClock::now());
    if (left.count() <= 0) return WaitResult::kTimedOut;
    pollfd p[2] = {{sock, events, 0}, {stop.fd(), POLLIN, 0}};
    const int timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 60'000));
    const int n = ::poll(p, 2, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WaitResult::kFailed;
    if (p[1].revents != 0) return WaitResult::kStopped;
    // POLLHUP / POLLERR count as ready: the read or write that follows reports them.
    if (p[0].revents != 0) return WaitResult::kReady;
  }
}

ConnectionStream::ConnectionStream(int sock, SSL* ssl, const ConnectionStop& stop,
                                   std::chrono::milliseconds write_timeout)
    : sock_(sock),
      ssl_(ssl),
      stop_(stop),
      write_timeout_(write_timeout),
      read_deadline_(ConnectionClock::now()) {
  const int flags = ::fcntl(sock, F_GETFL, 0);
  if (flags >= 0) ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
}

bool ConnectionStream::has_buffered_input() const {
  return buf_begin_ < buf_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
}

bool ConnectionStream::is_readable() const {
  return has_buffered_input() ||
         wait_socket(sock_, POLLIN, read_deadline_, stop_) == WaitResult::kReady;
}

bool ConnectionStream::is_writable() const {
  if (stop_.stopped()) return false;
  pollfd p{sock_, POLLOUT, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP)) != 0) return false;
  return wait_socket(sock_, POLLOUT, ConnectionClock::now() + write_timeout_, stop_) ==
         WaitResult::kReady;
}

ssize_t ConnectionStream::receive(char* ptr, size_t size) {
  const int n_max = static_cast<int>(std::min<size_t>(size, INT32_MAX));
  for (;;) {
    short want = POLLIN;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(ssl_, ptr, n_max);
      if (n > 0) return n;
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      if (err == SSL_ERROR_WANT_WRITE) {
        want = POLLOUT;
      } else if (err != SSL_ERROR_WANT_READ) {
        read_failed_ = true;
        tls_fatal_ = err == SSL_ERROR_SYSCALL || err == SSL_ERROR_SSL;
        return -1;
      }
    } else {
      const ssize_t n = ::recv(sock_, ptr, static_cast<size_t>(n_max), 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        read_failed_ = true;
        return -1;
      }
    }
    if (wait_socket(sock_, want, read_deadline_, stop_) != WaitResult::kReady) {
      read_failed_ = true;
      return -1;
    }
  }
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (buf_begin_ == buf_end_) {
    if (size >= sizeof(buf_)) return receive(ptr, size);  // large reads skip the buffer
    const ssize_t n = receive(buf_, sizeof(buf_));
    if (n <= 0) return n;
    buf_begin_ = 0;
    buf_end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, buf_end_ - buf_begin_);
  std::memcpy(ptr, buf_ + buf_begin_, n);
  buf_begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  const int n_max = static_cast<int>(std::min<size_t>(size, INT32_MAX));
  for (;;) {
    short want = POLLOUT;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int n = SSL_write(ssl_, ptr, n_max);
      if (n > 0) return n;
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_WANT_READ) {
        want = POLLIN;
      } else if (err != SSL_ERROR_WANT_WRITE) {
        tls_fatal_ = err == SSL_ERROR_SYSCALL || err == SSL_ERROR_SSL;
        return -1;
      }
    } else {
      const ssize_t n = ::send(sock_, ptr, static_cast<size_t>(n_max), MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
    // A client that takes nothing for write_timeout is dropped.
    if (wait_socket(sock_, want, ConnectionClock::now() + write_timeout_, stop_) !=
        WaitResult::kReady)
      return -1;
  }
}

namespace {

void numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

}  // namespace

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    numeric_address(addr, len, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    numeric_address(addr, len, ip, port);
}

bool tls_accept(int sock, SSL* ssl, ConnectionClock::time_point deadline,
                const ConnectionStop& stop) {
  const int flags = ::fcntl(sock, F_GETFL, 0);
  if (flags >= 0) ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_accept(ssl);
    if (r == 1) return true;
    const int err = SSL_get_error(ssl, r);
    short want = 0;
    if (err == SSL_ERROR_WANT_READ) {
      want = POLLIN;
    } else if (err == SSL_ERROR_WANT_WRITE) {
      want = POLLOUT;
    } else {
      return false;
    }
    if (wait_socket(sock, want, deadline, stop) != WaitResult::kReady) return false;
  }
}

}  // namespace prefixd
