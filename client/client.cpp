// Client: one connection to a daemon over cpp-httplib (requests, errors, SSE streams). The wire
// format is in wire.cpp, the SSE decoder in sse_parser.cpp, URL options in client_options.cpp.
#include "client/client.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <utility>

namespace prefixd::client {

using nlohmann::json;

namespace {

void split_seconds(double seconds, time_t* sec, time_t* usec) {
  if (seconds < 0) seconds = 0;
  *sec = static_cast<time_t>(seconds);
  *usec = static_cast<time_t>((seconds - static_cast<double>(*sec)) * 1e6);
}

// Retry-After in seconds (delta-seconds form only); -1 when absent or an HTTP date.
double parse_retry_after(const std::string& value) {
  if (value.empty()) return -1;
  char* end = nullptr;
  double s = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || s < 0) return -1;
  return s;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Why OpenSSL did not accept the daemon's certificate (X509_V_ERR_* codes; 0 = the chain was
// fine, so the name did not match).
std::string certificate_problem(long verify_result, const std::string& host) {
  switch (verify_result) {
    case 0: return "the certificate does not name " + host;
    case 2: return "unable to get the issuer's certificate";
    case 9: return "the certificate is not yet valid";
    case 10: return "the certificate has expired";
    case 18: return "self-signed certificate";
    case 19: return "self-signed certificate in the chain";
    case 20: return "unable to get the local issuer certificate";
    case 21: return "unable to verify the first certificate";
    default: return "certificate verify error " + std::to_string(verify_result);
  }
}

// Answers above this (error bodies, or a stream request answered with plain JSON) abort the call.
constexpr size_t kMaxPlainBodyBytes = size_t{64} << 20;

}  // namespace

Client::Client(ClientOptions options) : options_(std::move(options)) {
  if (options_.tls) {
    // httplib::Client picks its TLS implementation from the URL's scheme.
    http_ = std::make_unique<httplib::Client>(options_.url());
    http_->enable_server_certificate_verification(!options_.insecure);
    if (!options_.ca_cert_path.empty()) http_->set_ca_cert_path(options_.ca_cert_path);
  } else {
    http_ = std::make_unique<httplib::Client>(options_.host, options_.port);
  }
  time_t sec = 0, usec = 0;
  split_seconds(options_.connect_timeout_s, &sec, &usec);
  http_->set_connection_timeout(sec, usec);
  split_seconds(options_.read_timeout_s, &sec, &usec);
  http_->set_read_timeout(sec, usec);
  split_seconds(options_.write_timeout_s, &sec, &usec);
  http_->set_write_timeout(sec, usec);
  http_->set_keep_alive(options_.keep_alive);
  http_->set_tcp_nodelay(options_.tcp_nodelay);
  if (!options_.api_key.empty()) http_->set_bearer_token_auth(options_.api_key);
}

Client::~Client() = default;

Status Client::fail_http(int32_t http_status, const std::string& body, double retry_after_s) {
  last_error_ = ApiError{};
  last_error_.http_status = http_status;
  last_error_.retry_after_s = retry_after_s;
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  bool have_message = false;
  if (parsed.is_object()) {
    auto err = parsed.find("error");
    if (err != parsed.end() && err->is_object()) {
      auto text = [&](const char* key) {
        auto it = err->find(key);
        return it != err->end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      last_error_.type = text("type");
      last_error_.code = text("code");
      last_error_.param = text("param");
      auto msg = err->find("message");
      if (msg != err->end() && msg->is_string()) {
        last_error_.message = msg->get<std::string>();
        have_message = true;
      }
    } else if (err != parsed.end() && err->is_string()) {
      last_error_.message = err->get<std::string>();
      have_message = true;
    }
  }
  if (!have_message) {
    last_error_.message = body.empty() ? "(empty body)" : body.substr(0, 300);
  }
  return Status::error("HTTP " + std::to_string(http_status) + ": " + last_error_.message);
}

Status Client::fail_other(std::string message) {
  last_error_ = ApiError{};
  last_error_.message = message;
  return Status::error(std::move(message));
}

Status Client::fail_transport(const std::string& method, const std::string& path,
                              httplib::Error err) {
  std::string why = httplib::to_string(err);
  if (err == httplib::Error::SSLServerVerification) {
    why = "the daemon's TLS certificate is not trusted: " +
          certificate_problem(http_->get_openssl_verify_result(), options_.host) +
          " (trust its CA with ca_cert_path, prefixctl --ca-cert FILE)";
  } else if (err == httplib::Error::SSLLoadingCerts) {
    why = "cannot load the CA certificates " +
          (options_.ca_cert_path.empty() ? std::string("of the system")
                                         : "from " + options_.ca_cert_path + " (PEM expected)");
  } else if (err == httplib::Error::SSLConnection) {
    why = "TLS handshake failed (is the daemon serving https?)";
  }
  // Plain http keeps the historical "HOST:PORT" form of the message.
  const std::string where =
      options_.tls ? options_.url() : options_.host + ":" + std::to_string(options_.port);
  return fail_other(method + " " + path + " to " + where + " failed: " + why);
}

Result<std::string> Client::request_text(const std::string& method, const std::string& path,
                                         const std::string& body, const std::string& content_type,
                                         const std::string& prefix_key) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  if (!prefix_key.empty()) req.set_header(kPrefixKeyHeader, prefix_key);
  if (!body.empty() || method == "POST") {
    req.body = body;
    req.set_header("Content-Type", content_type);
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!http_->send(req, res, err)) return fail_transport(method, path, err);
  if (res.status < 200 || res.status >= 300) {
    return fail_http(res.status, res.body, parse_retry_after(res.get_header_value("Retry-After")));
  }
  last_error_ = ApiError{};
  return std::move(res.body);
}

Result<json> Client::post_cache_query(const std::string& path, const CacheQuery& query) {
  std::string key;
  if (options_.prefix_key_header) {
    key = query.prompt ? prefix_key(*query.prompt) : prefix_key(query.messages);
  }
  return request_json("POST", path, cache_query_body(query), key);
}

Result<json> Client::request_json(const std::string& method, const std::string& path,
                                  const json& body, const std::string& prefix_key) {
  Result<std::string> text = request_text(method, path, body.is_null() ? std::string() : body.dump(),
                                          "application/json", prefix_key);
  if (!text.ok()) return text.status();
  json parsed = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return fail_other(method + " " + path +
                      ": response is not JSON: " + text.value().substr(0, 200));
  }
  return parsed;
}

