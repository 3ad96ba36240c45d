// TierManager: the host, disk and remote tiers behind one object, with its
// own I/O threads. The engine offloads blocks (device pool -> host -> disk and
// remote), asks how much of a chain the tiers hold, and onboards chains
// (host, disk, then remote -> engine) without ever blocking on I/O.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "storage/block_record.h"
#include "storage/disk_tier.h"
#include "storage/host_tier.h"
#include "storage/lag_histogram.h"
#include "storage/record_slab_allocator.h"
#include "storage/remote_tier.h"
#include "storage/state_snapshot.h"
#include "storage/onboard_policy.h"
#include "storage/pin_record.h"
#include "storage/writer_priority.h"

namespace prefixd {

enum class WritePolicy : uint8_t {
  kWriteThrough,  // every newly computed full block goes to host and disk (default)
  kEvictOnly,     // only blocks evicted from the pool go to host; host evictions go to disk
};
const char* write_policy_name(WritePolicy policy);
// "write-through" or "evict-only".
Result<WritePolicy> parse_write_policy(const std::string& name);

struct TierManagerOptions {
  Hash128 model_fingerprint;
  BlockGeometry geometry;                     // of every record (the pool's geometry)
  uint64_t host_capacity_bytes = 1ull << 30;  // 0 disables the host tier (every insert declines)
  std::optional<DiskTierOptions> disk;        // no disk tier when empty
  // A memcached pool shared by replicas; no remote tier when empty. Its
  // deployment_secret, record_bytes and allocator are filled in here.
  std::optional<RemoteTierOptions> remote;
  // The operator's deployment secret (--cache-secret-file); required with a
  // remote tier. Empty: the disk directory's own, or random per process.
  std::optional<std::array<uint8_t, 16>> deployment_secret;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  int32_t n_io_threads = 2;
  // The disk writer thread's (and the remote writer's) share of the CPU
  // (writer_priority.h). batch:10 keeps write-through up with serving at
  // full load (docs/cache.md, "Write-through under load").
  WriterPriority writer_priority;
  // Disk writes queued beyond this many bytes are dropped (counted), so a
  // slow disk cannot grow memory without bound.
  uint64_t max_pending_offload_bytes = 256ull << 20;
  // Records of published blocks waiting to be built on the offload thread
  // (offload_published_later) beyond this many bytes are refused: the caller
  // builds them itself, so the blocks they hold in the pool stay bounded.
  uint64_t max_pending_build_bytes = 64ull << 20;
  HostAllocator allocator = default_host_allocator();  // record buffers (pinned for CUDA)
};

// Why a block is offered to the tiers.
enum class OffloadReason : uint8_t {
  kPublished,  // a newly computed full block (stored only under write-through)
  kEvicted,    // the device pool is evicting it (always goes to host)
};

// A run of consecutive blocks of one prompt, starting at any block of it.
struct ChainQuery {
  uint64_t namespace_seed = 0;     // the request's (BlockKey::namespace_seed)
  Hash128 first_parent;            // parent hash of hashes[0]; zeros for a prompt's first block
  std::vector<Hash128> hashes;     // [n_blocks]
  std::vector<int32_t> token_ids;  // [n_blocks * block_size]
};

// How many leading blocks of a chain the host and disk tiers hold, and how
// many after them the remote tier may hold (it is not asked: that is I/O).
struct ChainLookup {
  int32_t n_blocks = 0;  // leading blocks found in host or disk (walk stops at the first gap)
  int32_t n_host = 0;
  int32_t n_disk = 0;
  std::vector<StorageTier> tiers;  // [n_blocks] where each was found
  // With a remote tier: the rest of the chain after the n_blocks, which an
  // onboard asks the remote tier for (one round trip); 0 without one.
  int32_t n_remote_candidates = 0;
};

// The result of request_onboard(): the valid leading blocks of the chain.
struct OnboardCompletion {
  uint64_t request_id = 0;
  int32_t n_requested = 0;
  std::vector<RecordPtr> records;  // [n valid leading blocks] in chain order, all checked
  int32_t n_from_host = 0;
  int32_t n_from_disk = 0;
  int32_t n_from_remote = 0;
  uint64_t host_bytes = 0;    // bytes of records that came from host
  uint64_t disk_bytes = 0;    // bytes of records read from disk
  uint64_t remote_bytes = 0;  // bytes of records read from the remote tier
  double host_seconds = 0;    // time spent on host records (lookup + checks)
  double disk_seconds = 0;    // time spent reading and checking disk records
  double remote_seconds = 0;  // time of the remote request that returned records
  double remote_miss_seconds = 0;  // time of a remote request that returned none (a round trip)
};

struct TierManagerStats {
  HostTierStats host;
  bool has_disk = false;
  DiskTierStats disk;
  uint64_t offload_host_blocks = 0;  // records newly inserted into host by offload()
  uint64_t offload_host_bytes = 0;
  uint64_t offload_disk_blocks = 0;  // records written to disk
  uint64_t offload_disk_bytes = 0;
  uint64_t offload_dropped = 0;      // disk writes dropped: queue over its byte bound
  uint64_t builds_deferred = 0;      // records built on the offload thread (offload_published_later)
  uint64_t builds_refused = 0;       // ... refused: the build queue was over its bound
  uint64_t pending_offload_bytes = 0;
  // From a block's offer to the tiers (published: when it was computed, a
  // deferred build's queueing included; evicted: its eviction) to its record
  // being stored on disk.
  LagSummary disk_write_lag;
  uint64_t onboard_requests = 0;
  uint64_t onboard_host_blocks = 0;
  uint64_t onboard_disk_blocks = 0;
  uint64_t onboard_remote_blocks = 0;
  uint64_t onboard_bytes = 0;
  uint64_t shutdown_dropped_builds = 0;   // builds not run: the shutdown deadline had passed
  uint64_t shutdown_dropped_records = 0;  // queued disk writes dropped at the shutdown deadline
  bool has_remote = false;
  RemoteTierStats remote;
  // Recurrent-state snapshots (state_snapshot.h): their pages are records in
  // the same tiers, so host/disk/remote used bytes and counts include them.
  uint64_t snapshots_offloaded = 0;           // offload_snapshot() calls that stored pages
  uint64_t snapshot_pages_host_written = 0;   // pages newly inserted into host
  uint64_t snapshot_pages_disk_queued = 0;    // pages handed to the disk writer (or evicted to it later)
  uint64_t snapshot_pages_remote_queued = 0;  // pages handed to the remote writer
  uint64_t snapshot_pages_host_read = 0;      // pages read_snapshot() took from host
  uint64_t snapshot_pages_disk_read = 0;      // ... from disk
  uint64_t snapshot_pages_remote_read = 0;    // ... from the remote tier
  uint64_t snapshot_reads_ok = 0;
  uint64_t snapshot_reads_missed = 0;          // a page in no tier
  uint64_t snapshot_reads_rejected_damaged = 0;   // a page failed a check, or pages of different writes
  uint64_t snapshot_reads_rejected_size = 0;      // pages of another total size
  uint64_t snapshot_reads_rejected_model = 0;     // pages of another model or geometry
};

// What drain_for_shutdown() did, for the daemon's last log lines.
struct ShutdownDrain {
  uint64_t records_written = 0;   // disk writes completed from begin_shutdown() to the end of the drain
  uint64_t dropped_builds = 0;    // builds dropped at the deadline (since begin_shutdown)
  uint64_t dropped_records = 0;   // queued disk writes dropped at the deadline
  uint64_t dropped_while_serving = 0;  // disk writes dropped earlier: the queue was over its byte bound
  bool writer_raised = false;     // the low-priority disk writer was lifted to normal priority
  uint64_t remote_writes_dropped = 0;  // remote writes dropped since start (queue full, timeouts, bound)
  bool remote_writer_raised = false;   // the remote tier's writer was lifted to normal priority
  double seconds = 0;             // from begin_shutdown() to the end of the drain
};

// Thread-safety: every public method may be called from any thread.
// offload(), lookup_chain(), request_onboard(), poll_completions() and stats()
// never wait on I/O (offload() inserts into the host tier in memory and
// queues disk and remote writes), so the engine thread calls them freely. wait_idle()
// and clear() block until I/O threads finish their current work; the engine
// thread should call them only from admin paths (DELETE /v1/cache), tests and
// shutdown. Records handed in or out are immutable and shared.
//
// Typical engine use:
//   publish:  rec = tm.start_record(namespace_seed, hash, parent, tokens);
//             backend.read_block(pool, id, block_record_payload(*rec));
//             seal_block_record(*rec);  tm.offload({namespace_seed, hash}, rec, kPublished);
//   evict:    the same record (or a new one) with OffloadReason::kEvicted.
//   admit:    auto found = tm.lookup_chain(q);   // cheap, for routing and admission
//             tm.request_onboard(req_id, q);     // request waits in `loading`
//   each step: for (auto& c : tm.poll_completions()) write_block(...) per record.
class TierManager {
 public:
  static Result<std::unique_ptr<TierManager>> create(const TierManagerOptions& options);
  // Finishes queued work (disk writes included), stops the I/O threads,
  // flushes and closes the disk tier.
  ~TierManager();
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  const BlockGeometry& geometry() const { return options_.geometry; }
  // The model fingerprint every record carries (TierManagerOptions).
  const Hash128& model_fingerprint() const { return options_.model_fingerprint; }
  WritePolicy write_policy() const { return options_.write_policy; }
  uint64_t record_bytes() const { return block_record_bytes(options_.geometry); }
  bool has_disk() const { return disk_ != nullptr; }
  bool has_remote() const { return remote_ != nullptr; }
  // options.deployment_secret when set; else the disk tier's persistent
  // secret; without a disk tier, random per process.
  const std::array<uint8_t, 16>& deployment_secret() const { return secret_; }

