// GET /health and GET /metrics.
#include "daemon/api/monitoring_handlers.h"

#include <nlohmann/json.hpp>

#include "daemon/api/ttl_pins.h"
#include "daemon/monitoring/stats_snapshot.h"

namespace prefixd {

void handle_health(DaemonContext& ctx, const Call&, Reply& res) {
  const bool draining = ctx.draining.load();
  res.json(nlohmann::json{{"status", draining ? "shutting_down" : "ok"},
                          {"backend", ctx.build.backend_name},
                          {"cpu_isa", ctx.build.cpu_isa_name}},
           draining ? 503 : 200);
}

void handle_metrics(DaemonContext& ctx, const Call&, Reply& res) {
  std::string text = ctx.metrics->render(read_stats(*ctx.engine, ctx.tiers), ctx.build);
  if (ctx.ttl_pins) ctx.ttl_pins->render_metrics(&text);
  res.content(text, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace prefixd