Result<Completion> Client::post_completion(const std::string& path, const json& body,
                                           const std::string& prefix_key) {
  auto t0 = std::chrono::steady_clock::now();
  Result<json> r = request_json("POST", path, body, prefix_key);
  if (!r.ok()) return r.status();
  Result<Completion> c = parse_completion(r.value());
  if (!c.ok()) return fail_other(c.message());
  c->total_ms = ms_since(t0);
  return c;
}

Result<Completion> Client::complete(const CompletionRequest& request) {
  return post_completion("/v1/completions", completion_body(request, false),
                         options_.prefix_key_header ? prefix_key(request.prompt) : "");
}

Result<Completion> Client::chat(const ChatRequest& request) {
  return post_completion("/v1/chat/completions", chat_body(request, false),
                         options_.prefix_key_header ? prefix_key(request.messages) : "");
}

Result<Completion> Client::complete_stream(const CompletionRequest& request,
                                           const TokenCallback& on_delta) {
  return stream("/v1/completions", completion_body(request, true),
                options_.prefix_key_header ? prefix_key(request.prompt) : "", on_delta);
}

Result<Completion> Client::chat_stream(const ChatRequest& request, const TokenCallback& on_delta) {
  return stream("/v1/chat/completions", chat_body(request, true),
                options_.prefix_key_header ? prefix_key(request.messages) : "", on_delta);
}

// One streamed call: what httplib's callbacks have seen so far, and the completion the chunks
// add up to.
struct Client::StreamCall {
  std::string path;
  const TokenCallback* on_delta = nullptr;
  std::chrono::steady_clock::time_point t0;
  Completion out;
  int32_t http_status = 0;
  bool is_sse = false;
  double retry_after_s = -1;
  std::string plain_body;  // non-SSE or error answers
  bool saw_done = false;
  bool cancelled = false;         // on_delta returned false
  std::optional<Status> failure;  // malformed chunk or in-stream error
  SseParser parser;
};

