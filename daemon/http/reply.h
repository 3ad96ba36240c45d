// Reply: how a handler answers without httplib's types, which stay in
// daemon/http/ and the route table: a JSON document or ApiError, a text body,
// headers, or a chunked stream fed by a pump. The route wrapper
// (daemon/api/routes.cpp) makes one over the request's httplib::Response.
// Used on the request's connection thread only.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>

#include "daemon/http/api_error.h"

namespace httplib {
struct Response;
}

namespace prefixd {

// Where a streamed answer writes. write() returns false once the client has
// gone (the stream then ends); done() ends the answer after the last write.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(std::string_view bytes) = 0;
  virtual void done() = 0;
};

class Reply {
 public:
  explicit Reply(httplib::Response& res) : res_(res) {}

  // `body` as application/json with `status`.
  void json(const nlohmann::json& body, int status = 200);
  // The error in its JSON shape, with its status.
  void error(const ApiError& e);
  void header(const std::string& name, const std::string& value);
  // `body` as it is, of `content_type`, with `status`.
  void content(const std::string& body, const char* content_type, int status = 200);
  // A chunked answer of `content_type`: after the handler returns, `pump` is
  // called on the connection's thread, once per wake-up, until it returns
  // false or calls sink.done(). It owns the stream's state; it is destroyed
  // when the answer ends, however it ends.
  void stream(const char* content_type, std::function<bool(ChunkSink&)> pump);

 private:
  httplib::Response& res_;
};

// "prefix-" followed by 24 random hex digits.
inline std::string make_response_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  id += '-';
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

}  // namespace prefixd
