// prefixd client: request bodies, response parsing, SSE stream handling over cpp-httplib.
// JSON errors are caught here and turned into Status; nothing throws out of this file.
#include "client/client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace prefixd::client {

using nlohmann::json;

namespace {

// Internal parse failure, caught at each parser's boundary.
struct FieldError {
  std::string message;
};

int64_t int_field(const json& obj, const char* key, int64_t fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw FieldError{std::string("field '") + key + "' is not a number"};
  if (it->is_number_float()) return static_cast<int64_t>(std::llround(it->get<double>()));
  return it->get<int64_t>();
}

double double_field(const json& obj, const char* key, double fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw FieldError{std::string("field '") + key + "' is not a number"};
  return it->get<double>();
}

std::string string_field(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (!it->is_string()) throw FieldError{std::string("field '") + key + "' is not a string"};
  return it->get<std::string>();
}

const json& object_field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return kNull;
  if (!it->is_object()) throw FieldError{std::string("field '") + key + "' is not an object"};
  return *it;
}

std::vector<int32_t> ids_field(const json& obj, const char* key) {
  std::vector<int32_t> ids;
  if (!obj.is_object()) return ids;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ids;
  if (!it->is_array()) throw FieldError{std::string("field '") + key + "' is not an array"};
  ids.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number_integer())
      throw FieldError{std::string("field '") + key + "' holds a non-integer"};
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

json prompt_json(const Prompt& prompt) {
  if (const auto* text = std::get_if<std::string>(&prompt)) return *text;
  return std::get<std::vector<int32_t>>(prompt);
}

