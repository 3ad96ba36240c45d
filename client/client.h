// C++ client for the prefixd HTTP API (daemon/api.md): completions, chat, SSE streaming with a
// per-token callback, and the cache endpoints. This header is the whole client API: Client here,
// with ClientOptions (client_options.h), the wire types, bodies and parsers (wire.h) and the SSE
// decoder (sse_parser.h). Depends only on common/, cpp-httplib and nlohmann-json; never on
// engine/ or daemon/ headers. Everything is in namespace
// prefixd::client: the engine and daemon have types of the same names (SamplingParams, Usage,
// ApiError, ModelInfo, ...) and the test programs link both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client_options.h"
#include "client/sse_parser.h"
#include "client/wire.h"
#include "common/result.h"

namespace httplib {
class Client;
enum class Error;
}

namespace prefixd::client {

// Called on the calling thread for every chunk that has choices; return false to cancel the
// request (the connection is closed, which cancels it on the server).
using TokenCallback = std::function<bool(const StreamDelta&)>;

// Details of the last failed call, beyond the Status message.
struct ApiError {
  int32_t http_status = 0;    // 0 = no HTTP response (connection, timeout, cancel, parse)
  std::string message;        // the server's error.message, or the transport error
  std::string type;           // error.type
  std::string code;           // error.code ("" when null)
  std::string param;          // error.param ("" when null)
  double retry_after_s = -1;  // the Retry-After header when present (seconds), else -1
};

// A connection to one daemon. Not thread-safe: use one Client per thread (each holds its own
// keep-alive connection). Every call returns the parsed result, or an error whose message is
// "HTTP <status>: <server message>" for 4xx/5xx answers, or names the transport failure;
// last_error() then holds the details (status, type, code, Retry-After).
class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }
  const ApiError& last_error() const { return last_error_; }

  Result<Completion> complete(const CompletionRequest& request);
  Result<Completion> chat(const ChatRequest& request);
  // Streamed variants: on_delta sees every chunk; the result aggregates them, with usage and
  // prefix_cache from the final usage chunk (params.include_usage). A stream that ends without
  // "data: [DONE]" is an error.
  Result<Completion> complete_stream(const CompletionRequest& request,
                                     const TokenCallback& on_delta);
  Result<Completion> chat_stream(const ChatRequest& request, const TokenCallback& on_delta);

  Result<CacheStats> stats();
  Result<LookupResult> lookup(const CacheQuery& query);
  Result<PrefetchResult> prefetch(const CacheQuery& query);
  Result<PinResult> pin(const CacheQuery& query);
  Result<PinResult> unpin(const CacheQuery& query);
  Result<int64_t> clear();  // DELETE /v1/cache: number of cleared blocks
  Result<HealthInfo> health();
  Result<std::vector<ModelInfo>> models();
  Result<std::vector<int32_t>> tokenize(const std::string& content, bool add_special);
  Result<std::string> detokenize(const std::vector<int32_t>& token_ids);
  Result<std::string> metrics();  // Prometheus text

  // Raw access for tests and tools: sends body (JSON, or nothing when null) and returns the
  // parsed JSON answer of a 2xx response. prefix_key: sent as kPrefixKeyHeader when not empty.
  Result<nlohmann::json> request_json(const std::string& method, const std::string& path,
                                      const nlohmann::json& body, const std::string& prefix_key = "");

 private:
  // prefix_key: sent as kPrefixKeyHeader when not empty.
  Result<std::string> request_text(const std::string& method, const std::string& path,
                                   const std::string& body, const std::string& content_type,
                                   const std::string& prefix_key = "");
  // The cache endpoints' POSTs, with the query's prefix key (so a prefetch or pin through a
  // load balancer reaches the replica that will serve the prompt).
  Result<nlohmann::json> post_cache_query(const std::string& path, const CacheQuery& query);
  Result<Completion> post_completion(const std::string& path, const nlohmann::json& body,
                                     const std::string& prefix_key);
  Result<Completion> stream(const std::string& path, const nlohmann::json& body,
                            const std::string& prefix_key, const TokenCallback& on_delta);
  // stream()'s steps: one SSE event's data (false stops the stream), and an answer that came
  // as one JSON document instead of SSE.
  struct StreamCall;
  bool on_stream_event(StreamCall& call, const std::string& data);
  Result<Completion> plain_stream_answer(StreamCall& call);
  // A parsed answer: r's failure as it is; a parse failure is recorded (last_error) and returned.
  template <typename T>
  Result<T> answer(Result<nlohmann::json> r, Result<T> (*parse)(const nlohmann::json&)) {
    if (!r.ok()) return r.status();
    Result<T> parsed = parse(r.value());
    if (!parsed.ok()) return fail_other(parsed.message());
    return parsed;
  }
  Status fail_http(int32_t http_status, const std::string& body, double retry_after_s);
  Status fail_other(std::string message);
  // "METHOD PATH to URL failed: <transport error>", with the certificate problem for TLS.
  Status fail_transport(const std::string& method, const std::string& path, httplib::Error err);

  ClientOptions options_;
  std::unique_ptr<httplib::Client> http_;
  ApiError last_error_;
};

}  // namespace prefixd::client
