// The HTTP surface of prefixd as one table: method, path, handler and who may
// call it (daemon/api.md is the contract). install_routes() puts the table
// into an httplib::Server together with what every route shares: the API-key
// check, the JSON body reader of POST routes and JSON answers for the errors
// httplib produces itself.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <span>

#include "daemon/daemon_context.h"
#include "daemon/server_options.h"

namespace prefixd {

enum class Method : uint8_t { kGet, kPost, kDelete };

// Who may call a route. Today there are two kinds of caller: anyone, and a
// holder of the API key; finer roles would be more values here.
enum class Access : uint8_t {
  kPublic,  // anyone, key or not (GET /health: load balancers probe it)
  kKey,     // with --api-key set, `Authorization: Bearer KEY` (else 401); anyone without it
};

// Bits of Route::flags.
enum RouteFlag : uint8_t {
  // A generation route: its requests count in prefixd_requests_total, those
  // refused before the handler runs (unreadable, multipart or too large
  // bodies, any path error) as "invalid".
  kCountsRequests = 1 << 0,
  // httplib reads the POST body, as the dashboard's pin-by-id routes always
  // have: form-urlencoded bodies above 8 KiB get 413 and multipart bodies are
  // parsed into files; chunked or unframed bodies get 411 before httplib
  // reads them (it would read those whole). Every other POST route reads any
  // body as JSON text up to --max-body-bytes and refuses multipart with 415.
  kHttplibBody = 1 << 1,
};

// Handlers run on HTTP worker threads; `ctx` outlives the server.
using Handler = void (*)(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res);

struct Route {
  Method method;
  const char* path;
  Handler handler;
  Access access;
  uint8_t flags = 0;  // RouteFlag bits
};

// Every route of the daemon.
std::span<const Route> routes();

// Installs the routes, the key check (when options.api_key is set), the body
// reader and the JSON error answers into `http`. `ctx` and `options` must
// outlive it.
void install_routes(httplib::Server& http, DaemonContext& ctx, const ServerOptions& options);

}  // namespace prefixd
