// Call: one routed request as its handler sees it. The route wrapper
// (daemon/api/routes.cpp) builds it once per request: the caller its API key
// names (the key the checks before routing let through), the JSON body
// parsed once, and, on a generation route, the one count of the request's
// outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/auth/api_keys.h"
#include "daemon/monitoring/metrics.h"

namespace prefixd {

// Who calls: the tenant whose key the request presents (`Authorization:
// Bearer KEY` or `x-api-key: KEY`), with its role and limits
// (daemon/auth/api_keys.h). Resolved from the request's headers by the route
// wrapper and handed to the handler in its Call.
struct Caller {
  const Tenant* tenant = nullptr;  // null without keys, and on public routes
  int32_t index() const { return tenant ? tenant->index : -1; }  // Tenant::index; -1 = none
};

// The one count of a generation request in prefixd_requests_total (and its
// tenant's series), settled exactly once with its outcome wherever the
// request ends: refused before or by its handler, answered, or its stream
// cut. Later settles are ignored. Thread-safe.
class RequestCount {
 public:
  RequestCount(Metrics& metrics, int32_t tenant) : metrics_(metrics), tenant_(tenant) {}
  RequestCount(const RequestCount&) = delete;
  RequestCount& operator=(const RequestCount&) = delete;

  void settle(RequestOutcome outcome) {
    if (!settled_.exchange(true)) metrics_.count_request(outcome, tenant_);
  }
  bool settled() const { return settled_.load(); }
  int32_t tenant() const { return tenant_; }  // Tenant::index; -1 = none

 private:
  Metrics& metrics_;
  const int32_t tenant_;
  std::atomic<bool> settled_{false};
};

struct Call {
  std::string_view path;                                 // e.g. "/v1/completions"
  const std::multimap<std::string, std::string>& query;  // query parameters
  Caller caller;
  const nlohmann::json* body = nullptr;  // POST routes: the body, a JSON object; else null
  std::shared_ptr<RequestCount> count;   // generation routes (kCountsRequests); else null
  // When the route began, its body read and not yet parsed: where TTFT starts.
  std::chrono::steady_clock::time_point t_routed = std::chrono::steady_clock::now();
};

}  // namespace prefixd
