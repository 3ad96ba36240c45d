// The daemon's HTTP and HTTPS listeners: httplib's Server and SSLServer with
// their connection handling replaced, so that idle and slow clients cannot
// starve the server: a thread per connection (ConnectionThreads), and time
// limits on each phase of a connection that a trickle of bytes cannot extend.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>

#include "daemon/http/connection_stream.h"

namespace prefixd {

// Limits on every connection. Each is a total for its phase, not a wait
// between bytes: a client sending a byte a second gains nothing.
struct ConnectionOptions {
  size_t max_threads = 4096;  // connections served at once; more wait for a thread (FIFO)
  // A connection with no request in progress (new, or between keep-alive
  // requests) is closed when no byte comes within this.
  std::chrono::milliseconds idle_timeout{5000};
  // From a request's first byte (and, with TLS, from the first handshake
  // byte) to the end of its headers; past it the connection is closed.
  std::chrono::milliseconds head_timeout{10000};
  // From the end of the headers to the end of the body.
  std::chrono::milliseconds body_timeout{60000};
  // The longest a response write waits for the client to take bytes.
  std::chrono::milliseconds write_timeout{30000};
  size_t max_requests_per_connection = 10000;
};

// The shared part of both listeners: the options, the stop signal and the
// per-connection loop. Thread-safe (each connection uses its own stream).
class ConnectionService {
 public:
  using Process =
      std::function<bool(httplib::Stream& strm, bool close_connection, bool& connection_closed,
                         const std::function<void(httplib::Request&)>& setup)>;

  explicit ConnectionService(const ConnectionOptions& options) : options_(options) {}

  const ConnectionOptions& options() const { return options_; }
  const ConnectionStop& stop_signal() const { return stop_; }

  // The task queue for httplib's `new_task_queue`; its shutdown stops every
  // connection's waits.
  httplib::TaskQueue* new_task_queue();

  // Serves requests on an open connection (after the TLS handshake, if any)
  // until the client closes it, a limit passes, or the server stops.
  // `setup` is applied to each request after its headers (e.g. req.ssl).
  void serve(ConnectionStream& strm, const Process& process,
             const std::function<void(httplib::Request&)>& setup) const;

 private:
  ConnectionOptions options_;
  ConnectionStop stop_;
};

// Plain HTTP. Listens once (the stop signal is not re-armed).
class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(const ConnectionOptions& options);

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionService service_;
};

// HTTPS: the SSL context loaded by httplib::SSLServer from the PEM files; the
// handshake and the TLS I/O are done here, non-blocking, within the limits.
class HttpsServer final : public httplib::SSLServer {
 public:
  HttpsServer(const char* cert_path, const char* key_path, const ConnectionOptions& options);

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionService service_;
};

// Raises this process's soft limit on open files (RLIMIT_NOFILE) to at least
// `wanted` when the hard limit allows, else to the hard limit. Returns the
// soft limit now in force.
size_t raise_open_file_limit(size_t wanted);

}  // namespace prefixd
