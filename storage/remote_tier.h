// RemoteTier: block records in a pool of memcached servers shared by several
// prefixd replicas (libmemcached: binary protocol, ketama consistent hashing;
// a dead or stalled server leaves every handle's ring at once and is retried).
// Values are the disk tier's bytes: record || RecordMac trailer under the
// deployment secret; keys carry the pool namespace's generation (clear_pool).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "storage/block_record.h"
#include "storage/remote_servers.h"  // RemoteServer, parse_remote_cache_url
#include "storage/writer_priority.h"

namespace prefixd {

struct RemoteTierOptions {
  // Every replica must name the servers alike ("127.0.0.1:11211" and
  // "localhost:11211" differ): ketama places keys by hashing the names. The
  // order does not matter.
  std::vector<RemoteServer> servers;
  std::array<uint8_t, 16> deployment_secret{};  // keys the MAC of every value
  uint64_t record_bytes = 0;                     // block_record_bytes(geometry); required
  // Per-operation bound: connect, send and receive (libmemcached timeouts).
  std::chrono::milliseconds timeout{200};
  // A server that refused this many connects in a row leaves the ketama
  // ring of every handle of the tier at once (its keys move to the others);
  // it joins again after retry_interval. With 1, an operation that a dead
  // server refused is tried once more at once, on the ring without it, so a
  // dead server costs a connect attempt per retry_interval, not a lost read
  // or write.
  int32_t failure_limit = 1;
  // A server that timed out this many operations in a row, answering none
  // between (it accepts connects but has stalled), leaves the ring the same
  // way for retry_interval; after it joins again its first timeout takes it
  // out at once (RemoteServerRing). So a stalled server costs at most
  // timeout_limit timeouts, then one per retry_interval.
  int32_t timeout_limit = 3;
  std::chrono::milliseconds retry_interval{2000};
  // The pool namespace whose generation counter this tier follows: every
  // replica with the same deployment secret and the same value here (the
  // TierManager sets the model fingerprint) shares it. clear_pool() bumps
  // it; keys carry it, so the old blocks become unreachable to all of them.
  Hash128 pool_namespace;
  // How often the generation counter is read again (one round trip, on a
  // thread that is about to use the pool): another replica's clear_pool()
  // reaches this one within about this long.
  std::chrono::milliseconds generation_refresh{1000};
  // Writes queued beyond this many bytes are dropped (counted).
  uint64_t max_pending_write_bytes = 256ull << 20;
  WriterPriority writer_priority;  // the writer thread's CPU share (TierManager's, filled in there)
  HostAllocator allocator = default_host_allocator();  // buffers returned by get_chain()
  // Told one line per server that does not answer at open() (when another
  // one does). May be empty.
  std::function<void(const std::string&)> log_warning;
};

struct RemoteTierStats {
  uint64_t hits = 0;                     // records returned that passed every check
  uint64_t misses = 0;                   // keys asked for and not returned (absent, or failed
                                         // below); per key: hits + misses = keys asked
  uint64_t read_bytes = 0;               // value bytes received
  uint64_t writes = 0;                   // records stored
  uint64_t written_bytes = 0;            // value bytes: record + MAC trailer
  uint64_t writes_dropped = 0;           // not queued: the queue was over its byte bound
                                         // (or dropped at shutdown, see ~RemoteTier)
  uint64_t errors = 0;                   // operations that failed (server down, protocol error):
                                         // one per get_chain, write or delete that saw a failure
  uint64_t timeouts = 0;                 // of those, the ones that timed out
  uint64_t corrupt_records = 0;          // values that failed a check (MAC, layout, key): misses
  uint64_t unauthenticated_records = 0;  // of those, the ones whose MAC did not verify
  uint64_t pending_write_bytes = 0;      // now
  int32_t servers = 0;                   // configured
  int32_t servers_in_ring = 0;           // now: not taken out (RemoteServerRing)
  uint64_t server_ejections = 0;         // times a server was taken out of the ring
  uint64_t lookup_hits = 0;              // blocks present_chain() found (the lookup path)
  uint64_t lookup_misses = 0;            // ... keys it asked for and did not find
  std::vector<RemoteServerState> server_states;  // [servers] each one's place in the ring
  uint64_t generation = 0;               // now: the pool namespace's generation in keys
  uint64_t generation_changes = 0;       // times it moved on (a clear_pool() here or elsewhere)
};

// Thread-safety: every method may be called from any thread (each call takes
// a libmemcached handle of its own from a pool of up to 16; a 17th concurrent
// caller waits for one). The writer thread has its own. get_chain() does
// network I/O and belongs on tier I/O threads; present_chain() and
// clear_pool() do too and belong on HTTP threads; put_async() only queues.
class RemoteTier {
 public:
  // Connects to every server and reads its item size limit (memcached's
  // "item_size_max"): refuses, naming the server and memcached's -I option,
  // when a value (record + MAC trailer) would not fit. A server that does not
  // answer within the timeout is told to log_warning and left to the library
  // (tried again every retry_interval); when none answers, refuses. Starts
  // the writer thread.
  static Result<std::unique_ptr<RemoteTier>> open(const RemoteTierOptions& options);
  // Finishes queued writes (each bounded by the timeout), then stops; after a
  // write that timed out it drops the rest (writes_dropped) instead.
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // The leading blocks of a chain: keys[i] with expected[i] (same length).
  // Asks for all keys in one multi-get round trip and returns records for
  // the leading keys that were found and pass every check (MAC, record
  // integrity, key, every field of expected); stops at the first that is
  // missing or fails. A value that fails is counted and deleted from the pool.
  // Every key not returned is a miss, those after the first failure included.
  // Waits at most about the timeout per server that does not answer.
  std::vector<RecordPtr> get_chain(std::span<const BlockKey> keys,
                                   std::span<const RecordExpectations> expected);
  // How many leading keys of a chain the pool holds, without reading the
  // values: one existence check per key (libmemcached's memcached_exist: an
  // "add" of an empty item that has already expired, so a missing key stays
  // missing; memcached reclaims that small item), in order, stopping at the
  // first key absent or failing, at max_keys, or once `budget` has passed
  // (checked between keys; one key waits at most the timeout). Values are
  // not verified (their MAC is checked when an onboard reads them). Counted
  // in lookup_hits and lookup_misses (the keys not found, or not reached,
  // up to max_keys). *error (optional): why the walk stopped early on a
  // failure ("" when it did not). For HTTP threads (routing, dashboard);
  // never called by the engine thread.
  int32_t present_chain(std::span<const BlockKey> keys, size_t max_keys,
                        std::chrono::milliseconds budget, std::string* error = nullptr);
  // Queues a record (sealed) for the writer thread (idle CPU priority);
  // returns at once. Dropped
  // and counted when the queue is over max_pending_write_bytes; skipped when
  // the key is already queued or was recently stored or read by this process.
  void put_async(const BlockKey& key, RecordPtr record);
  // Waits until the write queue is empty and no write is running.
  void wait_idle();
  // Clears the pool namespace for every replica sharing it: memcached has no
  // delete by prefix, so this bumps the namespace's generation counter in the
  // pool (memcached incr; keys carry the generation), which makes every
  // block stored so far unreachable at once; memcached's LRU reclaims them.
  // Other replicas move on at their next refresh (generation_refresh);
  // writes queued here before the call are dropped. One round trip (bounded
  // by the timeout); returns the new generation, or why it failed (nothing
  // changed then).
  Result<uint64_t> clear_pool();
  // Shutdown: lifts the writer thread to normal priority where the OS allows
  // it (root or RLIMIT_NICE; returns whether it did), and from `deadline` on
  // drops what is still queued (counted in writes_dropped) instead of writing
  // it. The destructor then finishes the queue.
  bool begin_shutdown(std::chrono::steady_clock::time_point deadline);
  RemoteTierStats stats() const;

  // The memcached key of a block: "pfxd1:" + 48 lowercase hex digits of the
  // namespace seed (8 bytes big-endian) and the block hash (hi, lo; 8 bytes
  // big-endian each); after generation 0, ":" + the generation in hex.
  static std::string memcached_key(const BlockKey& key, uint64_t generation = 0);
  // The generation counter's key of `pool_namespace` under `secret`:
  // "pfxd1:gen:" + 32 hex digits of HMAC-SHA256(secret, namespace) (the
  // secret is not revealed, and other deployments get other counters).
  static std::string generation_key(const std::array<uint8_t, 16>& secret,
                                    const Hash128& pool_namespace);
  // Test hook: stores raw bytes as the value of `key`, synchronously.
  Status debug_set_value(const BlockKey& key, std::span<const uint8_t> value);

 private:
  struct Impl;
  explicit RemoteTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd
