// Which header carries the caller's key: Authorization first, x-api-key
// without it.
#include "daemon/api/caller_key.h"

namespace prefixd {

const Tenant* find_caller(const ApiKeys& keys, const httplib::Request& req) {
  if (req.has_header("Authorization"))
    return keys.find_bearer(req.get_header_value("Authorization"));
  if (req.has_header("x-api-key")) return keys.find(req.get_header_value("x-api-key"));
  return nullptr;
}

bool presents_key(const httplib::Request& req) {
  return !req.get_header_value("Authorization").empty() ||
         !req.get_header_value("x-api-key").empty();
}

}  // namespace prefixd
