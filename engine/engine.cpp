// The engine thread: takes requests in, runs each scheduler step (admission,
// batch planning, preemption: engine/scheduler.h) through one forward pass,
// samples, and carries results back through the request channels; moves
// blocks between the device pool and the tiers (onboard, offload).
#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "engine/batch_builder.h"
#include "engine/state_slots.h"
#include "engine/state_snapshots.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/window_blocks.h"
#include "engine/logprobs.h"
#include "engine/model/forward.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/text/tokenizer.h"
#include "kernels/conv_tail.h"
#include "storage/onboard_policy.h"
#include "storage/tier_manager.h"

namespace prefixd {

// Record dtype codes are the DType values (storage does not include kernels/).
static_assert(static_cast<uint8_t>(DType::F32) == kKvDtypeF32 && static_cast<uint8_t>(DType::F16) == kKvDtypeF16 &&
              static_cast<uint8_t>(DType::BF16) == kKvDtypeBF16);

Status EngineOptions::validate(const ModelConfig& model, bool window_group) const {
  if (block_size < 1 || block_size > 1024) {
    return Status::error("block size " + std::to_string(block_size) + " is out of range (1..1024)");
  }
  if (max_batch_tokens < 1) return Status::error("max batch tokens must be >= 1");
  if (max_running < 1) return Status::error("max running sequences must be >= 1");
  if (state_snapshots < -1 || state_snapshots > 4096) {
    return Status::error("state snapshots " + std::to_string(state_snapshots) + " is out of range (-1..4096)");
  }
  if (snapshot_interval_blocks < 0) return Status::error("snapshot interval blocks must be >= 0");
  if (max_prompt_logits_rows < 1 || max_prompt_logits_rows > 4096) {
    return Status::error("max prompt logits rows " + std::to_string(max_prompt_logits_rows) +
                         " is out of range (1..4096)");
  }
  if (!(window_share >= 0.0 && window_share <= 0.95)) {
    return Status::error("window share " + std::to_string(window_share) + " is out of range (0..0.95)");
  }
  const KvGeometry g = pool_geometry(model, window_group);
  const size_t state_bytes = static_cast<size_t>(g.n_state_slots) * g.state_floats * sizeof(float);
  if (g.n_blocks < 2 && state_bytes > 0) {
    return Status::error("KV pool of " + std::to_string(kv_pool_bytes) + " bytes holds " +
                         std::to_string(g.n_blocks) + " blocks of " + std::to_string(g.global_block_bytes()) +
                         " bytes after the recurrent state: " + std::to_string(g.n_state_slots) + " slots of " +
                         std::to_string(g.state_floats * sizeof(float)) + " bytes (one per running sequence, " +
                         std::to_string(max_running) + ", and " + std::to_string(g.n_state_slots - max_running) +
                         " snapshots) take " + std::to_string(state_bytes) +
                         "; at least 2 blocks are needed (raise --kv-pool-mib, or lower --max-concurrent or "
                         "--state-snapshots)");
  }
  if (g.n_blocks < 2) {
    return Status::error("KV pool of " + std::to_string(kv_pool_bytes) + " bytes holds " +
                         std::to_string(g.n_blocks) + " blocks of " + std::to_string(g.global_block_bytes()) +
                         " bytes; at least 2 are needed");
  }
  if (!model.layer_is_conv.empty() && !conv_tail::fits(g, model.n_embd, model.conv_l_cache)) {
    return Status::error("a block of " + std::to_string(block_size) + " tokens has " +
                         std::to_string(2 * g.layer_block_bytes()) + " bytes a layer, too few for the " +
                         std::to_string(conv_tail::ring_rows(model.conv_l_cache)) +
                         " F32 rows of a convolution layer's tail (" + std::to_string(model.n_embd) +
                         " channels): use a larger block size");
  }
  if (g.has_window_group() && g.n_window_blocks < min_window_blocks(model)) {
    return Status::error("KV pool of " + std::to_string(kv_pool_bytes) + " bytes at window share " +
                         std::to_string(window_share) + " holds " + std::to_string(g.n_window_blocks) +
                         " window blocks of " + std::to_string(g.window_block_bytes()) + " bytes; one sequence needs " +
                         std::to_string(min_window_blocks(model)) + " (window " +
                         std::to_string(model.sliding_window) + ", max batch tokens " +
                         std::to_string(max_batch_tokens) + ")");
  }
  return Status();
}

int32_t EngineOptions::min_window_blocks(const ModelConfig& model) const {
  // From the window's first block to the end of a chunk, rounded out at both
  // ends, the block before it (Scheduler::trim_window keeps it), the copy of
  // a shared last block and the reserved block 0.
  return (model.sliding_window - 1 + max_batch_tokens) / block_size + 2 + 1 + 1 + 1;
}

KvGeometry EngineOptions::pool_geometry(const ModelConfig& model, bool window_group) const {
  KvGeometry g;
  g.n_layers = model.n_kv_layers();
  g.block_size = block_size;
  // One per running sequence, then the state snapshots'.
  g.n_state_slots = model.state_floats() > 0 ? max_running + n_state_snapshots(model) : 0;
  g.state_floats = model.state_floats();
  g.n_kv_heads = model.n_kv_heads;
  g.head_dim = model.head_dim;
  g.dtype = kv_dtype;
  // The state slots come out of the pool's budget (none when it is too small:
  // the check above then reports too few blocks).
  const size_t state_bytes = static_cast<size_t>(g.n_state_slots) * g.state_floats * sizeof(float);
  size_t global_bytes = kv_pool_bytes > state_bytes ? kv_pool_bytes - state_bytes : 0;
  const int32_t n_window_layers =
      static_cast<int32_t>(std::count(model.layer_is_window.begin(), model.layer_is_window.end(), 1));
  // (A model whose every layer is a window layer keeps one space: the
  // logical blocks need a global space to be counted in.)
  if (window_group && window_share > 0.0 && model.sliding_window > 0 && n_window_layers < model.n_layers) {
    g.window_layers = model.layer_is_window;
    g.n_window_blocks = static_cast<int32_t>(std::min<size_t>(
        static_cast<size_t>(static_cast<double>(kv_pool_bytes) * window_share) / g.window_block_bytes(), 1u << 30));
    global_bytes = kv_pool_bytes - static_cast<size_t>(g.n_window_blocks) * g.window_block_bytes();
  }
  g.n_blocks = static_cast<int32_t>(std::min<size_t>(global_bytes / g.global_block_bytes(), 1u << 30));
  return g;
}

BlockGeometry EngineOptions::record_geometry(const ModelConfig& model) const {
  BlockGeometry g;
  g.block_size = block_size;
  g.n_layers = model.n_kv_layers();
  g.n_kv_heads = model.n_kv_heads;
  g.head_dim = model.head_dim;
  g.dtype_code = static_cast<uint8_t>(kv_dtype);  // the same codes (storage/block_record.h)
  return g;
}

Status EngineOptions::check_tiers(const ModelConfig& model, const TierManager& tiers) const {
  if (!(tiers.geometry() == record_geometry(model))) {
    return Status::error("the tiers' record geometry differs from the KV pool's (block size, layers, "
                         "KV heads, head dim or KV dtype): their records would not fit its blocks");
  }
  if (!(tiers.model_fingerprint() == model_fingerprint)) {
    return Status::error("the tiers' model fingerprint " + tiers.model_fingerprint().hex() +
                         " differs from the engine's " + model_fingerprint.hex() +
                         " (EngineOptions::model_fingerprint): no block would ever be found in them");
  }
  if (tiers.deployment_secret() != deployment_secret) {
    return Status::error("the tiers' deployment secret differs from the engine's "
                         "(EngineOptions::deployment_secret, to be taken from "
                         "TierManager::deployment_secret()): no block would ever be found in them");
  }
  return Status();
}

class Engine::Impl {
 public:
  Impl(const Model& model, const Tokenizer* tokenizer, TierManager* tiers, const EngineOptions& opts,
       KvPool pool)
      : model_(model),
        tokenizer_(tokenizer),
        tiers_(tiers),
        opts_(opts),
        backend_(model.backend()),
        pool_(pool),
        blocks_(BlockManagerOptions{pool.geom.n_blocks, opts.block_size,
                                    opts.max_pinned_blocks > 0 ? opts.max_pinned_blocks
                                                               : std::max(1, pool.geom.n_blocks / 4)}),
        window_(pool.geom.has_window_group()
                    ? std::make_unique<WindowBlocks>(pool.geom.n_window_blocks, model.config().sliding_window, blocks_)
                    : nullptr),
        snapshots_(opts.n_state_snapshots(model.config()) > 0
                       ? std::make_unique<StateSnapshots>(opts.max_running, opts.n_state_snapshots(model.config()))
                       : nullptr),
        scheduler_(SchedulerOptions{opts.block_size, opts.max_batch_tokens, opts.max_running,
                                    opts.max_prompt_logits_rows, model.config().state_floats() == 0,
                                    snapshots_ != nullptr, opts.snapshot_interval_blocks},
                   blocks_, scheduler_hooks(), window_.get()),
        // Logits rows: one per sequence that samples, plus the prompt-logprobs rows.
        fwd_(model, opts.max_batch_tokens, opts.max_running + opts.max_prompt_logits_rows),
        builder_(opts.block_size),
        // The first max_running slots; the snapshots' come after them.
        state_slots_(pool.geom.n_state_slots > 0 ? std::make_unique<StateSlots>(opts.max_running) : nullptr),
        onboard_policy_(OnboardPolicyOptions{tiers ? tiers->record_bytes() : 1}) {
    if (tiers_ || window_ || snapshots_) {
      blocks_.set_on_evict([this](int32_t block_id, const BlockMeta& meta) {
        // A snapshot goes with the block it ends at (down to evict-only
        // tiers with it: write-through ones have it already).
        if (snapshots_) {
          const SnapshotKey key{meta.namespace_seed, meta.hash};
          if (tiers_ && tiers_->write_policy() != WritePolicy::kWriteThrough && snapshots_->contains(key))
            offload_snapshot(key, snapshots_->find(key), OffloadReason::kEvicted);
          snapshots_->drop(key);
        }
        // A block that lost its window part went down when it did (below).
        if (tiers_ && (!window_ || window_->of(block_id) >= 0)) {
          offload_block(block_id, meta.namespace_seed, meta.hash, meta.parent_hash, meta.tokens,
                        OffloadReason::kEvicted);
        }
        if (window_) window_->forget(block_id);
      });
    }
    if (window_ && tiers_ && tiers_->write_policy() != WritePolicy::kWriteThrough) {
      // Evict-only tiers get a block when it leaves the pool; a block whose
      // window part goes first would never reach them whole: send it now.
      window_->set_on_evict([this](int32_t block_id) {
        if (!blocks_.is_indexed(block_id)) return;
        const BlockMeta meta = blocks_.meta(block_id);
        offload_block(block_id, meta.namespace_seed, meta.hash, meta.parent_hash, meta.tokens,
                      OffloadReason::kEvicted);
      });
    }
    if (tiers_) tiers_->set_completion_notifier([this] { cv_.notify_all(); });
    thread_ = std::thread([this] { thread_main(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // Records still being built read the pool: let them finish first.
    if (tiers_) tiers_->wait_builds();
    backend_.free_kv_pool(pool_);
  }

  const EngineOptions& options() const { return opts_; }
  TierManager* tiers() const { return tiers_; }  // may be null

  std::shared_ptr<RequestChannel> submit(Request request) {
    auto seq = std::make_unique<Sequence>();
    seq->channel = std::make_shared<RequestChannel>();
    seq->request = std::move(request);
    seq->t_submit = Clock::now();
    auto channel = seq->channel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seq->id = ++next_id_;
      incoming_.push_back(std::move(seq));
    }
    cv_.notify_all();
    return channel;
  }

  // Runs `fn` on the engine thread between steps and waits for it.
  template <typename T>
  T call(std::function<T()> fn) {
    std::packaged_task<T()> task(std::move(fn));
    std::future<T> result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back([&task] { task(); });
    }
    cv_.notify_all();
    return result.get();
  }

  EngineStats stats_now() {
    EngineStats s = counters_;
    BlockManagerStats b = blocks_.stats();
    s.pool_blocks_total = pool_.geom.n_blocks;
    s.pool_capacity_bytes = static_cast<int64_t>(pool_.geom.pool_bytes());
    s.pool_blocks_referenced = b.blocks_referenced;
    s.pool_blocks_cached = b.blocks_cached;
    s.pool_blocks_pinned = b.blocks_pinned;
    s.pool_used_bytes = static_cast<int64_t>(b.blocks_referenced + b.blocks_cached) *
                        static_cast<int64_t>(pool_.geom.global_block_bytes());
    if (window_) {
      const WindowBlocksStats w = window_->stats();
      s.pool_window_blocks_total = w.blocks_total;
      s.pool_window_blocks_referenced_or_pinned = w.blocks_referenced_or_pinned;
      s.pool_window_blocks_cached = w.blocks_cached;
      s.pool_window_evictions = w.evictions;
      s.pool_used_bytes += static_cast<int64_t>(w.blocks_referenced_or_pinned + w.blocks_cached) *
                           static_cast<int64_t>(pool_.geom.window_block_bytes());
    }
    s.device_hits = b.hits;
    s.device_misses = b.misses;
    s.device_evictions = b.evictions;
    s.prompt_tokens = scheduler_.stats().prompt_tokens;
    s.preemptions = scheduler_.stats().preemptions;
    if (snapshots_) {
      const SnapshotCounters& c = snapshots_->counters;
      s.snapshot_slots = opts_.n_state_snapshots(model_.config());
      s.snapshots_stored = snapshots_->n_stored();
      s.snapshot_hits = scheduler_.stats().snapshot_hits;
      s.snapshot_misses = scheduler_.stats().snapshot_misses;
      s.snapshots_taken = c.taken;
      s.snapshot_evictions = c.evictions;
      s.snapshots_dropped = c.dropped;
      s.snapshot_bytes_taken = c.bytes_taken;
      s.snapshot_bytes_restored = c.bytes_restored;
      s.snapshot_tier_hits = c.tier_hits;
      s.snapshot_tier_rejected = c.tier_rejected;
      s.snapshots_offloaded = c.offloaded;
      s.snapshot_bytes = pool_.geom.state_floats * static_cast<int64_t>(sizeof(float));
    }
    s.cached_tokens_device = cached_totals_.device;
    s.cached_tokens_host = cached_totals_.host;
    s.cached_tokens_disk = cached_totals_.disk;
    s.cached_tokens_remote = cached_totals_.remote;
    s.running = 0;
    for (const auto& r : scheduler_.running()) s.running += r->state == SeqState::kRunning ? 1 : 0;
    s.waiting = static_cast<int32_t>(scheduler_.waiting().size() + scheduler_.running().size()) - s.running;
    return s;
  }

  LookupResult lookup_now(const std::vector<int32_t>& prompt, const std::string& salt) {
    LookupResult r;
    r.prompt_tokens = static_cast<int32_t>(prompt.size());
    if (!scheduler_.options().prefix_reuse && !snapshots_) return r;  // a recurrent model without snapshots
    const uint64_t ns_seed = namespace_seed_for(salt);
    std::vector<BlockHash> hashes = hash_blocks(prompt, opts_.block_size, ns_seed);
    MatchResult m = blocks_.match(ns_seed, hashes, prompt);
    if (snapshots_) return lookup_with_state(ns_seed, hashes, prompt, m, r);
    if (window_) m.block_ids.resize(static_cast<size_t>(window_->usable_prefix(m.block_ids, r.prompt_tokens)));
    r.device_tokens = m.n_ready() * opts_.block_size;
    if (tiers_ && m.n_ready() < static_cast<int32_t>(hashes.size())) {
      ChainLookup below = tiers_->lookup_chain(chain_query(ns_seed, hashes, prompt, m.n_ready(),
                                                           static_cast<int32_t>(hashes.size())));
      r.host_tokens = below.n_host * opts_.block_size;
      r.disk_tokens = below.n_disk * opts_.block_size;
      for (size_t i = static_cast<size_t>(m.n_ready() + below.n_blocks);
           below.n_remote_candidates > 0 && i < hashes.size(); ++i) {
        r.remote_keys.push_back(BlockKey{ns_seed, hashes[i]});
      }
    }
    return r;
  }

  // lookup_now for a recurrent model: what a request would resume from, as
  // the scheduler chooses it (offer_state_below, cut_to_snapshot): the pool's
  // match and the host/disk chain after it up to the longest that ends at a
  // snapshot, else the longest pool match that ends at one. Short of the
  // prompt's end. The remote tier is not asked (remote_keys stays empty): a
  // recurrent chain from there counts only once a request onboards it.
  LookupResult lookup_with_state(uint64_t ns_seed, const std::vector<BlockHash>& hashes,
                                 const std::vector<int32_t>& prompt, const MatchResult& m, LookupResult r) const {
    const int32_t B = opts_.block_size;
    const int32_t last = (r.prompt_tokens - 1) / B;
    const int32_t d = std::min(m.n_ready(), std::max(last, 0));
    auto has_local_state = [&](int32_t k) {
      const BlockHash& h = hashes[static_cast<size_t>(k) - 1];
      return snapshots_->contains(SnapshotKey{ns_seed, h}) ||
             (tiers_ != nullptr && tiers_->has_local_snapshot(BlockKey{ns_seed, h}, state_bytes()));
    };
    int32_t n = 0;
    ChainLookup below;
    if (tiers_ && d < last) {
      below = tiers_->lookup_chain(chain_query(ns_seed, hashes, prompt, d, last));
      n = below.n_blocks;
      while (n > 0 && !has_local_state(d + n)) --n;
    }
    if (n > 0) {
      r.device_tokens = d * B;
      const auto host = std::count(below.tiers.begin(), below.tiers.begin() + n, StorageTier::kHost);
      r.host_tokens = static_cast<int32_t>(host) * B;
      r.disk_tokens = n * B - r.host_tokens;
      return r;
    }
    int32_t k = d;
    while (k > 0 && !has_local_state(k)) --k;
    r.device_tokens = k * B;
    return r;
  }

  size_t state_bytes() const { return static_cast<size_t>(pool_.geom.state_floats) * sizeof(float); }

  ChainKeys chain_keys(const std::vector<int32_t>& prompt, const std::string& salt) const {
    ChainKeys k;
    k.namespace_seed = namespace_seed_for(salt);
    k.block_hashes = hash_blocks(prompt, opts_.block_size, k.namespace_seed);
    return k;
  }

  Result<PinResult> pin_now(const std::vector<int32_t>& prompt, const std::string& salt, bool pin) {
    const uint64_t ns_seed = namespace_seed_for(salt);
    std::vector<BlockHash> hashes = hash_blocks(prompt, opts_.block_size, ns_seed);
    MatchResult m = blocks_.match(ns_seed, hashes, prompt);
    PinResult r;
    Status s = pin ? blocks_.pin(m.block_ids) : blocks_.unpin(m.block_ids);
    if (!s.ok()) return s;
    if (window_ && m.n_ready() > 0) {
      // The window parts a hit at the chain's end reads are pinned with it.
      const int32_t k = m.n_ready();
      const int32_t first = window_->first_block(window_->resume_position(k, static_cast<int32_t>(prompt.size())));
      bool whole = true;
      for (int32_t i = first; i < k; ++i) whole = whole && window_->of(m.block_ids[static_cast<size_t>(i)]) >= 0;
      if (pin && !whole) {
        (void)blocks_.unpin(m.block_ids);
        return Status::error("the window layers' K/V of the prefix's last " + std::to_string(window_->window_tokens()) +
                             " tokens are no longer in the pool: send the prompt again, then pin it");
      }
      for (int32_t i = first; i < k; ++i) {
        if (pin) {
          window_->pin(m.block_ids[static_cast<size_t>(i)]);
        } else {
          window_->unpin(m.block_ids[static_cast<size_t>(i)]);
        }
      }
    }
    r.pinned_blocks = m.n_ready();
    r.pinned_tokens = r.pinned_blocks * opts_.block_size;
    r.namespace_seed = ns_seed;
    r.block_hashes.assign(hashes.begin(), hashes.begin() + r.pinned_blocks);
    return r;
  }

  int32_t clear_now() {
    // Blocks whose records are still being built are referenced, and
    // BlockManager::clear() keeps referenced blocks: finish those builds and
    // drop their references first, so that nothing published stays findable.
    if (tiers_) tiers_->wait_builds();
    release_copied_blocks();
    int32_t n = blocks_.clear();
    if (window_) window_->clear();
    if (tiers_) (void)tiers_->clear();
    return n;
  }

 private:
  // ---- thread loop --------------------------------------------------------
  void thread_main() {
    for (;;) {
      std::deque<std::unique_ptr<Sequence>> incoming;
      std::deque<std::function<void()>> tasks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stopping_ || !incoming_.empty() || !tasks_.empty() || !copied_blocks_.empty() ||
                 !scheduler_.waiting().empty() || !scheduler_.running().empty();
        });
        if (stopping_) break;
        incoming.swap(incoming_);
        tasks.swap(tasks_);
      }
      release_copied_blocks();
      for (auto& s : incoming) take_in(std::move(s));
      for (auto& t : tasks) t();
      // Nothing could run although sequences exist (all loading from the
      // tiers, waiting for blocks another sequence computes, or short of pool
      // blocks): the wait above would return at once, since they keep its
      // predicate true, so the loop polls. The sleep bounds that to one idle
      // step per 200 µs, which costs up to 200 µs before an onboarding
      // completion or a new request is seen and a few thousand cheap wakeups
      // a second while sequences are blocked; when no sequence exists the
      // loop sleeps in the wait instead.
      if (!step()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // Shutdown: everything still queued or running ends as cancelled.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : incoming_) take_in(std::move(s));
    incoming_.clear();
    for (auto& t : tasks_) t();
    tasks_.clear();
    while (!scheduler_.running().empty()) finish(*scheduler_.running().back(), FinishReason::kCancelled);
    while (!scheduler_.waiting().empty()) finish(*scheduler_.waiting().back(), FinishReason::kCancelled);
  }

