// libFuzzer target: untrusted HTTP bodies through the daemon's JSON parsing
// and validation (completions, chat, cache prompt bodies, tokenize,
// detokenize, Anthropic messages with cache breakpoints) with the real
// stories260K tokenizer and a chatml template.
// Checks the contract: either a 4xx ApiError with a message, or a Request
// whose ids are in the vocabulary and whose length fits the context.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "daemon/validation/messages_request.h"
#include "daemon/validation/request_validation.h"
#include "engine/model/gguf.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace {

using namespace prefixd;

std::shared_ptr<GgufFile> g_file;
std::unique_ptr<Tokenizer> g_tokenizer;
std::unique_ptr<ChatTemplate> g_template;
ModelInfo g_model;

void require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "contract broken: %s\n", what);
    std::abort();
  }
}

void check_error(const ApiError& e) {
  require(e.status >= 400 && e.status < 500, "error status is 4xx");
  require(!e.message.empty(), "error has a message");
}

void check_ids(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) require(id >= 0 && id < g_model.n_vocab, "ids in vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("PREFIXD_FUZZ_MODEL");
  auto file = GgufFile::open(path ? path : "../shared/models/stories260K.gguf");
  if (!file.ok()) {
    std::fprintf(stderr, "fuzz_request_validation: %s\n", file.message().c_str());
    std::abort();
  }
  g_file = file.value();
  auto tok = Tokenizer::from_gguf(*g_file);
  require(tok.ok(), "tokenizer loads");
  g_tokenizer = std::move(tok.value());
  auto tmpl = ChatTemplate::detect("", "chatml");
  require(tmpl.ok(), "chatml template");
  g_template = std::make_unique<ChatTemplate>(std::move(tmpl.value()));
  g_model.id = "stories260K";
  g_model.n_ctx = 512;
  g_model.n_vocab = g_tokenizer->n_vocab();
  g_model.tokenizer = g_tokenizer.get();
  g_model.chat_template = g_template.get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto body = parse_json_body(std::string(reinterpret_cast<const char*>(data), size));
  if (!body.ok()) {
    const ApiError* e = &body.error();
    check_error(*e);
    return 0;
  }
  const nlohmann::json& j = body.value();
  for (bool chat : {false, true}) {
    auto g = validate_generation(j, g_model, chat);
    if (!g.ok()) {
      const ApiError* e = &g.error();
      check_error(*e);
    } else {
      const GenerationRequest& gr = g.value();
      const Request& r = gr.request;
      require(!r.prompt.empty(), "prompt not empty");
      check_ids(r.prompt);
      require(r.max_tokens >= 1 || (gr.echo && r.max_tokens == 0),
              "max_tokens >= 1 (0 only with echo)");
      require(r.logprobs.top_n >= 0 && r.logprobs.top_n <= kMaxTopLogprobs, "top_n in 0..20");
      require(!r.logprobs.prompt || (gr.echo && r.logprobs.sampled), "prompt logprobs only with echo");
      require(static_cast<int64_t>(r.prompt.size()) + r.max_tokens <= g_model.n_ctx,
              "prompt + max_tokens within the context");
    }
  }
  auto p = validate_prompt_body(j, g_model);
  if (!p.ok()) {
    const ApiError* e = &p.error();
    check_error(*e);
  } else {
    check_ids(p.value().prompt);
  }
  for (bool count_only : {false, true}) {
    auto m = validate_messages(j, g_model, count_only);
    if (!m.ok()) {
      const ApiError* e = &m.error();
      require(e->status == 400 || e->status == 404, "messages error is 400 or 404");
      require(!e->message.empty(), "error has a message");
      continue;
    }
    const MessagesRequest& mr = m.value();
    require(!mr.request.prompt.empty(), "messages prompt not empty");
    check_ids(mr.request.prompt);
    require(count_only || mr.request.max_tokens >= 1, "messages max_tokens >= 1");
    require(static_cast<int64_t>(mr.request.prompt.size()) + mr.request.max_tokens <= g_model.n_ctx,
            "messages prompt + max_tokens within the context");
    require(mr.breakpoints.size() <= kMaxCacheBreakpoints, "at most 4 breakpoints");
    for (size_t i = 0; i < mr.breakpoints.size(); ++i) {
      const CacheBreakpoint& b = mr.breakpoints[i];
      require(b.position_tokens >= 0 &&
                  b.position_tokens <= static_cast<int32_t>(mr.request.prompt.size()),
              "breakpoint within the prompt");
      require(i == 0 || ttl_seconds(b.ttl) <= ttl_seconds(mr.breakpoints[i - 1].ttl),
              "longer TTLs first");
    }
  }
  auto t = validate_tokenize(j, g_model);
  if (!t.ok()) check_error(t.error());
  auto d = validate_detokenize(j, g_model);
  if (!d.ok()) {
    const ApiError* e = &d.error();
    check_error(*e);
  } else {
    check_ids(d.value());
    (void)g_tokenizer->decode(d.value());
  }
  return 0;
}
