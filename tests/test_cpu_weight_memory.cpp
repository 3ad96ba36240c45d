// Weight memory (kernels/cpu/weight_memory.h): 64-byte aligned blocks that do
// not overlap, zeroed by alloc_weights, carved from shared chunks that go back
// once their last block is freed, in any order.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/weight_memory.h"

using namespace prefixd;

namespace {

struct Block {
  uint8_t* p;
  size_t bytes;
  uint8_t fill;
};

}  // namespace

TEST_CASE("weight blocks are aligned, disjoint and keep their bytes until freed, in any order") {
  const size_t chunks_before = cpu::weight_chunks();
  std::mt19937 rng(3);
  // Sizes from small (plain allocations) through chunk-carved ones to one past 16 MiB (a chunk of its own).
  const std::vector<size_t> sizes = {100, 70000, 1 << 20, 3 << 20, 5 << 20, 65 << 10, 17 << 20, 9 << 20, 2 << 20, 33};
  std::vector<Block> blocks;
  for (int round = 0; round < 3; ++round) {
    for (size_t s : sizes) {
      size_t rounded = 0;
      auto* p = static_cast<uint8_t*>(cpu::alloc_weights_raw(s, &rounded));
      CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
      CHECK(rounded == (s + 63) / 64 * 64);
      const auto fill = static_cast<uint8_t>(blocks.size() * 7 + 1);
      std::memset(p, fill, rounded);
      blocks.push_back({p, rounded, fill});
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i)
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      const bool apart = blocks[i].p + blocks[i].bytes <= blocks[j].p || blocks[j].p + blocks[j].bytes <= blocks[i].p;
      CHECK(apart);
    }
  CHECK(cpu::weight_chunks() > chunks_before);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const Block& b : blocks) {
    const bool kept = std::all_of(b.p, b.p + b.bytes, [&](uint8_t v) { return v == b.fill; });
    CHECK(kept);
    cpu::free_weights(b.p);
  }
  // Every chunk is back but the one new blocks are carved from.
  CHECK(cpu::weight_chunks() <= std::max<size_t>(chunks_before, 1));
}

TEST_CASE("alloc_weights zeroes; free_weights takes nullptr and alloc_aligned's blocks") {
  for (size_t s : {size_t{40}, size_t{100000}, size_t{3} << 20}) {
    auto* p = static_cast<uint8_t*>(cpu::alloc_weights(s));
    CHECK(std::all_of(p, p + s, [](uint8_t v) { return v == 0; }));
    std::memset(p, 0xAB, s);
    cpu::free_weights(p);
    // A block carved where a freed one was is zeroed again.
    auto* q = static_cast<uint8_t*>(cpu::alloc_weights(s));
    CHECK(std::all_of(q, q + s, [](uint8_t v) { return v == 0; }));
    cpu::free_weights(q);
  }
  cpu::free_weights(nullptr);
  cpu::free_weights(cpu::alloc_aligned(200000));
}