  // A record buffer (from the allocator) with header and tokens written; the
  // caller fills block_record_payload() and calls seal_block_record().
  // token_ids: [block_size]. nullptr if the allocator fails.
  std::shared_ptr<RecordBuffer> start_record(uint64_t namespace_seed, const Hash128& block_hash,
                                             const Hash128& parent_hash,
                                             std::span<const int32_t> token_ids) const;

  // Offers a sealed record to the tiers (see WritePolicy). The host insert
  // happens now (in memory); disk and remote writes are queued for their
  // threads (what goes to disk also goes to the remote tier).
  void offload(const BlockKey& key, RecordPtr record, OffloadReason reason);

  // Write-through without the copy on the caller's thread: queues a newly
  // published block for the offload thread, which starts its record, calls
  // `fill` (the backend's read_block into the payload), seals it and offers
  // it as kPublished, then calls `done` (also when no record could be
  // allocated). The caller keeps the block unchanged until `done`. Returns
  // false, queuing nothing, when builds over max_pending_build_bytes wait or
  // the policy is not write-through: the caller then builds it itself.
  // Builds run before disk writes; the offload thread drains them even while
  // the manager is being destroyed, so the owner of what `fill` reads calls
  // wait_builds() before freeing it.
  bool offload_published_later(uint64_t namespace_seed, const Hash128& block_hash,
                               const Hash128& parent_hash, std::span<const int32_t> token_ids,
                               std::function<void(uint8_t* payload)> fill, std::function<void()> done);
  // Blocks until every queued build has run (fill and done called). The
  // caller runs queued builds itself (one build runs at a time), so this
  // does not wait on the low-priority I/O thread's share of the CPU. After
  // the shutdown deadline (begin_shutdown) builds are dropped: done() only.
  void wait_builds();

