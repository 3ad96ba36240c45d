// Cache breakpoints: where a request's `cache_control` marks fall in its
// prompt tokens, and the cache part of its usage. A mark on a text block
// ends at the token where that block's text ends after chat-template
// rendering (daemon/api.md, "Cache breakpoints"); the prefix up to it is
// what gets pinned for the mark's TTL (daemon/api/ttl_pins.h). Pure functions;
// any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace prefixd {

// How long a breakpoint's prefix stays pinned after its last hit.
// k5m and k1h are Anthropic's `cache_control.ttl`; k24h is OpenAI's
// `prompt_cache_retention: "24h"`.
enum class CacheTtl : uint8_t { k5m, k1h, k24h };
inline constexpr int kCacheTtlCount = 3;
const char* ttl_name(CacheTtl ttl);  // "5m", "1h", "24h"
double ttl_seconds(CacheTtl ttl);    // 300, 3600, 86400 (before --cache-ttl-scale)

// One message as the chat template sees it, its text kept as the blocks the
// request sent (joined without a separator, as chat completions join text
// parts, when rendered).
struct MessageBlocks {
  std::string role;                 // "system", "user" or "assistant"
  std::vector<std::string> blocks;  // the text blocks in order (a string content is one block)
};

// A `cache_control` mark as the request placed it.
struct BreakpointMark {
  std::string field;    // where it is, Anthropic's way: "system.0.cache_control"
  size_t message = 0;   // index into the MessageBlocks list (the system message first)
  size_t n_blocks = 0;  // that message's blocks up to and including the marked one
  CacheTtl ttl = CacheTtl::k5m;
};

// A mark placed on the prompt: its prefix is prompt[0, position_tokens).
struct CacheBreakpoint {
  std::string field;
  CacheTtl ttl = CacheTtl::k5m;
  int32_t position_tokens = 0;
};

// The rendered text of `messages`, as ChatTemplate::encode renders it.
std::vector<ChatMessage> chat_messages(const std::vector<MessageBlocks>& messages);

// Each mark's position in `prompt` (the tokens of `messages` rendered with
// the generation prompt): the number of leading tokens `prompt` shares with
// the rendering of the messages before the marked one and the marked
// message cut after its marked block, up to the end of that block's text
// (the template's markup after it is not part of the prefix). Where the
// template's tokenization merges the block's last characters with what
// follows, the shared tokens stop before the merged token: a position never
// covers a token that a later turn could tokenize differently.
std::vector<CacheBreakpoint> place_breakpoints(const ChatTemplate& chat_template,
                                               const Tokenizer& tokenizer,
                                               const std::vector<MessageBlocks>& messages,
                                               const std::vector<BreakpointMark>& marks,
                                               const std::vector<int32_t>& prompt);

// What happened to one breakpoint's prefix after the answer.
enum class PinStatus : uint8_t {
  kPinned,          // newly pinned for its TTL
  kRefreshed,       // already pinned: its expiry moved to now + TTL
  kBelowMinimum,    // shorter than --min-cache-tokens (or than one block): nothing cached
  kTenantPinLimit,  // the tenant's max_pinned_blocks is spent: not pinned
  kPinBudgetFull,   // the daemon's --max-pinned-blocks is spent: not pinned
  kNotInCache,      // none of its blocks was in the device pool any more: not pinned
};
const char* pin_status_name(PinStatus s);  // "pinned", "refreshed", "below_min_cache_tokens", ...

struct BreakpointOutcome {
  CacheBreakpoint breakpoint;
  PinStatus status = PinStatus::kBelowMinimum;
  int32_t pinned_tokens =
      0;  // whole blocks of the prefix held by the pin (0 unless pinned/refreshed)
};

// The cache part of a /v1/messages usage. input + read + creation = the
// prompt's tokens.
struct CacheUsage {
  int32_t input_tokens = 0;     // neither read from the cache nor written under a breakpoint
  int32_t read_tokens = 0;      // the prompt tokens found cached, any tier
  int32_t creation_tokens = 0;  // pinned under a breakpoint and not read
  int32_t creation_tokens_by_ttl[kCacheTtlCount] = {};  // creation_tokens split by the pin's TTL
};

// `outcomes` in prompt order. Each pinned prefix's tokens beyond the read
// ones and beyond the previous pinned prefix count as created under its TTL.
CacheUsage cache_usage(int32_t prompt_tokens, int32_t cached_tokens,
                       const std::vector<BreakpointOutcome>& outcomes);

}  // namespace prefixd
