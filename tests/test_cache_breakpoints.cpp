// Cache breakpoints: each cache_control mark's token position with every
// chat template (the marked block's text ends there, and a later turn
// shares those tokens), and the usage arithmetic of reads and writes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "daemon/validation/cache_breakpoints.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_bpe.h"

using namespace prefixd;

namespace {

// A byte-level BPE vocabulary (bytes only, no merges: one token per byte of
// text) with the control tokens of the chatml and llama-3 families.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = "llama-bpe";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(BpeTokenizer::byte_chars()[b]);
  v.token_types.assign(v.tokens.size(), 1);
  for (const char* s : {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
                        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(3);
  }
  v.bos_id = 256;
  v.eos_id = 257;
  v.add_bos = true;
  auto tok = Tokenizer::create(std::move(v));
  REQUIRE_MESSAGE(tok.ok(), tok.message());
  return std::move(tok).value();
}

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

const std::vector<MessageBlocks> kTurn1 = {
    {"system", {"You are terse. ", "Answer about the sea."}},
    {"user", {"What is a tide?"}},
    {"assistant", {"The rise and fall of the sea."}},
    {"user", {"Background: waves. ", "Why are waves tall?"}},
};

// Marks on both system blocks, the assistant turn and both blocks of the last user turn.
const std::vector<BreakpointMark> kMarks = {
    {"system.0.cache_control", 0, 1, CacheTtl::k1h},
    {"system.1.cache_control", 0, 2, CacheTtl::k1h},
    {"messages.1.content.0.cache_control", 2, 1, CacheTtl::k5m},
    {"messages.2.content.0.cache_control", 3, 1, CacheTtl::k5m},
    {"messages.2.content.1.cache_control", 3, 2, CacheTtl::k5m},
};

}  // namespace

TEST_CASE("each mark ends where its block's text ends, with every chat template") {
  auto tok = byte_tokenizer();
  for (const std::string& name : ChatTemplate::supported_names()) {
    CAPTURE(name);
    auto t = ChatTemplate::detect("", name);
    REQUIRE(t.ok());
    const ChatTemplate& tmpl = t.value();
    const std::vector<int32_t> prompt = tmpl.encode(*tok, chat_messages(kTurn1), true);
    const std::vector<CacheBreakpoint> bps = place_breakpoints(tmpl, *tok, kTurn1, kMarks, prompt);
    REQUIRE(bps.size() == kMarks.size());
    int32_t previous = 0;
    for (size_t i = 0; i < bps.size(); ++i) {
      CAPTURE(bps[i].field);
      CHECK(bps[i].field == kMarks[i].field);
      CHECK(bps[i].ttl == kMarks[i].ttl);
      // In prompt order, within the prompt.
      CHECK(bps[i].position_tokens >= previous);
      CHECK(bps[i].position_tokens < static_cast<int32_t>(prompt.size()));
      previous = bps[i].position_tokens;
      // The text up to the position ends with the marked block (bytes are
      // tokens here; a template's own spacing after the text may follow it).
      const std::string head = tok->decode(
          std::vector<int32_t>(prompt.begin(), prompt.begin() + bps[i].position_tokens));
      const std::string& block = kTurn1[kMarks[i].message].blocks[kMarks[i].n_blocks - 1];
      CHECK_MESSAGE(rstrip(head).ends_with(rstrip(block)), head);
      CHECK(head.size() - rstrip(head).size() <= 2);
    }
  }
}

TEST_CASE("a later turn shares every mark's tokens, and places the marks at the same positions") {
  auto tok = byte_tokenizer();
  std::vector<MessageBlocks> turn2 = kTurn1;
  turn2.push_back({"assistant", {"Wind."}});
  turn2.push_back({"user", {"Thanks!"}});
  for (const std::string& name : ChatTemplate::supported_names()) {
    CAPTURE(name);
    const ChatTemplate tmpl = ChatTemplate::detect("", name).value();
    const std::vector<int32_t> p1 = tmpl.encode(*tok, chat_messages(kTurn1), true);
    const std::vector<int32_t> p2 = tmpl.encode(*tok, chat_messages(turn2), true);
    const auto b1 = place_breakpoints(tmpl, *tok, kTurn1, kMarks, p1);
    const auto b2 = place_breakpoints(tmpl, *tok, turn2, kMarks, p2);
    for (size_t i = 0; i < b1.size(); ++i) {
      CAPTURE(b1[i].field);
      CHECK(b1[i].position_tokens == b2[i].position_tokens);
      const auto n = static_cast<std::ptrdiff_t>(b1[i].position_tokens);
      CHECK(std::vector<int32_t>(p1.begin(), p1.begin() + n) ==
            std::vector<int32_t>(p2.begin(), p2.begin() + n));
    }
  }
}

TEST_CASE("cache usage: read, created by TTL and input add up to the prompt") {
  auto outcome = [](CacheTtl ttl, PinStatus s, int32_t pinned) {
    return BreakpointOutcome{CacheBreakpoint{"f", ttl, pinned + 3}, s, pinned};
  };
  // Turn 1: nothing read, system (1h) 48 tokens and the user turn (5m) up to 96 pinned.
  CacheUsage u = cache_usage(110, 0,
                             {outcome(CacheTtl::k1h, PinStatus::kPinned, 48),
                              outcome(CacheTtl::k5m, PinStatus::kPinned, 96)});
  CHECK(u.read_tokens == 0);
  CHECK(u.creation_tokens == 96);
  CHECK(u.creation_tokens_by_ttl[static_cast<int>(CacheTtl::k1h)] == 48);
  CHECK(u.creation_tokens_by_ttl[static_cast<int>(CacheTtl::k5m)] == 48);
  CHECK(u.input_tokens == 14);
  // Turn 2: 96 read; the system pin refreshed creates nothing; the new turn 144 - 96.
  u = cache_usage(150, 96,
                  {outcome(CacheTtl::k1h, PinStatus::kRefreshed, 48),
                   outcome(CacheTtl::k5m, PinStatus::kPinned, 144)});
  CHECK(u.read_tokens == 96);
  CHECK(u.creation_tokens == 48);
  CHECK(u.creation_tokens_by_ttl[static_cast<int>(CacheTtl::k1h)] == 0);
  CHECK(u.input_tokens == 6);
  // Not pinned (budget, minimum): nothing created, all input.
  u = cache_usage(150, 0,
                  {outcome(CacheTtl::k5m, PinStatus::kPinBudgetFull, 0),
                   outcome(CacheTtl::k5m, PinStatus::kBelowMinimum, 0)});
  CHECK(u.creation_tokens == 0);
  CHECK(u.input_tokens == 150);
}
