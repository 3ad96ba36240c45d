// StatsSnapshot: the engine's and the cache tiers' figures read at one
// instant. It is the one source of GET /metrics, GET /v1/cache/stats and the
// dashboard's history; each maps its output from it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "storage/remote_servers.h"  // RemoteServerState

#include "storage/lag_histogram.h"

namespace prefixd {

class Engine;
class TierManager;

// What one tier (device pool, host RAM, disk, remote) reports. A tier that is off
// reports zeros.
struct TierFigures {
  // Gauges.
  int64_t capacity_bytes = 0;
  int64_t used_bytes = 0;  // bytes held (device: blocks referenced or cached, EngineStats::pool_used_bytes)
  int64_t blocks = 0;      // blocks held (device: referenced + cached)
  // Counters (monotonic).
  int64_t hits = 0;            // block lookups that found the block in this tier
  int64_t misses = 0;          // ... and that did not
  int64_t evictions = 0;       // blocks pushed out by capacity
  int64_t cached_tokens = 0;   // prompt tokens reused from this tier
  int64_t offload_blocks = 0;  // host, disk: blocks newly written down into this tier
  int64_t offload_bytes = 0;
  int64_t onboard_blocks = 0;  // host, disk: blocks onboarded from this tier into the pool
};

// The remote tier's own figures (memcached pool), beside its TierFigures.
struct RemoteFigures {
  int64_t servers = 0;                  // gauge: configured memcached servers
  int64_t read_bytes = 0;               // counters from here on
  int64_t written_bytes = 0;
  int64_t writes_dropped = 0;           // the write queue was over its bound
  int64_t errors = 0;                   // failed operations (server down, protocol error)
  int64_t timeouts = 0;                 // of those, timeouts
  int64_t corrupt_records = 0;          // values that failed a check: deleted, misses
  int64_t unauthenticated_records = 0;  // of those, the ones whose MAC did not verify
  int64_t pending_write_bytes = 0;      // gauge
  int64_t servers_in_ring = 0;          // gauge: servers not taken out of the ring
  int64_t server_ejections = 0;         // counter: times a server was taken out
  int64_t lookup_hits = 0;              // counter: blocks /v1/cache/lookup (and the dashboard's
                                        // prefix table) found in the pool
  int64_t lookup_misses = 0;            // counter: ... asked for and not found
  std::vector<RemoteServerState> server_states;  // [servers] now
  int64_t generation = 0;               // gauge: the pool namespace's generation (DELETE bumps it)
};

struct StatsSnapshot {
  TierFigures device;
  TierFigures host;
  TierFigures disk;
  TierFigures remote;  // capacity, used bytes and blocks unknown (shared pool): zeros
  RemoteFigures remote_io;
  bool has_host_tier = false;  // a host tier (and maybe a disk tier) is configured
  bool has_disk_tier = false;
  bool has_remote_tier = false;

  // The device pool in blocks (gauges).
  int32_t pool_blocks_total = 0;
  int32_t pool_blocks_referenced = 0;  // ref > 0: held by a live sequence
  int32_t pool_blocks_cached = 0;      // ref 0, findable (holding cached data)
  int32_t pool_blocks_pinned = 0;
  int32_t block_size = 0;  // tokens per block (EngineOptions::block_size)

  // Counters.
  int64_t prompt_tokens = 0;   // prompt tokens of admitted requests
  int64_t prefill_tokens = 0;  // prompt tokens computed by prefill
  int64_t generated_tokens = 0;
  int64_t onboard_bytes = 0;    // bytes onboarded from host, disk and remote together
  int64_t corrupt_records = 0;  // disk records that failed a check (deleted, a miss)
  int64_t unauthenticated_records = 0;  // of those, the ones whose MAC did not verify
  int64_t disk_write_errors = 0;  // disk records not written: a failed write, or writes stopped
  int64_t disk_io_errors = 0;     // RocksDB errors other than NotFound (reads and writes)
  bool disk_writes_stopped = false;  // gauge: the disk tier refuses writes until a retry works
  int64_t disk_writes_dropped = 0;   // disk writes dropped: the write queue was over its byte bound
  int64_t disk_pending_write_bytes = 0;  // gauge: disk writes queued
  LagSummary disk_write_lag;         // since start: queued -> stored (count is a counter)

  // Recurrent models' state snapshots (EngineStats' snapshot_*; all zero
  // for other models): slots and stored ones (gauges), then counters.
  int32_t snapshot_slots = 0;
  int32_t snapshots_stored = 0;
  int64_t snapshot_hits = 0;
  int64_t snapshot_misses = 0;
  int64_t snapshots_taken = 0;
  int64_t snapshot_evictions = 0;
  int64_t snapshots_dropped = 0;
  int64_t snapshot_bytes_taken = 0;
  int64_t snapshot_bytes_restored = 0;
  int64_t snapshot_tier_hits = 0;      // of snapshot_hits, restored from the tiers
  int64_t snapshot_tier_rejected = 0;  // tiers' snapshots refused by a check
  int64_t snapshots_offloaded = 0;
  int64_t snapshot_bytes = 0;  // gauge: bytes of one snapshot (the recurrent state, F32)

  // Gauges.
  int32_t running = 0;  // requests running in the engine
  int32_t waiting = 0;  // requests waiting for admission or for onboarding

  // Prompt tokens reused from any tier.
  int64_t cached_tokens() const {
    return device.cached_tokens + host.cached_tokens + disk.cached_tokens + remote.cached_tokens;
  }
};

// The device pool's bytes per token it caches: the bytes of the blocks that
// hold data (referenced or cached, both spaces: device.used_bytes) plus the
// stored state snapshots' bytes, over the tokens those blocks hold
// ((pool_blocks_referenced + pool_blocks_cached) x block_size). For a model
// without snapshots it is the KV (and convolution tail) bytes of one token.
// nullopt while no block holds data. /metrics' prefixd_pool_bytes_per_cached_token
// and the dashboard's history show it.
std::optional<double> pool_bytes_per_cached_token(const StatsSnapshot& s);

// Reads the engine's figures and, when `tiers` is not null, the host, disk
// and remote tiers'. Any thread (both stats() calls are thread-safe).
StatsSnapshot read_stats(Engine& engine, const TierManager* tiers);

// The change from `before` to `now`: counters are the increase (never
// negative), gauges and the tier flags are those of `now`.
StatsSnapshot stats_delta(const StatsSnapshot& now, const StatsSnapshot& before);

}  // namespace prefixd
