// JSON body checks: types, ranges, the served model, prompt tokenization and
// the context-length budget. Each failure names the offending field.
#include "daemon/validation/request_validation.h"

#include <cmath>
#include <limits>

#include "engine/sampler.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

ApiError type_error(const std::string& field, const std::string& expected) {
  return ApiError::bad_request(field, "'" + field + "' must be " + expected, "invalid_type");
}

ApiError value_error(const std::string& field, const std::string& message) {
  return ApiError::bad_request(field, message, "invalid_value");
}

// Reads an optional number field (null counts as absent).
ApiResult<void> get_number(const json& body, const char* field, double* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number()) return type_error(field, "a number");
  *out = it->get<double>();
  if (!std::isfinite(*out))
    return value_error(field, std::string("'") + field + "' must be finite");
  return {};
}

ApiResult<void> get_int(const json& body, const char* field, int64_t* out,
                        bool* present = nullptr) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number_integer()) return type_error(field, "an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return value_error(field, std::string("'") + field + "' is too large");
  }
  *out = it->get<int64_t>();
  if (present) *present = true;
  return {};
}

ApiResult<void> get_bool(const json& body, const char* field, bool* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_boolean()) return type_error(field, "a boolean");
  *out = it->get<bool>();
  return {};
}

ApiResult<void> get_string(const json& body, const char* field, std::string* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_string()) return type_error(field, "a string");
  *out = it->get<std::string>();
  return {};
}

// `cache_salt`: an optional string of at most kMaxCacheSaltBytes bytes.
ApiResult<void> get_cache_salt(const json& body, std::string* out) {
  auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_string()) return type_error("cache_salt", "a string");
  const std::string& salt = it->get_ref<const std::string&>();
  if (salt.size() > kMaxCacheSaltBytes) {
    return value_error("cache_salt", "'cache_salt' is " + std::to_string(salt.size()) +
                                         " bytes; at most " + std::to_string(kMaxCacheSaltBytes) +
                                         " bytes are accepted");
  }
  *out = salt;
  return {};
}

ApiResult<void> check_ids(const std::vector<int32_t>& ids, const ModelInfo& m,
                          const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= m.n_vocab) {
      return ApiError::bad_request(field,
                                   "token id " + std::to_string(ids[i]) + " at " + field + "[" +
                                       std::to_string(i) + "] is outside the vocabulary (0.." +
                                       std::to_string(m.n_vocab - 1) + ")",
                                   "invalid_token_id");
    }
  }
  return {};
}

// A JSON array of integers -> ids; refuses non-integers and values beyond int32.
ApiResult<void> parse_id_array(const json& arr, const ModelInfo& m, const std::string& field,
                               std::vector<int32_t>* out) {
  out->clear();
  out->reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number_integer()) {
      return type_error(field, "a string or an array of integer token ids (element " +
                                   std::to_string(i) + " is " + v.type_name() + ")");
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)
                               : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
      return ApiError::bad_request(field,
                                   "token id " + v.dump() + " at " + field + "[" +
                                       std::to_string(i) + "] is outside the vocabulary (0.." +
                                       std::to_string(m.n_vocab - 1) + ")",
                                   "invalid_token_id");
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return check_ids(*out, m, field);
}

// `prompt`: a string, an array of ids, or a one-element array of either.
ApiResult<void> parse_prompt(const json& body, const ModelInfo& m, std::vector<int32_t>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null())
    return ApiError::bad_request("prompt", "'prompt' is required", "missing_field");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    const std::string text = p->get<std::string>();
    if (text.empty()) return ApiError::bad_request("prompt", "'prompt' is empty", "empty_prompt");
    if (!m.tokenizer) {
      return ApiError::bad_request(
          "prompt", "the model has no tokenizer; send 'prompt' as an array of token ids",
          "no_tokenizer");
    }
    *out = m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
    return check_ids(*out, m, "prompt");
  }
  if (p->is_array()) {
    if (!p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
      return ApiError::bad_request(
          "prompt",
          "only one prompt per request is supported (got " + std::to_string(p->size()) + ")",
          "unsupported_value");
    }
    if (p->empty()) return ApiError::bad_request("prompt", "'prompt' is empty", "empty_prompt");
    return parse_id_array(*p, m, "prompt", out);
  }
  return type_error("prompt", "a string or an array of integer token ids");
}