  // Shutdown, in three calls. begin_shutdown(deadline) once nothing will be
  // published any more (requests ended): stops prefaulting and lifts the
  // low-priority disk writer to normal priority where the OS allows it
  // (root or RLIMIT_NICE; otherwise that thread takes no more builds or
  // writes and the callers below do them). Then wait_builds() (the owner of
  // the pool the builds read, before freeing it), then drain_for_shutdown():
  // runs queued disk writes on the calling thread too until the queue is
  // empty or `deadline` passes, drops what is still queued then (counted),
  // and waits for writes running on I/O threads, then for the remote tier's
  // queue (its writer is lifted too, and drops what is left at `deadline`).
  // The destructor then flushes and closes the disk tier. Without
  // begin_shutdown() nothing is dropped.
  void begin_shutdown(std::chrono::steady_clock::time_point deadline);
  ShutdownDrain drain_for_shutdown();

  // Leading blocks of the chain held in host (header and tokens checked) or
  // on disk (in-memory key index); with a remote tier, the rest of the chain
  // as remote candidates. Never waits on I/O.
  ChainLookup lookup_chain(const ChainQuery& query) const;
  // The remote half of a lookup, for HTTP threads only (it waits on the
  // network; the engine thread never calls it): how many leading blocks of
  // `keys` (the blocks after lookup_chain's run) the remote tier holds, by
  // one existence check per block (RemoteTier::present_chain), all of it
  // bounded by twice the remote tier's timeout (plus at most one timeout).
  // 0 without a remote tier. *error (optional): why it stopped early.
  int32_t lookup_remote(std::span<const BlockKey> keys, std::string* error = nullptr) const;

