// The dashboard's endpoints: GET /dashboard (the page), GET
// /v1/cache/history, GET /v1/cache/prefixes and POST
// /v1/cache/prefixes/pin and /unpin (by tracked prefix id). They read
// ctx.dashboard (daemon/monitoring/dashboard.h), which must be set.
#pragma once

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"

namespace prefixd {

void handle_dashboard_page(DaemonContext& ctx, const Call& call, Reply& res);
// ?since=T_MS (default 0).
void handle_cache_history(DaemonContext& ctx, const Call& call, Reply& res);
// ?limit=N (1..256, default 20).
void handle_cache_prefixes(DaemonContext& ctx, const Call& call, Reply& res);
void handle_prefix_pin(DaemonContext& ctx, const Call& call, Reply& res);
void handle_prefix_unpin(DaemonContext& ctx, const Call& call, Reply& res);

// An HTML page with the dashboard's headers (no caching, a content security
// policy allowing nothing beyond this origin, no sniffing, no framing).
void send_html(Reply& res, const std::string& html, int status);

// The small page that asks for the key and loads the dashboard with it: the
// route table answers a GET /dashboard refused with 401 with it (a browser
// cannot send a bearer header on navigation).
const std::string& dashboard_login_html();

}  // namespace prefixd
