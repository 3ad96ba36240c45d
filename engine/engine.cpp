// The engine thread: admission with prefix matching, chunked-prefill +
// decode batches, sampling, publishing filled blocks, preemption, and the
// request channels that carry results back to callers.
#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "engine/batch_builder.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/block_manager.h"
#include "engine/model/forward.h"
#include "engine/sequence.h"
#include "engine/text/tokenizer.h"
#include "storage/restore_policy.h"
#include "storage/tier_manager.h"

namespace prefixd {

// Record dtype codes are the DType values (storage does not include kernels/).
static_assert(static_cast<uint8_t>(DType::F32) == kKvDtypeF32 && static_cast<uint8_t>(DType::F16) == kKvDtypeF16 &&
              static_cast<uint8_t>(DType::BF16) == kKvDtypeBF16);

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "none";
}

Status EngineOptions::validate(const ModelConfig& model) const {
  if (block_size < 1 || block_size > 1024) {
    return Status::error("block size " + std::to_string(block_size) + " is out of range (1..1024)");
  }
  if (max_batch_tokens < 1) return Status::error("max batch tokens must be >= 1");
  if (max_running < 1) return Status::error("max running sequences must be >= 1");
  const KvGeometry g = pool_geometry(model);
  const size_t n_blocks = kv_pool_bytes / g.block_bytes();
  if (n_blocks < 2) {
    return Status::error("KV pool of " + std::to_string(kv_pool_bytes) + " bytes holds " +
                         std::to_string(n_blocks) + " blocks of " + std::to_string(g.block_bytes()) +
                         " bytes; at least 2 are needed");
  }
  return Status();
}

KvGeometry EngineOptions::pool_geometry(const ModelConfig& model) const {
  KvGeometry g;
  g.n_layers = model.n_layers;
  g.block_size = block_size;
  g.n_kv_heads = model.n_kv_heads;
  g.head_dim = model.head_dim;
  g.dtype = kv_dtype;
  g.n_blocks = static_cast<int32_t>(std::min<size_t>(kv_pool_bytes / g.block_bytes(), 1u << 30));
  return g;
}

