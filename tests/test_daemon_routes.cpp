// Unit tests of what every route shares: the admission gate, the route table
// (against daemon/api.md) and ApiError's factories.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "daemon/api/daemon_context.h"
#include "daemon/api/routes.h"
#include "daemon/http/api_error.h"

using nlohmann::json;
using namespace prefixd;

TEST_CASE("AdmissionGate admits up to its limit and tickets release their slot") {
  AdmissionGate gate(2);
  CHECK(gate.try_acquire());
  CHECK(gate.try_acquire());
  CHECK(!gate.try_acquire());
  {
    AdmissionTicket t(&gate);
    CHECK(gate.in_flight() == 2);
  }
  CHECK(gate.in_flight() == 1);
  CHECK(gate.try_acquire());
}

TEST_CASE("the route table: one row per method and path, all in api.md, /health the only public") {
  auto method_name = [](Method m) {
    return m == Method::kGet ? "GET" : m == Method::kPost ? "POST" : "DELETE";
  };
  std::ifstream in(std::string(PREFIXD_SOURCE_DIR) + "/daemon/api.md");
  std::stringstream api_md;
  api_md << in.rdbuf();
  REQUIRE(!api_md.str().empty());
  std::set<std::string> seen;
  std::vector<std::string> public_paths, counted_paths, httplib_body_paths;
  for (const Route& r : routes()) {
    const std::string endpoint = std::string(method_name(r.method)) + " " + r.path;
    CHECK_MESSAGE(seen.insert(endpoint).second, endpoint);
    CHECK_MESSAGE(api_md.str().find(endpoint) != std::string::npos, endpoint);
    const bool has_handler = r.handler != nullptr;
    CHECK_MESSAGE(has_handler, endpoint);
    if (r.access == Access::kPublic) public_paths.push_back(r.path);
    if ((r.flags & kCountsRequests) != 0) counted_paths.push_back(r.path);
    if ((r.flags & kHttplibBody) != 0) httplib_body_paths.push_back(r.path);
  }
  CHECK(seen.size() == 20);
  CHECK(public_paths == std::vector<std::string>{"/health"});
  CHECK(counted_paths ==
        std::vector<std::string>{"/v1/completions", "/v1/chat/completions", "/v1/messages"});
  CHECK(httplib_body_paths ==
        std::vector<std::string>{"/v1/cache/prefixes/pin", "/v1/cache/prefixes/unpin"});
}

TEST_CASE("ApiError factories: status, type, param and code of each") {
  auto check = [](const ApiError& e, int status, const char* type, const char* param,
                  const char* code) {
    CHECK(e.status == status);
    CHECK(e.type == type);
    CHECK(e.param == param);
    CHECK(e.code == code);
  };
  check(ApiError::bad_request("n", "m", "unsupported_value"), 400, "invalid_request_error", "n",
        "unsupported_value");
  check(ApiError::unauthorized("m"), 401, "authentication_error", "", "invalid_api_key");
  check(ApiError::not_found("", "m"), 404, "invalid_request_error", "", "not_found");
  check(ApiError::not_found("model", "m", "model_not_found"), 404, "invalid_request_error", "model",
        "model_not_found");
  check(ApiError::conflict("id", "m", "pin_failed"), 409, "invalid_request_error", "id",
        "pin_failed");
  check(ApiError::payload_too_large(65536), 413, "invalid_request_error", "", "request_too_large");
  CHECK(ApiError::payload_too_large(65536).message ==
        "the request body is larger than the limit of 65536 bytes");
  check(ApiError::unsupported_media_type("m"), 415, "invalid_request_error", "",
        "unsupported_media_type");
  check(ApiError::too_many_requests("m"), 429, "rate_limit_error", "", "queue_full");
  check(ApiError::internal_error("m"), 500, "server_error", "", "");
  check(ApiError::service_unavailable("m"), 503, "unavailable", "", "shutting_down");
  check(ApiError::from_status(400), 400, "invalid_request_error", "", "");
  check(ApiError::from_status(502), 502, "server_error", "", "");
  CHECK(ApiError::from_status(502).message == "HTTP error 502");
  const json j = ApiError::bad_request("", "bad", "invalid_json").to_json();
  CHECK(j == json{{"error",
                   {{"message", "bad"},
                    {"type", "invalid_request_error"},
                    {"param", nullptr},
                    {"code", "invalid_json"}}}});
}
