// Breakpoint positions by rendering the prompt up to the marked block, and
// the cache usage arithmetic.
#include "daemon/validation/cache_breakpoints.h"

#include <algorithm>

namespace prefixd {

const char* ttl_name(CacheTtl ttl) {
  switch (ttl) {
    case CacheTtl::k5m:
      return "5m";
    case CacheTtl::k1h:
      return "1h";
    case CacheTtl::k24h:
      return "24h";
  }
  return "?";
}

double ttl_seconds(CacheTtl ttl) {
  switch (ttl) {
    case CacheTtl::k5m:
      return 300;
    case CacheTtl::k1h:
      return 3600;
    case CacheTtl::k24h:
      return 86400;
  }
  return 0;
}

const char* pin_status_name(PinStatus s) {
  switch (s) {
    case PinStatus::kPinned:
      return "pinned";
    case PinStatus::kRefreshed:
      return "refreshed";
    case PinStatus::kBelowMinimum:
      return "below_min_cache_tokens";
    case PinStatus::kTenantPinLimit:
      return "tenant_pin_limit";
    case PinStatus::kPinBudgetFull:
      return "pin_budget_full";
    case PinStatus::kNotInCache:
      return "not_in_cache";
  }
  return "?";
}

std::vector<ChatMessage> chat_messages(const std::vector<MessageBlocks>& messages) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (const MessageBlocks& m : messages) {
    std::string text;
    for (const std::string& b : m.blocks) text += b;
    out.push_back(ChatMessage{m.role, std::move(text)});
  }
  return out;
}

namespace {

// The tokens of `messages[0, mark.message]` with the marked message cut
// after its marked block, rendered without the template's markup after the
// last text: BOS, then the segments up to the last content segment.
std::vector<int32_t> tokens_through_mark(const ChatTemplate& chat_template,
                                         const Tokenizer& tokenizer,
                                         const std::vector<MessageBlocks>& messages,
                                         const BreakpointMark& mark) {
  std::vector<MessageBlocks> head(messages.begin(),
                                  messages.begin() + static_cast<std::ptrdiff_t>(mark.message) + 1);
  head.back().blocks.resize(mark.n_blocks);
  const std::string eos_text =
      tokenizer.eos_id() >= 0 ? tokenizer.token_text(tokenizer.eos_id()) : std::string("</s>");
  std::vector<TextSegment> segments =
      chat_template.render(chat_messages(head), /*add_generation_prompt=*/false, eos_text);
  while (!segments.empty() && segments.back().parse_special) segments.pop_back();
  return tokenizer.encode_segments(segments, /*add_special=*/true);
}

}  // namespace

std::vector<CacheBreakpoint> place_breakpoints(const ChatTemplate& chat_template,
                                               const Tokenizer& tokenizer,
                                               const std::vector<MessageBlocks>& messages,
                                               const std::vector<BreakpointMark>& marks,
                                               const std::vector<int32_t>& prompt) {
  std::vector<CacheBreakpoint> out;
  out.reserve(marks.size());
  for (const BreakpointMark& mark : marks) {
    const std::vector<int32_t> head = tokens_through_mark(chat_template, tokenizer, messages, mark);
    const auto [a, b] = std::mismatch(head.begin(), head.end(), prompt.begin(), prompt.end());
    out.push_back(CacheBreakpoint{mark.field, mark.ttl, static_cast<int32_t>(a - head.begin())});
  }
  return out;
}

CacheUsage cache_usage(int32_t prompt_tokens, int32_t cached_tokens,
                       const std::vector<BreakpointOutcome>& outcomes) {
  CacheUsage u;
  u.read_tokens = cached_tokens;
  int32_t covered = cached_tokens;  // tokens already counted as read or created
  for (const BreakpointOutcome& o : outcomes) {
    if (o.status != PinStatus::kPinned && o.status != PinStatus::kRefreshed) continue;
    const int32_t created = std::max(0, o.pinned_tokens - covered);
    u.creation_tokens += created;
    u.creation_tokens_by_ttl[static_cast<int>(o.breakpoint.ttl)] += created;
    covered = std::max(covered, o.pinned_tokens);
  }
  u.input_tokens = prompt_tokens - u.read_tokens - u.creation_tokens;
  return u;
}

}  // namespace prefixd
