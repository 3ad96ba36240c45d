// Tests for the state snapshots of recurrent models without a model: the
// snapshot LRU (engine/state_snapshots.h: free slots first, then the least
// recently used one; a lookup refreshes; drop() frees a slot), and the
// scheduler's side (engine/scheduler.h, SchedulerOptions::state_snapshots):
// prefill chunks end at the snapshot boundaries (every interval, the
// request's reuse positions, and the last block boundary before the
// prompt's end, and the end of the prefix it shares with cached prompts), a
// sequence resumes from the longest matched prefix whose
// state resume_state restores, never at its prompt's end, and a chain below
// the pool is onboarded up to a snapshot and resumed at the longest
// onboarded prefix that has one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <set>
#include <unordered_set>
#include <vector>

#include "engine/kv/block_manager.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/state_snapshots.h"

using namespace prefixd;

namespace {

constexpr int32_t kB = 4;  // tokens per block

SnapshotKey key(uint64_t n) { return SnapshotKey{7, Hash128{n, n * 3}}; }

std::vector<int32_t> tokens(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = start + i;
  return t;
}

// The engine's part: snapshots stored by (seed, hash of their last block),
// "taken" after every chunk that ends at a boundary. With tiers, `below`
// holds blocks by chain hash and `below_state` snapshots by key; the offer is
// every leading block of the range found there, and an onboard brings
// `n_arrive` of them (fewer than asked: a remote miss or a record that failed
// its check).
struct Harness {
  BlockManager blocks;
  std::unordered_set<SnapshotKey, SnapshotKeyHasher> stored;
  std::vector<int32_t> resumed;  // resume_state successes: block counts
  std::unordered_set<Hash128, Hash128Hasher> below;
  std::unordered_set<SnapshotKey, SnapshotKeyHasher> below_state;
  std::unordered_set<Hash128, Hash128Hasher> hashes_seen;  // of every prompt run
  std::vector<std::array<int32_t, 2>> onboards;            // [from, to) asked
  int32_t n_arrive = 1 << 30;
  Scheduler sched;
  uint64_t next_id = 0;

  Harness(int32_t max_batch_tokens, int32_t interval, bool with_tiers = false)
      : blocks(BlockManagerOptions{64, kB, 4}),
        sched(SchedulerOptions{kB, max_batch_tokens, 4, 64, false, true, interval}, blocks, hooks(with_tiers)) {}

  bool has_state(const Sequence& s, int32_t n) const {
    const SnapshotKey k{s.namespace_seed, s.hashes[static_cast<size_t>(n) - 1]};
    return stored.count(k) > 0 || below_state.count(k) > 0;
  }

  SchedulerHooks hooks(bool with_tiers) {
    SchedulerHooks h;
    h.copy_block = [](int32_t, int32_t) {};
    h.resume_state = [this](Sequence& s, int32_t n) {
      if (!has_state(s, n)) return false;
      resumed.push_back(n);
      // As the engine does: where the snapshot came from.
      const SnapshotKey k{s.namespace_seed, s.hashes[static_cast<size_t>(n) - 1]};
      s.cache.state_resumed(n, stored.count(k) > 0 ? "device" : "tiers");
      return true;
    };
    if (!with_tiers) return h;
    h.has_state = [this](const Sequence& s, int32_t n) { return has_state(s, n); };
    h.offer = [this](const Sequence& s, int32_t from, int32_t to) {
      TierOffer o;
      while (from + o.n_blocks < to && below.count(s.hashes[static_cast<size_t>(from + o.n_blocks)])) ++o.n_blocks;
      o.onboard = true;
      return o;
    };
    h.onboard = [this](const Sequence&, int32_t from, int32_t to) { onboards.push_back({from, to}); };
    return h;
  }

  // Everything the device holds goes below, then the device forgets it.
  void evict_all_below() {
    for (const SnapshotKey& k : stored) below_state.insert(k);
    stored.clear();
    for (const Hash128& h : hashes_seen) below.insert(h);
    blocks.clear();
  }

