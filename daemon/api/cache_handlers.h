// The cache endpoints: GET /v1/cache/stats, POST /v1/cache/lookup,
// /v1/cache/prefetch, /v1/cache/pin, /v1/cache/unpin and DELETE /v1/cache.
// They run on HTTP worker threads and reach the engine only through its
// thread-safe queries and a kPrefetch request.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"
#include "daemon/monitoring/stats_snapshot.h"

namespace prefixd {

// The /v1/cache/stats document of `stats` (block_size: tokens per block).
nlohmann::json cache_stats_json(const StatsSnapshot& stats, int32_t block_size);

void handle_cache_stats(DaemonContext& ctx, const Call& call, Reply& res);
void handle_cache_lookup(DaemonContext& ctx, const Call& call, Reply& res);
void handle_cache_prefetch(DaemonContext& ctx, const Call& call, Reply& res);
void handle_cache_pin(DaemonContext& ctx, const Call& call, Reply& res);
void handle_cache_unpin(DaemonContext& ctx, const Call& call, Reply& res);
void handle_cache_clear(DaemonContext& ctx, const Call& call, Reply& res);

}  // namespace prefixd
