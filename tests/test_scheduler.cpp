// Tests for the Scheduler without a model: admission order and prefix
// matching, in-flight coalescing, the tiers' offer (loading, then the
// host/disk split of the usage), batch planning within max_batch_tokens
// (decode steps first, then the oldest prefill chunks), preemption of the
// newest sequence when the pool runs out, and a sequence too big for the pool.
// The harness plays the engine: it "computes" each planned chunk (advance)
// and appends a made-up sampled token where the plan wants logits.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/kv/block_manager.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

using namespace prefixd;

namespace {

constexpr int32_t kB = 4;  // tokens per block

std::vector<int32_t> tokens(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = start + i;
  return t;
}

struct Harness {
  BlockManager blocks;
  std::vector<std::array<int32_t, 2>> copies;     // copy_block(src, dst) calls
  std::vector<std::array<int64_t, 3>> onboards;   // onboard(seq id, from, to) calls
  std::vector<std::array<int64_t, 2>> published;  // published(seq id, block index) calls
  std::function<TierOffer(const Sequence&, int32_t, int32_t)> offer;  // the tiers, when set
  Scheduler sched;
  CachedTokenTotals totals;
  Clock::time_point now{};
  uint64_t next_id = 0;

  Harness(int32_t n_blocks, int32_t max_batch_tokens, int32_t max_running, bool with_tiers = false)
      : blocks(BlockManagerOptions{n_blocks, kB, 4}),
        sched(SchedulerOptions{kB, max_batch_tokens, max_running}, blocks, hooks(with_tiers)) {}

  SchedulerHooks hooks(bool with_tiers) {
    SchedulerHooks h;
    h.copy_block = [this](int32_t src, int32_t dst) { copies.push_back({src, dst}); };
    h.published = [this](const Sequence& s, int32_t i) { published.push_back({int64_t(s.id), i}); };
    if (with_tiers) {
      h.offer = [this](const Sequence& s, int32_t from, int32_t to) { return offer(s, from, to); };
      h.onboard = [this](const Sequence& s, int32_t from, int32_t to) {
        onboards.push_back({int64_t(s.id), from, to});
      };
    }
    return h;
  }

  Sequence* submit(std::vector<int32_t> prompt, int32_t max_tokens = 100,
                   RequestKind kind = RequestKind::kGenerate) {
    auto s = std::make_unique<Sequence>();
    s->id = ++next_id;
    s->request.prompt = std::move(prompt);
    s->request.max_tokens = max_tokens;
    s->request.kind = kind;
    s->namespace_seed = 7;
    s->t_submit = now;
    Sequence* p = s.get();
    sched.add(std::move(s));
    return p;
  }

  // What the engine does after the forward pass: advance the sequence, and
  // where it wanted logits append a "sampled" token (or finish it).
  void complete(const ScheduledChunk& c) {
    Sequence& s = *c.seq;
    sched.advance(s, c.n_tokens);
    if (s.request.kind == RequestKind::kPrefetch) {
      if (s.n_computed >= s.target_tokens) sched.remove(s);
      return;
    }
    if (c.logits_row < 0) return;
    if (s.n_generated == 0) s.cache.commit(s.usage, totals);
    s.tokens.push_back(1000 + static_cast<int32_t>(s.id) * 100 + s.n_generated);
    s.n_generated++;
    s.target_tokens = static_cast<int32_t>(s.tokens.size());
    if (s.n_generated >= s.request.max_tokens) sched.remove(s);
  }

  // Admits, plans and completes one step; returns the plan as
  // "id:n_tokens" per chunk, with "d" for a decode step and "@row" for its
  // logits row, e.g. "1:1d@0 2:5@1".
  std::string step() {
    sched.admit(now);
    StepPlan plan = sched.plan_step();
    REQUIRE(plan.too_big.empty());
    for (Sequence* s : plan.completed) sched.remove(*s);
    std::string out;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!out.empty()) out += " ";
      out +=
          std::to_string(c.seq->id) + ":" + std::to_string(c.n_tokens) + (c.is_decode ? "d" : "");
      if (c.logits_row >= 0) out += "@" + std::to_string(c.logits_row);
    }
    for (const ScheduledChunk& c : plan.chunks) complete(c);
    const Status st = sched.check_invariants();
    INFO(st.message());
    REQUIRE(st.ok());
    return out;
  }

  std::vector<uint64_t> running_ids() const {
    std::vector<uint64_t> ids;
    for (const auto& s : sched.running()) ids.push_back(s->id);
    return ids;
  }
  std::vector<uint64_t> waiting_ids() const {
    std::vector<uint64_t> ids;
    for (const auto& s : sched.waiting()) ids.push_back(s->id);
    return ids;
  }
};

}  // namespace

