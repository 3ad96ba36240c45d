// The client's JSON wire: request bodies, answer parsers and the prefix key (see wire.h).
// Parsers throw FieldError inside and turn it into a Status at their boundary (guarded).
#include "client/wire.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <utility>

namespace prefixd::client {

using nlohmann::json;

namespace {

// Internal parse failure, caught at each parser's boundary.
struct FieldError {
  std::string message;
};

// The value of `key` in `obj`: nullptr when `obj` is not an object or the
// field is absent or null (each reader below then returns its fallback).
const json* present_field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const json& obj, const char* key, int64_t fallback) {
  const json* it = present_field(obj, key);
  if (!it) return fallback;
  if (!it->is_number()) throw FieldError{std::string("field '") + key + "' is not a number"};
  if (it->is_number_float()) return static_cast<int64_t>(std::llround(it->get<double>()));
  return it->get<int64_t>();
}

double double_field(const json& obj, const char* key, double fallback) {
  const json* it = present_field(obj, key);
  if (!it) return fallback;
  if (!it->is_number()) throw FieldError{std::string("field '") + key + "' is not a number"};
  return it->get<double>();
}

std::string string_field(const json& obj, const char* key) {
  const json* it = present_field(obj, key);
  if (!it) return "";
  if (!it->is_string()) throw FieldError{std::string("field '") + key + "' is not a string"};
  return it->get<std::string>();
}

const json& object_field(const json& obj, const char* key) {
  static const json kNull;
  const json* it = present_field(obj, key);
  if (!it) return kNull;
  if (!it->is_object()) throw FieldError{std::string("field '") + key + "' is not an object"};
  return *it;
}

std::vector<int32_t> ids_field(const json& obj, const char* key) {
  std::vector<int32_t> ids;
  const json* it = present_field(obj, key);
  if (!it) return ids;
  if (!it->is_array()) throw FieldError{std::string("field '") + key + "' is not an array"};
  ids.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number_integer())
      throw FieldError{std::string("field '") + key + "' holds a non-integer"};
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// Reads each named integer field of `obj` (absent or null: 0) into its member of `out`.
template <typename T>
void read_int_fields(const json& obj, T* out,
                     std::initializer_list<std::pair<const char*, int64_t T::*>> fields) {
  for (const auto& [key, member] : fields) out->*member = int_field(obj, key, 0);
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
  info.onboard_path = string_field(p, "restore_path");
  info.queue_ms = double_field(p, "queue_ms", 0);
  info.onboard_ms = double_field(p, "restore_ms", 0);
  info.prefill_ms = double_field(p, "prefill_ms", 0);
  info.ttft_ms = double_field(p, "ttft_ms", 0);
  info.decode_ms = double_field(p, "decode_ms", 0);
  return info;
}

TierStats tier_from(const json& t) {
  TierStats s;
  read_int_fields(t, &s,
                  {{"capacity_bytes", &TierStats::capacity_bytes},
                   {"used_bytes", &TierStats::used_bytes},
                   {"blocks", &TierStats::blocks},
                   {"hits", &TierStats::hits},
                   {"misses", &TierStats::misses},
                   {"evictions", &TierStats::evictions}});
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

}  // namespace

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

namespace {

// `j` converted by `from`; an error naming `what` when it is not an object.
template <typename T>
Result<T> parse_object(const char* what, const json& j, T (*from)(const json&)) {
  return guarded<T>(what, [&]() -> Result<T> {
    if (!j.is_object()) return Status::error(std::string("malformed ") + what + ": not an object");
    return from(j);
  });
}

// An answer of integer fields only (absent or null: 0).
template <typename T>
Result<T> parse_int_answer(const char* what, const json& answer,
                           std::initializer_list<std::pair<const char*, int64_t T::*>> fields) {
  return guarded<T>(what, [&]() -> Result<T> {
    T out;
    read_int_fields(answer, &out, fields);
    return out;
  });
}

}  // namespace

Result<Usage> parse_usage(const json& usage) { return parse_object("usage", usage, usage_from); }

Result<PrefixCacheInfo> parse_prefix_cache(const json& prefix_cache) {
  return parse_object("prefix_cache", prefix_cache, prefix_cache_from);
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

Result<LookupResult> parse_lookup(const json& answer) {
  return parse_int_answer<LookupResult>("lookup answer", answer,
                                        {{"prompt_tokens", &LookupResult::prompt_tokens},
                                         {"cached_tokens", &LookupResult::cached_tokens},
                                         {"device_tokens", &LookupResult::device_tokens},
                                         {"host_tokens", &LookupResult::host_tokens},
                                         {"disk_tokens", &LookupResult::disk_tokens},
                                         {"remote_tokens", &LookupResult::remote_tokens}});
}

Result<PrefetchResult> parse_prefetch(const json& answer) {
  return parse_int_answer<PrefetchResult>("prefetch answer", answer,
                                          {{"prompt_tokens", &PrefetchResult::prompt_tokens},
                                           {"cached_tokens", &PrefetchResult::cached_tokens},
                                           {"prefill_tokens", &PrefetchResult::prefill_tokens},
                                           {"blocks", &PrefetchResult::blocks}});
}

Result<PinResult> parse_pin(const json& answer) {
  return parse_int_answer<PinResult>(
      "pin answer", answer,
      {{"pinned_blocks", &PinResult::pinned_blocks}, {"pinned_tokens", &PinResult::pinned_tokens}});
}

Result<int64_t> parse_cleared_blocks(const json& answer) {
  return guarded<int64_t>(
      "clear answer", [&]() -> Result<int64_t> { return int_field(answer, "cleared_blocks", 0); });
}

Result<HealthInfo> parse_health(const json& answer) {
  return guarded<HealthInfo>("health answer", [&]() -> Result<HealthInfo> {
    return HealthInfo{string_field(answer, "status"), string_field(answer, "backend")};
  });
}

Result<std::vector<ModelInfo>> parse_models(const json& answer) {
  using Models = std::vector<ModelInfo>;
  return guarded<Models>("models answer", [&]() -> Result<Models> {
    Models models;
    auto data = answer.is_object() ? answer.find("data") : answer.end();
    if (!answer.is_object() || data == answer.end() || !data->is_array()) {
      throw FieldError{"field 'data' is not an array"};
    }
    for (const json& e : *data) {
      models.push_back(ModelInfo{string_field(e, "id"), string_field(e, "owned_by"),
                                 int_field(e, "context_length", 0), string_field(e, "backend")});
    }
    return models;
  });
}

Result<std::vector<int32_t>> parse_tokenize(const json& answer) {
  using Ids = std::vector<int32_t>;
  return guarded<Ids>("tokenize answer", [&]() -> Result<Ids> {
    if (!answer.is_object() || !answer.contains("tokens")) {
      throw FieldError{"field 'tokens' is missing"};
    }
    return ids_field(answer, "tokens");
  });
}

Result<std::string> parse_detokenize(const json& answer) {
  return guarded<std::string>("detokenize answer", [&]() -> Result<std::string> {
    if (!answer.is_object() || !answer.contains("content")) {
      throw FieldError{"field 'content' is missing"};
    }
    return string_field(answer, "content");
  });
}

Result<bool> apply_stream_chunk(const json& chunk, Completion* out, StreamDelta* delta) {
  return guarded<bool>("SSE chunk", [&]() -> Result<bool> {
    if (out->id.empty()) out->id = string_field(chunk, "id");
    if (out->object.empty()) out->object = string_field(chunk, "object");
    if (out->model.empty()) out->model = string_field(chunk, "model");
    const json& usage = object_field(chunk, "usage");
    if (usage.is_object()) {
      out->usage = usage_from(usage);
      out->raw = chunk;
    }
    const json& prefix = object_field(chunk, "prefix_cache");
    if (prefix.is_object()) out->prefix_cache = prefix_cache_from(prefix);
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || choices->is_null()) return false;
    if (!choices->is_array()) throw FieldError{"field 'choices' is not an array"};
    if (choices->empty()) return false;
    const json& choice = (*choices)[0];
    if (!choice.is_object()) throw FieldError{"choice is not an object"};
    const json& d = object_field(choice, "delta");
    if (d.is_object()) {
      delta->text = string_field(d, "content");
      delta->role = string_field(d, "role");
    } else {
      delta->text = string_field(choice, "text");
    }
    delta->token_ids = ids_field(choice, "token_ids");
    if (delta->token_ids.empty() && d.is_object()) delta->token_ids = ids_field(d, "token_ids");
    delta->finish_reason = string_field(choice, "finish_reason");
    out->text += delta->text;
    out->token_ids.insert(out->token_ids.end(), delta->token_ids.begin(), delta->token_ids.end());
    if (!delta->finish_reason.empty()) out->finish_reason = delta->finish_reason;
    return true;
  });
}

}  // namespace prefixd::client
