// The endpoints that watch the daemon rather than use it: GET /health (public:
// load balancers probe it without the API key) and GET /metrics (Prometheus).
#pragma once

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"

namespace prefixd {

// {"status": "ok", "backend", "cpu_isa"}; 503 with "shutting_down" while draining.
void handle_health(DaemonContext& ctx, const Call& call, Reply& res);

// The Prometheus exposition of ctx.metrics and a StatsSnapshot read now.
void handle_metrics(DaemonContext& ctx, const Call& call, Reply& res);

}  // namespace prefixd
