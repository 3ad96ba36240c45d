// Scheduler: admission, batch planning and preemption over Sequences and the
// BlockManager. See scheduler.h for the contract.
#include "engine/scheduler.h"

#include <algorithm>
#include <string>

namespace prefixd {

Scheduler::Scheduler(const SchedulerOptions& options, BlockManager& blocks, SchedulerHooks hooks,
                     WindowBlocks* window)
    : options_(options), blocks_(blocks), window_(window), hooks_(std::move(hooks)) {
  PREFIXD_CHECK(options_.block_size == blocks_.block_size(),
                "scheduler and block manager block sizes differ");
  PREFIXD_CHECK(options_.max_batch_tokens >= 1 && options_.max_running >= 1 &&
                    options_.max_prompt_logits_rows >= 1,
                "scheduler limits must be >= 1");
  PREFIXD_CHECK(static_cast<bool>(hooks_.copy_block), "scheduler needs a copy_block hook");
  PREFIXD_CHECK(!hooks_.offer || hooks_.onboard, "a scheduler with tiers needs an onboard hook");
  PREFIXD_CHECK(!options_.state_snapshots || (!options_.prefix_reuse && hooks_.resume_state),
                "state snapshots are for recurrent models (no plain prefix reuse) and need a resume_state hook");
  PREFIXD_CHECK(options_.snapshot_interval_blocks >= 0, "snapshot interval must be >= 0");
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  seq->state = SeqState::kWaiting;
  waiting_.push_back(std::move(seq));
}

// ---- admission ----------------------------------------------------------------

void Scheduler::admit(Clock::time_point now) {
  for (size_t i = 0; i < waiting_.size();) {
    if (static_cast<int32_t>(running_.size()) >= options_.max_running) return;
    if (try_admit(*waiting_[i], now)) {
      running_.push_back(std::move(waiting_[i]));
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

MatchResult Scheduler::match_prefix(const Sequence& s, bool whole_prompt) const {
  // Prompt logprobs need the logits of every prompt position, which cached
  // blocks do not have: such a sequence looks nothing up and computes all.
  const bool reuse = options_.prefix_reuse || options_.state_snapshots;
  MatchResult m = whole_prompt || !reuse ? MatchResult{} : blocks_.match(s.namespace_seed, s.hashes, s.tokens);
  // A window model resumes only where the window layers' K/V it reads are here.
  if (window_ && m.n_ready() > 0)
    m.block_ids.resize(static_cast<size_t>(
        window_->usable_prefix(m.block_ids, static_cast<int32_t>(s.tokens.size()))));
  return m;
}

int32_t Scheduler::offer_below(const Sequence& s, int32_t k, int32_t n_full, const char** path) {
  int32_t n_below = 0;
  if (hooks_.offer && k < n_full) {
    const TierOffer offer = hooks_.offer(s, k, n_full);
    if (offer.n_blocks > 0) {
      if (offer.onboard) {
        n_below = offer.n_blocks;
      } else {
        *path = "recompute";
      }
    }
  }
  return n_below;
}

void Scheduler::take_matched(Sequence& s, const std::vector<int32_t>& block_ids) {
  const int32_t k = static_cast<int32_t>(block_ids.size());
  blocks_.acquire(block_ids);
  s.block_table = block_ids;
  s.window_first = 0;
  if (window_) {
    s.window_held.assign(static_cast<size_t>(k), 0);
    const int32_t first = k > 0 ? window_first_block(s, k) : 0;
    for (int32_t i = first; i < k; ++i) hold_part(s, i);
  }
}

void Scheduler::start_loading(Sequence& s, int32_t k, int32_t n_below, int32_t onboard_first,
                              Clock::time_point now) {
  std::vector<int32_t> reserved = blocks_.allocate(n_below);
  s.block_table.insert(s.block_table.end(), reserved.begin(), reserved.end());
  if (window_) {
    s.window_held.resize(s.block_table.size(), 0);
    for (int32_t i = onboard_first; i < k + n_below; ++i) attach_part(s, i);
  }
  s.state = SeqState::kLoading;
  s.t_loading_start = now;
  hooks_.onboard(s, k, k + n_below);
}

bool Scheduler::try_admit(Sequence& s, Clock::time_point now) {
  const int32_t B = options_.block_size;
  const bool first_admission = !s.cache.admitted;
  if (first_admission) {
    s.tokens = s.request.prompt;
    s.n_prompt = static_cast<int32_t>(s.tokens.size());
    s.usage.prompt_tokens = s.n_prompt;
  }
  // Hashes of every full block of the known tokens.
  const int32_t n_full = static_cast<int32_t>(s.tokens.size()) / B;
  extend_block_hashes(s.hashes, s.tokens, B, s.namespace_seed);
  const bool whole_prompt = s.wants_prompt_logits();
  MatchResult m = match_prefix(s, whole_prompt);
  // Below the device: the chain's continuation in host RAM, on disk or in the
  // remote tier (a recurrent model's only up to a snapshot the tiers or the
  // device hold; without one, the pool's match ends at its own snapshot).
  const char* path = "none";
  int32_t n_below = 0;
  if (options_.state_snapshots && !whole_prompt) n_below = offer_state_below(s, m, &path);
  if (options_.state_snapshots && n_below == 0) cut_to_snapshot(s, m);
  if (whole_prompt) s.shared_blocks = 0;
  const int32_t k = m.n_ready();
  // In-flight coalescing: another sequence is computing our next block.
  if (k < n_full && !whole_prompt && options_.prefix_reuse) {
    auto it = inflight_.find(s.hashes[k]);
    if (it != inflight_.end() && it->second != s.id) return false;
  }
  if (!whole_prompt && options_.prefix_reuse) n_below = offer_below(s, k, n_full, &path);
  if (!whole_prompt) blocks_.count_lookup(k, n_full - k);
  // Take the matched blocks first: acquiring them takes them off the LRU,
  // which shrinks what an allocation may evict.
  take_matched(s, m.block_ids);
  // Onboarded blocks get window parts from the window before the chain's end
  // on (the earlier ones are onboarded without: no row will read them).
  const int32_t onboard_first = n_below > 0 && window_ ? std::max(k, window_first_block(s, k + n_below)) : 0;
  const int32_t onboard_parts = n_below > 0 && window_ ? k + n_below - onboard_first : 0;
  if (n_below > 0 && (!blocks_.can_allocate(n_below + 1) || (window_ && !window_->can_allocate(onboard_parts + 1))))
    n_below = 0;
  s.n_published = k;
  s.admit_order = ++admit_counter_;
  s.t_admit = now;
  for (int32_t i = k; i < n_full; ++i) inflight_.emplace(s.hashes[i], s.id);
  if (first_admission) {
    s.usage.queue_ms = ms_between(s.t_submit, now);
    stats_.prompt_tokens += s.n_prompt;
  }
  s.cache.admit(k, path);
  if (n_below > 0) {
    // Reserve pool blocks for the chain and wait in `loading` for the tiers.
    start_loading(s, k, n_below, onboard_first, now);
    return true;
  }
  start_running(s, k, /*n_onboarded=*/0);
  return true;
}

void Scheduler::onboarded(Sequence& s, int32_t n_onboarded, int32_t n_from_host,
                          int32_t n_from_remote) {
  PREFIXD_CHECK(s.state == SeqState::kLoading, "onboarded: sequence is not loading");
  const int32_t k = s.cache.device_blocks;
  int32_t v = n_onboarded;
  PREFIXD_CHECK(v >= 0 && k + v <= static_cast<int32_t>(s.block_table.size()),
                "onboarded: more blocks than were reserved");
  // Reserved blocks the tiers could not fill go back.
  int32_t n_keep = k + v;
  if (window_) {
    // Resume where the window parts the next rows read are here: short of
    // a whole onboard, those of the onboarded tail may be missing.
    n_keep = window_->usable_prefix(std::span<const int32_t>(s.block_table.data(), static_cast<size_t>(k + v)),
                                    static_cast<int32_t>(s.tokens.size()));
    PREFIXD_CHECK(n_keep >= k, "onboarded: the device hit lost its window parts");
    for (int32_t i = static_cast<int32_t>(s.block_table.size()) - 1; i >= n_keep; --i) release_block(s, i);
    s.block_table.resize(static_cast<size_t>(n_keep));
    s.window_held.resize(static_cast<size_t>(n_keep));
    for (int32_t i = n_keep > 0 ? window_first_block(s, n_keep) : 0; i < n_keep; ++i) {
      if (!s.window_held[static_cast<size_t>(i)]) hold_part(s, i);
    }
    v = n_keep - k;
  } else {
    std::vector<int32_t> unused(s.block_table.begin() + k + v, s.block_table.end());
    blocks_.release(unused);
    s.block_table.resize(static_cast<size_t>(k + v));
  }
  s.n_computed = (k + v) * options_.block_size;
  // Every onboarded block enters the index, also those a recurrent model
  // resumes short of (their K/V is exact; only the state is missing there).
  publish_full_blocks(s);
  int32_t n_device = k;
  if (options_.state_snapshots) {
    const int32_t r = resume_after_onboard(s, k + v);
    for (int32_t i = k + v - 1; i >= r; --i) release_block(s, i);
    s.block_table.resize(static_cast<size_t>(r));
    s.n_published = r;
    s.n_computed = r * options_.block_size;
    n_device = std::min(k, r);
    v = r - n_device;
  }
  s.cache.onboarded(v, n_from_host, n_from_remote);
  start_running(s, n_device, v);
}

int32_t Scheduler::offer_state_below(Sequence& s, const MatchResult& m, const char** path) {
  const int32_t last = (static_cast<int32_t>(s.tokens.size()) - 1) / options_.block_size;
  const int32_t d = m.n_ready();
  s.shared_blocks = std::min(d, std::max(last, 0));
  if (!hooks_.offer || d >= last) return 0;
  int32_t n = offer_below(s, d, last, path);
  s.shared_blocks = d + n;
  while (n > 0 && !hooks_.has_state(s, d + n)) --n;
  // Room for them and one more block even after the pool's d matched blocks
  // leave the LRU (try_admit's own check comes after they are taken, too
  // late to fall back to the pool's snapshot).
  if (n > 0 && !blocks_.can_allocate(d + n + 1)) return 0;
  return n;
}

// The longest prefix the state can be resumed at, from the onboarded chain's
// end down (the tiers may have lost the snapshot they had at admission; the
// pool's blocks before the onboarded ones may have one of their own).
int32_t Scheduler::resume_after_onboard(Sequence& s, int32_t n_blocks) {
  s.cache.state_lookup();
  int32_t r = n_blocks;
  while (r > 0 && !hooks_.resume_state(s, r)) --r;
  stats_.snapshot_hits += r > 0 ? 1 : 0;
  stats_.snapshot_misses += r == 0 ? 1 : 0;
  return r;
}

// A recurrent model resumes after k blocks only with the state there, and
// never at the known tokens' end (its last token is always computed, and a
// resume inside a block would need the state there): the longest k whose
// snapshot resume_state restores, from the longest match down.
void Scheduler::cut_to_snapshot(Sequence& s, MatchResult& m) {
  s.cache.state_lookup();
  const int32_t B = options_.block_size;
  const int32_t n_known = static_cast<int32_t>(s.tokens.size());
  int32_t k = std::min(m.n_ready(), (n_known - 1) / B);
  const bool matched = k > 0;
  while (k > 0 && !hooks_.resume_state(s, k)) --k;
  m.block_ids.resize(static_cast<size_t>(std::max(k, 0)));
  stats_.snapshot_hits += k > 0 ? 1 : 0;
  stats_.snapshot_misses += matched && k == 0 ? 1 : 0;
}

// The sequence's first n_device + n_onboarded blocks (device matched, then
// onboarded) are in its block table and published: it computes from there.
void Scheduler::start_running(Sequence& s, int32_t n_device, int32_t n_onboarded) {
  const int32_t B = options_.block_size;
  const bool prefetch = s.request.kind == RequestKind::kPrefetch;
  const int32_t n_cached_blocks = n_device + n_onboarded;
  int32_t cached = n_cached_blocks * B;
  if (!prefetch && cached >= static_cast<int32_t>(s.tokens.size())) {
    // The last token is always computed. The shared last block is copied
    // into a private one, where it is recomputed: shared blocks are never written.
    cached = static_cast<int32_t>(s.tokens.size()) - 1;
    if (can_allocate(1)) {
      int32_t shared = s.block_table[n_cached_blocks - 1];
      int32_t priv = blocks_.allocate(1).front();
      if (window_) window_->attach(priv);
      hooks_.copy_block(shared, priv);
      release_block(s, n_cached_blocks - 1);
      s.block_table[n_cached_blocks - 1] = priv;
      if (window_) s.window_held[static_cast<size_t>(n_cached_blocks) - 1] = 1;
      s.n_published = n_cached_blocks - 1;
    } else {
      // No block to copy into: recompute the whole last block instead.
      release_block(s, static_cast<int32_t>(s.block_table.size()) - 1);
      s.block_table.pop_back();
      if (window_) s.window_held.pop_back();
      s.n_published = n_cached_blocks - 1;
      cached = (n_cached_blocks - 1) * B;
    }
  }
  s.n_computed = cached;
  trim_window(s);
  s.cache.report(cached, B, s.usage);
  s.state = SeqState::kRunning;
  s.target_tokens = prefetch ? (s.n_prompt / B) * B : static_cast<int32_t>(s.tokens.size());
}

// ---- publishing -------------------------------------------------------------------

void Scheduler::advance(Sequence& s, int32_t n_tokens) {
  s.n_computed += n_tokens;
  if (s.recomputing && s.n_computed == static_cast<int32_t>(s.tokens.size())) s.recomputing = false;
  publish_full_blocks(s);
  trim_window(s);
}

void Scheduler::publish_full_blocks(Sequence& s) {
  const int32_t B = options_.block_size;
  const int32_t n_full = s.n_computed / B;
  while (s.n_published < n_full) {
    const int32_t i = s.n_published;
    if (static_cast<int32_t>(s.hashes.size()) < n_full) {
      extend_block_hashes(s.hashes, std::span<const int32_t>(s.tokens.data(), n_full * B), B,
                          s.namespace_seed);
    }
    PublishInfo info;
    info.namespace_seed = s.namespace_seed;
    info.hash = s.hashes[i];
    info.parent_hash = i == 0 ? kRootParentHash : s.hashes[i - 1];
    info.parent_block = i == 0 ? -1 : s.block_table[i - 1];
    info.tokens = std::span<const int32_t>(s.tokens.data() + i * B, B);
    PublishResult r = blocks_.publish(s.block_table[i], info);
    if (r.outcome == PublishOutcome::kDuplicate) {
      // Someone else published the same block: share theirs, drop our copy,
      // so the rest of our chain can be published under it.
      const int32_t mine = s.block_table[i];
      blocks_.acquire(std::span<const int32_t>(&r.existing_block, 1));
      if (window_ && s.window_held[static_cast<size_t>(i)]) {
        // Ours has a window part: share theirs, or give ours to the
        // published block when it has lost its own.
        if (window_->of(r.existing_block) >= 0) {
          window_->hold(r.existing_block);
          window_->release(mine);
        } else {
          window_->move(mine, r.existing_block);
        }
      }
      blocks_.release(std::span<const int32_t>(&mine, 1));
      s.block_table[i] = r.existing_block;
    }
    auto it = inflight_.find(s.hashes[i]);
    if (it != inflight_.end() && it->second == s.id) inflight_.erase(it);
    if (r.outcome == PublishOutcome::kPublished && hooks_.published) hooks_.published(s, i);
    s.n_published++;
  }
}

// ---- batch planning -----------------------------------------------------------------

StepPlan Scheduler::plan_step() {
  StepPlan plan;
  int32_t budget = options_.max_batch_tokens;
  int32_t prompt_rows_left = options_.max_prompt_logits_rows;
  for (Sequence* s : step_order()) {
    if (budget == 0) break;
    if (s->state != SeqState::kRunning) continue;  // preempted during this loop
    const int32_t remaining = s->target_tokens - s->n_computed;
    if (remaining <= 0) {
      plan.completed.push_back(s);  // prefetch already complete
      continue;
    }
    int32_t n = std::min(remaining, budget);
    const bool all_logits = s->wants_prompt_logits();
    if (all_logits) {
      if (prompt_rows_left == 0) continue;  // next pass
      n = std::min(n, prompt_rows_left);
    }
    // A snapshot boundary ends the chunk, so the state can be copied there.
    const int32_t boundary = options_.state_snapshots ? next_snapshot_boundary(*s) : 0;
    if (boundary > 0) n = std::min(n, boundary * options_.block_size - s->n_computed);
    n = grant_blocks(*s, n, plan);
    if (n <= 0) continue;
    const bool is_decode = n == 1 && s->n_generated > 0 && remaining == 1 && !s->recomputing;
    plan.chunks.push_back(ScheduledChunk{s, n, is_decode, -1, all_logits ? 0 : -1});
    if (boundary > 0 && s->n_computed + n == boundary * options_.block_size)
      plan.chunks.back().snapshot_blocks = boundary;
    if (options_.state_snapshots) mark_generated_snapshot(*s, plan.chunks.back());
    budget -= n;
    if (all_logits) prompt_rows_left -= n;
  }
  assign_logits_rows(plan);
  return plan;
}

// A chunk that ends on a block boundary among generated tokens (past the
// prompt's last resumable boundary) ends at a snapshot too: the one a
// conversation's next turn, which repeats this answer, resumes from. Its
// block's hash is computed now (the engine keys the snapshot by it before
// the block is published).
void Scheduler::mark_generated_snapshot(Sequence& s, ScheduledChunk& c) {
  const int32_t B = options_.block_size;
  const int32_t end = s.n_computed + c.n_tokens;
  if (c.snapshot_blocks > 0 || end % B != 0 || end / B <= (s.n_prompt - 1) / B) return;
  extend_block_hashes(s.hashes, std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(end)), B,
                      s.namespace_seed);
  c.snapshot_blocks = end / B;
  c.generated_snapshot = true;
}

// Boundaries: every snapshot_interval_blocks blocks, the last block boundary
// at or before each of the request's reuse positions (its `cache_control`
// breakpoints), the end of the prefix it shares with cached prompts
// (Sequence::shared_blocks: a shared system prompt's end, found by its
// second use), and the prompt's last resumable one, the last block boundary
// before its end ((n_prompt - 1) / B: its last full block, or the one before
// when the prompt ends on a boundary, as a resume never starts at the
// prompt's end). Past that, mark_generated_snapshot marks chunks that end on
// a block boundary.
int32_t Scheduler::next_snapshot_boundary(const Sequence& s) const {
  const int32_t B = options_.block_size;
  const int32_t n_full = (s.n_prompt - 1) / B;
  const int32_t after = s.n_computed / B + 1;  // the first block count past n_computed
  int32_t best = 0;
  auto consider = [&](int32_t b) {
    if (b >= after && b <= n_full && (best == 0 || b < best)) best = b;
  };
  const int32_t I = options_.snapshot_interval_blocks;
  if (I > 0) consider((after + I - 1) / I * I);
  for (int32_t pos : s.request.reuse_positions) consider(pos / B);
  consider(s.shared_blocks);
  consider(n_full);
  return best;
}

// Decode steps first (one token each), then prefill chunks, oldest first.
std::vector<Sequence*> Scheduler::step_order() const {
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
  return order;
}

int32_t Scheduler::grant_blocks(Sequence& s, int32_t n, StepPlan& plan) {
  const int32_t B = options_.block_size;
  // Blocks for the new positions; preempt newer sequences when short.
  int32_t need = (s.n_computed + n + B - 1) / B - static_cast<int32_t>(s.block_table.size());
  while (need > 0 && !can_allocate(need)) {
    Sequence* victim = preemption_victim(s, plan.chunks);
    if (victim == nullptr) break;
    preempt(*victim);
  }
  if (need > 0 && !can_allocate(need)) {
    // Shrink the chunk to the blocks we can get.
    const int32_t avail = n_allocatable();
    n = std::min(n, (static_cast<int32_t>(s.block_table.size()) + avail) * B - s.n_computed);
    if (n <= 0) {
      // Alone in the engine and still short, with no block on its way
      // back from a write-through copy: the pool (less its pins) is too
      // small for it. While copies hold blocks it waits for them. Otherwise
      // others hold blocks (loading ones cannot be preempted): it steps
      // back and is re-admitted later.
      if (plan.chunks.empty() && running_.size() == 1) {
        if (blocks_held_outside_ == 0) plan.too_big.push_back(&s);
      } else if (plan.chunks.empty()) {
        preempt(s);
      }
      return 0;
    }
    need = (s.n_computed + n + B - 1) / B - static_cast<int32_t>(s.block_table.size());
  }
  if (need > 0) {
    std::vector<int32_t> fresh = allocate(need);
    s.block_table.insert(s.block_table.end(), fresh.begin(), fresh.end());
    if (window_) s.window_held.resize(s.block_table.size(), 1);
  }
  return n;
}

// Rows of the batch's logits: a prompt-logits chunk takes one per token, a
// generating sequence whose chunk completes its target one for its last token.
void Scheduler::assign_logits_rows(StepPlan& plan) const {
  int32_t row = 0;
  for (ScheduledChunk& c : plan.chunks) {
    const bool completes = c.seq->n_computed + c.n_tokens == c.seq->target_tokens;
    if (c.all_logits_row >= 0) {
      c.all_logits_row = row;
      row += c.n_tokens;
    }
    if (completes && c.seq->request.kind == RequestKind::kGenerate)
      c.logits_row = c.all_logits_row >= 0 ? row - 1 : row++;
  }
}

// The preemption victim for `s`: the newest running sequence admitted after
// it that is not already in this pass's plan (its K/V writes are batched
// into blocks it holds; freeing them now would let others reuse them).
Sequence* Scheduler::preemption_victim(const Sequence& s,
                                       const std::vector<ScheduledChunk>& planned) const {
  Sequence* best = nullptr;
  for (const auto& r : running_) {
    if (r.get() == &s || r->state != SeqState::kRunning) continue;
    const bool is_planned = std::any_of(planned.begin(), planned.end(),
                                        [&](const ScheduledChunk& c) { return c.seq == r.get(); });
    if (is_planned) continue;
    if (r->admit_order < s.admit_order) continue;  // never preempt older work for newer
    if (!best || r->admit_order > best->admit_order) best = r.get();
  }
  return best;
}

// Frees a running sequence's blocks and queues it (first) for recomputation.
void Scheduler::preempt(Sequence& s) {
  drop_inflight(s);
  release_all(s);
  s.n_computed = 0;
  s.n_published = 0;
  s.recomputing = s.n_generated > 0;
  s.state = SeqState::kWaiting;
  stats_.preemptions++;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i].get() == &s) {
      waiting_.push_front(std::move(running_[i]));
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

void Scheduler::drop_inflight(const Sequence& s) {
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    it = it->second == s.id ? inflight_.erase(it) : std::next(it);
  }
}

// ---- lifecycle ------------------------------------------------------------------------

void Scheduler::remove(Sequence& s) {
  drop_inflight(s);
  release_all(s);
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

Sequence* Scheduler::find_loading(uint64_t id) const {
  for (const auto& r : running_) {
    if (r->id == id && r->state == SeqState::kLoading) return r.get();
  }
  return nullptr;
}

Status Scheduler::check_invariants() const {
  std::vector<int32_t> refs(static_cast<size_t>(blocks_.n_blocks()), 0);
  std::vector<int32_t> window_refs(refs.size(), 0);
  auto count = [&](const Sequence& seq) {
    for (size_t i = 0; i < seq.block_table.size(); ++i) {
      refs[static_cast<size_t>(seq.block_table[i])]++;
      if (i < seq.window_held.size() && seq.window_held[i]) window_refs[static_cast<size_t>(seq.block_table[i])]++;
    }
  };
  for (const auto& r : running_) count(*r);
  for (const auto& w : waiting_) count(*w);
  if (Status st = blocks_.check_invariants(&refs); !st.ok()) return st;
  return window_ ? window_->check_invariants(&window_refs) : Status();
}

// ---- the window space -------------------------------------------------------------------

bool Scheduler::can_allocate(int32_t n) const {
  return blocks_.can_allocate(n) && (window_ == nullptr || window_->can_allocate(n));
}

int32_t Scheduler::n_allocatable() const {
  const int32_t n = blocks_.n_allocatable();
  return window_ ? std::min(n, window_->n_allocatable()) : n;
}

std::vector<int32_t> Scheduler::allocate(int32_t n) {
  std::vector<int32_t> ids = blocks_.allocate(n);
  if (window_) {
    for (int32_t id : ids) window_->attach(id);
  }
  return ids;
}

void Scheduler::release_block(Sequence& s, int32_t i) {
  const int32_t id = s.block_table[static_cast<size_t>(i)];
  if (window_ && s.window_held[static_cast<size_t>(i)]) {
    window_->release(id);
    s.window_held[static_cast<size_t>(i)] = 0;
  }
  blocks_.release(std::span<const int32_t>(&id, 1));
}

void Scheduler::hold_part(Sequence& s, int32_t i) {
  window_->hold(s.block_table[static_cast<size_t>(i)]);
  s.window_held[static_cast<size_t>(i)] = 1;
}

void Scheduler::attach_part(Sequence& s, int32_t i) {
  window_->attach(s.block_table[static_cast<size_t>(i)]);
  s.window_held[static_cast<size_t>(i)] = 1;
}

int32_t Scheduler::window_first_block(const Sequence& s, int32_t n_blocks) const {
  return window_->first_block(window_->resume_position(n_blocks, static_cast<int32_t>(s.tokens.size())));
}

void Scheduler::release_all(Sequence& s) {
  if (window_) {
    // Last to first, as BlockManager::release does with a list.
    for (int32_t i = static_cast<int32_t>(s.block_table.size()) - 1; i >= 0; --i) release_block(s, i);
  } else {
    blocks_.release(s.block_table);
  }
  s.block_table.clear();
  s.window_held.clear();
  s.window_first = 0;
}

void Scheduler::trim_window(Sequence& s) {
  if (!window_) return;
  // One block further back than the next rows read: a later prompt that ends
  // where this sequence's known tokens do resumes a block earlier (its last
  // token is recomputed), and its hit needs those parts too.
  const int32_t first = std::min(window_->first_block(std::max(0, s.n_computed - options_.block_size)),
                                 static_cast<int32_t>(s.block_table.size()));
  for (; s.window_first < first; ++s.window_first) {
    const size_t i = static_cast<size_t>(s.window_first);
    if (s.window_held[i]) {
      window_->release(s.block_table[i], /*passed=*/true);
      s.window_held[i] = 0;
    }
  }
}

std::vector<int32_t> Scheduler::window_table(const Sequence& s) const {
  std::vector<int32_t> table;
  if (!window_) return table;
  table.assign(s.block_table.size(), 0);
  const size_t first = static_cast<size_t>(window_->first_block(s.n_computed));
  for (size_t i = 0; i < s.block_table.size(); ++i) {
    if (s.window_held[i]) table[i] = window_->of(s.block_table[i]);
    PREFIXD_CHECK(i < first || table[i] > 0, "a block within a sequence's window has no window part");
  }
  return table;
}

}  // namespace prefixd
