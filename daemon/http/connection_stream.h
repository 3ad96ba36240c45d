// ConnectionStream: httplib::Stream over one accepted socket (plain, or TLS
// through an OpenSSL SSL*), made non-blocking, where every wait has a
// deadline set by the connection's phase and wakes when the server stops.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace prefixd {

using ConnectionClock = std::chrono::steady_clock;

// Wakes every connection's waits at once when the server stops: an eventfd
// that becomes (and stays) readable. Thread-safe.
class ConnectionStop {
 public:
  ConnectionStop();
  ~ConnectionStop();
  ConnectionStop(const ConnectionStop&) = delete;
  ConnectionStop& operator=(const ConnectionStop&) = delete;

  void stop();
  bool stopped() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// What a wait on the socket came to.
enum class WaitResult { kReady, kTimedOut, kStopped, kFailed };

// Waits until `sock` is readable (`events` POLLIN) or writable (POLLOUT), the
// deadline passes or `stop` fires.
WaitResult wait_socket(int sock, short events, ConnectionClock::time_point deadline,
                       const ConnectionStop& stop);

// A Stream whose reads wait at most until read_deadline and whose writes wait
// at most write_timeout for each chunk to be taken. The owner (the connection
// loop of connection_server.cpp) moves read_deadline as the request goes from
// head to body. Reads are buffered (httplib reads the head a byte at a time).
// Used by the one thread that serves the connection.
class ConnectionStream final : public httplib::Stream {
 public:
  // `ssl` is null for plain HTTP; with TLS the handshake is done. The socket
  // is made non-blocking; neither it nor `ssl` is owned.
  ConnectionStream(int sock, SSL* ssl, const ConnectionStop& stop,
                   std::chrono::milliseconds write_timeout);

  void set_read_deadline(ConnectionClock::time_point deadline) { read_deadline_ = deadline; }

  // Bytes already received and not yet read (buffered here or inside TLS):
  // the next request has begun.
  bool has_buffered_input() const;

  // A read failed (deadline passed, server stopping, connection error):
  // whatever httplib answers, the connection must close after it.
  bool read_failed() const { return read_failed_; }

  // With TLS: no fatal TLS error happened, so a close_notify may be sent
  // (OpenSSL forbids SSL_shutdown after SSL_ERROR_SYSCALL or SSL_ERROR_SSL).
  bool tls_intact() const { return !tls_fatal_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

 private:
  ssize_t receive(char* ptr, size_t size);  // one transport read, waiting as needed

  int sock_;
  SSL* ssl_;
  const ConnectionStop& stop_;
  std::chrono::milliseconds write_timeout_;
  ConnectionClock::time_point read_deadline_;
  char buf_[4096];  // bytes received, buf_[buf_begin_, buf_end_) not yet read
  size_t buf_begin_ = 0;
  size_t buf_end_ = 0;
  bool read_failed_ = false;
  bool tls_fatal_ = false;
};

// The TLS handshake on a non-blocking socket, bounded by `deadline`. False
// when it failed, timed out or the server stopped.
bool tls_accept(int sock, SSL* ssl, ConnectionClock::time_point deadline,
                const ConnectionStop& stop);

}  // namespace prefixd
