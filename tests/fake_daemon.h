// Test support for the client tests: a fake daemon (an httplib::Server on a free loopback port,
// routes added by each test) and helpers that serve canned answers in the api.md format.
#pragma once

#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "client/client.h"

namespace prefixd::testing {

// Writes `text` to the sink in pieces of 1, 2, 3, 5, 7, 11, 13 bytes (cycling), so SSE events
// and line ends straddle HTTP chunks.
inline void write_odd_chunks(httplib::DataSink& sink, const std::string& text) {
  static const size_t kSizes[] = {1, 2, 3, 5, 7, 11, 13};
  size_t pos = 0;
  for (size_t k = 0; pos < text.size(); ++k) {
    size_t n = std::min(kSizes[k % 7], text.size() - pos);
    if (!sink.write(text.data() + pos, n)) return;
    pos += n;
  }
}

inline void serve_sse(httplib::Response& res, std::string text) {
  res.set_chunked_content_provider("text/event-stream",
                                   [text](size_t /*offset*/, httplib::DataSink& sink) {
                                     write_odd_chunks(sink, text);
                                     sink.done();
                                     return true;
                                   });
}

inline void serve_error(httplib::Response& res, int status, const std::string& message,
                        const std::string& type, const nlohmann::json& param,
                        const nlohmann::json& code) {
  res.status = status;
  nlohmann::json body = {
      {"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
  res.set_content(body.dump(), "application/json");
}

// A fake daemon: routes are added by each test before start().
class FakeDaemon {
 public:
  httplib::Server server;

  void start() {
    port_ = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server.listen_after_bind(); });
    for (int i = 0; i < 500 && !server.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    REQUIRE(server.is_running());
  }
  ~FakeDaemon() {
    server.stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  client::ClientOptions options() const {
    client::ClientOptions o;
    o.port = port_;
    o.read_timeout_s = 10;
    return o;
  }
  // The last request body and Authorization header seen by a handler that calls record().
  void record(const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    last_body_ = req.body;
    last_auth_ = req.get_header_value("Authorization");
    last_method_ = req.method;
  }
  nlohmann::json last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_.empty() ? nlohmann::json(nullptr) : nlohmann::json::parse(last_body_);
  }
  std::string last_auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_auth_;
  }
  std::string last_method() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_method_;
  }

 private:
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::string last_body_, last_auth_, last_method_;
};

// A loopback port nobody listens on: bound (never listened) and closed again.
inline int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace prefixd::testing