  // A submitted request enters the engine: its namespace and its sampling and
  // text state, then the scheduler's waiting queue.
  void take_in(std::unique_ptr<Sequence> s) {
    s->namespace_seed = namespace_seed_for(s->request.cache_salt);
    s->sampler.emplace(s->request.sampling);
    if (tokenizer_) s->decoder = std::make_unique<StreamDecoder>(*tokenizer_);
    if (!s->request.stop.empty()) s->stop = std::make_unique<StopMatcher>(s->request.stop);
    scheduler_.add(std::move(s));
  }

  // One scheduling step; returns false when nothing could run.
  bool step() {
    reap_cancelled();
    finish_onboarding();
    scheduler_.admit(Clock::now());
    scheduler_.set_blocks_held_outside(n_copy_refs_);
    StepPlan plan = scheduler_.plan_step();
    for (Sequence* s : plan.too_big) {
      fail(*s, "the request needs more KV blocks than the pool holds (" +
                   std::to_string(pool_.geom.n_blocks) + " blocks of " + std::to_string(opts_.block_size) +
                   " tokens" +
                   (window_ ? ", " + std::to_string(pool_.geom.n_window_blocks) + " window blocks" : std::string()) +
                   ")");
    }
    for (Sequence* s : plan.completed) finish(*s, FinishReason::kStop);
    if (plan.chunks.empty()) {
      if (opts_.check_invariants_each_step) check_invariants();
      return false;
    }
    builder_.clear();
    if (state_slots_) state_slots_->retain(scheduler_.running());
    for (const ScheduledChunk& c : plan.chunks) {
      const Sequence& s = *c.seq;
      const LogitsWanted wanted = c.all_logits_row >= 0 ? LogitsWanted::kAll
                                  : c.logits_row >= 0   ? LogitsWanted::kLast
                                                        : LogitsWanted::kNone;
      const std::vector<int32_t> window_table = scheduler_.window_table(s);
      builder_.add(std::span<const int32_t>(s.tokens.data() + s.n_computed, c.n_tokens), s.n_computed,
                   s.block_table, wanted, window_table);
      if (state_slots_) builder_.set_last_state_slot(state_slots_->slot_of(s.id));
    }
    std::vector<float> logits;
    const auto t0 = Clock::now();
    fwd_.run(builder_.batch(), pool_, &logits);
    const double pass_s = std::chrono::duration<double>(Clock::now() - t0).count();
    counters_.forward_passes++;
    counters_.forward_tokens += builder_.n_tokens();
    int64_t prefill_rows = 0;
    for (const ScheduledChunk& c : plan.chunks) prefill_rows += c.is_decode ? 0 : c.n_tokens;
    if (prefill_rows == builder_.n_tokens()) onboard_policy_.observe_prefill(prefill_rows, pass_s);
    if (snapshots_) take_snapshots(plan);
    for (const ScheduledChunk& c : plan.chunks) complete(c, logits);
    if (opts_.check_invariants_each_step) check_invariants();
    return true;
  }