TEST_CASE("admission is first come, first served up to max_running; the rest wait in order") {
  Harness h(32, 64, 2);
  Sequence* a = h.submit(tokens(10, 0));
  Sequence* b = h.submit(tokens(10, 100));
  Sequence* c = h.submit(tokens(10, 200));
  h.now += std::chrono::milliseconds(5);
  h.sched.admit(h.now);
  CHECK(h.running_ids() == std::vector<uint64_t>{1, 2});
  CHECK(h.waiting_ids() == std::vector<uint64_t>{3});
  CHECK(a->admit_order == 1);
  CHECK(b->admit_order == 2);
  CHECK(a->state == SeqState::kRunning);
  CHECK(c->state == SeqState::kWaiting);
  CHECK(a->n_computed == 0);
  CHECK(a->target_tokens == 10);
  CHECK(a->usage.prompt_tokens == 10);
  CHECK(a->usage.queue_ms == 5.0);
  CHECK(h.sched.stats().prompt_tokens == 20);
  // A place frees up: the next in line is admitted.
  h.sched.remove(*a);
  h.now += std::chrono::milliseconds(2);
  h.sched.admit(h.now);
  CHECK(h.running_ids() == std::vector<uint64_t>{2, 3});
  CHECK(h.waiting_ids().empty());
  CHECK(c->admit_order == 3);
  CHECK(c->usage.queue_ms == 7.0);
  CHECK(h.sched.stats().prompt_tokens == 30);
  CHECK(h.sched.check_invariants().ok());
}

TEST_CASE("a prompt whose prefix is in the pool starts after its matched blocks") {
  Harness h(32, 64, 4);
  h.submit(tokens(12, 0), /*max_tokens=*/1);  // 3 full blocks
  CHECK(h.step() == "1:12@0");                // computed, published, finished
  CHECK(h.published == std::vector<std::array<int64_t, 2>>{{1, 0}, {1, 1}, {1, 2}});
  CHECK(h.blocks.stats().blocks_cached == 3);

  std::vector<int32_t> longer = tokens(8, 0);  // the first 2 blocks, then 5 new tokens
  for (int32_t t : tokens(5, 50)) longer.push_back(t);
  Sequence* b = h.submit(longer, 1);
  h.sched.admit(h.now);
  CHECK(b->n_computed == 8);
  CHECK(b->block_table == std::vector<int32_t>{0, 1});  // the first sequence's blocks
  CHECK(b->n_published == 2);
  CHECK(b->usage.device_tokens == 8);
  CHECK(b->usage.cached_tokens == 8);
  CHECK(b->usage.host_tokens == 0);
  CHECK(b->usage.onboard_path == "none");
  CHECK(h.step() == "2:5@0");
  CHECK(h.blocks.stats().hits == 2);
  CHECK(h.blocks.stats().misses == 3 + 1);  // the first prompt's 3 blocks, then block 2 of this one
  CHECK(h.totals.device == 8);

  // The whole prompt cached: the last block is copied into a private one
  // where the last token is recomputed (shared blocks are never written).
  Sequence* c = h.submit(tokens(12, 0), 1);
  h.sched.admit(h.now);
  CHECK(c->n_computed == 11);
  CHECK(c->usage.cached_tokens == 11);
  CHECK(c->usage.device_tokens == 11);
  REQUIRE(h.copies.size() == 1);
  CHECK(h.copies[0][0] == 2);                  // the shared last block
  CHECK(c->block_table[2] == h.copies[0][1]);  // its private copy
  CHECK(c->block_table[2] != 2);
  CHECK(c->n_published == 2);
  CHECK(h.step() == "3:1@0");
}