BlockGeometry EngineOptions::record_geometry(const ModelConfig& model) const {
  BlockGeometry g;
  g.block_size = block_size;
  g.n_layers = model.n_layers;
  g.n_kv_heads = model.n_kv_heads;
  g.head_dim = model.head_dim;
  g.dtype_code = static_cast<uint8_t>(kv_dtype);  // the same codes (storage/block_record.h)
  return g;
}

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One sequence's share of a forward pass.
struct Planned {
  Sequence* seq;
  int32_t n_tokens;
  bool is_decode;
  int32_t logits_row;  // index into the pass's logits, or -1
};

}  // namespace

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
        fwd_(model, opts.max_batch_tokens, opts.max_running),
        builder_(opts.block_size),
        restore_(RestorePolicyOptions{tiers ? tiers->record_bytes() : 1}) {
    if (tiers_) {
      blocks_.set_on_evict([this](int32_t block_id, const BlockMeta& meta) {
        offload_block(block_id, meta.seed, meta.hash, meta.parent_hash, meta.tokens, OffloadReason::kEvicted);
      });
      tiers_->set_completion_notifier([this] { cv_.notify_all(); });
    }
    thread_ = std::thread([this] { thread_main(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    backend_.free_kv_pool(pool_);
  }

  const Model& model() const { return model_; }
  const EngineOptions& options() const { return opts_; }

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
    s.pool_blocks_used = b.blocks_used;
    s.pool_blocks_cached = b.blocks_cached;
    s.pool_blocks_pinned = b.blocks_pinned;
    s.pool_used_bytes = static_cast<int64_t>(b.blocks_used + b.blocks_cached) *
                        static_cast<int64_t>(pool_.geom.block_bytes());
    s.device_hits = b.hits;
    s.device_misses = b.misses;
    s.device_evictions = b.evictions;
    s.running = 0;
    for (const auto& r : running_) s.running += r->state == SeqState::kRunning ? 1 : 0;
    s.waiting = static_cast<int32_t>(waiting_.size() + running_.size()) - s.running;
    return s;
  }

  LookupResult lookup_now(const std::vector<int32_t>& prompt, const std::string& salt) {
    LookupResult r;
    r.prompt_tokens = static_cast<int32_t>(prompt.size());
    const uint64_t seed = namespace_seed_for(salt);
    std::vector<BlockHash> hashes = hash_prompt(prompt, seed);
    MatchResult m = blocks_.match(seed, hashes, prompt);
    r.device_tokens = m.n_ready() * opts_.block_size;
    if (tiers_ && m.n_ready() < static_cast<int32_t>(hashes.size())) {
      ChainLookup below = tiers_->lookup_chain(chain_query(seed, hashes, prompt, m.n_ready(),
                                                           static_cast<int32_t>(hashes.size())));
      r.host_tokens = below.n_host * opts_.block_size;
      r.disk_tokens = below.n_disk * opts_.block_size;
    }
    return r;
  }

  Result<PinResult> pin_now(const std::vector<int32_t>& prompt, const std::string& salt, bool pin) {
    const uint64_t seed = namespace_seed_for(salt);
    std::vector<BlockHash> hashes = hash_prompt(prompt, seed);
    MatchResult m = blocks_.match(seed, hashes, prompt);
    PinResult r;
    Status s = pin ? blocks_.pin(m.block_ids) : blocks_.unpin(m.block_ids);
    if (!s.ok()) return s;
    r.pinned_blocks = m.n_ready();
    r.pinned_tokens = r.pinned_blocks * opts_.block_size;
    return r;
  }

  int32_t clear_now() {
    int32_t n = blocks_.clear();
    if (tiers_) (void)tiers_->clear();
    return n;
  }

 private:
  // ---- thread loop --------------------------------------------------------
  void thread_main() {
    for (;;) {
      std::deque<std::function<void()>> tasks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stopping_ || !incoming_.empty() || !tasks_.empty() || !waiting_.empty() || !running_.empty();
        });
        if (stopping_) break;
        while (!incoming_.empty()) {
          waiting_.push_back(std::move(incoming_.front()));
          incoming_.pop_front();
        }
        tasks.swap(tasks_);
      }
      for (auto& t : tasks) t();
      if (!step()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // Shutdown: everything still queued or running ends as cancelled.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : incoming_) waiting_.push_back(std::move(s));
    incoming_.clear();
    for (auto& t : tasks_) t();
    tasks_.clear();
    while (!running_.empty()) finish(*running_.back(), FinishReason::kCancelled);
    while (!waiting_.empty()) finish(*waiting_.back(), FinishReason::kCancelled);
  }

  // One scheduling step; returns false when nothing could run.
  bool step() {
    reap_cancelled();
    finish_onboarding();
    admit_waiting();
    std::vector<Planned> plan = plan_batch();
    if (plan.empty()) {
      if (opts_.check_invariants_each_step) check_invariants();
      return false;
    }
    std::vector<float> logits;
    const auto t0 = Clock::now();
    fwd_.run(builder_.batch(), pool_, &logits);
    const double pass_s = std::chrono::duration<double>(Clock::now() - t0).count();
    counters_.forward_passes++;
    counters_.forward_tokens += builder_.n_tokens();
    int64_t prefill_rows = 0;
    for (const Planned& p : plan) prefill_rows += p.is_decode ? 0 : p.n_tokens;
    if (prefill_rows == builder_.n_tokens()) restore_.observe_prefill(prefill_rows, pass_s);
    for (Planned& p : plan) complete(p, logits);
    if (opts_.check_invariants_each_step) check_invariants();
    return true;
  }

  // Ref counts equal the references held by live block tables, and the block
  // manager's own structures agree (index, LRU, free list).
  void check_invariants() const {
    std::vector<int32_t> refs(static_cast<size_t>(pool_.geom.n_blocks), 0);
    for (const auto& r : running_) {
      for (int32_t id : r->block_table) refs[static_cast<size_t>(id)]++;
    }
    for (const auto& w : waiting_) {
      for (int32_t id : w->block_table) refs[static_cast<size_t>(id)]++;
    }
    Status s = blocks_.check_invariants(&refs);
    if (!s.ok()) {
      std::fprintf(stderr, "engine invariant failed: %s\n", s.message().c_str());
      std::abort();
    }
  }

  void reap_cancelled() {
    for (size_t i = 0; i < running_.size();) {
      if (running_[i]->channel->cancelled()) {
        finish(*running_[i], FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
    for (size_t i = 0; i < waiting_.size();) {
      if (waiting_[i]->channel->cancelled()) {
        finish(*waiting_[i], FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
  }

  // ---- admission ----------------------------------------------------------
  uint64_t namespace_seed_for(const std::string& salt) const {
    return namespace_seed(Hash128{opts_.model_fingerprint_lo, opts_.model_fingerprint_hi},
                          static_cast<uint8_t>(opts_.kv_dtype), opts_.block_size, opts_.deployment_secret,
                          salt);
  }

  std::vector<BlockHash> hash_prompt(const std::vector<int32_t>& tokens, uint64_t seed) const {
    return hash_blocks(tokens, opts_.block_size, seed);
  }

  void admit_waiting() {
    for (size_t i = 0; i < waiting_.size();) {
      if (static_cast<int32_t>(running_.size()) >= opts_.max_running) return;
      Sequence& s = *waiting_[i];
      if (try_admit(s)) {
        running_.push_back(std::move(waiting_[i]));
        waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  bool try_admit(Sequence& s) {
    const int32_t B = opts_.block_size;
    if (!s.first_admission_done) {
      s.tokens = s.request.prompt;
      s.n_prompt = static_cast<int32_t>(s.tokens.size());
      s.seed = namespace_seed_for(s.request.cache_salt);
      s.sampler.emplace(s.request.sampling);
      if (tokenizer_) s.decoder = std::make_unique<StreamDecoder>(*tokenizer_);
      if (!s.request.stop.empty()) s.stop = std::make_unique<StopMatcher>(s.request.stop);
      s.usage.prompt_tokens = s.n_prompt;
    }
    // Hashes of every full block of the known tokens.
    const int32_t n_full = static_cast<int32_t>(s.tokens.size()) / B;
    extend_block_hashes(s.hashes, s.tokens, B, s.seed);
    MatchResult m = blocks_.match(s.seed, s.hashes, s.tokens);
    const int32_t k = m.n_ready();
    // In-flight coalescing: another sequence is computing our next block.
    if (k < n_full) {
      auto it = inflight_.find(s.hashes[k]);
      if (it != inflight_.end() && it->second != s.id) return false;
    }
    // Below the device: the chain's continuation in host RAM or on disk.
    int32_t n_below = 0, n_host = 0, n_disk = 0;
    s.adm_restore_path = "none";
    if (tiers_ && k < n_full) {
      ChainLookup below = tiers_->lookup_chain(chain_query(s.seed, s.hashes, s.tokens, k, n_full));
      if (below.n_blocks > 0) {
        RestoreDecision d = restore_.choose_chain(below.n_host, below.n_disk,
                                                  static_cast<int64_t>(below.n_blocks) * B);
        if (opts_.restore_mode == EngineOptions::RestoreMode::kAlways) d.choice = RestoreChoice::kRestore;
        if (opts_.restore_mode == EngineOptions::RestoreMode::kNever) d.choice = RestoreChoice::kRecompute;
        if (d.choice == RestoreChoice::kRestore) {
          n_below = below.n_blocks;
          n_host = below.n_host;
          n_disk = below.n_disk;
        } else {
          s.adm_restore_path = "recompute";
        }
      }
    }
    blocks_.count_lookup(k, n_full - k);
    // Take the matched blocks first: acquiring them takes them off the LRU,
    // which shrinks what an allocation may evict.
    blocks_.acquire(m.block_ids);
    if (n_below > 0 && !blocks_.can_allocate(n_below + 1)) n_below = 0;
    s.block_table = m.block_ids;
    s.n_published = k;
    s.admit_order = ++admit_counter_;
    s.t_admit = Clock::now();
    for (int32_t i = k; i < n_full; ++i) inflight_.emplace(s.hashes[i], s.id);
    if (!s.first_admission_done) {
      s.first_admission_done = true;
      s.usage.queue_ms = ms_between(s.t_submit, s.t_admit);
      counters_.prompt_tokens += s.n_prompt;
    }
    if (n_below > 0) {
      // Reserve pool blocks for the chain and wait in `loading` for the tiers.
      std::vector<int32_t> reserved = blocks_.allocate(n_below);
      s.block_table.insert(s.block_table.end(), reserved.begin(), reserved.end());
      s.n_device_matched = k;
      s.adm_host_tokens = n_host * B;
      s.adm_disk_tokens = n_disk * B;
      s.state = SeqState::kLoading;
      s.t_loading_start = Clock::now();
      tiers_->request_onboard(s.id, chain_query(s.seed, s.hashes, s.tokens, k, k + n_below));
      return true;
    }
    start_running(s, k, /*n_restored=*/0);
    return true;
  }

  // The sequence's first n_cached blocks (device matched, then restored) are
  // in its block table and published: it computes from there.
  void start_running(Sequence& s, int32_t n_device, int32_t n_restored) {
    const int32_t B = opts_.block_size;
    const bool prefetch = s.request.kind == RequestKind::kPrefetch;
    const int32_t n_cached_blocks = n_device + n_restored;
    int32_t cached = n_cached_blocks * B;
    if (!prefetch && cached >= static_cast<int32_t>(s.tokens.size())) {
      // The last token is always computed. The shared last block is copied
      // into a private one, where it is recomputed: shared blocks are never written.
      cached = static_cast<int32_t>(s.tokens.size()) - 1;
      if (blocks_.can_allocate(1)) {
        int32_t shared = s.block_table[n_cached_blocks - 1];
        int32_t priv = blocks_.allocate(1).front();
        backend_.copy_block(pool_, shared, priv);
        blocks_.release(std::span<const int32_t>(&shared, 1));
        s.block_table[n_cached_blocks - 1] = priv;
        s.n_published = n_cached_blocks - 1;
      } else {
        // No block to copy into: recompute the whole last block instead.
        int32_t shared = s.block_table.back();
        blocks_.release(std::span<const int32_t>(&shared, 1));
        s.block_table.pop_back();
        s.n_published = n_cached_blocks - 1;
        cached = (n_cached_blocks - 1) * B;
      }
    }
    s.n_computed = cached;
    if (!s.cache_usage_committed) {
      // Usage reports the latest admission (an earlier one may have been preempted).
      const int32_t device = std::min(cached, n_device * B);
      const int32_t below = cached - device;
      if (n_restored == 0) s.adm_host_tokens = s.adm_disk_tokens = 0;
      // Restored tokens keep their host/disk split (the last block may be recomputed).
      const int32_t host = std::min(s.adm_host_tokens, below);
      s.usage.device_tokens = device;
      s.usage.host_tokens = host;
      s.usage.disk_tokens = below - host;
      s.usage.cached_tokens = cached;
      s.usage.restore_path = n_restored > 0 ? "restore" : s.adm_restore_path;
    }
    s.state = SeqState::kRunning;
    s.target_tokens = prefetch ? (s.n_prompt / B) * B : static_cast<int32_t>(s.tokens.size());
  }

  ChainQuery chain_query(uint64_t seed, const std::vector<BlockHash>& hashes,
                         const std::vector<int32_t>& tokens, int32_t from, int32_t to) const {
    const int32_t B = opts_.block_size;
    ChainQuery q;
    q.namespace_id = seed;
    q.first_parent = from == 0 ? kRootParentHash : hashes[from - 1];
    q.hashes.assign(hashes.begin() + from, hashes.begin() + to);
    q.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(from) * B,
                       tokens.begin() + static_cast<std::ptrdiff_t>(to) * B);
    return q;
  }

  // Copies onboarded records into their reserved pool blocks and publishes them.
  void finish_onboarding() {
    if (!tiers_) return;
    for (OnboardCompletion& c : tiers_->poll_completions()) {
      Sequence* s = nullptr;
      for (auto& r : running_) {
        if (r->id == c.request_id && r->state == SeqState::kLoading) s = r.get();
      }
      if (s == nullptr) continue;  // cancelled meanwhile; its blocks are already released
      const int32_t B = opts_.block_size;
      const int32_t k = s->n_device_matched;
      const int32_t v = static_cast<int32_t>(c.records.size());
      for (int32_t j = 0; j < v; ++j) {
        // The payload is the record's tail (records from the tiers are checked).
        const RecordBuffer& rec = *c.records[j];
        backend_.write_block(pool_, s->block_table[k + j],
                             rec.data() + rec.size() - tiers_->geometry().payload_bytes());
      }
      // Reserved blocks the tiers could not fill go back.
      std::vector<int32_t> unused(s->block_table.begin() + k + v, s->block_table.end());
      blocks_.release(unused);
      s->block_table.resize(k + v);
      s->n_computed = (k + v) * B;
      const int32_t hosts = std::min(c.n_from_host, v);
      s->adm_host_tokens = hosts * B;
      s->adm_disk_tokens = (v - hosts) * B;
      publish_full_blocks(*s);
      s->usage.restore_ms = ms_between(s->t_loading_start, Clock::now());
      if (c.host_bytes > 0) restore_.observe_restore(StorageTier::kHost, c.host_bytes, c.host_seconds);
      if (c.disk_bytes > 0) restore_.observe_restore(StorageTier::kDisk, c.disk_bytes, c.disk_seconds);
      start_running(*s, k, v);
    }
  }

  // Sends a pool block down to the host (and disk) tier as a record.
  void offload_block(int32_t block_id, uint64_t seed, const BlockHash& hash, const BlockHash& parent,
                     std::span<const int32_t> tokens, OffloadReason reason) {
    std::shared_ptr<RecordBuffer> rec = tiers_->start_record(seed, hash, parent, tokens);
    if (!rec) return;
    backend_.read_block(pool_, block_id, block_record_payload(*rec));
    seal_block_record(*rec);
    tiers_->offload(BlockKey{seed, hash}, std::move(rec), reason);
  }

  // ---- batching -----------------------------------------------------------
  std::vector<Planned> plan_batch() {
    const int32_t B = opts_.block_size;
    builder_.clear();
    std::vector<Planned> plan;
    int32_t budget = opts_.max_batch_tokens;
    // Decode steps first (one token each), then prefill chunks, oldest first.
    std::vector<Sequence*> order;
    for (auto& r : running_) {
      if (r->state == SeqState::kRunning) order.push_back(r.get());
    }
    std::stable_sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) {
      const bool da = a->n_generated > 0 && a->target_tokens - a->n_computed == 1;
      const bool db = b->n_generated > 0 && b->target_tokens - b->n_computed == 1;
      if (da != db) return da;
      return a->admit_order < b->admit_order;
    });
    std::vector<Sequence*> finished_now;
    for (Sequence* s : order) {
      if (budget == 0) break;
      if (s->state != SeqState::kRunning) continue;  // preempted during this loop
      const int32_t remaining = s->target_tokens - s->n_computed;
      if (remaining <= 0) {
        finished_now.push_back(s);  // prefetch already complete
        continue;
      }
      int32_t n = std::min(remaining, budget);
      // Blocks for the new positions; preempt newer sequences when short.
      int32_t need = (s->n_computed + n + B - 1) / B - static_cast<int32_t>(s->block_table.size());
      while (need > 0 && !blocks_.can_allocate(need)) {
        Sequence* victim = newest_running_other_than(s, plan);
        if (victim == nullptr) break;
        preempt(*victim);
      }
      if (need > 0 && !blocks_.can_allocate(need)) {
        // Shrink the chunk to the blocks we can get.
        const int32_t avail = blocks_.n_allocatable();
        n = std::min(n, (static_cast<int32_t>(s->block_table.size()) + avail) * B - s->n_computed);
        if (n <= 0) {
          // Alone in the engine and still short: the pool (less its pins) is
          // too small for it. Otherwise others hold blocks (loading ones
          // cannot be preempted): it steps back and is re-admitted later.
          if (plan.empty() && running_.size() == 1) {
            fail(*s, "the request needs more KV blocks than the pool holds (" +
                         std::to_string(pool_.geom.n_blocks) + " blocks of " + std::to_string(B) +
                         " tokens)");
          } else if (plan.empty()) {
            preempt(*s);
          }
          continue;
        }
        need = (s->n_computed + n + B - 1) / B - static_cast<int32_t>(s->block_table.size());
      }
      if (need > 0) {
        std::vector<int32_t> fresh = allocate_blocks(need);
        s->block_table.insert(s->block_table.end(), fresh.begin(), fresh.end());
      }
      const bool completes = s->n_computed + n == s->target_tokens;
      const bool wants_logits = completes && s->request.kind == RequestKind::kGenerate;
      const bool is_decode = n == 1 && s->n_generated > 0 && remaining == 1 && !s->recomputing;
      builder_.add(std::span<const int32_t>(s->tokens.data() + s->n_computed, n), s->n_computed,
                   s->block_table, wants_logits ? LogitsWanted::kLast : LogitsWanted::kNone);
      plan.push_back(Planned{s, n, is_decode, -1});
      budget -= n;
    }
    int32_t row = 0;
    for (Planned& p : plan) {
      const bool completes = p.seq->n_computed + p.n_tokens == p.seq->target_tokens;
      if (completes && p.seq->request.kind == RequestKind::kGenerate) p.logits_row = row++;
    }
    for (Sequence* s : finished_now) finish(*s, FinishReason::kStop);
    return plan;
  }

  std::vector<int32_t> allocate_blocks(int32_t n) { return blocks_.allocate(n); }

  // The preemption victim for `s`: the newest running sequence admitted after
  // it that is not already in this pass's plan (its K/V writes are batched
  // into blocks it holds; freeing them now would let others reuse them).
  Sequence* newest_running_other_than(const Sequence* s, const std::vector<Planned>& plan) {
    Sequence* best = nullptr;
    for (auto& r : running_) {
      if (r.get() == s || r->state != SeqState::kRunning) continue;
      const bool planned =
          std::any_of(plan.begin(), plan.end(), [&](const Planned& p) { return p.seq == r.get(); });
      if (planned) continue;
      if (r->admit_order < s->admit_order) continue;  // never preempt older work for newer
      if (!best || r->admit_order > best->admit_order) best = r.get();
    }
    return best;
  }

  // Frees a running sequence's blocks and queues it (first) for recomputation.
  void preempt(Sequence& s) {
    drop_inflight(s);
    blocks_.release(s.block_table);
    s.block_table.clear();
    s.n_computed = 0;
    s.n_published = 0;
    s.recomputing = s.n_generated > 0;
    s.state = SeqState::kWaiting;
    counters_.preemptions++;
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].get() == &s) {
        waiting_.push_front(std::move(running_[i]));
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }

  void drop_inflight(const Sequence& s) {
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      it = it->second == s.id ? inflight_.erase(it) : std::next(it);
    }
  }

  // ---- after the forward pass ----------------------------------------------
  void complete(const Planned& p, const std::vector<float>& logits) {
    Sequence& s = *p.seq;
    if (s.state != SeqState::kRunning) return;
    s.n_computed += p.n_tokens;
    if (!p.is_decode) {  // decode tokens are counted when sampled
      s.usage.prefill_tokens += p.n_tokens;
      counters_.prefill_tokens += p.n_tokens;
    }
    if (s.recomputing && s.n_computed == static_cast<int32_t>(s.tokens.size())) s.recomputing = false;
    publish_full_blocks(s);
    if (s.request.kind == RequestKind::kPrefetch) {
      if (s.n_computed >= s.target_tokens) finish(s, FinishReason::kStop);
      return;
    }
    if (p.logits_row < 0) return;
    const int32_t n_vocab = model_.config().n_vocab;
    const float* row = logits.data() + static_cast<size_t>(p.logits_row) * n_vocab;
    sample_and_emit(s, row, n_vocab);
  }

  void publish_full_blocks(Sequence& s) {
    const int32_t B = opts_.block_size;
    const int32_t n_full = s.n_computed / B;
    while (s.n_published < n_full) {
      const int32_t i = s.n_published;
      if (static_cast<int32_t>(s.hashes.size()) < n_full) {
        extend_block_hashes(s.hashes, std::span<const int32_t>(s.tokens.data(), n_full * B), B, s.seed);
      }
      PublishInfo info;
      info.seed = s.seed;
      info.hash = s.hashes[i];
      info.parent_hash = i == 0 ? kRootParentHash : s.hashes[i - 1];
      info.parent_block = i == 0 ? -1 : s.block_table[i - 1];
      info.tokens = std::span<const int32_t>(s.tokens.data() + i * B, B);
      PublishResult r = blocks_.publish(s.block_table[i], info, /*ready=*/true);
      if (r.outcome == PublishOutcome::kDuplicate && r.existing_ready) {
        // Someone else published the same block: share theirs, drop our copy,
        // so the rest of our chain can be published under it.
        const int32_t mine = s.block_table[i];
        blocks_.acquire(std::span<const int32_t>(&r.existing_block, 1));
        blocks_.release(std::span<const int32_t>(&mine, 1));
        s.block_table[i] = r.existing_block;
      }
      auto it = inflight_.find(s.hashes[i]);
      if (it != inflight_.end() && it->second == s.id) inflight_.erase(it);
      if (tiers_ && tiers_->write_policy() == WritePolicy::kWriteThrough && r.outcome == PublishOutcome::kPublished) {
        offload_block(s.block_table[i], s.seed, info.hash, info.parent_hash, info.tokens,
                      OffloadReason::kPublished);
      }
      s.n_published++;
    }
  }

  void sample_and_emit(Sequence& s, const float* logits, int32_t n_vocab) {
    const auto now = Clock::now();
    const int32_t token = s.sampler->sample(logits, n_vocab, s.tokens);
    if (s.n_generated == 0) {
      commit_cache_usage(s);
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

  // Adds the request's cache split to the engine's counters, once.
  void commit_cache_usage(Sequence& s) {
    if (s.cache_usage_committed || !s.first_admission_done) return;
    s.cache_usage_committed = true;
    counters_.cached_tokens_device += s.usage.device_tokens;
    counters_.cached_tokens_host += s.usage.host_tokens;
    counters_.cached_tokens_disk += s.usage.disk_tokens;
  }

  void fail(Sequence& s, const std::string& message) {
    EngineEvent ev;
    ev.type = EngineEvent::Type::kError;
    ev.error = message;
    s.channel->push(std::move(ev));
    remove(s);
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
    commit_cache_usage(s);
    ev.usage = s.usage;
    s.channel->push(std::move(ev));
    remove(s);
  }

  // Releases the sequence's blocks and forgets it.
  void remove(Sequence& s) {
    drop_inflight(s);
    blocks_.release(s.block_table);
    s.block_table.clear();
    s.state = SeqState::kFinished;
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].get() == &s) {
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
    for (size_t i = 0; i < waiting_.size(); ++i) {
      if (waiting_[i].get() == &s) {
        waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }

  const Model& model_;
  const Tokenizer* tokenizer_;
  TierManager* tiers_;
  EngineOptions opts_;
  Backend& backend_;
  KvPool pool_;
  BlockManager blocks_;
  ForwardPass fwd_;
  BatchBuilder builder_;
  RestorePolicy restore_;

  // Shared with other threads, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  uint64_t next_id_ = 0;

  // Engine thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::unordered_map<BlockHash, uint64_t, BlockHashHasher> inflight_;  // block being computed -> sequence id
  uint64_t admit_counter_ = 0;
  EngineStats counters_;
  std::thread thread_;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer* tokenizer,
                                               TierManager* tiers, const EngineOptions& options) {
  if (Status s = options.validate(model.config()); !s.ok()) return s;
  const ModelConfig& c = model.config();
  if (tiers != nullptr && !(tiers->geometry() == options.record_geometry(c))) {
    return Status::error("the tiers' record geometry differs from the KV pool's (block size, layers, "
                         "KV heads, head dim or KV dtype): their records would not fit its blocks");
  }
  Result<KvPool> pool = model.backend().allocate_kv_pool(options.pool_geometry(c));
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<Engine>(new Engine(std::make_unique<Impl>(model, tokenizer, tiers, options, *pool)));
}

const ModelConfig& Engine::model_config() const { return impl_->model().config(); }
const EngineOptions& Engine::options() const { return impl_->options(); }
std::shared_ptr<RequestChannel> Engine::submit(Request request) { return impl_->submit(std::move(request)); }
EngineStats Engine::stats() { return impl_->call<EngineStats>([this] { return impl_->stats_now(); }); }
LookupResult Engine::lookup(const std::vector<int32_t>& prompt, const std::string& salt) {
  return impl_->call<LookupResult>([&] { return impl_->lookup_now(prompt, salt); });
}
Result<PinResult> Engine::pin(const std::vector<int32_t>& prompt, const std::string& salt, bool pin) {
  return impl_->call<Result<PinResult>>([&] { return impl_->pin_now(prompt, salt, pin); });
}
int32_t Engine::clear_cache() { return impl_->call<int32_t>([this] { return impl_->clear_now(); }); }

}  // namespace prefixd
