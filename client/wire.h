// The JSON wire of the prefixd HTTP API as the C++ client sees it (daemon/api.md): request and
// answer types, the request bodies it sends, the parsers of what comes back, and the
// prefix-affinity key. No I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/result.h"

namespace prefixd::client {

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
  std::string onboard_path;  // JSON restore_path: "none" | "restore" | "recompute"
  double queue_ms = 0;
  double onboard_ms = 0;  // JSON restore_ms
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
  int64_t remote_tokens = 0;
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

// Answers of the other endpoints, as Client returns them (exposed for tests): each fails with a
// message "malformed <what> answer: ..." naming the bad field.
Result<LookupResult> parse_lookup(const nlohmann::json& answer);
Result<PrefetchResult> parse_prefetch(const nlohmann::json& answer);
Result<PinResult> parse_pin(const nlohmann::json& answer);
Result<int64_t> parse_cleared_blocks(const nlohmann::json& answer);
Result<HealthInfo> parse_health(const nlohmann::json& answer);
Result<std::vector<ModelInfo>> parse_models(const nlohmann::json& answer);
Result<std::vector<int32_t>> parse_tokenize(const nlohmann::json& answer);
Result<std::string> parse_detokenize(const nlohmann::json& answer);

// One streamed chunk (an object, not "[DONE]" and without "error"): copies its id, object,
// model, usage and prefix_cache into *out (the first id, object and model seen stay), and when
// it has a choice fills *delta (all but elapsed_ms) and appends it to out's text, token ids and
// finish reason. Returns whether the chunk had a choice; fails naming the bad field.
Result<bool> apply_stream_chunk(const nlohmann::json& chunk, Completion* out, StreamDelta* delta);

}  // namespace prefixd::client