TEST_CASE("a sequence waits while another computes its next block, and then shares it") {
  Harness h(32, 4, 4);  // one block per step
  Sequence* a = h.submit(tokens(12, 0), 1);
  std::vector<int32_t> same_and_more = tokens(12, 0);
  same_and_more.push_back(99);
  Sequence* b = h.submit(same_and_more, 1);
  Sequence* c = h.submit(tokens(6, 300), 1);  // unrelated: may pass the waiting one
  h.sched.admit(h.now);
  CHECK(h.running_ids() == std::vector<uint64_t>{1, 3});
  CHECK(h.waiting_ids() == std::vector<uint64_t>{2});
  CHECK(a->admit_order == 1);
  CHECK(c->admit_order == 2);
  CHECK(h.step() == "1:4");
  // Block 0 is published; block 1 is still being computed by the first sequence.
  h.sched.admit(h.now);
  CHECK(h.waiting_ids() == std::vector<uint64_t>{2});
  CHECK(h.step() == "1:4");
  CHECK(h.step() == "1:4@0");  // all 3 blocks published; the first sequence finishes
  h.sched.admit(h.now);
  CHECK(h.waiting_ids().empty());
  CHECK(b->n_computed == 12);
  CHECK(b->usage.device_tokens == 12);
  CHECK(b->admit_order == 3);
  CHECK(h.step() == "3:4");          // the oldest prefill first: the unrelated one
  CHECK(h.step() == "3:2@0 2:1@1");  // then the one that shared all 3 blocks: its last token
  CHECK(h.sched.running().empty());
  CHECK(h.blocks.stats().publish_duplicates == 0);  // nothing was computed twice
}

TEST_CASE("a batch is decode steps first, then the oldest prefill chunks, within the budget") {
  Harness h(64, 6, 8);
  h.submit(tokens(2, 0));
  CHECK(h.step() == "1:2@0");  // prefill, then its first token: it decodes from now on
  h.submit(tokens(10, 100));
  h.submit(tokens(10, 200));
  CHECK(h.step() == "1:1d@0 2:5");         // decode, then the oldest prefill takes the rest
  CHECK(h.step() == "1:1d@0 2:5@1");       // its prompt completes: it samples too
  CHECK(h.step() == "1:1d@0 2:1d@1 3:4");  // two decodes (oldest first), then the next prefill
  CHECK(h.step() == "1:1d@0 2:1d@1 3:4");
  CHECK(h.step() == "1:1d@0 2:1d@1 3:2@2");
  CHECK(h.step() == "1:1d@0 2:1d@1 3:1d@2");
}

TEST_CASE("a newer decoder goes before an older prefill; onboarded blocks report host and disk") {
  Harness h(32, 6, 4, /*with_tiers=*/true);
  h.offer = [](const Sequence& s, int32_t from, int32_t to) {
    CHECK(from == 0);
    CHECK(to == 3);
    return s.id == 1 ? TierOffer{2, true} : TierOffer{};
  };
  Sequence* a = h.submit(tokens(13, 0));  // 3 full blocks; the tiers hold the first 2
  Sequence* d = h.submit(tokens(2, 500));
  h.now += std::chrono::milliseconds(1);
  h.sched.admit(h.now);
  CHECK(a->state == SeqState::kLoading);
  CHECK(a->block_table.size() == 2);  // reserved for the onboarded blocks
  CHECK(a->t_loading_start == h.now);
  CHECK(h.onboards == std::vector<std::array<int64_t, 3>>{{1, 0, 2}});
  CHECK(h.sched.find_loading(1) == a);
  CHECK(h.sched.find_loading(2) == nullptr);
  CHECK(d->state == SeqState::kRunning);
  CHECK(h.step() == "2:2@0");  // the loading one is not planned
  // The tiers answer: both blocks, the first from host RAM, the second from disk.
  h.sched.onboarded(*a, 2, 1, 0);
  CHECK(a->state == SeqState::kRunning);
  CHECK(a->n_computed == 8);
  CHECK(a->n_published == 2);
  CHECK(h.published == std::vector<std::array<int64_t, 2>>{{1, 0}, {1, 1}});
  CHECK(a->usage.cached_tokens == 8);
  CHECK(a->usage.device_tokens == 0);
  CHECK(a->usage.host_tokens == 4);
  CHECK(a->usage.disk_tokens == 4);
  CHECK(a->usage.onboard_path == "restore");
  CHECK(h.step() == "2:1d@0 1:5@1");  // decode first, although the decoder is newer
  CHECK(h.totals.device == 0);
  CHECK(h.totals.host == 4);
  CHECK(h.totals.disk == 4);
}

