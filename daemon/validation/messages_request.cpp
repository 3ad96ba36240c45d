// Anthropic Messages body checks: system and messages as text blocks with
// their cache_control marks, the Anthropic rules on marks (type, ttl, at
// most four, longer TTLs first), sampling fields and the context budget.
#include "daemon/validation/messages_request.h"

#include <cmath>
#include <optional>

#include "engine/sampler.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

ApiError field_error(const std::string& field, const std::string& message,
                     const std::string& code = "invalid_value") {
  return ApiError::bad_request(field, field + ": " + message, code);
}

// What a body's system and messages become: the blocks per message and the
// marks on them, in prompt order.
struct Conversation {
  std::vector<MessageBlocks> messages;
  std::vector<BreakpointMark> marks;
};

// `cache_control` of one block at `where` (its path, without the
// ".cache_control"): {"type": "ephemeral", "ttl": "5m" | "1h"}.
ApiResult<void> read_cache_control(const json& block, const std::string& where, size_t message,
                                   size_t n_blocks, Conversation* conv) {
  auto it = block.find("cache_control");
  if (it == block.end() || it->is_null()) return {};
  const std::string field = where + ".cache_control";
  if (!it->is_object()) return field_error(field, "must be an object", "invalid_type");
  auto type = it->find("type");
  if (type == it->end() || !type->is_string() || *type != "ephemeral")
    return field_error(field + ".type",
                       "must be 'ephemeral' (got " +
                           (type == it->end() ? std::string("nothing") : type->dump()) + ")");
  CacheTtl ttl = CacheTtl::k5m;
  if (auto t = it->find("ttl"); t != it->end() && !t->is_null()) {
    if (*t == "5m") {
      ttl = CacheTtl::k5m;
    } else if (*t == "1h") {
      ttl = CacheTtl::k1h;
    } else {
      return field_error(field + ".ttl", "must be '5m' or '1h' (got " + t->dump() + ")");
    }
  }
  if (conv->marks.size() == kMaxCacheBreakpoints)
    return field_error(field, "a request may have at most " + std::to_string(kMaxCacheBreakpoints) +
                                  " blocks with cache_control; this is the " +
                                  std::to_string(kMaxCacheBreakpoints + 1) + "th");
  if (!conv->marks.empty() && ttl_seconds(ttl) > ttl_seconds(conv->marks.back().ttl))
    return field_error(field + ".ttl", "a cache_control with ttl '" + std::string(ttl_name(ttl)) +
                                           "' comes after one with ttl '" +
                                           ttl_name(conv->marks.back().ttl) + "' (" +
                                           conv->marks.back().field +
                                           "): longer TTLs must come before shorter ones");
  conv->marks.push_back(BreakpointMark{field, message, n_blocks, ttl});
  return {};
}

// A content value at `where`: a string, or an array of text blocks
// {"type": "text", "text": str, "cache_control"?}. Appends the message.
ApiResult<void> read_content(const json& content, const std::string& role, const std::string& where,
                             Conversation* conv) {
  MessageBlocks m{role, {}};
  const size_t index = conv->messages.size();
  if (content.is_string()) {
    m.blocks.push_back(content.get<std::string>());
    conv->messages.push_back(std::move(m));
    return {};
  }
  if (!content.is_array())
    return field_error(where, "must be a string or an array of content blocks", "invalid_type");
  for (size_t k = 0; k < content.size(); ++k) {
    const json& block = content[k];
    const std::string bw = where + "." + std::to_string(k);
    if (!block.is_object())
      return field_error(bw, "must be a content block object", "invalid_type");
    auto type = block.find("type");
    if (type == block.end() || !type->is_string())
      return field_error(bw + ".type", "is required (a string)", "missing_field");
    if (*type != "text")
      return field_error(bw + ".type",
                         "content blocks of type " + type->dump() +
                             " are not supported; prefixd serves text blocks only",
                         "unsupported_value");
    auto text = block.find("text");
    if (text == block.end() || !text->is_string())
      return field_error(bw + ".text", "is required (a string)", "missing_field");
    m.blocks.push_back(text->get<std::string>());
    if (auto e = read_cache_control(block, bw, index, m.blocks.size(), conv); !e.ok())
      return e.error();
  }
  conv->messages.push_back(std::move(m));
  return {};
}

// `system` (optional) then `messages` (required, user/assistant turns).
ApiResult<void> read_conversation(const json& body, Conversation* conv) {
  if (auto s = body.find("system"); s != body.end() && !s->is_null()) {
    if (auto e = read_content(*s, "system", "system", conv); !e.ok()) return e.error();
  }
  auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    return field_error("messages", "is required", "missing_field");
  if (!it->is_array()) return field_error("messages", "must be an array", "invalid_type");
  if (it->empty()) return field_error("messages", "must not be empty", "empty_prompt");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& msg = (*it)[i];
    const std::string where = "messages." + std::to_string(i);
    if (!msg.is_object()) return field_error(where, "must be an object", "invalid_type");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string())
      return field_error(where + ".role", "is required (a string)", "missing_field");
    if (*role != "user" && *role != "assistant")
      return field_error(where + ".role", "must be 'user' or 'assistant' (got " + role->dump() +
                                              "); the system prompt goes in 'system'");
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null())
      return field_error(where + ".content", "is required", "missing_field");
    if (auto e = read_content(*content, role->get<std::string>(), where + ".content", conv);
        !e.ok())
      return e;
  }
  return {};
}