  // Queues loading of the chain on an I/O thread; exactly one completion per
  // call is posted for poll_completions(). The leading blocks come from host,
  // then disk, then (from the first block neither holds) the remote tier in
  // one multi-get. Blocks read from disk or the remote tier are also inserted
  // into the host tier (and remote ones written to disk). Onboards run before
  // queued disk writes.
  void request_onboard(uint64_t request_id, ChainQuery query);
  // Completions posted since the last call; never blocks.
  std::vector<OnboardCompletion> poll_completions();
  // Called (on an I/O thread) after each completion is posted, e.g. to wake
  // the engine loop. Set before the first request_onboard().
  void set_completion_notifier(std::function<void()> notifier);

  // Faults in up to `n_bytes` of record memory on the low-priority I/O
  // thread, so the first records written later (write-through of a cold
  // prompt) do not page-fault on the engine thread. Returns at once.
  void prefault_async(uint64_t n_bytes);
  // Bytes of record memory reserved so far (slabs).
  uint64_t reserved_record_bytes() const { return slabs_->reserved_bytes(); }

  // Recurrent-state snapshots, stored as page records (state_snapshot.h)
  // under keys derived from `key` = (namespace seed, chain hash of the last
  // block the state covers) and the byte count. offload_snapshot copies
  // `state` into pages and offers each like offload() does a block (host
  // now; disk and remote per the write policy, queued). has_snapshot: every
  // page in host or on disk (in-memory checks only, never I/O), or with a
  // remote tier page 0 and the last page present there (one existence
  // check each: I/O, not for the engine thread unless the host/disk probe
  // answered). read_snapshot: synchronous (I/O); each page from host, else
  // disk, else the remote tier (pages from below are inserted into host),
  // every page checked (record checks and MAC where the tier signs, model,
  // geometry, index, count, total bytes == n_bytes) and the assembled bytes
  // against the whole-content checksum. Any failure is an error (a miss,
  // counted by reason); the pages of a rejected snapshot are erased from
  // host and disk. The message starts with snapshot_check_name().
  void offload_snapshot(const BlockKey& key, std::span<const uint8_t> state, OffloadReason reason);
  bool has_snapshot(const BlockKey& key, size_t n_bytes) const;
  // has_snapshot without the remote tier: every page in host or on disk.
  bool has_local_snapshot(const BlockKey& key, size_t n_bytes) const;
  Result<std::vector<uint8_t>> read_snapshot(const BlockKey& key, size_t n_bytes);