// `messages` -> rendered and tokenized with the generation prompt.
ApiResult<void> parse_messages(const json& body, const ModelInfo& m, std::vector<int32_t>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return ApiError::bad_request("messages", "'messages' is required", "missing_field");
  }
  if (!it->is_array()) return type_error("messages", "an array of messages");
  if (it->empty()) return ApiError::bad_request("messages", "'messages' is empty", "empty_prompt");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& msg = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return type_error(where, "an object");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return type_error(where + ".role", "a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant") {
      return value_error(where + ".role", "role '" + r + "' is not one of system, user, assistant");
    }
    std::string content;
    auto c = msg.find("content");
    if (c == msg.end() || c->is_null()) {
      if (r != "assistant")
        return ApiError::bad_request(where + ".content", where + ".content is required",
                                     "missing_field");
    } else if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {
      // Content parts: only text parts are supported.
      for (size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        const std::string pw = where + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          return ApiError::bad_request(
              pw, pw + " must be a text part {\"type\": \"text\", \"text\": str}",
              "unsupported_value");
        }
        content += part["text"].get<std::string>();
      }
    } else {
      return type_error(where + ".content", "a string or an array of text parts");
    }
    messages.push_back(ChatMessage{r, content});
  }
  if (!m.tokenizer || !m.chat_template) {
    return ApiError::bad_request("messages",
                                 "the model has no tokenizer or chat template; use /v1/completions",
                                 "no_chat_template");
  }
  *out = m.chat_template->encode(*m.tokenizer, messages, /*add_generation_prompt=*/true);
  if (out->empty())
    return ApiError::bad_request("messages", "'messages' rendered to an empty prompt",
                                 "empty_prompt");
  return check_ids(*out, m, "messages");
}

// An optional integer field in [0, kMaxTopLogprobs]; *present tells whether it was given.
ApiResult<void> get_top_count(const json& body, const char* field, int32_t* out, bool* present) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  const std::string range = "an integer from 0 to " + std::to_string(kMaxTopLogprobs);
  if (!it->is_number_integer()) return type_error(field, range);
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= static_cast<uint64_t>(kMaxTopLogprobs)
                            : (it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxTopLogprobs);
  if (!in_range)
    return value_error(field, std::string("'") + field + "' must be " + range + " (got " +
                                  it->dump() + ")");
  *out = static_cast<int32_t>(it->get<int64_t>());
  *present = true;
  return {};
}

// logprobs, top_logprobs, echo and return_tokens_as_token_ids. Completions:
// `logprobs` is the number of alternatives (0..20) and `echo` puts the
// prompt first; chat: `logprobs` is a boolean and `top_logprobs` (0..20, only
// with it) the number of alternatives.
ApiResult<void> parse_logprobs(const json& body, bool chat, GenerationRequest* g) {
  LogprobsOptions& lp = g->request.logprobs;
  if (auto e = get_bool(body, "return_tokens_as_token_ids", &g->tokens_as_ids); !e.ok())
    return e.error();
  if (chat) {
    if (auto e = get_bool(body, "logprobs", &lp.sampled); !e.ok()) return e.error();
    bool has_top = false;
    if (auto e = get_top_count(body, "top_logprobs", &lp.top_n, &has_top); !e.ok())
      return e.error();
    if (has_top && !lp.sampled)
      return ApiError::bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true",
                                   "invalid_value");
    bool echo = false;
    if (auto e = get_bool(body, "echo", &echo); !e.ok()) return e.error();
    if (echo)
      return ApiError::bad_request("echo", "'echo' is only supported on /v1/completions",
                                   "unsupported_value");
    return {};
  }
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    return ApiError::bad_request(
        "top_logprobs",
        "'top_logprobs' is a chat completions field; on /v1/completions 'logprobs' (0.." +
            std::to_string(kMaxTopLogprobs) + ") is the number of alternatives",
        "unsupported_value");
  }
  if (auto e = get_top_count(body, "logprobs", &lp.top_n, &lp.sampled); !e.ok()) return e.error();
  if (auto e = get_bool(body, "echo", &g->echo); !e.ok()) return e.error();
  lp.prompt = lp.sampled && g->echo;
  return {};
}

ApiResult<void> check_model(const json& body, const ModelInfo& m) {
  std::string model;
  if (auto e = get_string(body, "model", &model); !e.ok()) return e.error();
  if (!model.empty() && model != m.id) {
    return ApiError::not_found(
        "model", "the model '" + model + "' does not exist; this server serves '" + m.id + "'",
        "model_not_found");
  }
  return {};
}