// Fields of the Messages API that ask for what prefixd does not serve.
ApiResult<void> refuse_unsupported(const json& body) {
  for (const char* field : {"tools", "tool_choice", "mcp_servers", "container"}) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null() || (it->is_array() && it->empty())) continue;
    return field_error(field, "is not supported: prefixd serves text generation only",
                       "unsupported_value");
  }
  if (auto t = body.find("thinking"); t != body.end() && t->is_object()) {
    if (t->value("type", "") == "enabled")
      return field_error("thinking.type", "'enabled' is not supported (extended thinking)",
                         "unsupported_value");
  }
  return {};
}

ApiResult<void> read_number(const json& body, const char* field, float* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    return field_error(field, "must be a finite number", "invalid_type");
  *out = static_cast<float>(it->get<double>());
  return {};
}

// temperature, top_p, top_k, stop_sequences, max_tokens, stream, metadata.
ApiResult<void> read_generation_fields(const json& body, MessagesRequest* m, int64_t* max_tokens) {
  auto mt = body.find("max_tokens");
  if (mt == body.end() || mt->is_null())
    return field_error("max_tokens", "is required", "missing_field");
  if (!mt->is_number_integer())
    return field_error("max_tokens", "must be an integer", "invalid_type");
  const bool too_large =
      mt->is_number_unsigned() && mt->get<uint64_t>() > static_cast<uint64_t>(INT32_MAX);
  if (too_large || mt->get<int64_t>() < 1)
    return field_error("max_tokens", "must be from 1 to " + std::to_string(INT32_MAX) + " (got " +
                                         mt->dump() + ")");
  *max_tokens = mt->get<int64_t>();
  SamplingParams& s = m->request.sampling;
  if (auto e = read_number(body, "temperature", &s.temperature); !e.ok()) return e.error();
  if (auto e = read_number(body, "top_p", &s.top_p); !e.ok()) return e.error();
  if (auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
      return field_error("top_k", "must be an integer >= 0 (got " + it->dump() + ")");
    s.top_k = static_cast<int32_t>(it->get<int64_t>());
  }
  if (Status st = validate_sampling_params(s); !st.ok()) return field_error("", st.message());
  if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) {
    if (!it->is_array())
      return field_error("stop_sequences", "must be an array of strings", "invalid_type");
    if (it->size() > kMaxStopSequences)
      return field_error("stop_sequences", "at most " + std::to_string(kMaxStopSequences) +
                                               " are supported (got " + std::to_string(it->size()) +
                                               ")");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& x = (*it)[i];
      const std::string f = "stop_sequences." + std::to_string(i);
      if (!x.is_string() || x.get<std::string>().empty() ||
          x.get<std::string>().size() > kMaxStopBytes)
        return field_error(
            f, "must be a non-empty string of at most " + std::to_string(kMaxStopBytes) + " bytes");
      m->request.stop.push_back(x.get<std::string>());
    }
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return field_error("stream", "must be a boolean", "invalid_type");
    m->stream = it->get<bool>();
  }
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return field_error("metadata", "must be an object", "invalid_type");
    if (auto u = it->find("user_id"); u != it->end() && !u->is_null() && !u->is_string())
      return field_error("metadata.user_id", "must be a string", "invalid_type");
  }
  return {};
}

}  // namespace

ApiResult<MessagesRequest> validate_messages(const json& body, const ModelInfo& model,
                                             bool count_only) {
  MessagesRequest m;
  m.model = model.id;
  m.request.kind = RequestKind::kGenerate;
  auto mod = body.find("model");
  if (mod == body.end() || mod->is_null())
    return field_error("model", "is required", "missing_field");
  if (!mod->is_string()) return field_error("model", "must be a string", "invalid_type");
  if (*mod != model.id)
    return ApiError::not_found("model",
                               "model: '" + mod->get<std::string>() +
                                   "' does not exist; this server serves '" + model.id + "'",
                               "model_not_found");
  if (auto e = refuse_unsupported(body); !e.ok()) return e.error();
  int64_t max_tokens = 0;
  if (!count_only) {
    if (auto e = read_generation_fields(body, &m, &max_tokens); !e.ok()) return e.error();
  }
  Conversation conv;
  if (auto e = read_conversation(body, &conv); !e.ok()) return e.error();
  if (!model.tokenizer || !model.chat_template)
    return field_error("messages", "the model has no tokenizer or chat template",
                       "no_chat_template");
  m.request.prompt = model.chat_template->encode(*model.tokenizer, chat_messages(conv.messages),
                                                 /*add_generation_prompt=*/true);
  const int64_t n_prompt = static_cast<int64_t>(m.request.prompt.size());
  if (n_prompt >= model.n_ctx)
    return field_error("messages",
                       "the prompt has " + std::to_string(n_prompt) +
                           " tokens; the context length is " + std::to_string(model.n_ctx) +
                           " tokens, which leaves no room to generate",
                       "context_length_exceeded");
  if (!count_only && n_prompt + max_tokens > model.n_ctx)
    return field_error("max_tokens",
                       "the prompt has " + std::to_string(n_prompt) + " tokens and max_tokens is " +
                           std::to_string(max_tokens) +
                           "; together they exceed the context length of " +
                           std::to_string(model.n_ctx) + " tokens",
                       "context_length_exceeded");
  m.request.max_tokens = static_cast<int32_t>(max_tokens);
  m.breakpoints = place_breakpoints(*model.chat_template, *model.tokenizer, conv.messages,
                                    conv.marks, m.request.prompt);
  for (const CacheBreakpoint& bp : m.breakpoints) m.request.reuse_positions.push_back(bp.position_tokens);
  return m;
}

}  // namespace prefixd