TEST_CASE("tiers that fill only part of the reserved blocks, and a choice to recompute") {
  Harness h(32, 64, 4, /*with_tiers=*/true);
  h.offer = [](const Sequence& s, int32_t, int32_t) {
    return s.id == 1 ? TierOffer{3, true} : TierOffer{3, false};
  };
  Sequence* a = h.submit(tokens(14, 0));
  h.sched.admit(h.now);
  REQUIRE(a->state == SeqState::kLoading);
  CHECK(a->block_table.size() == 3);
  CHECK(h.blocks.stats().blocks_referenced == 3);
  h.sched.onboarded(*a, 1, 0, 0);  // one block, from disk; the other two reserved blocks go back
  CHECK(a->block_table.size() == 1);
  CHECK(h.blocks.stats().blocks_referenced == 1);
  CHECK(a->usage.disk_tokens == 4);
  CHECK(a->usage.host_tokens == 0);
  CHECK(a->usage.cached_tokens == 4);
  CHECK(h.step() == "1:10@0");

  Sequence* b = h.submit(tokens(14, 100));
  h.sched.admit(h.now);
  CHECK(b->state == SeqState::kRunning);  // offered, but recomputing was chosen
  CHECK(b->usage.cached_tokens == 0);
  CHECK(b->usage.onboard_path == "recompute");
  CHECK(h.onboards.size() == 1);
}

TEST_CASE("when the pool runs out, the newest sequence is preempted and recomputed later") {
  Harness h(6, 16, 4);  // 6 blocks of 4 tokens
  Sequence* a = h.submit(tokens(8, 0));
  Sequence* b = h.submit(tokens(8, 100));
  CHECK(h.step() == "1:8@0 2:8@1");    // 2 blocks each
  CHECK(h.step() == "1:1d@0 2:1d@1");  // position 8: a third block each; the pool is full
  CHECK(h.blocks.stats().blocks_free == 0);
  CHECK(h.step() == "1:1d@0 2:1d@1");
  CHECK(h.step() == "1:1d@0 2:1d@1");
  CHECK(h.step() == "1:1d@0 2:1d@1");  // position 11: the third blocks fill and are published
  CHECK(a->block_table == std::vector<int32_t>{0, 1, 4});
  CHECK(b->block_table == std::vector<int32_t>{2, 3, 5});
  CHECK(h.sched.stats().preemptions == 0);
  // Position 12 needs a fourth block for the older sequence: the newer one is
  // preempted, its blocks stay cached, and the oldest cached one (its last) is reused.
  CHECK(h.step() == "1:1d@0");
  CHECK(h.sched.stats().preemptions == 1);
  CHECK(h.running_ids() == std::vector<uint64_t>{1});
  CHECK(h.waiting_ids() == std::vector<uint64_t>{2});
  CHECK(b->state == SeqState::kWaiting);
  CHECK(b->block_table.empty());
  CHECK(b->n_computed == 0);
  CHECK(b->recomputing);
  CHECK(b->n_generated == 5);
  CHECK(a->block_table == std::vector<int32_t>{0, 1, 4, 5});
  CHECK(h.blocks.stats().evictions == 1);
  // Re-admitted at once (a free place): it finds its first two blocks still
  // cached and must recompute the rest of its 13 known tokens, but the pool
  // is full and the older sequence is never preempted for it: it waits.
  CHECK(h.step() == "1:1d@0");
  CHECK(b->state == SeqState::kRunning);
  CHECK(b->admit_order == 3);
  CHECK(b->n_computed == 8);
  CHECK(b->block_table == std::vector<int32_t>{2, 3});
  CHECK(b->usage.device_tokens == 0);  // usage keeps the admission that produced its first token
  // The older one finishes; the newer recomputes its known tokens in one
  // chunk (not a decode step) and samples its next token from them.
  h.sched.remove(*a);
  CHECK(h.step() == "2:5@0");
  CHECK_FALSE(b->recomputing);
  CHECK(b->n_generated == 6);
  CHECK(h.step() == "2:1d@0");
}

TEST_CASE("a sequence alone that needs more blocks than the pool holds is reported too big") {
  Harness h(2, 64, 4);  // 8 tokens of pool
  Sequence* a = h.submit(tokens(12, 0));
  h.sched.admit(h.now);
  StepPlan first = h.sched.plan_step();
  REQUIRE(first.chunks.size() == 1);
  CHECK(first.chunks[0].n_tokens == 8);  // shrunk to the blocks it could get
  CHECK(first.chunks[0].logits_row == -1);
  h.complete(first.chunks[0]);
  StepPlan second = h.sched.plan_step();
  CHECK(second.chunks.empty());
  CHECK(second.too_big == std::vector<Sequence*>{a});
  h.sched.remove(*a);
  CHECK(h.blocks.stats().blocks_referenced == 0);
  CHECK(h.sched.check_invariants().ok());
}

