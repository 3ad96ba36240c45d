// Tests for WindowBlocks (the window space of a sliding-window model's pool):
// parts follow their logical blocks through attach / hold / release, only a
// published block's unreferenced part is kept (LRU) and evicted oldest first
// with a callback, pins keep parts, forget / move / clear, and the longest
// usable prefix of a chain given which parts are present.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <vector>

#include "engine/kv/block_hash.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/window_blocks.h"

using namespace prefixd;

namespace {

constexpr int32_t kB = 4;  // block size

BlockManager make_manager(int32_t n_blocks) {
  BlockManagerOptions o;
  o.n_blocks = n_blocks;
  o.block_size = kB;
  o.max_pinned_blocks = 4;
  return BlockManager(o);
}

// Allocates and publishes a chain of `n` blocks for tokens starting at
// `first_token`; returns the block table (each ref 1 in the manager).
std::vector<int32_t> publish_chain(BlockManager& bm, int32_t n, int32_t first_token) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < n * kB; ++i) tokens.push_back(first_token + i);
  const auto hashes = hash_blocks(tokens, kB, 1);
  std::vector<int32_t> table = bm.allocate(n);
  for (int32_t i = 0; i < n; ++i) {
    PublishInfo info;
    info.namespace_seed = 1;
    info.hash = hashes[static_cast<size_t>(i)];
    info.parent_hash = i == 0 ? kRootParentHash : hashes[static_cast<size_t>(i) - 1];
    info.parent_block = i == 0 ? -1 : table[static_cast<size_t>(i) - 1];
    info.tokens = std::span<const int32_t>(tokens.data() + i * kB, kB);
    REQUIRE(bm.publish(table[static_cast<size_t>(i)], info).outcome == PublishOutcome::kPublished);
  }
  return table;
}

}  // namespace

TEST_CASE("a published block's part is cached when released, a private one's freed") {
  BlockManager bm = make_manager(8);
  WindowBlocks w(4, 8, bm);  // window blocks 1..3 usable
  CHECK(w.n_allocatable() == 3);
  std::vector<int32_t> chain = publish_chain(bm, 2, 100);
  std::vector<int32_t> priv = bm.allocate(1);
  for (int32_t id : chain) w.attach(id);
  w.attach(priv[0]);
  CHECK(w.of(chain[0]) == 1);
  CHECK(w.of(chain[1]) == 2);
  CHECK(w.of(priv[0]) == 3);
  CHECK(w.n_allocatable() == 0);
  CHECK(w.stats().blocks_referenced_or_pinned == 3);
  w.release(priv[0]);
  CHECK(w.of(priv[0]) == -1);  // not published: freed
  w.release(chain[1]);
  w.release(chain[0]);
  CHECK(w.of(chain[0]) == 1);  // published: kept, cached
  CHECK(w.stats().blocks_cached == 2);
  CHECK(w.stats().blocks_free == 1);
  CHECK(w.n_allocatable() == 3);
  CHECK(w.check_invariants().ok());
  // hold takes a cached part out of the LRU.
  w.hold(chain[1]);
  CHECK(w.stats().blocks_cached == 1);
  std::vector<int32_t> refs(8, 0);
  refs[static_cast<size_t>(chain[1])] = 1;
  CHECK(w.check_invariants(&refs).ok());
  refs[static_cast<size_t>(chain[1])] = 2;
  CHECK_FALSE(w.check_invariants(&refs).ok());
}

TEST_CASE("cached parts are evicted oldest first, with the logical block named") {
  BlockManager bm = make_manager(8);
  std::vector<int32_t> evicted;
  WindowBlocks w(3, 8, bm, [&](int32_t logical) { evicted.push_back(logical); });  // 2 usable
  std::vector<int32_t> chain = publish_chain(bm, 2, 100);
  w.attach(chain[0]);
  w.attach(chain[1]);
  w.release(chain[0]);  // older in the LRU
  w.release(chain[1]);
  std::vector<int32_t> fresh = bm.allocate(1);
  w.attach(fresh[0]);
  CHECK(evicted == std::vector<int32_t>{chain[0]});
  CHECK(w.of(chain[0]) == -1);
  CHECK(w.of(chain[1]) >= 1);
  CHECK(w.stats().evictions == 1);
  // A pinned part is not evictable; unpinned it is cached again.
  w.pin(chain[1]);
  CHECK(w.n_allocatable() == 0);
  CHECK_FALSE(w.can_allocate(1));
  w.unpin(chain[1]);
  CHECK(w.n_allocatable() == 1);
  CHECK(w.check_invariants().ok());
}