json messages_json(const std::vector<ChatMessage>& messages) {
  json out = json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

void add_params(const SamplingParams& p, bool stream, json* body) {
  json& b = *body;
  b["max_tokens"] = p.max_tokens;
  if (p.temperature) b["temperature"] = *p.temperature;
  if (p.top_p) b["top_p"] = *p.top_p;
  if (p.top_k) b["top_k"] = *p.top_k;
  if (p.min_p) b["min_p"] = *p.min_p;
  if (p.seed) b["seed"] = *p.seed;
  if (p.repetition_penalty) b["repetition_penalty"] = *p.repetition_penalty;
  if (!p.stop.empty()) b["stop"] = p.stop;
  if (!p.model.empty()) b["model"] = p.model;
  if (!p.user.empty()) b["user"] = p.user;
  if (!p.cache_salt.empty()) b["cache_salt"] = p.cache_salt;
  b["stream"] = stream;
  if (stream) b["stream_options"] = {{"include_usage", p.include_usage}};
}

Usage usage_from(const json& u) {
  Usage usage;
  usage.prompt_tokens = int_field(u, "prompt_tokens", 0);
  usage.completion_tokens = int_field(u, "completion_tokens", 0);
  usage.total_tokens = int_field(u, "total_tokens", usage.prompt_tokens + usage.completion_tokens);
  usage.cached_tokens = int_field(object_field(u, "prompt_tokens_details"), "cached_tokens", 0);
  return usage;
}

PrefixCacheInfo prefix_cache_from(const json& p) {
  PrefixCacheInfo info;
  info.cached_tokens = int_field(p, "cached_tokens", 0);
  info.device_tokens = int_field(p, "device_tokens", 0);
  info.host_tokens = int_field(p, "host_tokens", 0);
  info.disk_tokens = int_field(p, "disk_tokens", 0);
  info.remote_tokens = int_field(p, "remote_tokens", 0);
  info.prefill_tokens = int_field(p, "prefill_tokens", 0);
  info.restore_path = string_field(p, "restore_path");
  info.queue_ms = double_field(p, "queue_ms", 0);
  info.restore_ms = double_field(p, "restore_ms", 0);
  info.prefill_ms = double_field(p, "prefill_ms", 0);
  info.ttft_ms = double_field(p, "ttft_ms", 0);
  info.decode_ms = double_field(p, "decode_ms", 0);
  return info;
}

TierStats tier_from(const json& t) {
  TierStats s;
  s.capacity_bytes = int_field(t, "capacity_bytes", 0);
  s.used_bytes = int_field(t, "used_bytes", 0);
  s.blocks = int_field(t, "blocks", 0);
  s.hits = int_field(t, "hits", 0);
  s.misses = int_field(t, "misses", 0);
  s.evictions = int_field(t, "evictions", 0);
  return s;
}

// Runs a parser body, turning JSON type errors into a Status naming `what`.
template <typename T, typename F>
Result<T> guarded(const char* what, F&& body) {
  try {
    return body();
  } catch (const FieldError& e) {
    return Status::error(std::string("malformed ") + what + ": " + e.message);
  } catch (const json::exception& e) {
    return Status::error(std::string("malformed ") + what + ": " + e.what());
  }
}

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

// "::1" -> "[::1]"; names and IPv4 addresses unchanged.
std::string url_host(const std::string& host) {
  return host.find(':') == std::string::npos ? host : "[" + host + "]";
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

// FNV-1a, 64 bits: the prefix key needs a stable, well-spread value, not a secret one.
class Fnv1a64 {
 public:
  void add(const void* bytes, size_t n) {
    const auto* p = static_cast<const unsigned char*>(bytes);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ULL;
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// Answers above this (error bodies, or a stream request answered with plain JSON) abort the call.
constexpr size_t kMaxPlainBodyBytes = size_t{64} << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ClientOptions

Status ClientOptions::set_url(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::error("daemon URL '" + url + "': " + why);
  };
  bool use_tls = false;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    use_tls = true;
    rest = url.substr(8);
  } else {
    return bad("does not start with http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#@") != std::string::npos)
    return bad("give only scheme://HOST[:PORT], without a path, query or user");
  std::string new_host, port_text;
  bool has_port = false;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unclosed '[' around an IPv6 address");
    new_host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty() && after[0] != ':') return bad("unexpected text after ']'");
    has_port = !after.empty();
    if (has_port) port_text = after.substr(1);
  } else {
    const size_t colon = rest.find(':');
    new_host = rest.substr(0, colon);
    has_port = colon != std::string::npos;
    if (has_port) port_text = rest.substr(colon + 1);
  }
  if (new_host.empty()) return bad("no host");
  // cpp-httplib 0.11 reads an https URL's bracketed host as digits and colons only.
  if (use_tls && new_host.find(':') != std::string::npos &&
      new_host.find_first_not_of("0123456789:") != std::string::npos)
    return bad("https to an IPv6 address with letters is not supported; use a host name");
  int32_t new_port = use_tls ? 443 : 80;
  if (has_port) {
    if (port_text.empty() || port_text.size() > 5 ||
        port_text.find_first_not_of("0123456789") != std::string::npos)
      return bad("the port is not a number");
    new_port = static_cast<int32_t>(std::strtol(port_text.c_str(), nullptr, 10));
    if (new_port < 1 || new_port > 65535) return bad("the port is not in 1..65535");
  }
  host = std::move(new_host);
  port = new_port;
  tls = use_tls;
  return Status::ok_status();
}

std::string ClientOptions::url() const {
  return std::string(tls ? "https://" : "http://") + url_host(host) + ":" + std::to_string(port);
}

// ---------------------------------------------------------------------------------------------
// SseParser

// Drops what was buffered and keeps the reason; the parser accepts nothing more.
bool SseParser::fail(const char* what) {
  const std::string limit = max_bytes_ % (size_t{1} << 20) == 0
                                ? std::to_string(max_bytes_ >> 20) + " MiB"
                                : std::to_string(max_bytes_) + " bytes";
  error_ = std::string(what) + " longer than " + limit + ": stream aborted";
  line_.clear();
  line_.shrink_to_fit();
  data_.clear();
  data_.shrink_to_fit();
  return false;
}

bool SseParser::feed(const char* bytes, size_t n_bytes,
                     const std::function<bool(const std::string&)>& on_event) {
  if (!error_.empty()) return false;
  size_t i = 0;
  while (i < n_bytes) {
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (bytes[i] == '\n') {  // second half of a \r\n split or not across chunks
        ++i;
        continue;
      }
    }
    size_t j = i;
    while (j < n_bytes && bytes[j] != '\n' && bytes[j] != '\r') ++j;
    if (j - i > max_bytes_ - line_.size()) return fail("SSE line");
    line_.append(bytes + i, j - i);
    if (j == n_bytes) break;
    last_was_cr_ = bytes[j] == '\r';
    i = j + 1;
    if (!end_line(on_event)) return false;
  }
  return true;
}

