// The dashboard's endpoints: GET /dashboard (the page), GET
// /v1/cache/history, GET /v1/cache/prefixes and POST
// /v1/cache/prefixes/pin and /unpin (by tracked prefix id). They read
// ctx.dashboard (daemon/monitoring/dashboard.h), which must be set.
#pragma once

#include <httplib.h>

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"

namespace prefixd {

void handle_dashboard_page(DaemonContext& ctx, const Call& call, httplib::Response& res);
// ?since=T_MS (default 0).
void handle_cache_history(DaemonContext& ctx, const Call& call, httplib::Response& res);
// ?limit=N (1..256, default 20).
void handle_cache_prefixes(DaemonContext& ctx, const Call& call, httplib::Response& res);
void handle_prefix_pin(DaemonContext& ctx, const Call& call, httplib::Response& res);
void handle_prefix_unpin(DaemonContext& ctx, const Call& call, httplib::Response& res);

// httplib post-routing hook, installed when an API key is configured: the
// key check answers a GET /dashboard without the key with a JSON 401, but a
// browser cannot send a bearer header on navigation, so that 401 carries
// instead the small page that asks for the key and loads the dashboard with it.
void answer_dashboard_login(const httplib::Request& req, httplib::Response& res);

}  // namespace prefixd