  // Runs a prompt to its first sampled token; returns each chunk's
  // (n_computed before, n_tokens, snapshot_blocks).
  // An onboard is answered with min(n_arrive, asked) host blocks; *usage
  // (when given) gets the sequence's usage.
  std::vector<std::array<int32_t, 3>> run(std::vector<int32_t> prompt, std::vector<int32_t> reuse_positions = {},
                                          Usage* usage = nullptr) {
    auto s = std::make_unique<Sequence>();
    s->id = ++next_id;
    s->request.prompt = std::move(prompt);
    s->request.reuse_positions = std::move(reuse_positions);
    s->request.max_tokens = 1;
    s->namespace_seed = 7;
    Sequence* p = s.get();
    sched.add(std::move(s));
    sched.admit(Clock::time_point{});
    if (p->state == SeqState::kLoading) {
      const auto [from, to] = onboards.back();
      const int32_t v = std::min(n_arrive, to - from);
      sched.onboarded(*p, v, v, 0);
    }
    std::vector<std::array<int32_t, 3>> chunks;
    for (int guard = 0; guard < 1000; ++guard) {
      StepPlan plan = sched.plan_step();
      REQUIRE(plan.chunks.size() == 1);
      const ScheduledChunk c = plan.chunks[0];
      chunks.push_back({p->n_computed, c.n_tokens, c.snapshot_blocks});
      if (c.snapshot_blocks > 0) stored.insert(SnapshotKey{p->namespace_seed, p->hashes[static_cast<size_t>(c.snapshot_blocks) - 1]});
      sched.advance(*p, c.n_tokens);
      if (c.logits_row >= 0) break;
    }
    for (const Hash128& h : p->hashes) hashes_seen.insert(h);
    if (usage) *usage = p->usage;
    sched.remove(*p);
    return chunks;
  }
};

}  // namespace

TEST_CASE("snapshot LRU: free slots first, then the least recently used; find refreshes; drop frees") {
  StateSnapshots s(/*first_slot=*/4, /*n_slots=*/2);
  CHECK(s.find(key(1)) == -1);
  const int32_t a = s.store(key(1));
  const int32_t b = s.store(key(2));
  CHECK(std::set<int32_t>{a, b} == std::set<int32_t>{4, 5});
  CHECK(s.store(key(1)) == -1);  // already stored: refreshed, nothing to copy
  CHECK(s.find(key(2)) == b);    // key 1 is now the least recently used
  const int32_t c = s.store(key(3));
  CHECK(c == a);
  CHECK(s.counters.evictions == 1);
  CHECK(s.find(key(1)) == -1);
  CHECK(s.find(key(2)) == b);
  s.drop(key(2));
  CHECK(s.counters.dropped == 1);
  CHECK(s.n_stored() == 1);
  CHECK(s.store(key(4)) == b);  // the dropped one's slot, no eviction
  CHECK(s.counters.evictions == 1);
  CHECK(s.counters.taken == 4);
  StateSnapshots none(4, 0);
  CHECK(none.store(key(1)) == -1);
}

TEST_CASE("scheduler: prefill chunks end at snapshot boundaries; a hit resumes from the longest snapshotted prefix") {
  Harness h(/*max_batch_tokens=*/64, /*interval=*/3);
  // 30 tokens: 7 full blocks; boundaries at 3 and 6 (interval) and 7 ((30-1)/4).
  const std::vector<int32_t> p = tokens(30, 100);
  Usage u;
  auto chunks = h.run(p, {}, &u);
  CHECK(u.has_state);
  CHECK(u.state_resumed_tokens == 0);
  CHECK(u.state_from == "none");
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[0] == std::array<int32_t, 3>{0, 12, 3});
  CHECK(chunks[1] == std::array<int32_t, 3>{12, 12, 6});
  CHECK(chunks[2] == std::array<int32_t, 3>{24, 4, 7});
  CHECK(chunks[3] == std::array<int32_t, 3>{28, 2, 0});
  CHECK(h.stored.size() == 3);

  // The same prompt: 7 blocks matched and resumable, the state at 7.
  chunks = h.run(p, {}, &u);
  CHECK(h.resumed.back() == 7);
  CHECK(u.cached_tokens == 28);
  CHECK(u.state_resumed_tokens == 28);
  CHECK(u.state_from == "device");
  CHECK(chunks.front()[0] == 28);
  CHECK(h.sched.stats().snapshot_hits == 1);

  // Sharing 5 blocks and 2 tokens: resumes at 3, the longest with a snapshot.
  std::vector<int32_t> q(p.begin(), p.begin() + 22);
  for (int32_t t : tokens(10, 900)) q.push_back(t);
  chunks = h.run(q);
  CHECK(h.resumed.back() == 3);
  CHECK(chunks.front()[0] == 12);
  // Its own boundaries from there: 5 (the 5 blocks it shares with p), 6
  // (interval) and 7 ((32-1)/4).
  CHECK(chunks.front() == std::array<int32_t, 3>{12, 8, 5});
  CHECK(chunks[1] == std::array<int32_t, 3>{20, 4, 6});
  CHECK(chunks[2] == std::array<int32_t, 3>{24, 4, 7});
  // A third prompt sharing those 5 blocks resumes at 5.
  std::vector<int32_t> q3(p.begin(), p.begin() + 22);
  for (int32_t t : tokens(10, 700)) q3.push_back(t);
  chunks = h.run(q3);
  CHECK(h.resumed.back() == 5);
  CHECK(chunks.front()[0] == 20);

  // A prompt ending exactly on a block boundary (8 blocks) resumes at 7.
  std::vector<int32_t> r(p.begin(), p.begin() + 28);
  for (int32_t t : tokens(4, 500)) r.push_back(t);
  h.run(r);
  chunks = h.run(r);
  CHECK(h.resumed.back() == 7);
  CHECK(chunks.front()[0] == 28);

  // Shorter than a block: one chunk, no boundary, no hit.
  const int64_t hits = h.sched.stats().snapshot_hits;
  chunks = h.run(tokens(3, 7));
  CHECK(chunks.size() == 1);
  CHECK(chunks[0] == std::array<int32_t, 3>{0, 3, 0});
  chunks = h.run(tokens(3, 7));
  CHECK(h.sched.stats().snapshot_hits == hits);
}

