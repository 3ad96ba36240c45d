// The route table, then how it is installed: the checks before routing
// (Host and Origin, what the request may carry before its body is read, the
// API key), the one wrapper every route runs through (body read and parsed
// once, the Call built with the caller its key names, the drain refusal),
// and JSON answers for the errors httplib produces itself and for exceptions.
#include "daemon/api/routes.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/api/anthropic_handlers.h"
#include "daemon/api/cache_handlers.h"
#include "daemon/api/dashboard_handlers.h"
#include "daemon/api/monitoring_handlers.h"
#include "daemon/api/openai_handlers.h"
#include "daemon/auth/api_keys.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/http/api_error.h"
#include "daemon/http/http_util.h"
#include "daemon/http/request_bounds.h"
#include "daemon/monitoring/metrics.h"
#include "daemon/validation/request_validation.h"

namespace prefixd {
namespace {

using enum Method;
using enum Access;
using HandlerResponse = httplib::Server::HandlerResponse;
using nlohmann::json;

// A generation route's flags.
constexpr uint8_t kGeneration = kCountsRequests | kRefusedWhileDraining;

// clang-format off
constexpr Route kRoutes[] = {
    // method path                         handler                   access   flags
    {kGet,    "/health",                   handle_health,            kPublic},
    {kGet,    "/metrics",                  handle_metrics,           kAdmin},
    // OpenAI-compatible (openai_handlers.h).
    {kGet,    "/v1/models",                handle_models,            kKey},
    {kPost,   "/v1/completions",           handle_completions,       kKey,    kGeneration},
    {kPost,   "/v1/chat/completions",      handle_chat_completions,  kKey,    kGeneration},
    {kPost,   "/tokenize",                 handle_tokenize,          kKey},
    {kPost,   "/detokenize",               handle_detokenize,        kKey},
    // Anthropic-compatible (anthropic_handlers.h); errors in Anthropic's shape.
    {kPost,   "/v1/messages",              handle_messages,          kKey,    kGeneration},
    {kPost,   "/v1/messages/count_tokens", handle_count_tokens,      kKey},
    // The prefix cache (cache_handlers.h).
    {kGet,    "/v1/cache/stats",           handle_cache_stats,       kAdmin},
    {kPost,   "/v1/cache/lookup",          handle_cache_lookup,      kKey},
    {kPost,   "/v1/cache/prefetch",        handle_cache_prefetch,    kKey,    kRefusedWhileDraining},
    {kPost,   "/v1/cache/pin",             handle_cache_pin,         kAdmin},
    {kPost,   "/v1/cache/unpin",           handle_cache_unpin,       kAdmin},
    {kDelete, "/v1/cache",                 handle_cache_clear,       kAdmin},
    // The dashboard (dashboard_handlers.h).
    {kGet,    "/dashboard",                handle_dashboard_page,    kAdmin},
    {kGet,    "/v1/cache/history",         handle_cache_history,     kAdmin},
    {kGet,    "/v1/cache/prefixes",        handle_cache_prefixes,    kAdmin},
    {kPost,   "/v1/cache/prefixes/pin",    handle_prefix_pin,        kAdmin,  kHttplibBody},
    {kPost,   "/v1/cache/prefixes/unpin",  handle_prefix_unpin,      kAdmin,  kHttplibBody},
};
// clang-format on

// Whether a request for `path` needs no key: some public route has that
// path. By path alone, whatever the method, because the check runs before
// routing: a wrong method on a public path gets its 404, not a 401.
bool is_public(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (path == r.path && r.access == kPublic) return true;
  }
  return false;
}

// Whether a request for `path` needs an admin key: some admin route has that
// path (whatever the method, as is_public).
bool is_admin_only(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (path == r.path && r.access == kAdmin) return true;
  }
  return false;
}

// Whether some route with `path` (whatever its method) has `flag`.
bool any_route_has(std::string_view path, uint8_t flag) {
  for (const Route& r : kRoutes) {
    if (path == r.path && (r.flags & flag) != 0) return true;
  }
  return false;
}

// How the route for this method and path takes a body (request_bounds.h).
// httplib serves HEAD with the GET handlers.
BodyUse body_use(std::string_view method, std::string_view path) {
  const std::string_view as = method == "HEAD" ? "GET" : method;
  for (const Route& r : kRoutes) {
    if (path != r.path) continue;
    const std::string_view route_method = r.method == kGet    ? "GET"
                                          : r.method == kPost ? "POST"
                                                              : "DELETE";
    if (as != route_method) continue;
    if (r.method != kPost) return BodyUse::kNone;
    return (r.flags & kHttplibBody) != 0 ? BodyUse::kHttplib : BodyUse::kStreamed;
  }
  // A public path is a probe: any other method gets 405 whatever it carries.
  return is_public(path) ? BodyUse::kGetOnly : BodyUse::kNoRoute;
}

