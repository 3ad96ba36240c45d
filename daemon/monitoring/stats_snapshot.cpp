// Reading the engine's and the tiers' stats into one StatsSnapshot, and the
// counter deltas between two of them.
#include "daemon/monitoring/stats_snapshot.h"

#include "engine/engine.h"
#include "storage/tier_manager.h"

namespace prefixd {
namespace {

// Host and disk stats share their field names.
template <typename StoreStats>
TierFigures store_figures(const StoreStats& t) {
  TierFigures f;
  f.capacity_bytes = static_cast<int64_t>(t.capacity_bytes);
  f.used_bytes = static_cast<int64_t>(t.used_bytes);
  f.blocks = static_cast<int64_t>(t.blocks);
  f.hits = static_cast<int64_t>(t.hits);
  f.misses = static_cast<int64_t>(t.misses);
  f.evictions = static_cast<int64_t>(t.evictions);
  return f;
}

// Sets each named counter of `d` to its increase from `before` to `now` (0
// when it went down: the daemon restarted or a tier was reset).
template <typename Figures, typename... Counters>
void take_increases(Figures& d, const Figures& now, const Figures& before, Counters... counters) {
  ((d.*counters = now.*counters > before.*counters ? now.*counters - before.*counters : 0), ...);
}

// Counters of one tier become increases; its gauges stay those of `now`.
TierFigures tier_delta(const TierFigures& now, const TierFigures& before) {
  TierFigures d = now;
  take_increases(d, now, before, &TierFigures::hits, &TierFigures::misses, &TierFigures::evictions,
                 &TierFigures::cached_tokens, &TierFigures::offload_blocks,
                 &TierFigures::offload_bytes, &TierFigures::onboard_blocks);
  return d;
}

// The remote tier's figures (ts.has_remote).
void read_remote_stats(const TierManagerStats& ts, StatsSnapshot& s) {
  const RemoteTierStats& r = ts.remote;
  s.remote.hits = static_cast<int64_t>(r.hits);
  s.remote.misses = static_cast<int64_t>(r.misses);
  s.remote.offload_blocks = static_cast<int64_t>(r.writes);
  s.remote.offload_bytes = static_cast<int64_t>(r.written_bytes);
  s.remote.onboard_blocks = static_cast<int64_t>(ts.onboard_remote_blocks);
  s.remote_io.servers = r.servers;
  s.remote_io.read_bytes = static_cast<int64_t>(r.read_bytes);
  s.remote_io.written_bytes = static_cast<int64_t>(r.written_bytes);
  s.remote_io.writes_dropped = static_cast<int64_t>(r.writes_dropped);
  s.remote_io.errors = static_cast<int64_t>(r.errors);
  s.remote_io.timeouts = static_cast<int64_t>(r.timeouts);
  s.remote_io.corrupt_records = static_cast<int64_t>(r.corrupt_records);
  s.remote_io.unauthenticated_records = static_cast<int64_t>(r.unauthenticated_records);
  s.remote_io.pending_write_bytes = static_cast<int64_t>(r.pending_write_bytes);
  s.remote_io.servers_in_ring = r.servers_in_ring;
  s.remote_io.server_ejections = static_cast<int64_t>(r.server_ejections);
  s.remote_io.lookup_hits = static_cast<int64_t>(r.lookup_hits);
  s.remote_io.lookup_misses = static_cast<int64_t>(r.lookup_misses);
  s.remote_io.server_states = r.server_states;
  s.remote_io.generation = static_cast<int64_t>(r.generation);
}

// The host, disk and remote tiers' figures.
void read_tier_stats(const TierManagerStats& ts, StatsSnapshot& s) {
  s.has_host_tier = true;
  s.has_disk_tier = ts.has_disk;
  s.host = store_figures(ts.host);
  if (ts.has_disk) {
    s.disk = store_figures(ts.disk);
    s.corrupt_records = static_cast<int64_t>(ts.disk.corrupt_records);
    s.unauthenticated_records = static_cast<int64_t>(ts.disk.unauthenticated_records);
    s.disk_write_errors = static_cast<int64_t>(ts.disk.write_errors);
    s.disk_io_errors = static_cast<int64_t>(ts.disk.io_errors);
    s.disk_writes_stopped = ts.disk.writes_stopped;
    s.disk_writes_dropped = static_cast<int64_t>(ts.offload_dropped);
    s.disk_pending_write_bytes = static_cast<int64_t>(ts.pending_offload_bytes);
    s.disk_write_lag = ts.disk_write_lag;
  }
  s.host.offload_blocks = static_cast<int64_t>(ts.offload_host_blocks);
  s.host.offload_bytes = static_cast<int64_t>(ts.offload_host_bytes);
  s.host.onboard_blocks = static_cast<int64_t>(ts.onboard_host_blocks);
  s.disk.offload_blocks = static_cast<int64_t>(ts.offload_disk_blocks);
  s.disk.offload_bytes = static_cast<int64_t>(ts.offload_disk_bytes);
  s.disk.onboard_blocks = static_cast<int64_t>(ts.onboard_disk_blocks);
  s.has_remote_tier = ts.has_remote;
  s.onboard_bytes = static_cast<int64_t>(ts.onboard_bytes);
  if (ts.has_remote) read_remote_stats(ts, s);
}

}  // namespace

StatsSnapshot read_stats(Engine& engine, const TierManager* tiers) {
  const EngineStats es = engine.stats();
  StatsSnapshot s;
  s.device.capacity_bytes = es.pool_capacity_bytes;
  s.device.used_bytes = es.pool_used_bytes;
  s.device.blocks = es.pool_blocks_referenced + es.pool_blocks_cached;
  s.device.hits = es.device_hits;
  s.device.misses = es.device_misses;
  s.device.evictions = es.device_evictions;
  s.pool_blocks_total = es.pool_blocks_total;
  s.pool_blocks_referenced = es.pool_blocks_referenced;
  s.pool_blocks_cached = es.pool_blocks_cached;
  s.pool_blocks_pinned = es.pool_blocks_pinned;
  s.prompt_tokens = es.prompt_tokens;
  s.prefill_tokens = es.prefill_tokens;
  s.generated_tokens = es.generated_tokens;
  s.running = es.running;
  s.waiting = es.waiting;
  s.snapshot_slots = es.snapshot_slots;
  s.snapshots_stored = es.snapshots_stored;
  s.snapshot_hits = es.snapshot_hits;
  s.snapshot_misses = es.snapshot_misses;
  s.snapshots_taken = es.snapshots_taken;
  s.snapshot_evictions = es.snapshot_evictions;
  s.snapshots_dropped = es.snapshots_dropped;
  s.snapshot_bytes_taken = es.snapshot_bytes_taken;
  s.snapshot_bytes_restored = es.snapshot_bytes_restored;
  s.snapshot_tier_hits = es.snapshot_tier_hits;
  s.snapshot_tier_rejected = es.snapshot_tier_rejected;
  s.snapshots_offloaded = es.snapshots_offloaded;
  s.snapshot_bytes = es.snapshot_bytes;
  s.block_size = engine.options().block_size;
  if (tiers) read_tier_stats(tiers->stats(), s);
  // Reused prompt tokens by tier, as the engine counts them (with or without tiers).
  s.device.cached_tokens = es.cached_tokens_device;
  s.host.cached_tokens = es.cached_tokens_host;
  s.disk.cached_tokens = es.cached_tokens_disk;
  s.remote.cached_tokens = es.cached_tokens_remote;
  return s;
}

StatsSnapshot stats_delta(const StatsSnapshot& now, const StatsSnapshot& before) {
  StatsSnapshot d = now;
  d.device = tier_delta(now.device, before.device);
  d.host = tier_delta(now.host, before.host);
  d.disk = tier_delta(now.disk, before.disk);
  d.remote = tier_delta(now.remote, before.remote);
  // servers, servers_in_ring, server_states and pending_write_bytes are gauges.
  take_increases(d.remote_io, now.remote_io, before.remote_io, &RemoteFigures::read_bytes,
                 &RemoteFigures::written_bytes, &RemoteFigures::writes_dropped,
                 &RemoteFigures::errors, &RemoteFigures::timeouts, &RemoteFigures::corrupt_records,
                 &RemoteFigures::unauthenticated_records, &RemoteFigures::server_ejections,
                 &RemoteFigures::lookup_hits, &RemoteFigures::lookup_misses);
  take_increases(d, now, before, &StatsSnapshot::prompt_tokens, &StatsSnapshot::prefill_tokens,
                 &StatsSnapshot::generated_tokens, &StatsSnapshot::onboard_bytes,
                 &StatsSnapshot::corrupt_records, &StatsSnapshot::unauthenticated_records,
                 &StatsSnapshot::disk_write_errors, &StatsSnapshot::disk_io_errors,
                 &StatsSnapshot::disk_writes_dropped, &StatsSnapshot::snapshot_hits,
                 &StatsSnapshot::snapshot_misses, &StatsSnapshot::snapshots_taken,
                 &StatsSnapshot::snapshot_evictions, &StatsSnapshot::snapshots_dropped,
                 &StatsSnapshot::snapshot_bytes_taken, &StatsSnapshot::snapshot_bytes_restored,
                 &StatsSnapshot::snapshot_tier_hits, &StatsSnapshot::snapshot_tier_rejected,
                 &StatsSnapshot::snapshots_offloaded);
  return d;
}

std::optional<double> pool_bytes_per_cached_token(const StatsSnapshot& s) {
  const int64_t tokens =
      static_cast<int64_t>(s.pool_blocks_referenced + s.pool_blocks_cached) * s.block_size;
  if (tokens <= 0) return std::nullopt;
  const int64_t bytes = s.device.used_bytes + static_cast<int64_t>(s.snapshots_stored) * s.snapshot_bytes;
  return static_cast<double>(bytes) / static_cast<double>(tokens);
}

}  // namespace prefixd