bool SseParser::finish(const std::function<bool(const std::string&)>& on_event) {
  if (!error_.empty()) return false;
  last_was_cr_ = false;
  if (!line_.empty() && !end_line(on_event)) return false;
  return end_line(on_event);  // an empty line: dispatches pending data
}

bool SseParser::end_line(const std::function<bool(const std::string&)>& on_event) {
  if (line_.empty()) {
    if (!has_data_) return true;
    std::string event = std::move(data_);
    data_.clear();
    has_data_ = false;
    return on_event(event);
  }
  if (line_[0] != ':') {
    size_t colon = line_.find(':');
    std::string_view field(line_.data(), colon == std::string::npos ? line_.size() : colon);
    if (field == "data") {
      size_t start = colon == std::string::npos ? line_.size() : colon + 1;
      if (start < line_.size() && line_[start] == ' ') ++start;
      if (data_.size() + 1 + (line_.size() - start) > max_bytes_) return fail("SSE event");
      if (has_data_) data_.push_back('\n');
      data_.append(line_, start, std::string::npos);
      has_data_ = true;
    }
  }
  line_.clear();
  return true;
}

// ---------------------------------------------------------------------------------------------
// Bodies and parsers

CacheQuery CacheQuery::of_text(std::string text) {
  CacheQuery q;
  q.prompt = Prompt(std::move(text));
  return q;
}

CacheQuery CacheQuery::of_ids(std::vector<int32_t> ids) {
  CacheQuery q;
  q.prompt = Prompt(std::move(ids));
  return q;
}

CacheQuery CacheQuery::of_messages(std::vector<ChatMessage> messages) {
  CacheQuery q;
  q.messages = std::move(messages);
  return q;
}

std::string prefix_key(const Prompt& prompt) {
  Fnv1a64 h;
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    h.add("text", 5);
    h.add(text->data(), std::min(text->size(), kPrefixKeyTextBytes));
  } else {
    const auto& ids = std::get<std::vector<int32_t>>(prompt);
    h.add("ids", 4);
    for (size_t i = 0; i < std::min(ids.size(), kPrefixKeyIds); ++i) {
      const uint32_t v = static_cast<uint32_t>(ids[i]);
      const unsigned char le[4] = {  // little-endian whatever the host
          static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
      h.add(le, 4);
    }
  }
  return h.hex();
}

std::string prefix_key(const std::vector<ChatMessage>& messages) {
  Fnv1a64 h;
  h.add("chat", 5);
  if (!messages.empty()) {
    const ChatMessage& first = messages.front();
    h.add(first.role.c_str(), first.role.size() + 1);  // with its '\0': role and content apart
    h.add(first.content.data(), std::min(first.content.size(), kPrefixKeyTextBytes));
  }
  return h.hex();
}

json completion_body(const CompletionRequest& request, bool stream) {
  json body = json::object();
  body["prompt"] = prompt_json(request.prompt);
  add_params(request.params, stream, &body);
  return body;
}

json chat_body(const ChatRequest& request, bool stream) {
  json body = json::object();
  body["messages"] = messages_json(request.messages);
  add_params(request.params, stream, &body);
  return body;
}

json cache_query_body(const CacheQuery& query) {
  json body = json::object();
  if (query.prompt) {
    body["prompt"] = prompt_json(*query.prompt);
  } else {
    body["messages"] = messages_json(query.messages);
  }
  if (!query.cache_salt.empty()) body["cache_salt"] = query.cache_salt;
  return body;
}

Result<Usage> parse_usage(const json& usage) {
  return guarded<Usage>("usage", [&]() -> Result<Usage> {
    if (!usage.is_object()) return Status::error("malformed usage: not an object");
    return usage_from(usage);
  });
}

Result<PrefixCacheInfo> parse_prefix_cache(const json& prefix_cache) {
  return guarded<PrefixCacheInfo>("prefix_cache", [&]() -> Result<PrefixCacheInfo> {
    if (!prefix_cache.is_object()) return Status::error("malformed prefix_cache: not an object");
    return prefix_cache_from(prefix_cache);
  });
}