// A refusal before routing. A body the request has is left unread, so the
// connection is closed after the answer (request_bounds.h).
void refuse(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
  const ApiError e = error.in_dialect_of(req.path);
  if (carries_body(req)) {
    send_error_closing(res, e);
  } else {
    send_error(res, e);
  }
}

// The caller's tenant: from the Authorization header when the request has
// one (x-api-key is then not read), else from x-api-key; null when neither
// carries a valid key.
const Tenant* find_caller(const ApiKeys& keys, const httplib::Request& req) {
  if (req.has_header("Authorization"))
    return keys.find_bearer(req.get_header_value("Authorization"));
  if (req.has_header("x-api-key")) return keys.find(req.get_header_value("x-api-key"));
  return nullptr;
}

// Who calls: the tenant whose key the request presents, when keys are
// configured and the path is not public; else no tenant. A function of the
// request alone (ApiKeys is immutable), so each step of a request that needs
// the caller (the checks before routing, the route wrapper, the error
// answers) resolves it from the request it is given: nothing is carried
// between them.
Caller resolve_caller(const DaemonContext& ctx, const httplib::Request& req) {
  if (!ctx.api_keys || is_public(req.path)) return Caller{};
  return Caller{find_caller(*ctx.api_keys, req)};
}

// Whether the request carries a key at all: picks the 401 message.
bool presents_key(const httplib::Request& req) {
  return !req.get_header_value("Authorization").empty() ||
         !req.get_header_value("x-api-key").empty();
}

// A request to a generation route refused before its handler: counted once
// here, under its tenant when the key is known.
void count_refused(DaemonContext& ctx, std::string_view path, const Caller& caller,
                   RequestOutcome outcome) {
  if (any_route_has(path, kCountsRequests))
    RequestCount(*ctx.metrics, caller.index()).settle(outcome);
}

// Before routing, before httplib reads any body: a Host that is not served
// gets 421, a foreign Origin 403 (request_origin.h), a request whose body
// would not be bounded 415/405/400/404/411/413 (request_bounds.h), then,
// with keys, a request for a route that needs one gets 401 without a valid
// key, 403 when the key's role does not allow the route, and 429 when the
// tenant's requests_per_minute is spent (daemon/auth/api_keys.h,
// tenant_limits.h).
HandlerResponse check_request(DaemonContext& ctx, const RouteOptions& o,
                              const httplib::Request& req, httplib::Response& res) {
  const std::string host = req.get_header_value("Host");
  if (auto refusal = check_host(o.origin_policy, host)) {
    refuse(req, res, ApiError::misdirected(*refusal));
    return HandlerResponse::Handled;
  }
  if (auto refusal = check_origin(o.origin_policy, req.get_header_value("Origin"), host)) {
    refuse(req, res, ApiError::forbidden(*refusal, "origin_not_allowed"));
    return HandlerResponse::Handled;
  }
  const bool needs_key = ctx.api_keys && !is_public(req.path);
  const Caller caller = resolve_caller(ctx, req);
  if (ApiResult<void> refusal =
          check_request_bounds(req, body_use(req.method, req.path), o.max_body_bytes);
      !refusal.ok()) {
    if (refusal.error().status == 405) res.set_header("Allow", "GET, HEAD");
    // As when read_body refuses a generation request's body.
    count_refused(ctx, req.path, caller, RequestOutcome::kInvalid);
    refuse(req, res, refusal.error());
    return HandlerResponse::Handled;
  }
  if (!needs_key) return HandlerResponse::Unhandled;
  const Tenant* tenant = caller.tenant;
  if (tenant == nullptr) {
    res.set_header("WWW-Authenticate", "Bearer");
    refuse(req, res,
           ApiError::unauthorized(presents_key(req) ? "invalid API key"
                                                    : "missing API key: send 'Authorization: "
                                                      "Bearer KEY' (or 'x-api-key: KEY')"));
    return HandlerResponse::Handled;
  }
  if (tenant->role != Role::kAdmin && is_admin_only(req.path)) {
    count_refused(ctx, req.path, caller, RequestOutcome::kInvalid);
    refuse(req, res,
           ApiError::forbidden("the key of tenant '" + tenant->name + "' has role " +
                                   role_name(tenant->role) + "; " + req.path + " needs role admin",
                               "insufficient_role"));
    return HandlerResponse::Handled;
  }
  if (ctx.tenant_limits) {
    const double now_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    if (std::optional<int32_t> wait_s = ctx.tenant_limits->take_request(tenant->index, now_s)) {
      count_refused(ctx, req.path, caller, RequestOutcome::kRejected);
      ctx.metrics->count_tenant_limited(tenant->index, TenantLimit::kRequestsPerMinute);
      res.set_header("Retry-After", std::to_string(*wait_s));
      refuse(req, res,
             ApiError::too_many_requests(
                 "tenant '" + tenant->name + "' has used its requests_per_minute of " +
                     std::to_string(tenant->limits.requests_per_minute) + "; retry in " +
                     std::to_string(*wait_s) + " s",
                 "tenant_rate_limit"));
      return HandlerResponse::Handled;
    }
  }
  return HandlerResponse::Unhandled;
}