// A prompt must leave room for one generated token, unless nothing is
// generated (max_tokens 0: echo scoring).
ApiResult<void> check_prompt_fits(size_t n_prompt, const ModelInfo& m, const std::string& param,
                                  bool generates) {
  if (static_cast<int64_t>(n_prompt) > m.n_ctx ||
      (generates && static_cast<int64_t>(n_prompt) == m.n_ctx)) {
    return ApiError::bad_request(param,
                                 "the prompt has " + std::to_string(n_prompt) +
                                     " tokens; the context length is " + std::to_string(m.n_ctx) +
                                     (generates ? " tokens, which leaves no room to generate"
                                                : " tokens"),
                                 "context_length_exceeded");
  }
  return {};
}

// Builds the DOM of a request body from nlohmann's SAX events, refusing it
// as soon as it crosses kMaxJsonDepth or kMaxJsonValues: the parser stops
// there and the partial tree is dropped. (nlohmann's own limit hook, the
// parse callback, is no use here: its parser rescans the enclosing container
// at every object end, quadratic in `[{},{},...]`.)
class JsonBodyBuilder final : public json::json_sax_t {
 public:
  explicit JsonBodyBuilder(json* root) : root_(root) {}

  ApiResult<void> failure;  // why parsing stopped, once it has (ok until then)