Result<Completion> parse_completion(const json& response) {
  return guarded<Completion>("completion", [&]() -> Result<Completion> {
    if (!response.is_object()) return Status::error("malformed completion: not an object");
    Completion c;
    c.id = string_field(response, "id");
    c.object = string_field(response, "object");
    c.model = string_field(response, "model");
    auto choices = response.find("choices");
    if (choices == response.end() || !choices->is_array() || choices->empty()) {
      return Status::error("malformed completion: no choices");
    }
    const json& choice = (*choices)[0];
    if (!choice.is_object()) return Status::error("malformed completion: choice is not an object");
    const json& message = object_field(choice, "message");
    c.text = message.is_object() ? string_field(message, "content") : string_field(choice, "text");
    c.token_ids = ids_field(choice, "token_ids");
    c.finish_reason = string_field(choice, "finish_reason");
    const json& usage = object_field(response, "usage");
    if (usage.is_object()) c.usage = usage_from(usage);
    const json& prefix = object_field(response, "prefix_cache");
    if (prefix.is_object()) c.prefix_cache = prefix_cache_from(prefix);
    c.raw = response;
    return c;
  });
}

Result<CacheStats> parse_cache_stats(const json& stats) {
  return guarded<CacheStats>("cache stats", [&]() -> Result<CacheStats> {
    if (!stats.is_object()) return Status::error("malformed cache stats: not an object");
    CacheStats s;
    s.block_size = int_field(stats, "block_size", 0);
    s.tokens_saved = int_field(stats, "tokens_saved", 0);
    s.prompt_tokens = int_field(stats, "prompt_tokens", 0);
    const json& tiers = object_field(stats, "tiers");
    s.device = tier_from(object_field(tiers, "device"));
    s.host = tier_from(object_field(tiers, "host"));
    s.disk = tier_from(object_field(tiers, "disk"));
    s.has_remote = tiers.contains("remote");
    if (s.has_remote) s.remote = tier_from(object_field(tiers, "remote"));
    s.raw = stats;
    return s;
  });
}

// ---------------------------------------------------------------------------------------------
// Client

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