// Errors httplib produces itself (no route, body too large, bad request
// line) get the JSON error shape; answers that already have a body keep it.
// A request to a generation path refused here is counted invalid. With the
// route's method (POST) that happens only before the checks before routing
// (a head httplib could not read whole: the route reads its own body and
// answers its own errors), so its key was never checked and it counts with
// no tenant; with another method it has no route, and counts under the
// caller its key names.
HandlerResponse answer_http_error(DaemonContext& ctx, const RouteOptions& o,
                                  const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty() || is_closing_answer(res)) return HandlerResponse::Unhandled;
  const bool checked = body_use(req.method, req.path) != BodyUse::kStreamed;
  count_refused(ctx, req.path, checked ? resolve_caller(ctx, req) : Caller{},
                RequestOutcome::kInvalid);
  if (res.status == 404) {
    send_error(res, ApiError::not_found("", "no endpoint " + req.method + " " + req.path)
                        .in_dialect_of(req.path));
  } else if (res.status == 413) {
    send_error(res, ApiError::payload_too_large(o.max_body_bytes).in_dialect_of(req.path));
  } else {
    send_error(res, ApiError::from_status(res.status).in_dialect_of(req.path));
  }
  return HandlerResponse::Handled;
}

// An exception out of a handler: the details go to the log, the client gets
// only "internal error" (no library internals in answers).
void answer_exception(const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
  std::string what = "unknown exception";
  try {
    if (ep) std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "prefixd [error] %s %s: %s\n", req.method.c_str(), req.path.c_str(), what.c_str());
  send_error(res, ApiError::internal_error("internal error").in_dialect_of(req.path));
}

// Ok when the request says its body is JSON: `application/json`, with
// or without parameters. Anything else gets 415, which also makes every
// cross-site "simple" POST (text/plain, forms) fail: a browser must preflight
// a JSON one, and the preflight is refused.
ApiResult<void> check_json_content_type(const httplib::Request& req) {
  std::string type = req.get_header_value("Content-Type");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (type == "application/json") return {};
  return ApiError::unsupported_media_type("Content-Type '" + req.get_header_value("Content-Type") +
                                          "' is not accepted: send the body as application/json "
                                          "(curl: -H 'Content-Type: application/json')");
}

// Reads a POST body (JSON: check_json_content_type) within the body limit, any
// framing (Content-Length, chunked, up to the end of the connection). On
// failure answers 415, 400 or 413 itself, on a connection then closed (the
// body is left unread, or read in part), and returns nullopt.
std::optional<std::string> read_body(const httplib::Request& req,
                                     const httplib::ContentReader& reader, int64_t max_body_bytes,
                                     httplib::Response& res) {
  if (ApiResult<void> refusal = check_json_content_type(req); !refusal.ok()) {
    send_error_closing(res, refusal.error().in_dialect_of(req.path));
    return std::nullopt;
  }
  std::string body;
  bool too_large = false;
  const size_t limit = static_cast<size_t>(max_body_bytes);
  const bool read_ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > limit) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  // A declared Content-Length above the limit was refused before routing
  // (check_request_bounds); a chunked or unframed body stops here at the limit.
  if (!read_ok && !too_large) {
    send_error_closing(
        res, ApiError::bad_request("", "the request body could not be read", "invalid_body")
                 .in_dialect_of(req.path));
    return std::nullopt;
  }
  if (too_large) {
    send_error_closing(res, ApiError::payload_too_large(max_body_bytes).in_dialect_of(req.path));
    return std::nullopt;
  }
  return body;
}

