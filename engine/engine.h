// The engine: one thread that owns the backend, the KV pool, the block
// manager (prefix index) and the scheduler, and runs forward passes over
// continuous batches. Other threads talk to it only through submit() /
// RequestChannel and the query calls below, which go through its queues.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/hash128.h"
#include "common/result.h"
#include "engine/model/model.h"
#include "engine/request.h"
#include "kernels/backend.h"
#include "storage/block_record.h"

namespace prefixd {

class Tokenizer;
class TierManager;

struct EngineOptions {
  int32_t block_size = 16;
  DType kv_dtype = DType::F16;
  size_t kv_pool_bytes = 256ull << 20;   // device pool budget
  int32_t max_batch_tokens = 512;        // tokens per forward pass (chunked prefill budget)
  int32_t max_running = 64;              // sequences in one batch at most
  int32_t max_pinned_blocks = 0;         // 0 = a quarter of the pool
  // Models with recurrent layers (qwen35): state snapshots in the device
  // pool (engine/state_snapshots.h), the only way such a model resumes a
  // cached prefix. state_snapshots: snapshot slots (state_floats f32 each,
  // out of kv_pool_bytes); -1: kDefaultStateSnapshots; 0: none (every
  // sequence computes from position 0). snapshot_interval_blocks: a snapshot
  // every that many blocks of a prompt (0: only at its last full block).
  static constexpr int32_t kDefaultStateSnapshots = 16;
  int32_t state_snapshots = -1;
  int32_t snapshot_interval_blocks = 32;
  int32_t n_state_snapshots(const ModelConfig& model) const {
    if (model.state_floats() == 0) return 0;
    return state_snapshots < 0 ? kDefaultStateSnapshots : state_snapshots;
  }
  // Sliding-window models on a backend with supports_window_group(): the
  // share of kv_pool_bytes that holds the window layers' K/V, in a space of
  // its own (KvGeometry's window group, engine/kv/window_blocks.h); the rest
  // holds the global layers of every block. A window part is kept only while
  // a sequence's window, a pin or the window LRU needs it. 0: one space, every
  // layer of every block kept (as for other models). In [0, 0.95].
  double window_share = 0.5;
  // Logits rows per forward pass for prompt logprobs (completions with echo
  // and logprobs): bounds the pass's logits buffer ((max_running + this,
  // n_vocab) f32) and the log-softmax work per step; longer prompts take
  // several passes.
  int32_t max_prompt_logits_rows = 64;
  // Parts of every namespace seed (engine/kv/block_hash.h). With tiers they
  // must equal the TierManager's (its options' model_fingerprint and its
  // deployment_secret()), or no block would ever be found there: create()
  // refuses a mismatch. The daemon passes the model's fingerprint mixed with
  // the backend's numerics (daemon/cache_identity.h), so blocks computed
  // under another CPU plan are never found.
  Hash128 model_fingerprint;
  std::array<uint8_t, 16> deployment_secret{};
  // Chains found below the device: kAuto onboards when the estimated onboard
  // time beats recomputing (OnboardPolicy); kAlways / kNever force a path.
  enum class OnboardMode : uint8_t { kAuto, kAlways, kNever } onboard_mode = OnboardMode::kAuto;
  // Tests: after every step, check the block manager's invariants and that
  // each block's ref count equals the references in live block tables; abort
  // with the violation when one fails.
  bool check_invariants_each_step = false;

