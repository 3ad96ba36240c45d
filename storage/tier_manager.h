// TierManager: the host and disk tiers behind one object, with its own I/O
// threads. The engine offloads blocks (device pool -> host -> disk), asks how
// much of a chain the tiers hold, and onboards chains (disk -> host -> engine)
// without ever blocking on I/O.
#pragma once

#include <array>
#include <atomic>
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
#include "storage/record_slab_allocator.h"
#include "storage/restore_policy.h"

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
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  int32_t n_io_threads = 2;
  // Disk writes queued beyond this many bytes are dropped (counted), so a
  // slow disk cannot grow memory without bound.
  uint64_t max_pending_offload_bytes = 256ull << 20;
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

// How many leading blocks of a chain the host and disk tiers hold.
struct ChainLookup {
  int32_t n_blocks = 0;  // leading blocks found in host or disk (walk stops at the first gap)
  int32_t n_host = 0;
  int32_t n_disk = 0;
  std::vector<StorageTier> tiers;  // [n_blocks] where each was found
};

// The result of request_onboard(): the valid leading blocks of the chain.
struct OnboardCompletion {
  uint64_t request_id = 0;
  int32_t n_requested = 0;
  std::vector<RecordPtr> records;  // [n valid leading blocks] in chain order, all checked
  int32_t n_from_host = 0;
  int32_t n_from_disk = 0;
  uint64_t host_bytes = 0;    // bytes of records that came from host
  uint64_t disk_bytes = 0;    // bytes of records read from disk
  double host_seconds = 0;    // time spent on host records (lookup + checks)
  double disk_seconds = 0;    // time spent reading and checking disk records
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
  uint64_t pending_offload_bytes = 0;
  uint64_t onboard_requests = 0;
  uint64_t onboard_host_blocks = 0;
  uint64_t onboard_disk_blocks = 0;
  uint64_t onboard_bytes = 0;
};

// Thread-safety: every public method may be called from any thread.
// offload(), lookup_chain(), request_onboard(), poll_completions() and stats()
// never wait on I/O (offload() inserts into the host tier in memory and
// queues disk writes), so the engine thread calls them freely. wait_idle()
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
  // The disk tier's persistent secret; without a disk tier, random per process.
  const std::array<uint8_t, 16>& deployment_secret() const { return secret_; }

  // A record buffer (from the allocator) with header and tokens written; the
  // caller fills block_record_payload() and calls seal_block_record().
  // token_ids: [block_size]. nullptr if the allocator fails.
  std::shared_ptr<RecordBuffer> start_record(uint64_t namespace_seed, const Hash128& block_hash,
                                             const Hash128& parent_hash,
                                             std::span<const int32_t> token_ids) const;

  // Offers a sealed record to the tiers (see WritePolicy). The host insert
  // happens now (in memory); disk writes are queued for the I/O threads.
  void offload(const BlockKey& key, RecordPtr record, OffloadReason reason);

  // Leading blocks of the chain held in host (header and tokens checked) or
  // on disk (in-memory key index). Never waits on I/O.
  ChainLookup lookup_chain(const ChainQuery& query) const;

  // Queues loading of the chain on an I/O thread; exactly one completion per
  // call is posted for poll_completions(). Blocks read from disk are also
  // inserted into the host tier. Onboards run before queued disk writes.
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

  // Blocks until no job is queued or running (a prefault is not waited for).
  void wait_idle();
  // Drops queued disk writes, waits for running ones, empties both tiers.
  Status clear();
  TierManagerStats stats() const;

  // Direct access to the tiers (tests, metrics). Their own thread-safety holds.
  HostTier& host() { return *host_; }
  DiskTier* disk() { return disk_.get(); }

 private:
  struct OffloadJob {
    BlockKey key;
    RecordPtr record;
  };
  struct OnboardJob {
    uint64_t request_id = 0;
    ChainQuery query;
  };

  explicit TierManager(const TierManagerOptions& options);
  enum class IoRole : uint8_t { kAll, kOffload, kOnboard };
  void io_loop(IoRole role);
  void run_offload(OffloadJob& job);
  void run_onboard(OnboardJob& job);
  // Queues a disk write unless the disk is absent, the key is already queued
  // or the queue is over its byte bound.
  void queue_disk_write(const BlockKey& key, RecordPtr record);
  RecordExpectations expectations(const ChainQuery& query, size_t i) const;

  TierManagerOptions options_;  // its allocator is slabs_'s once created
  // Every record of the tiers comes from here (over options.allocator); it
  // outlives every member below that holds records.
  std::unique_ptr<RecordSlabAllocator, RecordSlabAllocator::Retire> slabs_;
  std::array<uint8_t, 16> secret_{};
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;

  mutable std::mutex mu_;  // guards the queues, counters and flags below
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<OnboardJob> onboard_queue_;
  std::deque<OffloadJob> offload_queue_;
  std::unordered_set<BlockKey, BlockKeyHasher> queued_disk_keys_;
  uint64_t pending_offload_bytes_ = 0;
  int32_t active_jobs_ = 0;
  bool stopping_ = false;
  uint64_t prefault_bytes_ = 0;             // requested by prefault_async, taken by the offload thread
  std::atomic<bool> stop_prefault_{false};  // set on destruction
  TierManagerStats counters_;  // offload/onboard counters only

  std::mutex completions_mu_;
  std::vector<OnboardCompletion> completions_;
  std::function<void()> notifier_;

  std::vector<std::thread> io_threads_;
};

}  // namespace prefixd