// With keys, the key check answers a GET /dashboard without the key with a
// JSON 401, but a browser cannot send a bearer header on navigation: that 401
// carries instead the small page that asks for the key and loads the
// dashboard with it (dashboard_handlers.h).
void answer_dashboard_login(const httplib::Request& req, httplib::Response& res) {
  if (req.path != "/dashboard" || req.method != "GET" || res.status != 401) return;
  // httplib has sized (and maybe compressed) the JSON body already; the new
  // body goes out as it is, with its own length.
  res.headers.erase("Content-Length");
  res.headers.erase("Content-Encoding");
  Reply reply(res);
  send_html(reply, dashboard_login_html(), 401);
  res.set_header("Content-Length", std::to_string(res.body.size()));
}

// httplib adds its own `Connection: close` (a second one when the request
// asked to close) and `Keep-Alive` after the handler; a closing answer
// keeps one `Connection: close` and no `Keep-Alive`.
void tidy_closing_answer(httplib::Response& res) {
  if (!is_closing_answer(res)) return;
  res.headers.erase("Connection");
  res.headers.erase("Keep-Alive");
  res.set_header("Connection", "close");
}

// What every route runs through once its body (if any) is read: the Call
// (the caller, who passed the checks before routing; the outcome count of a
// generation route), the drain refusal, the body parsed once (malformed:
// 400), then the handler.
void run_route(DaemonContext& ctx, const Route& route, const httplib::Request& req,
               const std::string* body_text, httplib::Response& res) {
  Call call{req.path, req.params, resolve_caller(ctx, req), nullptr, nullptr};
  if ((route.flags & kCountsRequests) != 0)
    call.count = std::make_shared<RequestCount>(*ctx.metrics, call.caller.index());
  auto refuse_call = [&](const ApiError& e, RequestOutcome outcome) {
    if (call.count) call.count->settle(outcome);
    send_error(res, e.in_dialect_of(req.path));
  };
  if ((route.flags & kRefusedWhileDraining) != 0 && ctx.draining.load()) {
    res.set_header("Retry-After", std::to_string(ctx.retry_after_s));
    return refuse_call(ApiError::service_unavailable("the server is shutting down"),
                       RequestOutcome::kRejected);
  }
  ApiResult<json> body = json(nullptr);
  if (body_text) {
    body = parse_json_body(*body_text);
    if (!body.ok()) return refuse_call(body.error(), RequestOutcome::kInvalid);
    call.body = &body.value();
  }
  Reply reply(res);
  route.handler(ctx, call, reply);
}

void install_route(httplib::Server& h, DaemonContext& ctx, const RouteOptions& o,
                   const Route& route) {
  DaemonContext* c = &ctx;
  auto plain = [c, &route](const httplib::Request& req, httplib::Response& res) {
    run_route(*c, route, req, nullptr, res);
  };
  switch (route.method) {
    case kGet:
      h.Get(route.path, plain);
      return;
    case kDelete:
      h.Delete(route.path, plain);
      return;
    case kPost:
      if ((route.flags & kHttplibBody) != 0) {
        h.Post(route.path, [c, &route](const httplib::Request& req, httplib::Response& res) {
          if (ApiResult<void> refusal = check_json_content_type(req); !refusal.ok()) {
            send_error(res, refusal.error());  // the body was read (within its Content-Length)
            return;
          }
          run_route(*c, route, req, &req.body, res);
        });
        return;
      }
      h.Post(route.path, [c, &route, max_body_bytes = o.max_body_bytes](
                             const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader) {
        std::optional<std::string> body = read_body(req, reader, max_body_bytes, res);
        if (!body)
          return count_refused(*c, req.path, resolve_caller(*c, req), RequestOutcome::kInvalid);
        run_route(*c, route, req, &*body, res);
      });
      return;
  }
}

}  // namespace

std::span<const Route> routes() { return kRoutes; }

void install_routes(httplib::Server& http, DaemonContext& ctx, const RouteOptions& options) {
  auto o = std::make_shared<const RouteOptions>(options);
  DaemonContext* c = &ctx;
  http.set_pre_routing_handler([c, o](const httplib::Request& req, httplib::Response& res) {
    return check_request(*c, *o, req, res);
  });
  for (const Route& route : kRoutes) install_route(http, ctx, *o, route);
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [c, o](const httplib::Request& req, httplib::Response& res) {
        return answer_http_error(*c, *o, req, res);
      }));
  http.set_exception_handler(answer_exception);
  http.set_post_routing_handler([c](const httplib::Request& req, httplib::Response& res) {
    tidy_closing_answer(res);
    if (c->api_keys) answer_dashboard_login(req, res);
  });
}

}  // namespace prefixd