TEST_CASE("scheduler: a request's reuse positions (cache breakpoints) are snapshot boundaries") {
  Harness h(/*max_batch_tokens=*/64, /*interval=*/0);
  // 30 tokens marked at 10 and 21: boundaries at 2 and 5 (the block
  // boundaries at or before them) and 7 ((30-1)/4).
  const std::vector<int32_t> p = tokens(30, 100);
  auto chunks = h.run(p, {10, 21});
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[0] == std::array<int32_t, 3>{0, 8, 2});
  CHECK(chunks[1] == std::array<int32_t, 3>{8, 12, 5});
  CHECK(chunks[2] == std::array<int32_t, 3>{20, 8, 7});
  CHECK(chunks[3] == std::array<int32_t, 3>{28, 2, 0});
  // The marked 21 tokens with another question: resumes at 5 blocks.
  std::vector<int32_t> q(p.begin(), p.begin() + 21);
  for (int32_t t : tokens(9, 900)) q.push_back(t);
  chunks = h.run(q);
  CHECK(h.resumed.back() == 5);
  CHECK(chunks.front()[0] == 20);
}

TEST_CASE("scheduler: matched blocks without a snapshot are a counted miss, computed from 0") {
  Harness h(64, /*interval=*/0);
  const std::vector<int32_t> p = tokens(30, 100);
  h.run(p);  // snapshot at 7 only
  std::vector<int32_t> q(p.begin(), p.begin() + 20);  // 5 blocks shared, none snapshotted
  for (int32_t t : tokens(10, 900)) q.push_back(t);
  Usage u;
  auto chunks = h.run(q, {}, &u);
  CHECK(chunks.front()[0] == 0);
  CHECK(u.state_resumed_tokens == 0);
  CHECK(u.state_from == "none");
  CHECK(h.sched.stats().snapshot_misses == 1);
  CHECK(h.sched.stats().snapshot_hits == 0);
}


TEST_CASE("scheduler: a recurrent chain below the pool is onboarded up to a snapshot and resumed there") {
  Harness h(/*max_batch_tokens=*/64, /*interval=*/3, /*with_tiers=*/true);
  const std::vector<int32_t> p = tokens(30, 100);  // boundaries at 3, 6 and 7
  Usage u;
  h.run(p, {}, &u);
  CHECK(u.cached_tokens == 0);
  h.evict_all_below();

  // Its 7 blocks and the snapshot at 7 below: onboarded, resumed at 7.
  auto chunks = h.run(p, {}, &u);
  REQUIRE(h.onboards.size() == 1);
  CHECK(h.onboards[0] == std::array<int32_t, 2>{0, 7});
  CHECK(h.resumed.back() == 7);
  CHECK(chunks.front()[0] == 28);
  CHECK(u.host_tokens == 28);
  CHECK(u.device_tokens == 0);
  CHECK(u.state_resumed_tokens == 28);
  CHECK(u.state_from == "tiers");
  CHECK(h.sched.stats().snapshot_hits == 1);

  // Only 5 of the 7 arrive: the longest onboarded prefix with a snapshot is 3.
  h.evict_all_below();
  h.n_arrive = 5;
  chunks = h.run(p, {}, &u);
  CHECK(h.onboards.back() == std::array<int32_t, 2>{0, 7});
  CHECK(h.resumed.back() == 3);
  CHECK(chunks.front()[0] == 12);
  CHECK(u.host_tokens == 12);
  CHECK(u.state_resumed_tokens == 12);
  CHECK(u.state_from == "tiers");

  // The tiers hold the blocks but no snapshot: nothing is onboarded, and the
  // prompt is computed from 0.
  h.n_arrive = 1 << 30;
  h.evict_all_below();
  h.below_state.clear();
  const size_t n_onboards = h.onboards.size();
  chunks = h.run(p, {}, &u);
  CHECK(h.onboards.size() == n_onboards);
  CHECK(chunks.front()[0] == 0);
  CHECK(u.cached_tokens == 0);
  CHECK(u.state_resumed_tokens == 0);
  CHECK(u.state_from == "none");
}