  // Blocks until no job is queued or running (a prefault is not waited for)
  // and the remote tier's write queue is empty.
  void wait_idle();
  // Drops queued disk writes, waits for running ones, empties host and disk.
  // The remote tier is shared with other replicas and is left as it is.
  Status clear();
  // Clears this deployment's and model's blocks in the remote tier for every
  // replica sharing the pool (RemoteTier::clear_pool: one round trip, bounded
  // by its timeout; the others follow within its generation_refresh). For
  // HTTP threads (DELETE /v1/cache). Returns the pool's new generation.
  Result<uint64_t> clear_remote();
  TierManagerStats stats() const;

  // Durable TTL pins (pin_record.h), kept in the disk tier's "pins" family;
  // without a disk tier nothing is stored (store_pin succeeds, the pin lives
  // in memory only). I/O: call from HTTP or admin threads, not the engine's.
  Status store_pin(const PinRecord& pin);
  Status erase_pin(uint64_t namespace_seed, const Hash128& last_block_hash);
  struct StoredPins {
    std::vector<PinRecord> pins;
    // Records that failed to decode: key and why. Erased here.
    std::vector<std::string> damaged;
  };
  // Every stored pin record (start-up); damaged ones are erased and named.
  Result<StoredPins> stored_pins();
  // Marks or unmarks a pinned chain's blocks in host and disk, which evict
  // them only after every unpinned record (counts: overlapping pins add up).
  void mark_pinned(std::span<const BlockKey> keys, bool pinned);

  // Direct access to the tiers (tests, metrics). Their own thread-safety holds.
  HostTier& host() { return *host_; }
  DiskTier* disk() { return disk_.get(); }
  RemoteTier* remote() { return remote_.get(); }

 private:
  struct OffloadJob {
    BlockKey key;
    RecordPtr record;
    std::chrono::steady_clock::time_point queued_at;
  };
  struct OnboardJob {
    uint64_t request_id = 0;
    ChainQuery query;
  };
  struct BuildJob {
    uint64_t namespace_seed = 0;
    Hash128 block_hash;
    Hash128 parent_hash;
    std::vector<int32_t> token_ids;
    std::function<void(uint8_t*)> fill;
    std::function<void()> done;
    std::chrono::steady_clock::time_point queued_at;  // the block's publication
  };

