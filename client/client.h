// C++ client for the prefixd HTTP API (daemon/api.md): completions, chat, SSE streaming with a
// per-token callback, and the cache endpoints. Depends only on common/, cpp-httplib and
// nlohmann-json; never on engine/ or daemon/ headers. Everything is in namespace
// prefixd::client: the engine and daemon have types of the same names (SamplingParams, Usage,
// ApiError, ModelInfo, ...) and the test programs link both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/result.h"

namespace httplib {
class Client;
enum class Error;
}

namespace prefixd::client {

// Where and how to reach the daemon. Times are in seconds.
struct ClientOptions {
  std::string host = "127.0.0.1";
  int32_t port = 8080;
  // https: TLS, verifying the daemon's certificate chain and that it names `host` (unless
  // insecure).
  bool tls = false;
  std::string ca_cert_path;  // https: PEM file of the CAs to trust; empty = the system's CAs
  bool insecure = false;     // https: skip certificate verification (anyone on the path can read
                             // and change the traffic, the API key included); off by default
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double connect_timeout_s = 5.0;
  double read_timeout_s = 600.0;  // longest silence allowed between bytes of a response
  double write_timeout_s = 60.0;
  bool keep_alive = true;  // reuse one TCP connection across calls
  bool tcp_nodelay = true;  // no Nagle: request writes never wait for a delayed ACK
  // Completions, chat and the cache queries (lookup, prefetch, pin, unpin) send
  // "X-Prefix-Key: prefix_key(...)", so a load balancer in front of
  // several replicas (ops/haproxy/haproxy.cfg) sends requests sharing a prompt's leading part to
  // the same replica. The key is a hash: the prompt itself is never sent in a header.
  bool prefix_key_header = true;

  // Sets host, port and tls from a base URL: "http://HOST[:PORT]" or "https://HOST[:PORT]"
  // (default ports 80 and 443; HOST may be a bracketed IPv6 address; a trailing "/" is allowed,
  // any other path, a query or user info is not). Leaves the options unchanged on error.
  Status set_url(const std::string& url);
  // The base URL: "http://127.0.0.1:8080", "https://[::1]:8443".
  std::string url() const;
};

// A prompt: text, or token ids (exact token counts; ids must be inside the model's vocabulary).
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

// Sampling and bookkeeping fields shared by completions and chat. Unset optionals are not sent,
// so the server's defaults apply (temperature 1.0; api.md).
struct SamplingParams {
  int32_t max_tokens = 16;
  std::optional<double> temperature;  // 0 = greedy
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<uint64_t> seed;
  std::optional<double> repetition_penalty;
  std::vector<std::string> stop;  // empty = not sent
  std::string model;              // empty = not sent (the served model)
  std::string user;               // empty = not sent
  std::string cache_salt;         // empty = not sent
  bool include_usage = true;      // streaming: ask for the final usage chunk
};

struct CompletionRequest {
  Prompt prompt;
  SamplingParams params;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  SamplingParams params;
};

// Body of the cache endpoints (lookup, prefetch, pin, unpin): a prompt or chat messages.
struct CacheQuery {
  std::optional<Prompt> prompt;       // used when set
  std::vector<ChatMessage> messages;  // used when prompt is unset
  std::string cache_salt;             // empty = not sent
  static CacheQuery of_text(std::string text);
  static CacheQuery of_ids(std::vector<int32_t> ids);
  static CacheQuery of_messages(std::vector<ChatMessage> messages);
};

// The `usage` object. Counts in tokens.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
};

// The `prefix_cache` extension object: where the prompt's cached tokens came from and the
// server's own timings (milliseconds).
struct PrefixCacheInfo {
  int64_t cached_tokens = 0;
  int64_t device_tokens = 0;
  int64_t host_tokens = 0;
  int64_t disk_tokens = 0;
  int64_t remote_tokens = 0;  // from the remote tier (a memcached pool shared by replicas)
  int64_t prefill_tokens = 0;
  std::string restore_path;  // "none" | "restore" | "recompute"
  double queue_ms = 0;
  double restore_ms = 0;
  double prefill_ms = 0;
  double ttft_ms = 0;
  double decode_ms = 0;
};

// A finished completion or chat completion (streamed or not).
struct Completion {
  std::string id;
  std::string object;  // "text_completion" | "chat.completion" (for streams:
                       // the chunks' object)
  std::string model;
  std::string text;                // choices[0].text or choices[0].message.content;
                                   // for streams the concatenated deltas
  std::vector<int32_t> token_ids;  // generated ids when the server sent them
  std::string finish_reason;       // "stop" | "length" | "" when never sent
  std::optional<Usage> usage;      // absent when the server sent none
  std::optional<PrefixCacheInfo> prefix_cache;
  int32_t n_chunks = 0;  // streams: number of data events before [DONE]
  double total_ms = 0;   // client-side wall time of the whole call
  nlohmann::json raw;    // non-streamed: the response; streamed: the usage chunk
                         // (or null)
};

