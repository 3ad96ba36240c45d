// OpenAI's prompt-caching fields on /v1/completions and /v1/chat/completions:
// `prompt_cache_key` (a routing hint: checked and bounded here, read by the
// HAProxy affinity config in ops/haproxy, not used by the daemon) and
// `prompt_cache_retention` ("in_memory", the default, or "24h": the prompt's
// prefix is pinned for 24 h after the answer, daemon/api/ttl_pins.h). Pure
// functions; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "daemon/validation/cache_breakpoints.h"
#include "daemon/validation/request_validation.h"

namespace prefixd {

constexpr size_t kMaxPromptCacheKeyBytes = 1024;

struct PromptCacheFields {
  std::optional<CacheTtl> retention;  // set for "24h"
};

ApiResult<PromptCacheFields> read_prompt_cache_fields(const nlohmann::json& body);

}  // namespace prefixd