  explicit TierManager(const TierManagerOptions& options);
  // read_snapshot's parts. gather_snapshot_pages: every page of `keys` from
  // host, disk or the remote tier into `pages` (`from`: 0 host, 1 disk, 2
  // remote), each checked; kOk, or the failed check with its page at
  // *bad_page. reject_snapshot: a failed read counted by reason, its pages
  // erased where a check failed, the error returned.
  SnapshotCheck gather_snapshot_pages(const BlockKey& key, size_t n_bytes, std::span<const BlockKey> keys,
                                      std::vector<RecordPtr>& pages, std::vector<uint8_t>& from, uint32_t* bad_page);
  Result<std::vector<uint8_t>> reject_snapshot(const BlockKey& key, size_t n_bytes, std::span<const BlockKey> keys,
                                               SnapshotCheck why, uint32_t page);
  enum class IoRole : uint8_t { kAll, kOffload, kOnboard };
  void io_loop(IoRole role);
  void run_offload(OffloadJob& job);
  void run_build(BuildJob& job);
  void run_onboard(OnboardJob& job);
  // Takes the next build or disk write off its queue and runs it (the lock
  // is released meanwhile); false when the queue is empty or a build runs
  // elsewhere. After the shutdown deadline the job is dropped and counted.
  bool run_next_build(std::unique_lock<std::mutex>& lock);
  bool run_next_offload(std::unique_lock<std::mutex>& lock);
  void notify_job_done();  // mu_ held; wakes every waiter on idle_cv_ to check its condition
  bool past_shutdown_deadline() const;  // mu_ held
  // Queues a disk write unless the disk is absent, the key is already queued
  // or the queue is over its byte bound.
  // `since`: when the block was offered (its write lag is measured from then).
  void queue_disk_write(const BlockKey& key, RecordPtr record, std::chrono::steady_clock::time_point since);
  // What leaves host RAM: a disk write and a remote write.
  void write_below(const BlockKey& key, const RecordPtr& record,
                   std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now());
  // offload() with the time the block was published (a deferred build's queueing).
  void offload_since(const BlockKey& key, RecordPtr record, OffloadReason reason,
                     std::chrono::steady_clock::time_point since);
  // Onboard steps: records for chain blocks [i, end) from disk (or host) and
  // from the remote tier, appended to c; each returns the next block index.
  // Reads got.size() records of chain blocks [i, i + got.size()) from disk
  // (or host RAM, flagged in in_host): the first alone, the rest with up to
  // four readers; a record that fails its checks is left null.
  void read_disk_run(const ChainQuery& query, size_t i, std::vector<RecordPtr>& got, std::vector<uint8_t>& in_host);
  size_t onboard_from_disk(const ChainQuery& query, size_t i, OnboardCompletion& c);
  size_t onboard_from_remote(const ChainQuery& query, size_t i, OnboardCompletion& c);
  RecordExpectations expectations(const ChainQuery& query, size_t i) const;

  TierManagerOptions options_;  // its allocator is slabs_'s once created
  // Every record of the tiers comes from here (over options.allocator); it
  // outlives every member below that holds records.
  std::unique_ptr<RecordSlabAllocator, RecordSlabAllocator::Retire> slabs_;
  std::array<uint8_t, 16> secret_{};
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RemoteTier> remote_;

  mutable std::mutex mu_;  // guards the queues, counters and flags below
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;  // notified whenever a job ends
  std::deque<OnboardJob> onboard_queue_;
  std::deque<OffloadJob> offload_queue_;
  std::deque<BuildJob> build_queue_;
  uint64_t pending_build_bytes_ = 0;  // records of build_queue_ and the running build
  std::condition_variable builds_cv_;  // build_queue_ drained
  std::unordered_set<BlockKey, BlockKeyHasher> queued_disk_keys_;
  uint64_t pending_offload_bytes_ = 0;
  int32_t active_jobs_ = 0;
  bool build_running_ = false;  // builds run one at a time (they read the caller's pool)
  bool stopping_ = false;
  // Shutdown (begin_shutdown): the deadline of the drain, and whether the
  // low-priority writer still takes builds and writes (not when it could not
  // be lifted to normal priority).
  bool shutdown_begun_ = false;
  std::chrono::steady_clock::time_point shutdown_deadline_{};
  double shutdown_begun_at_s_ = 0;
  uint64_t disk_blocks_at_shutdown_ = 0;
  bool writer_parked_ = false;
  bool writer_raised_ = false;
  bool remote_writer_raised_ = false;
  std::atomic<pid_t> writer_tid_{0};  // the low-priority disk writer (0: none)
  uint64_t prefault_bytes_ = 0;             // requested by prefault_async, taken by the offload thread
  std::atomic<bool> stop_prefault_{false};  // set on destruction
  TierManagerStats counters_;  // offload/onboard counters only
  LagHistogram disk_write_lag_;

  std::mutex completions_mu_;
  std::vector<OnboardCompletion> completions_;
  std::function<void()> notifier_;

  std::vector<std::thread> io_threads_;
};

}  // namespace prefixd
