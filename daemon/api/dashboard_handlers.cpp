// The dashboard's endpoints: the page (and its login page), the history and
// hot-prefix documents, and pin/unpin by prefix id.
#include "daemon/api/dashboard_handlers.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/api/ttl_pins.h"
#include "daemon/auth/api_keys.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/monitoring/dashboard_assets.h"
#include "daemon/validation/request_validation.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

// No fetches beyond this origin; everything the page needs is inline.
const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The TTL pins for /v1/cache/prefixes: prefix length, TTL, seconds left,
// refreshes, the tenant and a preview of the text.
json ttl_pins_json(const DaemonContext& ctx, const TtlPins& pins) {
  json rows = json::array();
  for (const TtlPinView& p : pins.list()) {
    json row;
    row["tokens"] = p.tokens.size();
    row["ttl"] = ttl_name(p.ttl);
    row["expires_in_s"] = p.expires_in_s;
    row["hits"] = p.hits;
    row["tenant"] = p.tenant >= 0 && ctx.api_keys
                        ? json(ctx.api_keys->tenants()[static_cast<size_t>(p.tenant)].name)
                        : json(nullptr);
    row["preview"] = nullptr;
    if (ctx.model.tokenizer) {
      const size_t n_preview = std::min<size_t>(p.tokens.size(), 48);
      row["preview"] = ctx.model.tokenizer->decode(std::vector<int32_t>(
          p.tokens.begin(), p.tokens.begin() + static_cast<std::ptrdiff_t>(n_preview)));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

void send_html(Reply& res, const std::string& html, int status) {
  res.header("Cache-Control", "no-store");
  res.header("Content-Security-Policy", kContentSecurityPolicy);
  res.header("X-Content-Type-Options", "nosniff");
  res.header("X-Frame-Options", "DENY");  // no framing: its pin buttons cannot be clickjacked
  res.content(html, "text/html; charset=utf-8", status);
}

namespace {

// Parses a non-negative integer query parameter; nullopt (and an answered
// 400) when it is malformed.
std::optional<int64_t> int_param(const Call& call, Reply& res, const char* name, int64_t fallback,
                                 int64_t min, int64_t max) {
  const auto it = call.query.lower_bound(name);  // the first value given, as httplib reads it
  if (it == call.query.end() || it->first != name) return fallback;
  const std::string& v = it->second;
  int64_t out = 0;
  bool ok = !v.empty() && v.size() <= 18;
  for (char ch : v) {
    if (ch < '0' || ch > '9') {
      ok = false;
      break;
    }
    out = out * 10 + (ch - '0');
  }
  if (!ok || out < min || out > max) {
    res.error(ApiError::bad_request(name,
                                    std::string("'") + name + "' must be an integer in [" +
                                        std::to_string(min) + ", " + std::to_string(max) + "]",
                                    "invalid_parameter"));
    return std::nullopt;
  }
  return out;
}

// POST /v1/cache/prefixes/pin (pin = true) and /unpin {"id": "16 hex digits"}.
void pin_prefix(DaemonContext& ctx, const Call& call, Reply& res, bool pin) {
  Dashboard& d = *ctx.dashboard;
  const json& b = *call.body;
  if (!b.contains("id") || !b["id"].is_string()) {
    return res.error(
        ApiError::bad_request("id", "'id' (16 hex digits) is required", "invalid_parameter"));
  }
  std::optional<uint64_t> id = PrefixTracker::parse_id_hex(b["id"].get<std::string>());
  if (!id) {
    return res.error(
        ApiError::bad_request("id", "'id' must be 1 to 16 hex digits", "invalid_parameter"));
  }
  std::optional<PrefixEntry> e = d.prefixes().find(*id);
  if (!e) return res.error(ApiError::not_found("id", "no tracked prefix with this id"));
  Result<PinResult> r = ctx.engine->pin(e->tokens, e->cache_salt, pin);
  if (!r.ok()) {
    return res.error(ApiError::conflict("id", r.message(), pin ? "pin_failed" : "unpin_failed"));
  }
  d.prefixes().set_pinned(*id, pin);
  res.json(json{{"id", PrefixTracker::id_hex(*id)},
                {"pinned", pin},
                {"pinned_blocks", r->pinned_blocks},
                {"pinned_tokens", r->pinned_tokens}});
}

}  // namespace

void handle_dashboard_page(DaemonContext&, const Call&, Reply& res) {
  send_html(res, dashboard_page_html(), 200);
}

void handle_cache_history(DaemonContext& ctx, const Call& call, Reply& res) {
  auto since = int_param(call, res, "since", 0, 0, INT64_MAX / 2);
  if (!since) return;
  res.json(ctx.dashboard->history_json(*since));
}

void handle_cache_prefixes(DaemonContext& ctx, const Call& call, Reply& res) {
  auto limit = int_param(call, res, "limit", 20, 1, 256);
  if (!limit) return;
  json out = ctx.dashboard->prefixes_json(static_cast<size_t>(*limit));
  out["ttl_pins"] = ctx.ttl_pins ? ttl_pins_json(ctx, *ctx.ttl_pins) : json::array();
  res.json(out);
}

void handle_prefix_pin(DaemonContext& ctx, const Call& call, Reply& res) {
  pin_prefix(ctx, call, res, /*pin=*/true);
}

void handle_prefix_unpin(DaemonContext& ctx, const Call& call, Reply& res) {
  pin_prefix(ctx, call, res, /*pin=*/false);
}

const std::string& dashboard_login_html() {
  static const std::string html(dashboard_asset("login.html"));
  return html;
}

}  // namespace prefixd
