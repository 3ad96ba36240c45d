// GET /health and GET /metrics.
#include "daemon/api/monitoring_handlers.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "daemon/api/ttl_pins.h"
#include "daemon/monitoring/stats_snapshot.h"

namespace prefixd {

namespace {

// /health's "attention": which implementation serves each family, every
// path's state and calls, and the self-check verdicts.
nlohmann::json attention_json(const FastPathReport& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [family, line] : r.summary) j[family] = line;
  nlohmann::json paths = nlohmann::json::object();
  for (const FastPathState& p : r.paths)
    paths[p.name] = {{"enabled", p.enabled}, {"detail", p.detail}, {"calls", p.calls}};
  j["paths"] = std::move(paths);
  nlohmann::json checks = nlohmann::json::array();
  for (const SelfCheckVerdict& v : r.self_checks) {
    checks.push_back({{"path", v.path},
                      {"shape", v.shape},
                      {"passed", v.passed},
                      {"max_error", std::isfinite(v.max_error) ? nlohmann::json(v.max_error) : nlohmann::json()},
                      {"tolerance", v.tolerance},
                      {"error", v.error}});
  }
  j["self_checks"] = std::move(checks);
  return j;
}

}  // namespace

void handle_health(DaemonContext& ctx, const Call&, Reply& res) {
  const bool draining = ctx.draining.load();
  nlohmann::json body{{"status", draining ? "shutting_down" : "ok"},
                      {"backend", ctx.build.backend_name},
                      {"cpu_isa", ctx.build.cpu_isa_name}};
  if (ctx.fast_paths) {
    const FastPathReport r = ctx.fast_paths();
    if (!r.empty()) body["attention"] = attention_json(r);
  }
  res.json(body, draining ? 503 : 200);
}

void handle_metrics(DaemonContext& ctx, const Call&, Reply& res) {
  std::string text = ctx.metrics->render(read_stats(*ctx.engine, ctx.tiers), ctx.build);
  if (ctx.fast_paths) render_fast_paths(ctx.fast_paths(), &text);
  if (ctx.ttl_pins) ctx.ttl_pins->render_metrics(&text);
  res.content(text, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace prefixd