TEST_CASE("forget, move, clear and a stale part reused by attach") {
  BlockManager bm = make_manager(8);
  WindowBlocks w(4, 8, bm);
  std::vector<int32_t> chain = publish_chain(bm, 2, 100);
  w.attach(chain[0]);
  w.release(chain[0]);
  w.forget(chain[0]);  // the pool evicted the logical block
  CHECK(w.of(chain[0]) == -1);
  CHECK(w.stats().blocks_free == 3);
  // A private block's part moves to the published block it duplicates.
  std::vector<int32_t> mine = bm.allocate(1);
  w.attach(mine[0]);
  const int32_t part = w.of(mine[0]);
  w.move(mine[0], chain[1]);
  CHECK(w.of(mine[0]) == -1);
  CHECK(w.of(chain[1]) == part);
  w.release(chain[1]);
  CHECK(w.stats().blocks_cached == 1);
  CHECK(w.check_invariants().ok());
  // attach on a logical id that still has an unreferenced part reuses it.
  w.attach(chain[1]);
  CHECK(w.of(chain[1]) == part);
  CHECK(w.stats().blocks_cached == 0);
  w.release(chain[1]);
  CHECK(w.clear() == 1);
  CHECK(w.of(chain[1]) == -1);
  CHECK(w.stats().blocks_free == 3);
  CHECK(w.check_invariants().ok());
}

TEST_CASE("usable_prefix: the longest chain whose last window of parts is present") {
  BlockManager bm = make_manager(16);
  WindowBlocks w(16, 8, bm);  // window 8 tokens = 2 blocks of 4
  std::vector<int32_t> chain = publish_chain(bm, 6, 100);
  CHECK(w.first_block(0) == 0);
  CHECK(w.first_block(7) == 0);
  CHECK(w.first_block(8) == 0);   // reads 1..8
  CHECK(w.first_block(9) == 0);   // reads 2..9
  CHECK(w.first_block(11) == 1);  // reads 4..11
  CHECK(w.usable_prefix(chain, 100) == 0);  // no parts at all
  // Parts on blocks 3 and 4 only: resuming at 5 blocks (position 20) reads
  // positions 13.. (blocks 3, 4): usable. 6 blocks would need block 5.
  for (int32_t i : {3, 4}) w.attach(chain[static_cast<size_t>(i)]);
  CHECK(w.usable_prefix(chain, 100) == 5);
  // A prompt of exactly 5 blocks recomputes its last token: resumes at the
  // block before (position 16 reads 9..): needs blocks 2..4.
  CHECK(w.usable_prefix(std::span<const int32_t>(chain.data(), 5), 20) == 0);
  w.attach(chain[2]);
  CHECK(w.usable_prefix(std::span<const int32_t>(chain.data(), 5), 20) == 5);
  // A chain of one block resumes at 0 (needs no part) or at 4 (block 0).
  CHECK(w.usable_prefix(std::span<const int32_t>(chain.data(), 1), 100) == 0);
  w.attach(chain[0]);
  CHECK(w.usable_prefix(std::span<const int32_t>(chain.data(), 1), 100) == 1);
}

TEST_CASE("parts a sequence moved past are evicted before the parts of chains' ends") {
  BlockManager bm = make_manager(8);
  std::vector<int32_t> evicted;
  WindowBlocks w(4, 8, bm, [&](int32_t logical) { evicted.push_back(logical); });  // 3 usable
  std::vector<int32_t> chain = publish_chain(bm, 3, 100);
  for (int32_t id : chain) w.attach(id);
  w.release(chain[2]);                   // a chain's end: the new end of the LRU
  w.release(chain[1]);                   // newer still
  w.release(chain[0], /*passed=*/true);  // passed over: the old end, evicted first
  std::vector<int32_t> fresh = bm.allocate(2);
  w.attach(fresh[0]);
  w.attach(fresh[1]);
  CHECK(evicted == std::vector<int32_t>{chain[0], chain[2]});
  CHECK(w.check_invariants().ok());
}