TEST_CASE("a sequence alone and short of blocks waits while blocks are held outside sequences") {
  Harness h(3, 64, 4);  // 12 tokens of pool
  // A block referenced outside any sequence, as a write-through copy holds one.
  const std::vector<int32_t> held = h.blocks.allocate(1);
  Sequence* a = h.submit(tokens(12, 0));
  h.sched.admit(h.now);
  h.sched.set_blocks_held_outside(1);
  StepPlan first = h.sched.plan_step();
  REQUIRE(first.chunks.size() == 1);
  CHECK(first.chunks[0].n_tokens == 8);  // the two blocks it could get
  h.complete(first.chunks[0]);
  StepPlan waiting = h.sched.plan_step();
  CHECK(waiting.chunks.empty());
  CHECK(waiting.too_big.empty());  // the held block comes back: it waits
  CHECK(a->state == SeqState::kRunning);
  h.blocks.release(held);
  h.sched.set_blocks_held_outside(0);
  StepPlan after = h.sched.plan_step();
  REQUIRE(after.chunks.size() == 1);
  CHECK(after.chunks[0].n_tokens == 4);
  CHECK(after.too_big.empty());
  h.complete(after.chunks[0]);
  h.sched.remove(*a);
  CHECK(h.sched.check_invariants().ok());
}

TEST_CASE("a prefetch computes full blocks only; one already cached completes at once") {
  Harness h(32, 64, 4);
  h.submit(tokens(10, 0), 16, RequestKind::kPrefetch);
  CHECK(h.step() == "1:8");  // 2 full blocks; no logits
  CHECK(h.sched.running().empty());
  CHECK(h.blocks.stats().blocks_cached == 2);
  Sequence* again = h.submit(tokens(9, 0), 16, RequestKind::kPrefetch);
  h.sched.admit(h.now);
  CHECK(again->n_computed == 8);
  StepPlan plan = h.sched.plan_step();
  CHECK(plan.chunks.empty());
  CHECK(plan.completed == std::vector<Sequence*>{again});
}

TEST_CASE("the cache split is committed once, and only for an admitted sequence") {
  Usage u;
  CacheSplit never_admitted;
  CachedTokenTotals totals;
  never_admitted.commit(u, totals);
  CHECK(totals.device == 0);
  CHECK_FALSE(never_admitted.committed);

  CacheSplit split;
  split.admit(2, "none");
  split.onboarded(3, 2, 0);
  split.report(19, 4, u);  // 2 device blocks, 3 onboarded (2 from host), last token recomputed
  CHECK(u.device_tokens == 8);
  CHECK(u.host_tokens == 8);
  CHECK(u.disk_tokens == 3);
  CHECK(u.cached_tokens == 19);
  CHECK(u.onboard_path == "restore");
  split.commit(u, totals);
  split.commit(u, totals);
  CHECK(totals.device == 8);
  CHECK(totals.host == 8);
  CHECK(totals.disk == 3);
  // Once committed, a later admission (after a preemption) leaves the usage as it was.
  split.admit(0, "none");
  split.report(0, 4, u);
  CHECK(u.cached_tokens == 19);
}

TEST_CASE("the cache split takes recomputed tokens off the remote tail first") {
  Usage u;
  CacheSplit split;
  split.admit(1, "none");
  split.onboarded(5, 1, 2);  // 1 host, 2 disk, 2 remote blocks of 4 tokens
  split.report(4 + 20 - 1, 4, u);  // the last token is recomputed
  CHECK(u.device_tokens == 4);
  CHECK(u.host_tokens == 4);
  CHECK(u.disk_tokens == 8);
  CHECK(u.remote_tokens == 7);
  CacheSplit whole_block;
  whole_block.admit(0, "none");
  whole_block.onboarded(3, 0, 1);  // 2 disk, 1 remote block
  Usage w;
  whole_block.report(8, 4, w);  // the last block is recomputed whole
  CHECK(w.disk_tokens == 8);
  CHECK(w.remote_tokens == 0);
  CachedTokenTotals totals;
  split.commit(u, totals);
  CHECK(totals.remote == 7);
}
