// prompt_cache_key and prompt_cache_retention checks.
#include "daemon/validation/prompt_cache_request.h"

#include <string>

namespace prefixd {

ApiResult<PromptCacheFields> read_prompt_cache_fields(const nlohmann::json& body) {
  PromptCacheFields f;
  if (auto it = body.find("prompt_cache_key"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return ApiError::bad_request("prompt_cache_key", "'prompt_cache_key' must be a string",
                                   "invalid_type");
    if (it->get_ref<const std::string&>().size() > kMaxPromptCacheKeyBytes)
      return ApiError::bad_request(
          "prompt_cache_key",
          "'prompt_cache_key' is " + std::to_string(it->get_ref<const std::string&>().size()) +
              " bytes; at most " + std::to_string(kMaxPromptCacheKeyBytes) + " are accepted",
          "invalid_value");
  }
  if (auto it = body.find("prompt_cache_retention"); it != body.end() && !it->is_null()) {
    if (*it == "24h") {
      f.retention = CacheTtl::k24h;
    } else if (*it != "in_memory") {
      return ApiError::bad_request(
          "prompt_cache_retention",
          "'prompt_cache_retention' must be \"in_memory\" or \"24h\" (got " + it->dump() + ")",
          "invalid_value");
    }
  }
  return f;
}

}  // namespace prefixd