  // `window_group`: whether the backend supports a window group (the pool of
  // a sliding-window model then has one unless window_share is 0).
  Status validate(const ModelConfig& model, bool window_group = false) const;
  // The device pool's geometry for `model` (n_blocks, and n_window_blocks,
  // from kv_pool_bytes and window_share).
  KvGeometry pool_geometry(const ModelConfig& model, bool window_group = false) const;
  // Window blocks one sequence can hold at once (the reserved block 0
  // included): the smallest window space that serves a request.
  int32_t min_window_blocks(const ModelConfig& model) const;
  // The geometry of the tier records of that pool (TierManagerOptions::geometry).
  BlockGeometry record_geometry(const ModelConfig& model) const;
  // Whether `tiers` can serve an engine with these options: the same record
  // geometry, model fingerprint and deployment secret. The error names the
  // first that differs.
  Status check_tiers(const ModelConfig& model, const TierManager& tiers) const;
};

// Figures for /v1/cache/stats and /metrics (a consistent snapshot).
struct EngineStats {
  int64_t pool_capacity_bytes = 0;
  // Bytes of the blocks that hold data: referenced plus cached (not free), in
  // both spaces. The same figure as TierFigures::used_bytes of the device,
  // /v1/cache/stats tiers.device.used_bytes and /metrics prefixd_pool_used_bytes.
  int64_t pool_used_bytes = 0;
  int32_t pool_blocks_total = 0;
  int32_t pool_blocks_referenced = 0;  // ref > 0: held by a live sequence
  int32_t pool_blocks_cached = 0;      // ref 0, findable (holding cached data)
  int32_t pool_blocks_pinned = 0;      // pin > 0 (also counted as referenced or cached)
  // Window space (sliding-window models; else 0): its blocks, those referenced
  // or pinned, and the cached parts of published blocks. pool_capacity_bytes
  // and pool_used_bytes count both spaces.
  int32_t pool_window_blocks_total = 0;
  int32_t pool_window_blocks_referenced_or_pinned = 0;
  int32_t pool_window_blocks_cached = 0;
  int64_t pool_window_evictions = 0;
  int64_t device_hits = 0;           // blocks matched in the pool
  int64_t device_misses = 0;         // blocks looked up and not found in the pool
  int64_t device_evictions = 0;
  int64_t prompt_tokens = 0;         // prompt tokens of admitted requests
  int64_t cached_tokens_device = 0;
  int64_t cached_tokens_host = 0;
  int64_t cached_tokens_disk = 0;
  int64_t cached_tokens_remote = 0;
  int64_t prefill_tokens = 0;        // tokens computed for prompts
  int64_t generated_tokens = 0;
  int64_t forward_passes = 0;
  int64_t forward_tokens = 0;        // rows of all forward passes
  int64_t preemptions = 0;
  // Recurrent models' state snapshots (engine/state_snapshots.h): slots,
  // those holding one, admissions resumed from one (hits) or with matched
  // blocks but no snapshot at their boundaries (misses), snapshots stored,
  // evicted by newer ones (LRU), dropped with their block, and the bytes
  // copied into them and restored from them.
  int32_t snapshot_slots = 0;
  int32_t snapshots_stored = 0;
  int64_t snapshot_hits = 0;
  int64_t snapshot_misses = 0;
  int64_t snapshots_taken = 0;
  int64_t snapshot_evictions = 0;
  int64_t snapshots_dropped = 0;
  int64_t snapshot_bytes_taken = 0;
  int64_t snapshot_bytes_restored = 0;
  int64_t snapshot_bytes = 0;  // bytes of one snapshot (state_floats f32)
  int64_t snapshot_tier_hits = 0;      // of snapshot_hits, restored from the tiers
  int64_t snapshot_tier_rejected = 0;  // tiers' snapshots that failed a check (misses)
  int64_t snapshots_offloaded = 0;     // snapshots handed to the tiers
  int32_t running = 0;
  int32_t waiting = 0;               // includes loading
};

// How much of a prompt is cached where (for /v1/cache/lookup).
struct LookupResult {
  int32_t prompt_tokens = 0;
  int32_t device_tokens = 0;
  int32_t host_tokens = 0;
  int32_t disk_tokens = 0;
  // The leading run after device, host and disk that the remote tier holds:
  // filled by lookup_all_tiers() only (0 from lookup()).
  int32_t remote_tokens = 0;
  // With a remote tier: the keys of the blocks after the device, host and
  // disk run ([n blocks]), which lookup_all_tiers() asks the remote tier
  // about. Empty without one, or when the other tiers hold the whole prompt.
  std::vector<BlockKey> remote_keys;
  std::string remote_error;   // why it stopped early, when it did ("" else)
  int32_t cached_tokens() const { return device_tokens + host_tokens + disk_tokens + remote_tokens; }
};

struct PinResult {
  int32_t pinned_blocks = 0;
  int32_t pinned_tokens = 0;
  uint64_t namespace_seed = 0;       // of the salt (BlockKey::namespace_seed)
  std::vector<Hash128> block_hashes;  // [pinned_blocks] the pinned chain's hashes
};

// The tier keys of a prompt's full blocks under a salt.
struct ChainKeys {
  uint64_t namespace_seed = 0;
  std::vector<Hash128> block_hashes;  // [prompt tokens / block_size]
};

class Engine {
 public:
  // `model` and `tiers` (may be null) must outlive the engine. `tokenizer`
  // (may be null) is used for stop strings and streamed text. Fails on
  // invalid options and on tiers that fail options.check_tiers().
  static Result<std::unique_ptr<Engine>> create(const Model& model, const Tokenizer* tokenizer,
                                                TierManager* tiers, const EngineOptions& options);
  ~Engine();  // stops the thread; pending requests finish with kCancelled

  const EngineOptions& options() const;

  // Queues a request; its events arrive on the returned channel. The request
  // must already be validated (ids in vocabulary, length within context).
  std::shared_ptr<RequestChannel> submit(Request request);

  // Synchronous queries answered by the engine thread between steps.
  EngineStats stats();
  LookupResult lookup(const std::vector<int32_t>& prompt, const std::string& cache_salt);
  // lookup(), then, with a remote tier, the remote tier asked on the calling
  // thread (network I/O: one existence check per block after the other
  // tiers' run, bounded by TierManager::lookup_remote) for remote_tokens. For
  // HTTP threads (/v1/cache/lookup, the dashboard); the engine thread never
  // waits on it.
  LookupResult lookup_all_tiers(const std::vector<int32_t>& prompt, const std::string& cache_salt);
  Result<PinResult> pin(const std::vector<int32_t>& prompt, const std::string& cache_salt, bool pin);
  // Pure computation on the caller's thread (no engine round trip).
  ChainKeys chain_keys(const std::vector<int32_t>& prompt, const std::string& cache_salt) const;
  int32_t clear_cache();  // drops every unreferenced cached block from the pool (and tiers)

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd
