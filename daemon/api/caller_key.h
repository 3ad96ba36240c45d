// The API key a request presents: `Authorization: Bearer KEY` (OpenAI's
// header) or `x-api-key: KEY` (Anthropic's). Both reach the same keys,
// tenants, roles and limits (daemon/auth/api_keys.h).
#pragma once

#include <httplib.h>

#include <string>

#include "daemon/auth/api_keys.h"

namespace prefixd {

// The caller's tenant: from the Authorization header when the request has
// one (x-api-key is then not read), else from x-api-key; null when neither
// carries a valid key.
const Tenant* find_caller(const ApiKeys& keys, const httplib::Request& req);

// Whether the request carries a key at all (Authorization or x-api-key):
// picks the 401 message "missing" or "invalid".
bool presents_key(const httplib::Request& req);

}  // namespace prefixd
