// The connection loop of both listeners (see connection_server.h). httplib
// still accepts the sockets and parses the requests (Server::process_request
// over our ConnectionStream); what it no longer does is wait on the socket:
// its keep-alive wait and per-read timeouts let a byte a second hold a worker
// for ever, and its fixed pool let idle connections park every worker.
#include "daemon/http/connection_server.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "daemon/http/connection_threads.h"

namespace prefixd {
namespace {

// A connection thread without work waits this long for the next one.
constexpr std::chrono::milliseconds kThreadLinger{10'000};

void close_socket(int sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// httplib's own settings, for what it still uses them for: the Keep-Alive
// header it sends (timeout=, max=).
void advertise_limits(httplib::Server& server, const ConnectionOptions& o) {
  const auto idle_s = std::chrono::ceil<std::chrono::seconds>(o.idle_timeout).count();
  server.set_keep_alive_timeout(static_cast<time_t>(idle_s));
  server.set_keep_alive_max_count(o.max_requests_per_connection);
}

}  // namespace

httplib::TaskQueue* ConnectionService::new_task_queue() {
  return new ConnectionThreads(options_.max_threads, kThreadLinger, [this] { stop_.stop(); });
}

void ConnectionService::serve(ConnectionStream& strm, const Process& process,
                              const std::function<void(httplib::Request&)>& setup) const {
  const ConnectionOptions& o = options_;
  for (size_t left = o.max_requests_per_connection; left > 0; --left) {
    // Idle until the next request's first byte (pipelined bytes count).
    if (!strm.has_buffered_input() &&
        wait_socket(strm.socket(), POLLIN, ConnectionClock::now() + o.idle_timeout, stop_) !=
            WaitResult::kReady)
      return;
    strm.set_read_deadline(ConnectionClock::now() + o.head_timeout);
    bool closed = false;
    const bool ok = process(strm, left == 1, closed, [&](httplib::Request& req) {
      strm.set_read_deadline(ConnectionClock::now() + o.body_timeout);
      if (setup) setup(req);
    });
    // A head or body cut off at its deadline got httplib's 400: then close.
    if (!ok || closed || strm.read_failed() || stop_.stopped()) return;
  }
}

HttpServer::HttpServer(const ConnectionOptions& options) : service_(options) {
  new_task_queue = [this] { return service_.new_task_queue(); };
  advertise_limits(*this, options);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  {
    ConnectionStream strm(sock, nullptr, service_.stop_signal(), service_.options().write_timeout);
    service_.serve(
        strm,
        [this](httplib::Stream& s, bool close_connection, bool& connection_closed,
               const std::function<void(httplib::Request&)>& setup) {
          return process_request(s, close_connection, connection_closed, setup);
        },
        nullptr);
  }
  close_socket(sock);
  return true;
}

HttpsServer::HttpsServer(const char* cert_path, const char* key_path,
                         const ConnectionOptions& options)
    : httplib::SSLServer(cert_path, key_path), service_(options) {
  new_task_queue = [this] { return service_.new_task_queue(); };
  advertise_limits(*this, options);
}

bool HttpsServer::process_and_close_socket(socket_t sock) {
  const ConnectionOptions& o = service_.options();
  const ConnectionStop& stop = service_.stop_signal();
  SSL* ssl = SSL_new(ssl_context());
  bool ok = ssl != nullptr && SSL_set_fd(ssl, sock) == 1;
  // The handshake is part of the first request's head: idle until its first
  // byte, then done within head_timeout.
  ok = ok && wait_socket(sock, POLLIN, ConnectionClock::now() + o.idle_timeout, stop) ==
                 WaitResult::kReady;
  ok = ok && tls_accept(sock, ssl, ConnectionClock::now() + o.head_timeout, stop);
  if (ok) {
    ConnectionStream strm(sock, ssl, stop, o.write_timeout);
    service_.serve(
        strm,
        [this](httplib::Stream& s, bool close_connection, bool& connection_closed,
               const std::function<void(httplib::Request&)>& setup) {
          return process_request(s, close_connection, connection_closed, setup);
        },
        [ssl](httplib::Request& req) { req.ssl = ssl; });
    // close_notify, not waiting for the client's (the socket is non-blocking).
    if (strm.tls_intact()) SSL_shutdown(ssl);
  }
  if (ssl != nullptr) SSL_free(ssl);
  close_socket(sock);
  return ok;
}

size_t raise_open_file_limit(size_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < wanted) {
    rlimit raised = lim;
    raised.rlim_cur =
        lim.rlim_max == RLIM_INFINITY ? wanted : std::min<rlim_t>(wanted, lim.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(lim.rlim_cur);
}

}  // namespace prefixd