Result<Completion> Client::stream(const std::string& path, const json& body,
                                  const std::string& prefix_key, const TokenCallback& on_delta) {
  StreamCall call;
  call.path = path;
  call.on_delta = &on_delta;
  call.t0 = std::chrono::steady_clock::now();
  call.out.raw = nullptr;
  const auto on_event = [&](const std::string& data) { return on_stream_event(call, data); };

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!prefix_key.empty()) req.set_header(kPrefixKeyHeader, prefix_key);
  req.response_handler = [&](const httplib::Response& res) {
    call.http_status = res.status;
    call.is_sse = res.get_header_value("Content-Type").rfind("text/event-stream", 0) == 0;
    call.retry_after_s = parse_retry_after(res.get_header_value("Retry-After"));
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t /*offset*/, uint64_t /*total*/) {
    if (call.http_status < 200 || call.http_status >= 300 || !call.is_sse) {
      if (n > kMaxPlainBodyBytes - call.plain_body.size()) {
        call.failure = fail_other("POST " + path + ": answer longer than " +
                                  std::to_string(kMaxPlainBodyBytes >> 20) + " MiB: aborted");
        return false;
      }
      call.plain_body.append(data, n);
      return true;
    }
    if (call.parser.feed(data, n, on_event)) return true;
    if (!call.parser.error().empty()) {
      call.failure = fail_other("POST " + path + ": " + call.parser.error());
    }
    return false;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = http_->send(req, res, err);
  if (call.cancelled) return fail_other("stream cancelled by the caller");
  if (call.failure) return *call.failure;
  if (!sent) return fail_transport("POST", path, err);
  if (call.http_status == 0) call.http_status = res.status;
  if (call.plain_body.empty() && !res.body.empty()) call.plain_body = res.body;
  if (call.http_status < 200 || call.http_status >= 300) {
    return fail_http(call.http_status, call.plain_body, call.retry_after_s);
  }
  if (!call.is_sse) return plain_stream_answer(call);
  if (!call.parser.finish(on_event)) {
    if (call.cancelled) return fail_other("stream cancelled by the caller");
    if (call.failure) return *call.failure;
  }
  if (!call.saw_done) return fail_other("stream ended without data: [DONE]");
  last_error_ = ApiError{};
  call.out.total_ms = ms_since(call.t0);
  return std::move(call.out);
}

bool Client::on_stream_event(StreamCall& call, const std::string& data) {
  if (call.saw_done) return true;  // ignore anything after [DONE]
  if (data == "[DONE]") {
    call.saw_done = true;
    return true;
  }
  json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    call.failure = fail_other("malformed SSE chunk: " + data.substr(0, 200));
    return false;
  }
  if (chunk.contains("error")) {
    call.failure = fail_http(call.http_status, data, -1);
    return false;
  }
  ++call.out.n_chunks;
  StreamDelta delta;
  Result<bool> has_choice = apply_stream_chunk(chunk, &call.out, &delta);
  if (!has_choice.ok()) {
    call.failure = fail_other(has_choice.message());
    return false;
  }
  if (!has_choice.value()) return true;
  delta.elapsed_ms = ms_since(call.t0);
  if (*call.on_delta && !(*call.on_delta)(delta)) {
    call.cancelled = true;
    return false;
  }
  return true;
}

Result<Completion> Client::plain_stream_answer(StreamCall& call) {
  // The server answered with one JSON document: accept it as a whole completion.
  json parsed = json::parse(call.plain_body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return fail_other("stream answer is neither SSE nor JSON");
  Result<Completion> c = parse_completion(parsed);
  if (!c.ok()) return fail_other(c.message());
  StreamDelta delta;
  delta.text = c->text;
  delta.token_ids = c->token_ids;
  delta.finish_reason = c->finish_reason;
  delta.elapsed_ms = ms_since(call.t0);
  if (*call.on_delta && !(*call.on_delta)(delta)) return fail_other("stream cancelled by the caller");
  c->total_ms = ms_since(call.t0);
  return c;
}

Result<CacheStats> Client::stats() {
  return answer(request_json("GET", "/v1/cache/stats", nullptr), parse_cache_stats);
}

Result<LookupResult> Client::lookup(const CacheQuery& query) {
  return answer(post_cache_query("/v1/cache/lookup", query), parse_lookup);
}

Result<PrefetchResult> Client::prefetch(const CacheQuery& query) {
  return answer(post_cache_query("/v1/cache/prefetch", query), parse_prefetch);
}

Result<PinResult> Client::pin(const CacheQuery& query) {
  return answer(post_cache_query("/v1/cache/pin", query), parse_pin);
}

Result<PinResult> Client::unpin(const CacheQuery& query) {
  return answer(post_cache_query("/v1/cache/unpin", query), parse_pin);
}

Result<int64_t> Client::clear() {
  return answer(request_json("DELETE", "/v1/cache", nullptr), parse_cleared_blocks);
}

Result<HealthInfo> Client::health() {
  return answer(request_json("GET", "/health", nullptr), parse_health);
}

Result<std::vector<ModelInfo>> Client::models() {
  return answer(request_json("GET", "/v1/models", nullptr), parse_models);
}

Result<std::vector<int32_t>> Client::tokenize(const std::string& content, bool add_special) {
  return answer(
      request_json("POST", "/tokenize", {{"content", content}, {"add_special", add_special}}),
      parse_tokenize);
}

Result<std::string> Client::detokenize(const std::vector<int32_t>& token_ids) {
  return answer(request_json("POST", "/detokenize", {{"tokens", token_ids}}), parse_detokenize);
}

Result<std::string> Client::metrics() { return request_text("GET", "/metrics", "", ""); }

}  // namespace prefixd::client