  // The chunks that ended at a snapshot boundary: their sequences' state
  // slots into snapshot slots (none when that block's snapshot is stored).
  // One among generated tokens replaces the sequence's previous such one and
  // goes to write-through tiers only when the sequence finishes (the last
  // one is what a conversation's next turn resumes from; the others would
  // be written for nothing).
  void take_snapshots(const StepPlan& plan) {
    const int64_t bytes = pool_.geom.state_floats * static_cast<int64_t>(sizeof(float));
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.snapshot_blocks <= 0) continue;
      Sequence& s = *c.seq;
      const SnapshotKey key{s.namespace_seed, s.hashes[static_cast<size_t>(c.snapshot_blocks) - 1]};
      if (c.generated_snapshot) {
        if (s.generated_snapshot_blocks > 0) snapshots_->drop(generated_snapshot_key(s));
        s.generated_snapshot_blocks = c.snapshot_blocks;
      }
      SnapshotKey evicted;
      const int32_t dst = snapshots_->store(key, &evicted);
      if (dst < 0) continue;
      // Evict-only tiers get a snapshot when its slot goes to another.
      if (tiers_ && tiers_->write_policy() != WritePolicy::kWriteThrough && !(evicted == SnapshotKey{}))
        offload_snapshot(evicted, dst, OffloadReason::kEvicted);
      backend_.copy_state_slot(pool_, state_slots_->slot_of(s.id), dst);
      snapshots_->counters.bytes_taken += bytes;
      if (tiers_ && tiers_->write_policy() == WritePolicy::kWriteThrough && !c.generated_snapshot)
        offload_snapshot(key, dst, OffloadReason::kPublished);
    }
  }

  SnapshotKey generated_snapshot_key(const Sequence& s) const {
    return SnapshotKey{s.namespace_seed, s.hashes[static_cast<size_t>(s.generated_snapshot_blocks) - 1]};
  }

  // A finishing sequence's last snapshot among generated tokens, if the
  // device still holds it, to write-through tiers.
  void offload_generated_snapshot(const Sequence& s) {
    if (!snapshots_ || s.generated_snapshot_blocks <= 0 || !tiers_ ||
        tiers_->write_policy() != WritePolicy::kWriteThrough)
      return;
    const SnapshotKey key = generated_snapshot_key(s);
    if (snapshots_->contains(key)) offload_snapshot(key, snapshots_->find(key), OffloadReason::kPublished);
  }

  // The snapshot in slot `slot` to the tiers (they copy the bytes).
  void offload_snapshot(const SnapshotKey& key, int32_t slot, OffloadReason reason) {
    std::vector<float> state(static_cast<size_t>(pool_.geom.state_floats));
    backend_.read_state_slot(pool_, slot, state.data());
    tiers_->offload_snapshot(BlockKey{key.namespace_seed, key.hash},
                             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(state.data()),
                                                      state.size() * sizeof(float)),
                             reason);
    snapshots_->counters.offloaded++;
  }

  // The tiers' snapshot `key` into the sequence's state slot (and a device
  // snapshot slot); false when they hold none or it fails a check (a miss).
  bool restore_snapshot_from_tiers(const Sequence& s, const SnapshotKey& key) {
    const size_t n_bytes = static_cast<size_t>(pool_.geom.state_floats) * sizeof(float);
    const BlockKey bk{key.namespace_seed, key.hash};
    if (!tiers_->has_snapshot(bk, n_bytes)) return false;
    Result<std::vector<uint8_t>> r = tiers_->read_snapshot(bk, n_bytes);
    if (!r.ok() || r.value().size() != n_bytes) {
      snapshots_->counters.tier_rejected++;
      return false;
    }
    std::vector<float> state(static_cast<size_t>(pool_.geom.state_floats));
    std::memcpy(state.data(), r.value().data(), n_bytes);
    state_slots_->retain(scheduler_.running());
    const int32_t slot = state_slots_->slot_of(s.id);
    backend_.write_state_slot(pool_, slot, state.data());
    SnapshotKey evicted;
    const int32_t dst = snapshots_->store(key, &evicted);
    if (dst >= 0) {
      if (tiers_->write_policy() != WritePolicy::kWriteThrough && !(evicted == SnapshotKey{}))
        offload_snapshot(evicted, dst, OffloadReason::kEvicted);
      backend_.copy_state_slot(pool_, slot, dst);
    }
    snapshots_->counters.tier_hits++;
    snapshots_->counters.bytes_restored += static_cast<int64_t>(n_bytes);
    return true;
  }

  // Ref counts equal the references held by live block tables, and the block
  // manager's own structures agree (index, LRU, free list).
  void check_invariants() const {
    Status s = scheduler_.check_invariants();
    if (!s.ok()) {
      std::fprintf(stderr, "engine invariant failed: %s\n", s.message().c_str());
      std::abort();
    }
  }

  void reap_cancelled() {
    const auto& running = scheduler_.running();
    for (size_t i = 0; i < running.size();) {
      if (running[i]->channel->cancelled()) {
        finish(*running[i], FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
    const auto& waiting = scheduler_.waiting();
    for (size_t i = 0; i < waiting.size();) {
      if (waiting[i]->channel->cancelled()) {
        finish(*waiting[i], FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
  }

  // ---- namespaces and tiers ---------------------------------------------------
  uint64_t namespace_seed_for(const std::string& salt) const {
    return namespace_seed(opts_.model_fingerprint, static_cast<uint8_t>(opts_.kv_dtype), opts_.block_size,
                          opts_.deployment_secret, salt);
  }

  // Whether a snapshot keyed by the chain hash `hash` is on the device or in
  // the tiers (SchedulerHooks::has_state; TierManager::has_snapshot's
  // checks: in memory for host and disk, a probe of the remote tier).
  bool has_state(uint64_t ns_seed, const BlockHash& hash) const {
    if (snapshots_->contains(SnapshotKey{ns_seed, hash})) return true;
    return tiers_ != nullptr &&
           tiers_->has_snapshot(BlockKey{ns_seed, hash}, static_cast<size_t>(pool_.geom.state_floats) * sizeof(float));
  }

  // The scheduler's resume_state hook: the state after the sequence's first
  // n_blocks blocks into its slot, from a device snapshot or the tiers
  // (recorded in its usage: Usage::state_from).
  bool resume_state(Sequence& s, int32_t n_blocks) {
    const SnapshotKey key{s.namespace_seed, s.hashes[static_cast<size_t>(n_blocks) - 1]};
    const int32_t src = snapshots_->find(key);
    if (src < 0) {
      if (tiers_ == nullptr || !restore_snapshot_from_tiers(s, key)) return false;
      s.cache.state_resumed(n_blocks, "tiers");
      return true;
    }
    // Slots of sequences that left the running set are free again first:
    // this one is not running yet and needs its own.
    state_slots_->retain(scheduler_.running());
    backend_.copy_state_slot(pool_, src, state_slots_->slot_of(s.id));
    snapshots_->counters.bytes_restored += pool_.geom.state_floats * static_cast<int64_t>(sizeof(float));
    s.cache.state_resumed(n_blocks, "device");
    return true;
  }

  // The scheduler's offer hook: what the tiers hold of blocks [from, to) and
  // whether onboarding them beats recomputing them.
  TierOffer tier_offer(const Sequence& s, int32_t from, int32_t to) {
    TierOffer offer;
    ChainLookup below = tiers_->lookup_chain(chain_query(s.namespace_seed, s.hashes, s.tokens, from, to));
    // Blocks the remote tier may hold count as restorable: asking costs
    // one round trip, and a miss only means computing them after all.
    const int32_t n_offered = below.n_blocks + below.n_remote_candidates;
    if (n_offered == 0) return offer;
    OnboardDecision d = onboard_policy_.choose_chain(ChainTiers{below.n_host, below.n_disk, below.n_remote_candidates},
                                                     static_cast<int64_t>(n_offered) * opts_.block_size);
    if (opts_.onboard_mode == EngineOptions::OnboardMode::kAlways) d.choice = OnboardChoice::kOnboard;
    if (opts_.onboard_mode == EngineOptions::OnboardMode::kNever) d.choice = OnboardChoice::kRecompute;
    // Recomputing blocks nobody is known to hold is just a cold prompt.
    if (d.choice == OnboardChoice::kRecompute && below.n_blocks == 0) return offer;
    offer.n_blocks = n_offered;
    offer.onboard = d.choice == OnboardChoice::kOnboard;
    return offer;
  }

  // What the scheduler asks of the backend and the tiers.
  SchedulerHooks scheduler_hooks() {
    SchedulerHooks h;
    h.copy_block = [this](int32_t src, int32_t dst) { backend_.copy_kv_block(pool_, kv_ids(src), kv_ids(dst)); };
    if (snapshots_) {
      h.resume_state = [this](Sequence& s, int32_t n_blocks) { return resume_state(s, n_blocks); };
      h.has_state = [this](const Sequence& s, int32_t n_blocks) {
        return has_state(s.namespace_seed, s.hashes[static_cast<size_t>(n_blocks) - 1]);
      };
    }
    if (tiers_ == nullptr) return h;
    h.offer = [this](const Sequence& s, int32_t from, int32_t to) { return tier_offer(s, from, to); };
    h.onboard = [this](const Sequence& s, int32_t from, int32_t to) {
      tiers_->request_onboard(s.id, chain_query(s.namespace_seed, s.hashes, s.tokens, from, to));
    };
    if (tiers_->write_policy() == WritePolicy::kWriteThrough) {
      h.published = [this](const Sequence& s, int32_t i) {
        const int32_t B = opts_.block_size;
        const BlockHash& parent = i == 0 ? kRootParentHash : s.hashes[i - 1];
        const std::span<const int32_t> tokens(s.tokens.data() + i * B, B);
        const int32_t block_id = s.block_table[i];
        // A block onboarded without its window part (older than the window
        // of the onboarded chain's end) came from the tiers: they have it.
        if (window_ && window_->of(block_id) < 0) return;
        // The copy and checksum run on the tiers' offload thread while this
        // one computes; the block is held (a reference) until its copy is
        // done. Published blocks are immutable, so reading them concurrently
        // is safe. When the tiers refuse (too many waiting), copy here.
        if (backend_.reads_blocks_concurrently()) {
          blocks_.acquire(std::span<const int32_t>(&block_id, 1));
          if (window_) window_->hold(block_id);  // its window part too
          const KvBlockIds ids = kv_ids(block_id);
          if (tiers_->offload_published_later(
                  s.namespace_seed, s.hashes[i], parent, tokens,
                  [this, ids](uint8_t* payload) { backend_.read_kv_block(pool_, ids, payload); },
                  [this, block_id] { copied(block_id); })) {
            ++n_copy_refs_;
            return;
          }
          if (window_) window_->release(block_id);
          blocks_.release(std::span<const int32_t>(&block_id, 1));
        }
        offload_block(block_id, s.namespace_seed, s.hashes[i], parent, tokens, OffloadReason::kPublished);
      };
    }
    return h;
  }

  // A logical block's places in the pool (its window part, if any).
  KvBlockIds kv_ids(int32_t block_id) const {
    return KvBlockIds{block_id, window_ ? window_->of(block_id) : -1};
  }

  ChainQuery chain_query(uint64_t ns_seed, const std::vector<BlockHash>& hashes,
                         const std::vector<int32_t>& tokens, int32_t from, int32_t to) const {
    const int32_t B = opts_.block_size;
    ChainQuery q;
    q.namespace_seed = ns_seed;
    q.first_parent = from == 0 ? kRootParentHash : hashes[from - 1];
    q.hashes.assign(hashes.begin() + from, hashes.begin() + to);
    q.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(from) * B,
                       tokens.begin() + static_cast<std::ptrdiff_t>(to) * B);
    return q;
  }

  // Copies onboarded records into their reserved pool blocks; the scheduler
  // publishes them and starts the sequence.
  void finish_onboarding() {
    if (!tiers_) return;
    for (OnboardCompletion& c : tiers_->poll_completions()) {
      Sequence* s = scheduler_.find_loading(c.request_id);
      if (s == nullptr) continue;  // cancelled meanwhile; its blocks are already released
      const int32_t k = s->cache.device_blocks;
      const int32_t v = static_cast<int32_t>(c.records.size());
      // The whole chain in one call. The payload is the record's tail (records
      // from the tiers are checked).
      std::vector<BlockWrite> writes(static_cast<size_t>(v));
      for (int32_t j = 0; j < v; ++j) {
        const RecordBuffer& rec = *c.records[j];
        const int32_t id = s->block_table[k + j];
        writes[j] = BlockWrite{id, rec.data() + rec.size() - tiers_->geometry().payload_bytes(), kv_ids(id).window_block};
      }
      backend_.write_blocks(pool_, writes.data(), writes.size());
      s->usage.onboard_ms = ms_between(s->t_loading_start, Clock::now());
      if (c.host_bytes > 0) onboard_policy_.observe_onboard(StorageTier::kHost, c.host_bytes, c.host_seconds);
      if (c.disk_bytes > 0) onboard_policy_.observe_onboard(StorageTier::kDisk, c.disk_bytes, c.disk_seconds);
      if (c.remote_bytes > 0) onboard_policy_.observe_onboard(StorageTier::kRemote, c.remote_bytes, c.remote_seconds);
      if (c.remote_miss_seconds > 0) onboard_policy_.observe_remote_round_trip(c.remote_miss_seconds);
      scheduler_.onboarded(*s, v, c.n_from_host, c.n_from_remote);
    }
  }

  // A block whose record the offload thread has built: its reference is
  // dropped on the engine thread (the block manager is this thread's).
  void copied(int32_t block_id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      copied_blocks_.push_back(block_id);
    }
    cv_.notify_all();
  }
  void release_copied_blocks() {
    std::vector<int32_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids.swap(copied_blocks_);
    }
    if (window_) {
      for (int32_t id : ids) window_->release(id);
    }
    if (!ids.empty()) blocks_.release(ids);
    n_copy_refs_ -= static_cast<int32_t>(ids.size());
  }

  // Sends a pool block down to the host (and disk) tier as a record.
  void offload_block(int32_t block_id, uint64_t ns_seed, const BlockHash& hash, const BlockHash& parent,
                     std::span<const int32_t> tokens, OffloadReason reason) {
    std::shared_ptr<RecordBuffer> rec = tiers_->start_record(ns_seed, hash, parent, tokens);
    if (!rec) return;
    backend_.read_kv_block(pool_, kv_ids(block_id), block_record_payload(*rec));
    seal_block_record(*rec);
    tiers_->offload(BlockKey{ns_seed, hash}, std::move(rec), reason);
  }

  // ---- after the forward pass ----------------------------------------------
  void complete(const ScheduledChunk& c, const std::vector<float>& logits) {
    Sequence& s = *c.seq;
    if (s.state != SeqState::kRunning) return;
    if (!c.is_decode) {  // decode tokens are counted when sampled
      s.usage.prefill_tokens += c.n_tokens;
      counters_.prefill_tokens += c.n_tokens;
    }
    const int32_t pos0 = s.n_computed;
    scheduler_.advance(s, c.n_tokens);
    if (s.request.kind == RequestKind::kPrefetch) {
      if (s.n_computed >= s.target_tokens) finish(s, FinishReason::kStop);
      return;
    }
    const int32_t n_vocab = model_.config().n_vocab;
    if (c.all_logits_row >= 0) record_prompt_logprobs(s, pos0, c, logits, n_vocab);
    if (c.logits_row < 0) return;
    if (s.request.logprobs.prompt && !s.prompt_logprobs_sent) {
      EngineEvent ev;
      ev.type = EngineEvent::Type::kPromptLogprobs;
      ev.prompt_logprobs = std::move(s.prompt_logprobs);
      s.prompt_logprobs = {};
      s.prompt_logprobs_sent = true;
      s.channel->push(std::move(ev));
    }
    if (s.n_generated == 0 && s.request.max_tokens == 0) {
      // Prompt only (scoring): the prompt's results are its first output.
      const auto now = Clock::now();
      s.usage.ttft_ms = ms_between(s.t_submit, now);
      s.usage.prefill_ms = ms_between(s.t_admit, now);
      finish(s, FinishReason::kLength);
      return;
    }
    const float* row = logits.data() + static_cast<size_t>(c.logits_row) * n_vocab;
    sample_and_emit(s, row, n_vocab);
  }

  // Logprobs of the prompt tokens that follow the chunk's positions
  // [pos0, pos0 + n_tokens): position p's logits give token p + 1's. A
  // position computed again (after a preemption) is not recorded twice.
  void record_prompt_logprobs(Sequence& s, int32_t pos0, const ScheduledChunk& c,
                              const std::vector<float>& logits, int32_t n_vocab) {
    for (int32_t i = 0; i < c.n_tokens; ++i) {
      const int32_t pos = pos0 + i;
      if (pos + 1 >= s.n_prompt) break;
      if (pos != static_cast<int32_t>(s.prompt_logprobs.size())) continue;
      const float* row = logits.data() + static_cast<size_t>(c.all_logits_row + i) * n_vocab;
      const int32_t next = s.tokens[static_cast<size_t>(pos) + 1];
      s.prompt_logprobs.push_back(position_logprobs(row, n_vocab, next, s.request.logprobs.top_n));
    }
  }

  void sample_and_emit(Sequence& s, const float* logits, int32_t n_vocab) {
    const auto now = Clock::now();
    const int32_t token = s.sampler->sample(logits, n_vocab, s.tokens);
    if (s.n_generated == 0) {
      s.cache.commit(s.usage, cached_totals_);
      s.t_first_token = now;
      s.usage.ttft_ms = ms_between(s.t_submit, now);
      s.usage.prefill_ms = ms_between(s.t_admit, now);
    }
    s.tokens.push_back(token);
    s.n_generated++;
    s.usage.completion_tokens = s.n_generated;
    counters_.generated_tokens++;
    s.target_tokens = static_cast<int32_t>(s.tokens.size());
    if (!s.request.ignore_eos && tokenizer_ && tokenizer_->is_end_of_generation(token)) {
      finish(s, FinishReason::kStop);
      return;
    }
    EngineEvent ev;
    ev.type = EngineEvent::Type::kToken;
    ev.token = token;
    if (s.request.return_logits) ev.logits.assign(logits, logits + n_vocab);
    if (s.request.logprobs.sampled)
      ev.logprobs = position_logprobs(logits, n_vocab, token, s.request.logprobs.top_n);
    bool stopped = false;
    if (s.decoder) {
      std::string piece = s.decoder->push(token);
      if (s.stop) {
        StopMatcher::Output out = s.stop->feed(piece);
        ev.text = std::move(out.text);
        stopped = out.stopped;
      } else {
        ev.text = std::move(piece);
      }
    }
    s.channel->push(std::move(ev));
    if (stopped) {
      finish(s, FinishReason::kStop, /*flush_text=*/false);
    } else if (s.n_generated >= s.request.max_tokens) {
      finish(s, FinishReason::kLength);
    } else if (static_cast<int32_t>(s.tokens.size()) >= model_.config().n_ctx_train) {
      finish(s, FinishReason::kLength);
    }
  }

  // ---- the end of a request ------------------------------------------------
  void fail(Sequence& s, const std::string& message) {
    EngineEvent ev;
    ev.type = EngineEvent::Type::kError;
    ev.error = message;
    s.channel->push(std::move(ev));
    scheduler_.remove(s);
  }

  void finish(Sequence& s, FinishReason reason, bool flush_text = true) {
    EngineEvent ev;
    ev.type = EngineEvent::Type::kFinished;
    ev.finish = reason;
    if (flush_text && reason != FinishReason::kCancelled) {
      std::string tail = s.decoder ? s.decoder->flush() : std::string();
      if (s.stop) {
        StopMatcher::Output out = s.stop->feed(tail);
        tail = out.text + (out.stopped ? std::string() : s.stop->flush());
      }
      ev.text = std::move(tail);
    }
    if (s.n_generated > 0) s.usage.decode_ms = ms_between(s.t_first_token, Clock::now());
    offload_generated_snapshot(s);
    s.cache.commit(s.usage, cached_totals_);
    ev.usage = s.usage;
    s.channel->push(std::move(ev));
    scheduler_.remove(s);
  }

  const Model& model_;
  const Tokenizer* tokenizer_;
  TierManager* tiers_;
  EngineOptions opts_;
  Backend& backend_;
  KvPool pool_;
  BlockManager blocks_;
  std::unique_ptr<WindowBlocks> window_;  // the window space (sliding-window models), or null
  // Recurrent models with snapshot slots: the state snapshots (else null).
  std::unique_ptr<StateSnapshots> snapshots_;
  Scheduler scheduler_;
  ForwardPass fwd_;
  BatchBuilder builder_;
  // Recurrent models: each running sequence's state slot in pool_ (else null).
  std::unique_ptr<StateSlots> state_slots_;
  OnboardPolicy onboard_policy_;

  // Shared with other threads, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  std::deque<std::function<void()>> tasks_;
  std::vector<int32_t> copied_blocks_;  // records built: references to drop (copied())
  int32_t n_copy_refs_ = 0;  // blocks referenced for write-through copies, not yet released (engine thread)
  bool stopping_ = false;
  uint64_t next_id_ = 0;

  // Engine thread only.
  EngineStats counters_;              // forward passes, prefill and generated tokens
  CachedTokenTotals cached_totals_;   // the committed cache splits of all requests
  std::thread thread_;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer* tokenizer,
                                               TierManager* tiers, const EngineOptions& options) {
  const bool window_group = model.backend().supports_window_group();
  if (Status s = options.validate(model.config(), window_group); !s.ok()) return s;
  const ModelConfig& c = model.config();
  if (tiers != nullptr) {
    if (Status s = options.check_tiers(c, *tiers); !s.ok()) return s;
  }
  Result<KvPool> pool = model.backend().allocate_kv_pool(options.pool_geometry(c, window_group));
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<Engine>(new Engine(std::make_unique<Impl>(model, tokenizer, tiers, options, *pool)));
}

const EngineOptions& Engine::options() const { return impl_->options(); }
std::shared_ptr<RequestChannel> Engine::submit(Request request) { return impl_->submit(std::move(request)); }
EngineStats Engine::stats() { return impl_->call<EngineStats>([this] { return impl_->stats_now(); }); }
LookupResult Engine::lookup(const std::vector<int32_t>& prompt, const std::string& salt) {
  return impl_->call<LookupResult>([&] { return impl_->lookup_now(prompt, salt); });
}
ChainKeys Engine::chain_keys(const std::vector<int32_t>& prompt, const std::string& salt) const {
  return impl_->chain_keys(prompt, salt);
}

LookupResult Engine::lookup_all_tiers(const std::vector<int32_t>& prompt, const std::string& salt) {
  LookupResult r = lookup(prompt, salt);
  TierManager* tiers = impl_->tiers();
  if (tiers == nullptr || !tiers->has_remote() || r.remote_keys.empty()) return r;
  r.remote_tokens = tiers->lookup_remote(r.remote_keys, &r.remote_error) * impl_->options().block_size;
  return r;
}

Result<PinResult> Engine::pin(const std::vector<int32_t>& prompt, const std::string& salt, bool pin) {
  return impl_->call<Result<PinResult>>([&] { return impl_->pin_now(prompt, salt, pin); });
}
int32_t Engine::clear_cache() { return impl_->call<int32_t>([this] { return impl_->clear_now(); }); }

}  // namespace prefixd