Result<Completion> Client::stream(const std::string& path, const json& body,
                                  const std::string& prefix_key, const TokenCallback& on_delta) {
  auto t0 = std::chrono::steady_clock::now();
  Completion out;
  out.raw = nullptr;
  int32_t http_status = 0;
  bool is_sse = false;
  double retry_after_s = -1;
  std::string plain_body;  // non-SSE or error answers
  bool saw_done = false;
  bool cancelled = false;         // on_delta returned false
  std::optional<Status> failure;  // malformed chunk or in-stream error
  SseParser parser;

  auto on_event = [&](const std::string& data) -> bool {
    if (saw_done) return true;  // ignore anything after [DONE]
    if (data == "[DONE]") {
      saw_done = true;
      return true;
    }
    json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded() || !chunk.is_object()) {
      failure = fail_other("malformed SSE chunk: " + data.substr(0, 200));
      return false;
    }
    if (chunk.contains("error")) {
      failure = fail_http(http_status, data, -1);
      return false;
    }
    ++out.n_chunks;
    Result<bool> handled = guarded<bool>("SSE chunk", [&]() -> Result<bool> {
      if (out.id.empty()) out.id = string_field(chunk, "id");
      if (out.object.empty()) out.object = string_field(chunk, "object");
      if (out.model.empty()) out.model = string_field(chunk, "model");
      const json& usage = object_field(chunk, "usage");
      if (usage.is_object()) {
        out.usage = usage_from(usage);
        out.raw = chunk;
      }
      const json& prefix = object_field(chunk, "prefix_cache");
      if (prefix.is_object()) out.prefix_cache = prefix_cache_from(prefix);
      auto choices = chunk.find("choices");
      if (choices == chunk.end() || choices->is_null()) return true;
      if (!choices->is_array()) throw FieldError{"field 'choices' is not an array"};
      if (choices->empty()) return true;
      const json& choice = (*choices)[0];
      if (!choice.is_object()) throw FieldError{"choice is not an object"};
      StreamDelta delta;
      const json& d = object_field(choice, "delta");
      if (d.is_object()) {
        delta.text = string_field(d, "content");
        delta.role = string_field(d, "role");
      } else {
        delta.text = string_field(choice, "text");
      }
      delta.token_ids = ids_field(choice, "token_ids");
      if (delta.token_ids.empty() && d.is_object()) delta.token_ids = ids_field(d, "token_ids");
      delta.finish_reason = string_field(choice, "finish_reason");
      delta.elapsed_ms = ms_since(t0);
      out.text += delta.text;
      out.token_ids.insert(out.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      if (!delta.finish_reason.empty()) out.finish_reason = delta.finish_reason;
      if (on_delta && !on_delta(delta)) {
        cancelled = true;
        return false;
      }
      return true;
    });
    if (!handled.ok()) {
      failure = fail_other(handled.message());
      return false;
    }
    return handled.value();
  };

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!prefix_key.empty()) req.set_header(kPrefixKeyHeader, prefix_key);
  req.response_handler = [&](const httplib::Response& res) {
    http_status = res.status;
    is_sse = res.get_header_value("Content-Type").rfind("text/event-stream", 0) == 0;
    retry_after_s = parse_retry_after(res.get_header_value("Retry-After"));
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t /*offset*/, uint64_t /*total*/) {
    if (http_status < 200 || http_status >= 300 || !is_sse) {
      if (n > kMaxPlainBodyBytes - plain_body.size()) {
        failure = fail_other("POST " + path + ": answer longer than " +
                             std::to_string(kMaxPlainBodyBytes >> 20) + " MiB: aborted");
        return false;
      }
      plain_body.append(data, n);
      return true;
    }
    if (parser.feed(data, n, on_event)) return true;
    if (!parser.error().empty()) failure = fail_other("POST " + path + ": " + parser.error());
    return false;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = http_->send(req, res, err);
  if (cancelled) return fail_other("stream cancelled by the caller");
  if (failure) return *failure;
  if (!sent) return fail_transport("POST", path, err);
  if (http_status == 0) http_status = res.status;
  if (plain_body.empty() && !res.body.empty()) plain_body = res.body;
  if (http_status < 200 || http_status >= 300)
    return fail_http(http_status, plain_body, retry_after_s);
  if (!is_sse) {
    // The server answered with one JSON document: accept it as a whole completion.
    json parsed = json::parse(plain_body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return fail_other("stream answer is neither SSE nor JSON");
    Result<Completion> c = parse_completion(parsed);
    if (!c.ok()) return fail_other(c.message());
    StreamDelta delta;
    delta.text = c->text;
    delta.token_ids = c->token_ids;
    delta.finish_reason = c->finish_reason;
    delta.elapsed_ms = ms_since(t0);
    if (on_delta && !on_delta(delta)) return fail_other("stream cancelled by the caller");
    c->total_ms = ms_since(t0);
    return c;
  }
  if (!parser.finish(on_event)) {
    if (cancelled) return fail_other("stream cancelled by the caller");
    if (failure) return *failure;
  }
  if (!saw_done) return fail_other("stream ended without data: [DONE]");
  last_error_ = ApiError{};
  out.total_ms = ms_since(t0);
  return out;
}

Result<CacheStats> Client::stats() {
  Result<json> r = request_json("GET", "/v1/cache/stats", nullptr);
  if (!r.ok()) return r.status();
  Result<CacheStats> s = parse_cache_stats(r.value());
  if (!s.ok()) return fail_other(s.message());
  return s;
}

Result<LookupResult> Client::lookup(const CacheQuery& query) {
  Result<json> r = post_cache_query("/v1/cache/lookup", query);
  if (!r.ok()) return r.status();
  const json& j = r.value();
  Result<LookupResult> out = guarded<LookupResult>("lookup answer", [&]() -> Result<LookupResult> {
    LookupResult l;
    l.prompt_tokens = int_field(j, "prompt_tokens", 0);
    l.cached_tokens = int_field(j, "cached_tokens", 0);
    l.device_tokens = int_field(j, "device_tokens", 0);
    l.host_tokens = int_field(j, "host_tokens", 0);
    l.disk_tokens = int_field(j, "disk_tokens", 0);
    return l;
  });
  if (!out.ok()) return fail_other(out.message());
  return out;
}

Result<PrefetchResult> Client::prefetch(const CacheQuery& query) {
  Result<json> r = post_cache_query("/v1/cache/prefetch", query);
  if (!r.ok()) return r.status();
  const json& j = r.value();
  Result<PrefetchResult> out =
      guarded<PrefetchResult>("prefetch answer", [&]() -> Result<PrefetchResult> {
        PrefetchResult p;
        p.prompt_tokens = int_field(j, "prompt_tokens", 0);
        p.cached_tokens = int_field(j, "cached_tokens", 0);
        p.prefill_tokens = int_field(j, "prefill_tokens", 0);
        p.blocks = int_field(j, "blocks", 0);
        return p;
      });
  if (!out.ok()) return fail_other(out.message());
  return out;
}

static Result<PinResult> parse_pin(const json& j) {
  return guarded<PinResult>("pin answer", [&]() -> Result<PinResult> {
    PinResult p;
    p.pinned_blocks = int_field(j, "pinned_blocks", 0);
    p.pinned_tokens = int_field(j, "pinned_tokens", 0);
    return p;
  });
}

Result<PinResult> Client::pin(const CacheQuery& query) {
  Result<json> r = post_cache_query("/v1/cache/pin", query);
  if (!r.ok()) return r.status();
  Result<PinResult> p = parse_pin(r.value());
  if (!p.ok()) return fail_other(p.message());
  return p;
}

Result<PinResult> Client::unpin(const CacheQuery& query) {
  Result<json> r = post_cache_query("/v1/cache/unpin", query);
  if (!r.ok()) return r.status();
  Result<PinResult> p = parse_pin(r.value());
  if (!p.ok()) return fail_other(p.message());
  return p;
}

Result<int64_t> Client::clear() {
  Result<json> r = request_json("DELETE", "/v1/cache", nullptr);
  if (!r.ok()) return r.status();
  const json& j = r.value();
  Result<int64_t> n = guarded<int64_t>(
      "clear answer", [&]() -> Result<int64_t> { return int_field(j, "cleared_blocks", 0); });
  if (!n.ok()) return fail_other(n.message());
  return n;
}

Result<HealthInfo> Client::health() {
  Result<json> r = request_json("GET", "/health", nullptr);
  if (!r.ok()) return r.status();
  const json& j = r.value();
  Result<HealthInfo> h = guarded<HealthInfo>("health answer", [&]() -> Result<HealthInfo> {
    return HealthInfo{string_field(j, "status"), string_field(j, "backend")};
  });
  if (!h.ok()) return fail_other(h.message());
  return h;
}

Result<std::vector<ModelInfo>> Client::models() {
  Result<json> r = request_json("GET", "/v1/models", nullptr);
  if (!r.ok()) return r.status();
  const json& j = r.value();
  using Models = std::vector<ModelInfo>;
  Result<Models> m = guarded<Models>("models answer", [&]() -> Result<Models> {
    Models models;
    auto data = j.is_object() ? j.find("data") : j.end();
    if (!j.is_object() || data == j.end() || !data->is_array()) {
      throw FieldError{"field 'data' is not an array"};
    }
    for (const json& e : *data) {
      models.push_back(ModelInfo{string_field(e, "id"), string_field(e, "owned_by"),
                                 int_field(e, "context_length", 0), string_field(e, "backend")});
    }
    return models;
  });
  if (!m.ok()) return fail_other(m.message());
  return m;
}

Result<std::vector<int32_t>> Client::tokenize(const std::string& content, bool add_special) {
  Result<json> r =
      request_json("POST", "/tokenize", {{"content", content}, {"add_special", add_special}});
  if (!r.ok()) return r.status();
  const json& j = r.value();
  using Ids = std::vector<int32_t>;
  Result<Ids> ids = guarded<Ids>("tokenize answer", [&]() -> Result<Ids> {
    if (!j.is_object() || !j.contains("tokens")) throw FieldError{"field 'tokens' is missing"};
    return ids_field(j, "tokens");
  });
  if (!ids.ok()) return fail_other(ids.message());
  return ids;
}

Result<std::string> Client::detokenize(const std::vector<int32_t>& token_ids) {
  Result<json> r = request_json("POST", "/detokenize", {{"tokens", token_ids}});
  if (!r.ok()) return r.status();
  const json& j = r.value();
  Result<std::string> s = guarded<std::string>("detokenize answer", [&]() -> Result<std::string> {
    if (!j.is_object() || !j.contains("content")) throw FieldError{"field 'content' is missing"};
    return string_field(j, "content");
  });
  if (!s.ok()) return fail_other(s.message());
  return s;
}

Result<std::string> Client::metrics() { return request_text("GET", "/metrics", "", ""); }

}  // namespace prefixd::client