  bool null() override { return add(nullptr) != nullptr; }
  bool boolean(bool v) override { return add(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return add(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return add(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return add(v) != nullptr; }
  bool string(string_t& v) override { return add(std::move(v)) != nullptr; }
  bool binary(binary_t& v) override { return add(json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  // Syntax errors carry their position; number overflow (1e400) is an out_of_range.
  bool parse_error(std::size_t, const std::string&, const json::exception& e) override {
    failure = ApiError::bad_request("", std::string("the body is not valid JSON: ") + e.what(),
                                    "invalid_json");
    return false;
  }

 private:
  // Counts v and places it in the innermost open container (under the last
  // key in an object: a repeated key keeps its last value) or at the root.
  // Null when v is one value too many.
  json* add(json&& v) {
    if (++n_values_ > kMaxJsonValues) {
      failure = ApiError::bad_request(
          "", "the body is JSON with more than " + std::to_string(kMaxJsonValues) + " values",
          "json_too_many_values");
      return nullptr;
    }
    if (open_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  // A new array or object, open until its end event. Pointers into the open
  // containers stay valid: only the innermost one grows.
  bool open(json::value_t type) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      failure = ApiError::bad_request(
          "", "the body has JSON nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels",
          "json_too_deep");
      return false;
    }
    json* container = add(json(type));
    if (container == nullptr) return false;
    open_.push_back(container);
    return true;
  }

  json* root_;
  std::vector<json*> open_;  // the open arrays and objects, outermost first
  string_t key_;             // the innermost object's current key
  int64_t n_values_ = 0;
};

}  // namespace

ApiResult<json> parse_json_body(const std::string& body) {
  json j;
  JsonBodyBuilder builder(&j);
  if (!json::sax_parse(body, &builder)) {
    if (!builder.failure.ok()) return builder.failure.error();
    return ApiError::bad_request("", "the body is not valid JSON", "invalid_json");
  }
  if (!j.is_object())
    return ApiError::bad_request("", "the body must be a JSON object", "invalid_json");
  return j;
}

namespace {

// The requested length of the answer: `max_tokens` (chat: or
// `max_completion_tokens`), not yet checked against the prompt.
struct MaxTokens {
  int64_t value = -1;
  bool given = false;
  const char* field = "max_tokens";  // the field it came from, named in errors
};

// n, stream, stream_options, max_tokens and the logprobs fields.
ApiResult<void> parse_output_fields(const json& body, bool chat, GenerationRequest* g,
                                    MaxTokens* max) {
  int64_t n = 1;
  if (auto e = get_int(body, "n", &n); !e.ok()) return e.error();
  if (n != 1)
    return ApiError::bad_request("n", "only n = 1 is supported (got " + std::to_string(n) + ")",
                                 "unsupported_value");
  if (auto e = get_bool(body, "stream", &g->stream); !e.ok()) return e.error();
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return type_error("stream_options", "an object");
    if (auto e = get_bool(*it, "include_usage", &g->include_usage); !e.ok()) {
      e.error().param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto e = get_int(body, "max_tokens", &max->value, &max->given); !e.ok()) return e.error();
  if (!max->given && chat) {
    max->field = "max_completion_tokens";
    if (auto e = get_int(body, "max_completion_tokens", &max->value, &max->given); !e.ok())
      return e.error();
  }
  if (auto e = parse_logprobs(body, chat, g); !e.ok()) return e.error();
  // max_tokens 0 with echo scores the prompt (its logprobs) and generates nothing.
  if (max->given && max->value < (g->echo ? 0 : 1)) {
    return value_error(max->field, std::string("'") + max->field + "' must be at least " +
                                       (g->echo ? "0" : chat ? "1" : "1 (0 only with echo: true)") +
                                       " (got " + std::to_string(max->value) + ")");
  }
  return {};
}

// temperature, top_p, min_p, repetition_penalty, top_k, the unsupported
// frequency and presence penalties, and seed.
ApiResult<void> parse_sampling_fields(const json& body, SamplingParams* s) {
  const std::pair<const char*, float*> fields[] = {{"temperature", &s->temperature},
                                                   {"top_p", &s->top_p},
                                                   {"min_p", &s->min_p},
                                                   {"repetition_penalty", &s->repetition_penalty}};
  for (auto [field, value] : fields) {
    double v = *value;
    if (auto e = get_number(body, field, &v); !e.ok()) return e.error();
    *value = static_cast<float>(v);
  }
  int64_t top_k = s->top_k;
  if (auto e = get_int(body, "top_k", &top_k); !e.ok()) return e.error();
  if (top_k == -1) top_k = 0;  // llama.cpp's "off"
  if (top_k < 0 || top_k > INT32_MAX) return value_error("top_k", "'top_k' must be >= 0 (0 = off)");
  s->top_k = static_cast<int32_t>(top_k);
  for (const char* field : {"frequency_penalty", "presence_penalty"}) {
    double p = 0;
    if (auto e = get_number(body, field, &p); !e.ok()) return e.error();
    if (p != 0)
      return ApiError::bad_request(
          field, std::string("'") + field + "' is not supported (use repetition_penalty)",
          "unsupported_value");
  }
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return type_error("seed", "an integer");
    s->seed =
        it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
    s->has_seed = true;
  }
  if (Status st = validate_sampling_params(*s); !st.ok()) {
    return ApiError::bad_request("", st.message(), "invalid_value");
  }
  return {};
}

// `stop`: a string or an array of strings, bounded in number and length.
ApiResult<void> parse_stop(const json& body, std::vector<std::string>* stop) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  if (it->is_string()) {
    stop->push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& x : *it) {
      if (!x.is_string()) return type_error("stop", "a string or an array of strings");
      stop->push_back(x.get<std::string>());
    }
  } else {
    return type_error("stop", "a string or an array of strings");
  }
  if (stop->size() > kMaxStopStrings) {
    return value_error("stop", "at most " + std::to_string(kMaxStopStrings) +
                                   " stop strings are supported; got " +
                                   std::to_string(stop->size()));
  }
  for (const std::string& x : *stop) {
    if (x.empty()) return value_error("stop", "stop strings must not be empty");
    if (x.size() > kMaxStopBytes) {
      return value_error("stop", "a stop string is " + std::to_string(x.size()) +
                                     " bytes; at most " + std::to_string(kMaxStopBytes) +
                                     " bytes are accepted");
    }
  }
  return {};
}

// The prompt (`messages` rendered for chat, else `prompt`), checked against
// the context with the answer's length; sets r->prompt and r->max_tokens.
ApiResult<void> parse_prompt_and_length(const json& body, const ModelInfo& m, bool chat,
                                        MaxTokens max, Request* r) {
  if (chat) {
    if (auto e = parse_messages(body, m, &r->prompt); !e.ok()) return e.error();
  } else {
    if (auto e = parse_prompt(body, m, &r->prompt); !e.ok()) return e.error();
  }
  const std::string prompt_param = chat ? "messages" : "prompt";
  if (auto e = check_prompt_fits(r->prompt.size(), m, prompt_param,
                                 /*generates=*/!(max.given && max.value == 0));
      !e.ok())
    return e;
  const int64_t n_prompt = static_cast<int64_t>(r->prompt.size());
  if (!max.given) {
    // Completions default to 16 tokens; chat replies may use the rest of the context.
    max.value = chat ? m.n_ctx - n_prompt : std::min<int64_t>(16, m.n_ctx - n_prompt);
  } else if (n_prompt + max.value > m.n_ctx) {
    return ApiError::bad_request(
        max.field,
        "the prompt has " + std::to_string(n_prompt) + " tokens and " + max.field + " is " +
            std::to_string(max.value) + "; together " + std::to_string(n_prompt + max.value) +
            " tokens exceed the context length of " + std::to_string(m.n_ctx) + " tokens",
        "context_length_exceeded");
  }
  r->max_tokens = static_cast<int32_t>(max.value);
  return {};
}

}  // namespace

ApiResult<GenerationRequest> validate_generation(const json& body, const ModelInfo& m, bool chat) {
  GenerationRequest g;
  g.chat = chat;
  g.model = m.id;
  Request& r = g.request;
  r.kind = RequestKind::kGenerate;
  if (auto e = check_model(body, m); !e.ok()) return e.error();
  // Output and sampling fields first (cheap), then the prompt (tokenizes).
  MaxTokens max;
  if (auto e = parse_output_fields(body, chat, &g, &max); !e.ok()) return e.error();
  if (auto e = parse_sampling_fields(body, &r.sampling); !e.ok()) return e.error();
  if (auto e = parse_stop(body, &r.stop); !e.ok()) return e.error();
  std::string user;
  if (auto e = get_string(body, "user", &user); !e.ok()) return e.error();
  if (auto e = get_cache_salt(body, &r.cache_salt); !e.ok()) return e.error();
  if (auto e = get_bool(body, "ignore_eos", &r.ignore_eos); !e.ok()) return e.error();
  if (auto e = parse_prompt_and_length(body, m, chat, max, &r); !e.ok()) return e.error();
  return g;
}

ApiResult<PromptRequest> validate_prompt_body(const json& body, const ModelInfo& m) {
  PromptRequest p;
  if (auto e = check_model(body, m); !e.ok()) return e.error();
  if (auto e = get_cache_salt(body, &p.cache_salt); !e.ok()) return e.error();
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  if (has_messages == has_prompt) {
    return ApiError::bad_request(has_prompt ? "messages" : "prompt",
                                 "give exactly one of 'prompt' and 'messages'", "missing_field");
  }
  if (has_messages) {
    if (auto e = parse_messages(body, m, &p.prompt); !e.ok()) return e.error();
  } else {
    if (auto e = parse_prompt(body, m, &p.prompt); !e.ok()) return e.error();
  }
  if (static_cast<int64_t>(p.prompt.size()) > m.n_ctx) {
    return ApiError::bad_request(has_messages ? "messages" : "prompt",
                                 "the prompt has " + std::to_string(p.prompt.size()) +
                                     " tokens, more than the context length of " +
                                     std::to_string(m.n_ctx),
                                 "context_length_exceeded");
  }
  return p;
}

ApiResult<std::vector<int32_t>> validate_tokenize(const json& body, const ModelInfo& m) {
  auto it = body.find("content");
  if (it == body.end() || it->is_null())
    return ApiError::bad_request("content", "'content' is required", "missing_field");
  if (!it->is_string()) return type_error("content", "a string");
  bool add_special = false, parse_special = true;
  if (auto e = get_bool(body, "add_special", &add_special); !e.ok()) return e.error();
  if (auto e = get_bool(body, "parse_special", &parse_special); !e.ok()) return e.error();
  if (!m.tokenizer)
    return ApiError::bad_request("content", "the model has no tokenizer", "no_tokenizer");
  return m.tokenizer->encode(it->get<std::string>(), add_special, parse_special);
}

ApiResult<std::vector<int32_t>> validate_detokenize(const json& body, const ModelInfo& m) {
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null())
    return ApiError::bad_request("tokens", "'tokens' is required", "missing_field");
  if (!it->is_array()) return type_error("tokens", "an array of integer token ids");
  std::vector<int32_t> ids;
  if (auto e = parse_id_array(*it, m, "tokens", &ids); !e.ok()) return e.error();
  if (!m.tokenizer)
    return ApiError::bad_request("tokens", "the model has no tokenizer", "no_tokenizer");
  return ids;
}

}  // namespace prefixd