// One streamed chunk's new content, handed to a TokenCallback.
struct StreamDelta {
  std::string text;                // new text (choices[0].text or delta.content); may be empty
  std::vector<int32_t> token_ids;  // new token ids when the server sent them
  std::string role;                // chat: delta.role on the first chunk, else empty
  std::string finish_reason;       // set on the last chunk with choices
  double elapsed_ms = 0;           // client time since the call began (before connecting)
  // True when the chunk carries generated content (text or token ids).
  bool has_content() const { return !text.empty() || !token_ids.empty(); }
};

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

struct TierStats {
  int64_t capacity_bytes = 0;  // 0 = tier disabled
  int64_t used_bytes = 0;
  int64_t blocks = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
};

struct CacheStats {
  int64_t block_size = 0;  // tokens per block
  int64_t tokens_saved = 0;
  int64_t prompt_tokens = 0;
  TierStats device, host, disk;
  bool has_remote = false;  // the daemon has a remote tier (tiers.remote)
  TierStats remote;
  nlohmann::json raw;
};

struct LookupResult {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t device_tokens = 0;
  int64_t host_tokens = 0;
  int64_t disk_tokens = 0;
};

struct PrefetchResult {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;   // cached before the prefetch
  int64_t prefill_tokens = 0;  // computed by the prefetch
  int64_t blocks = 0;
};

struct PinResult {
  int64_t pinned_blocks = 0;
  int64_t pinned_tokens = 0;
};

struct HealthInfo {
  std::string status;
  std::string backend;
};

struct ModelInfo {
  std::string id;
  std::string owned_by;
  int64_t context_length = 0;
  std::string backend;
};

// Splits a text/event-stream byte stream into event payloads, whatever the chunk boundaries.
// Lines end in \n, \r\n or \r; "data:" lines of one event are joined with \n (one leading space
// after the colon is dropped); comment lines (":...") and other fields are ignored; a blank line
// dispatches the event. A line, or an event's data, longer than max_bytes is an error (a stream
// from a broken or hostile server cannot make the client buffer without bound). Not thread-safe.
class SseParser {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t{16} << 20;  // 16 MiB

  explicit SseParser(size_t max_bytes = kDefaultMaxBytes) : max_bytes_(max_bytes) {}

  // Feeds bytes; calls on_event(data) for every completed event with data. Stops early and
  // returns false when on_event returns false, or on a line or event over max_bytes (then
  // error() says so, and every later call returns false).
  bool feed(const char* bytes, size_t n_bytes,
            const std::function<bool(const std::string&)>& on_event);
  // End of stream: dispatches a final event that lacked its blank line. Returns on_event's
  // answer (true when nothing was pending; false after an error).
  bool finish(const std::function<bool(const std::string&)>& on_event);
  // Empty, or why the stream was refused ("SSE line longer than 16 MiB").
  const std::string& error() const { return error_; }

 private:
  bool end_line(const std::function<bool(const std::string&)>& on_event);
  bool fail(const char* what);
  size_t max_bytes_;   // bound on line_ and on data_
  std::string error_;  // set once a bound is exceeded
  std::string line_;   // current incomplete line
  std::string data_;   // data of the current event so far
  bool has_data_ = false;
  bool last_was_cr_ = false;  // previous byte was \r (a following \n is part of that line end)
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
  Status fail_http(int32_t http_status, const std::string& body, double retry_after_s);
  Status fail_other(std::string message);
  // "METHOD PATH to URL failed: <transport error>", with the certificate problem for TLS.
  Status fail_transport(const std::string& method, const std::string& path, httplib::Error err);

  ClientOptions options_;
  std::unique_ptr<httplib::Client> http_;
  ApiError last_error_;
};

// The prefix-affinity header and its value: 16 lowercase hex digits of a 64-bit FNV-1a hash of
// the prompt's leading part: the first kPrefixKeyTextBytes bytes of a text prompt, the first
// kPrefixKeyIds token ids, or the first chat message (role and up to kPrefixKeyTextBytes bytes
// of content: the system prompt). Prompts that share that part share the key; text, ids and
// chat never collide by construction (each hashes a different tag first).
inline constexpr const char* kPrefixKeyHeader = "X-Prefix-Key";
inline constexpr size_t kPrefixKeyTextBytes = 1024;
inline constexpr size_t kPrefixKeyIds = 256;
std::string prefix_key(const Prompt& prompt);
std::string prefix_key(const std::vector<ChatMessage>& messages);

// Request bodies as sent on the wire (exposed for tests).
nlohmann::json completion_body(const CompletionRequest& request, bool stream);
nlohmann::json chat_body(const ChatRequest& request, bool stream);
nlohmann::json cache_query_body(const CacheQuery& query);

// Response parsers (exposed for tests): fail with a message naming the bad field.
Result<Completion> parse_completion(const nlohmann::json& response);
Result<Usage> parse_usage(const nlohmann::json& usage);
Result<PrefixCacheInfo> parse_prefix_cache(const nlohmann::json& prefix_cache);
Result<CacheStats> parse_cache_stats(const nlohmann::json& stats);

}  // namespace prefixd::client
