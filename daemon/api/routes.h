// The HTTP surface of prefixd as one table: method, path, handler and who may
// call it (daemon/api.md is the contract). install_routes() puts the table
// into an httplib::Server together with what every route shares: the API-key
// check before routing, the caller resolved from the request's key for its
// handler, the JSON body reader and parser of POST routes, the count of
// generation requests' outcomes, and JSON answers for the errors httplib
// produces itself. Handlers take a Call (call.h).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <span>

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"
#include "daemon/http/request_origin.h"

namespace prefixd {

enum class Method : uint8_t { kGet, kPost, kDelete };

// Who may call a route. Without keys (no --api-key, --api-key-file,
// PREFIXD_API_KEY or --api-keys) anyone may call every route; with keys
// `Authorization: Bearer KEY` is needed (else 401) and the key's role must
// allow the route (else 403; daemon/auth/api_keys.h). The single key is an admin.
enum class Access : uint8_t {
  kPublic,  // anyone, key or not (GET /health: load balancers probe it)
  kKey,     // any key: role user or admin
  kAdmin,   // a key with role admin
};

// Bits of Route::flags.
enum RouteFlag : uint8_t {
  // A generation route: its requests count in prefixd_requests_total (once,
  // through Call::count), those refused before the handler runs (unreadable,
  // multipart, too large or malformed bodies, any path error) as "invalid".
  kCountsRequests = 1 << 0,
  // httplib reads the POST body, as the dashboard's pin-by-id routes always
  // have: form-urlencoded bodies above 8 KiB get 413 and multipart bodies are
  // parsed into files; chunked or unframed bodies get 411 before httplib
  // reads them (it would read those whole). Every other POST route reads any
  // body as JSON text up to --max-body-bytes and refuses multipart with 415.
  kHttplibBody = 1 << 1,
  // Refused with 503 (Retry-After) while the daemon drains, before its body
  // is parsed: the routes that submit to the engine.
  kRefusedWhileDraining = 1 << 2,
};

// Handlers run on HTTP worker threads; `ctx` outlives the server. A POST
// handler gets its body parsed (call.body is a JSON object). Handlers see no
// httplib type: they answer through `reply` (daemon/http/reply.h).
using Handler = void (*)(DaemonContext& ctx, const Call& call, Reply& reply);

struct Route {
  Method method;
  const char* path;
  Handler handler;
  Access access;
  uint8_t flags = 0;  // RouteFlag bits
};

// Every route of the daemon.
std::span<const Route> routes();

// What the checks before routing take from the server's options.
struct RouteOptions {
  OriginPolicy origin_policy;  // which Host and Origin headers are served (request_origin.h)
  int64_t max_body_bytes = 0;  // --max-body-bytes: larger request bodies get 413
};

// Installs the routes, the key check (when ctx.api_keys is set), the body
// reader and the JSON error answers into `http`. `ctx` must outlive it.
void install_routes(httplib::Server& http, DaemonContext& ctx, const RouteOptions& options);

}  // namespace prefixd
